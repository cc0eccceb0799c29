// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2 split-matmul-weights=true" | FileCheck %s

// No decisions given: `split-matmul-weights` (what strata compile uses for
// explicit graphs under tp) splits the weight of each matmul whose input is
// whole by its output features; the rules then split fc2 by rows (its input
// is split), and the head, whose input is whole again, by columns.

module {
  func.func @forward() -> tensor<f32> {
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    %e = strata.param "embed.weight" : tensor<16x8xf32>
    %w1 = strata.param "fc1.weight" : tensor<8x32xf32>
    %w2 = strata.param "fc2.weight" : tensor<32x8xf32>
    %head = strata.param "head.weight" : tensor<8x16xf32>
    %x = strata.embedding %e, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %h = strata.matmul %x, %w1 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
    %a = strata.relu %h : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
    %y = strata.matmul %a, %w2 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
    %r = strata.add %x, %y : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %logits = strata.matmul %r, %head : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: strata.param "embed.weight" {strata.sharding = {{\[\[}}"", ""]]}
// CHECK: strata.param "fc1.weight" {strata.sharding = {{\[\[}}"", "tp"]]}
// CHECK: strata.param "fc2.weight" {strata.sharding = {{\[\[}}"tp", ""]]}
// CHECK: strata.param "head.weight" {strata.sharding = {{\[\[}}"", "tp"]]}
// CHECK: strata.add {{.*}}strata.sharding = {{\[\[}}"", "", ""]]
// CHECK: strata.matmul {{.*}}strata.sharding = {{\[\[}}"", "", "tp"]]
