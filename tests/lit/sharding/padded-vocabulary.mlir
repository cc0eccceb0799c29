// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2" -strata-partition-sharding="mesh-size=2 rank=1" | FileCheck %s

// A vocabulary (15) the mesh does not divide: the table's rows, the head's
// output features and the loss's classes are the factors a rule lets be
// split with padding. Member 1 holds rows 8..15 of a 15-row table (the last
// one padding), looks up its rows, and its loss counts 7 valid classes.
// The norm, which needs its features whole, is no such op.

module {
  func.func @forward() -> tensor<f32> {
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    %e = strata.param "embed.weight" {strata.sharding = [["tp", ""]]} : tensor<15x8xf32>
    %g = strata.param "ln.weight" : tensor<8xf32>
    %x = strata.embedding %e, %tokens : (tensor<15x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %n = strata.rms_norm %x, %g : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %logits = strata.matmul %n, %e {transpose_b = true} : (tensor<2x4x8xf32>, tensor<15x8xf32>) -> tensor<2x4x15xf32>
    %loss = strata.cross_entropy %logits, %targets : (tensor<2x4x15xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: %[[E:.*]] = strata.param "embed.weight" {strata.global_shape = array<i64: 15, 8>, strata.shard_start = array<i64: 8, 0>, strata.shard_view = array<i64: 15, 8>{{.*}}} : tensor<8x8xf32>
// CHECK: strata.embedding %[[E]], %{{.*}} {row_start = 8 : i64{{.*}} -> tensor<2x4x8xf32>
// CHECK-NEXT: strata.all_reduce
// CHECK: %[[L:.*]] = strata.matmul %{{.*}}, %[[E]] {{.*}} -> tensor<2x4x8xf32>
// CHECK-NEXT: strata.vocab_parallel_cross_entropy %[[L]], %{{.*}} {group = "tp", {{.*}}valid = 7 : i64, vocab_start = 8 : i64}
