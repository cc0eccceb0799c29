// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2" -strata-partition-sharding="mesh-size=2 rank=0" | FileCheck %s

// Sequence parallelism from two decisions: the residual stream split along
// the sequence, fc1 split by columns. The block gathers the sequence before
// the column-parallel matmul (a gather whose gradient reduce-scatters) and
// reduce-scatters the row-parallel partial sums back onto sequence shards;
// the norm runs on sequence shards with its weight entering through
// replicate (its gradient is summed over the shards).

module {
  func.func @forward() -> tensor<f32> {
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    %e = strata.param "embed.weight" : tensor<16x8xf32>
    %g = strata.param "ln.weight" : tensor<8xf32>
    %w1 = strata.param "fc1.weight" {strata.sharding = [["", "tp"]]} : tensor<8x32xf32>
    %w2 = strata.param "fc2.weight" : tensor<32x8xf32>
    %x = strata.embedding %e, %tokens {strata.sharding = [["", "tp", ""]]} : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %n = strata.rms_norm %x, %g : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %h = strata.matmul %n, %w1 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
    %a = strata.relu %h : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
    %y = strata.matmul %a, %w2 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
    %r = strata.add %x, %y : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %logits = strata.matmul %r, %e {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// The token ids enter as this member's sequence slice, cut where they are
// used (no gradient, so no replicate); the tables of sequence-split ops enter through replicate, so
// their gradients are summed over the shards.
// CHECK: %[[T:.*]] = strata.input "tokens"
// CHECK: %[[E:.*]] = strata.param "embed.weight"
// CHECK-NEXT: %[[ER:.*]] = strata.replicate %[[E]] {group = "tp"}
// CHECK-NEXT: %[[G:.*]] = strata.param "ln.weight"
// CHECK-NEXT: %[[GW:.*]] = strata.replicate %[[G]] {group = "tp"} : (tensor<8xf32>)
// CHECK: strata.param "fc1.weight" {{.*}} : tensor<8x16xf32>
// CHECK: %[[TS:.*]] = strata.slice %[[T]] {axis = 1 : i64, offset = 0 : i64, size = 2 : i64} : (tensor<2x4xi32>) -> tensor<2x2xi32>
// CHECK-NEXT: %[[X:.*]] = strata.embedding %[[ER]], %[[TS]] {{.*}} -> tensor<2x2x8xf32>
// CHECK-NEXT: %[[N:.*]] = strata.rms_norm %[[X]], %[[GW]] {{.*}} -> tensor<2x2x8xf32>
// CHECK-NEXT: %[[AG:.*]] = strata.all_gather %[[N]] {axis = 1 : i64, group = "tp", size = 2 : i64} : (tensor<2x2x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: strata.matmul %[[AG]], {{.*}} -> tensor<2x4x16xf32>
// CHECK: %[[Y:.*]] = strata.matmul {{.*}} -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[RS:.*]] = strata.reduce_scatter %[[Y]] {axis = 1 : i64, group = "tp", size = 2 : i64} : (tensor<2x4x8xf32>) -> tensor<2x2x8xf32>
// CHECK-NEXT: strata.add %[[X]], %[[RS]] {{.*}} -> tensor<2x2x8xf32>
// CHECK-NOT: strata.all_reduce
