// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2 annotate-rules=true" | FileCheck %s

// Mixed precision's casts are elementwise: a column-split float32 master
// gives a column-split bfloat16 copy, and the matmul that reads it splits its
// output features; the float32 logits cast back stays whole.

module {
  func.func @forward() -> tensor<f32> {
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    %e = strata.param "embed.weight" : tensor<16x8xf32>
    %w1 = strata.param "fc1.weight" {strata.sharding = [["", "tp"]]} : tensor<8x32xf32>
    %w2 = strata.param "fc2.weight" : tensor<32x16xf32>
    %x = strata.embedding %e, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %xb = strata.cast %x : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
    %w1b = strata.cast %w1 : (tensor<8x32xf32>) -> tensor<8x32xbf16>
    %h = strata.matmul %xb, %w1b : (tensor<2x4x8xbf16>, tensor<8x32xbf16>) -> tensor<2x4x32xbf16>
    %w2b = strata.cast %w2 : (tensor<32x16xf32>) -> tensor<32x16xbf16>
    %y = strata.matmul %h, %w2b : (tensor<2x4x32xbf16>, tensor<32x16xbf16>) -> tensor<2x4x16xbf16>
    %logits = strata.cast %y : (tensor<2x4x16xbf16>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: strata.param "fc2.weight" {strata.sharding = {{\[\[}}"tp", ""]]}
// CHECK: strata.cast {{.*}}strata.sharding = {{\[\[}}"", "", ""]], strata.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
// CHECK: strata.cast {{.*}}strata.sharding = {{\[\[}}"", "tp"]]
// CHECK: strata.matmul {{.*}}strata.sharding = {{\[\[}}"", "", "tp"]]
// CHECK: strata.cast {{.*}}strata.sharding = {{\[\[}}"tp", ""]]
// CHECK: strata.matmul {{.*}}strata.sharding = {{\[\[}}"", "", ""]]
// CHECK: strata.cast {{.*}}strata.sharding = {{\[\[}}"", "", ""]]
