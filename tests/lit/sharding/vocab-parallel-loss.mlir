// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2" -strata-partition-sharding="mesh-size=2 rank=1" | FileCheck %s
// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2" -strata-partition-sharding="mesh-size=2 rank=1" -strata-autodiff | FileCheck %s --check-prefix=GRAD

// Megatron's vocabulary parallelism from one decision, the tied table split
// by rows: the embedding's vocabulary is its reduction factor (each member
// looks up its rows, the partial sums are all-reduced), the head's output
// is split by classes, and the cross-entropy's rule (classes a factor of the
// logits only) makes the loss the vocabulary-parallel one: the [.., V]
// logits never cross members.

module {
  func.func @forward() -> tensor<f32> {
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    %e = strata.param "embed.weight" {strata.sharding = [["tp", ""]]} : tensor<16x8xf32>
    %g = strata.param "ln.weight" : tensor<8xf32>
    %x = strata.embedding %e, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %n = strata.rms_norm %x, %g : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %logits = strata.matmul %n, %e {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: %[[T:.*]] = strata.input "tokens"
// CHECK: %[[Y:.*]] = strata.input "targets"
// CHECK: %[[E:.*]] = strata.param "embed.weight" {{.*}}strata.shard_start = array<i64: 8, 0>{{.*}} : tensor<8x8xf32>
// CHECK: %[[X:.*]] = strata.embedding %[[E]], %[[T]] {row_start = 8 : i64{{.*}} -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[XR:.*]] = strata.all_reduce %[[X]] {group = "tp"}
// CHECK-NEXT: %[[N:.*]] = strata.rms_norm %[[XR]]
// CHECK-NEXT: %[[NR:.*]] = strata.replicate %[[N]] {group = "tp"}
// CHECK-NEXT: %[[L:.*]] = strata.matmul %[[NR]], %[[E]] {{.*}}transpose_b = true} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[LOSS:.*]] = strata.vocab_parallel_cross_entropy %[[L]], %[[Y]] {group = "tp", {{.*}}valid = 8 : i64, vocab_start = 8 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
// CHECK-NEXT: return %[[LOSS]]
// CHECK-NOT: strata.all_gather

// GRAD: strata.vocab_parallel_cross_entropy_grad {{.*}}{group = "tp", valid = 8 : i64, vocab_start = 8 : i64} : {{.*}} -> tensor<2x4x8xf32>
// GRAD-NOT: strata.all_gather
