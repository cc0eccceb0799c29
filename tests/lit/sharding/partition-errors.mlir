// RUN: strata-opt %s -verify-diagnostics -strata-partition-sharding="mesh-size=2 rank=0" -o /dev/null

// strata-partition-sharding needs a sharding on every op of @forward (from
// strata-propagate-sharding, or written by hand).

module {
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" {strata.sharding = [["", ""]]} : tensor<2x4xi32>
    // expected-error @+1 {{has no strata.sharding; run strata-propagate-sharding first}}
    %x = strata.param "x" : tensor<2x4x16xf32>
    %loss = strata.cross_entropy %x, %targets {strata.sharding = [[]]} : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
