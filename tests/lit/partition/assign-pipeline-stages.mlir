// RUN: strata-opt %s -strata-assign-pipeline-stages="pp=2" | FileCheck %s
// RUN: strata-opt %s -strata-assign-pipeline-stages="pp=2" -strata-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: not strata-opt %s -strata-assign-pipeline-stages="pp=4" 2>&1 | FileCheck %s --check-prefix=TOOMANY

// Two layers over two stages: the embedding goes with layer 0, the head
// with layer 1, and the tied embedding table is declared on both.

module attributes {strata.training = {global_batch = 2 : i64, micro_batch = 2 : i64}} {
  func.func @forward() -> tensor<f32> {
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    %e = strata.param "wte.weight" : tensor<16x8xf32>
    %w0 = strata.param "l0.weight" : tensor<8x8xf32>
    %w1 = strata.param "l1.weight" : tensor<8x8xf32>
    %x = strata.embedding %e, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %h0 = strata.matmul %x, %w0 {strata.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %g0 = strata.gelu %h0 {strata.layer = 0 : i64} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %h1 = strata.matmul %g0, %w1 {strata.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %logits = strata.matmul %h1, %e {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: strata.input "tokens" {strata.stage = 0 : i64}
// CHECK: strata.input "targets" {strata.stage = 1 : i64}
// CHECK: %[[E0:.*]] = strata.param "wte.weight" {strata.stage = 0 : i64, strata.tied}
// CHECK: %[[E1:.*]] = strata.param "wte.weight" {strata.stage = 1 : i64, strata.tied}
// CHECK: strata.param "l0.weight" {strata.stage = 0 : i64}
// CHECK: strata.param "l1.weight" {strata.stage = 1 : i64}
// CHECK: strata.embedding %[[E0]], {{.*}} {strata.stage = 0 : i64}
// CHECK: strata.matmul {{.*}} {strata.layer = 0 : i64, strata.stage = 0 : i64}
// CHECK: strata.gelu {{.*}} {strata.layer = 0 : i64, strata.stage = 0 : i64}
// CHECK: strata.matmul {{.*}} {strata.layer = 1 : i64, strata.stage = 1 : i64}
// CHECK: strata.matmul {{.*}}, %[[E1]] {strata.stage = 1 : i64, transpose_b = true}
// CHECK: strata.cross_entropy {{.*}} {strata.stage = 1 : i64}

// Gradient ops inherit their forward op's stage.
// GRAD: strata.constant {strata.backward_begin, strata.stage = 1 : i64
// GRAD: strata.cross_entropy_grad {{.*}} {strata.stage = 1 : i64}
// GRAD: strata.gelu_grad {{.*}} {strata.layer = 0 : i64, strata.stage = 0 : i64}
// GRAD: strata.embedding_grad {{.*}} {strata.stage = 0 : i64}
// GRAD: strata.accumulate_grad {{.*}} {param = "wte.weight", strata.stage = 0 : i64}

// TOOMANY: cannot split 2 layer(s) into 4 pipeline stages
