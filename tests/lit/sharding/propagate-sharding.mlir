// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2 annotate-rules=true" | FileCheck %s

// One decision, the first weight split by columns, spreads through a
// Megatron MLP block: the hidden activation is split by features, the second
// weight by rows (its contraction factor), and the block output is whole.

module {
  func.func @forward() -> tensor<f32> {
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    %e = strata.param "embed.weight" : tensor<16x8xf32>
    %w1 = strata.param "fc1.weight" {strata.sharding = [["", "tp"]]} : tensor<8x32xf32>
    %b1 = strata.param "fc1.bias" : tensor<32xf32>
    %w2 = strata.param "fc2.weight" : tensor<32x8xf32>
    %g = strata.param "ln.weight" : tensor<8xf32>
    %head = strata.param "head.weight" : tensor<8x16xf32>
    %x = strata.embedding %e, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %h = strata.matmul %x, %w1 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
    %hb = strata.bias_add %h, %b1 : (tensor<2x4x32xf32>, tensor<32xf32>) -> tensor<2x4x32xf32>
    %a = strata.gelu %hb : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
    %y = strata.matmul %a, %w2 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
    %r = strata.add %x, %y : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %n = strata.layer_norm %r, %g, %g : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %logits = strata.matmul %n, %head : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: strata.param "fc1.bias" {strata.sharding = {{\[\[}}"tp"]]}
// CHECK: strata.param "fc2.weight" {strata.sharding = {{\[\[}}"tp", ""]]}
// CHECK: strata.embedding {{.*}}strata.sharding = {{\[\[}}"", "", ""]]
// CHECK: strata.matmul {{.*}}strata.sharding = {{\[\[}}"", "", "tp"]], strata.sharding_rule = "([i, j, k], [k, l]) -> ([i, j, l]) {i=2, j=4, k=8, l=32} reduction={k}"
// CHECK: strata.gelu {{.*}}strata.sharding = {{\[\[}}"", "", "tp"]]
// CHECK: strata.matmul {{.*}}strata.sharding = {{\[\[}}"", "", ""]], strata.sharding_rule = "([i, j, k], [k, l]) -> ([i, j, l]) {i=2, j=4, k=32, l=8} reduction={k}"
// CHECK: strata.layer_norm {{.*}}strata.sharding_rule = "([i, j, _], [_], [_]) -> ([i, j, _]) {i=2, j=4}"
// CHECK: strata.cross_entropy {{.*}}strata.sharding_rule = "([_, _, i], [_, _]) -> ([]) {i=16} reduction={i}"
