// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2" -strata-partition-sharding="mesh-size=2 rank=1" | FileCheck %s

// A decision may state the view of the checkpoint tensor a parameter is
// split in (strata.shard_view): an nn.Linear q projection [heads * head_dim,
// in] viewed as [heads, head_dim, in], split by heads. The member declares
// its box of the view and reshapes it to the local weight; the rules see the
// same [8, 16] split by rows either way.

module {
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" : tensor<2x4xi32>
    %x = strata.param "x" : tensor<2x4x16xf32>
    %q = strata.param "q_proj.weight" {strata.sharding = [["tp", ""]], strata.shard_view = array<i64: 4, 4, 16>} : tensor<16x16xf32>
    %y = strata.matmul %x, %q {transpose_b = true} : (tensor<2x4x16xf32>, tensor<16x16xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %y, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: %[[Q:.*]] = strata.param "q_proj.weight" {strata.global_shape = array<i64: 16, 16>, strata.shard_start = array<i64: 2, 0, 0>, strata.shard_view = array<i64: 4, 4, 16>{{.*}}} : tensor<2x4x16xf32>
// CHECK-NEXT: %[[W:.*]] = strata.reshape %[[Q]] : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
// CHECK: strata.matmul %{{.*}}, %[[W]] {{.*}} -> tensor<2x4x8xf32>
// CHECK: strata.vocab_parallel_cross_entropy
