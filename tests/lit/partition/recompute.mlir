// RUN: strata-opt %s -strata-autodiff -strata-recompute | FileCheck %s --check-prefix=FULL
// RUN: strata-opt %s -strata-autodiff -strata-recompute=mode=selective | FileCheck %s --check-prefix=SEL
// RUN: not strata-opt %s -strata-autodiff -strata-recompute=mode=some 2>&1 | FileCheck %s --check-prefix=BAD

// One attention-like layer: full recomputation clones the layer's forward
// ops before its backward and the backward reads the clones; selective
// recomputes only the [.., S, S] scores and their softmax.

module attributes {strata.training = {global_batch = 1 : i64, micro_batch = 1 : i64}} {
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" : tensor<1x2x4xi32>
    %x = strata.param "x" : tensor<1x2x4x8xf32>
    %w = strata.param "w" : tensor<8x8xf32>
    %h = strata.matmul %x, %w {strata.layer = 0 : i64} : (tensor<1x2x4x8xf32>, tensor<8x8xf32>) -> tensor<1x2x4x8xf32>
    %g = strata.gelu %h {strata.layer = 0 : i64} : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
    %s = strata.matmul %g, %g {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
    %p = strata.softmax %s {causal = true, strata.layer = 0 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
    %loss = strata.cross_entropy %p, %targets : (tensor<1x2x4x4xf32>, tensor<1x2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// FULL: strata.constant {strata.backward_begin
// FULL: %[[H:.*]] = strata.matmul {{.*}} {strata.layer = 0 : i64, strata.recomputed}
// FULL-NEXT: %[[G:.*]] = strata.gelu %[[H]] {strata.layer = 0 : i64, strata.recomputed}
// FULL-NEXT: %[[S:.*]] = strata.matmul %[[G]], %[[G]] {strata.layer = 0 : i64, strata.recomputed, transpose_b = true}
// FULL-NEXT: %[[P:.*]] = strata.softmax %[[S]] {{.*}}strata.recomputed
// FULL: strata.softmax_grad %{{.*}}, %[[P]]
// FULL: strata.gelu_grad %{{.*}}, %[[H]]

// SEL: strata.constant {strata.backward_begin
// SEL-NOT: strata.gelu {{.*}}strata.recomputed
// SEL: %[[S:.*]] = strata.matmul {{.*}} {strata.layer = 0 : i64, strata.recomputed, transpose_b = true}
// SEL-NEXT: %[[P:.*]] = strata.softmax %[[S]] {{.*}}strata.recomputed
// SEL: strata.softmax_grad %{{.*}}, %[[P]]

// BAD: strata-recompute mode must be full or selective, got 'some'
