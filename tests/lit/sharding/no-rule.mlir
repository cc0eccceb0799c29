// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2" -verify-diagnostics | FileCheck %s

// An op without a sharding rule is replicated, with a warning, never a crash.

module {
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" : tensor<2x4xi32>
    %w = strata.param "w" {strata.sharding = [["", "", "tp"]]} : tensor<2x4x8xf32>
    // expected-warning @+1 {{has no sharding rule; its operands and results are replicated}}
    %g = strata.all_gather %w {axis = 2 : i64, group = "tp", size = 2 : i64} : (tensor<2x4x8xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %g, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: strata.all_gather {{.*}}strata.sharding = {{\[\[}}"", "", ""]]
