// RUN: strata-opt %s -split-input-file -verify-diagnostics -strata-propagate-sharding="mesh-size=2" -strata-partition-sharding="mesh-size=2 rank=1" -o /dev/null

// A view given with a decision must refine the parameter's shape and split
// only what the mesh divides.

module {
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" : tensor<2x4xi32>
    %x = strata.param "x" : tensor<2x4x16xf32>
    // expected-error @+1 {{strata.shard_view must refine the parameter's shape}}
    %q = strata.param "q_proj.weight" {strata.sharding = [["tp", ""]], strata.shard_view = array<i64: 3, 5, 16>} : tensor<16x16xf32>
    %y = strata.matmul %x, %q {transpose_b = true} : (tensor<2x4x16xf32>, tensor<16x16xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %y, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

module {
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" : tensor<2x4xi32>
    %x = strata.param "x" : tensor<2x4x16xf32>
    // expected-error @+1 {{strata.shard_view: the view dimension split in dimension 0 (3) must divide by the mesh size 2}}
    %q = strata.param "q_proj.weight" {strata.sharding = [["tp", ""]], strata.shard_view = array<i64: 3, 4, 16>} : tensor<12x16xf32>
    %y = strata.matmul %x, %q {transpose_b = true} : (tensor<2x4x16xf32>, tensor<12x16xf32>) -> tensor<2x4x12xf32>
    %loss = strata.cross_entropy %y, %targets : (tensor<2x4x12xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
