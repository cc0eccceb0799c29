// RUN: strata-opt %s -strata-autodiff | FileCheck %s

// The gradient rule of strata.causal_attention: one causal_attention_grad
// that reads the forward's output and log-sum-exp (nothing of size
// [S, S] is kept for the backward pass), and gradients for q, k and v.

module attributes {strata.training = {global_batch = 2 : i64, micro_batch = 2 : i64}} {
  // CHECK-LABEL: func.func @train_microbatch
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" : tensor<32xi32>
    // CHECK-DAG: %[[Q:.*]] = strata.param "q"
    // CHECK-DAG: %[[K:.*]] = strata.param "k"
    // CHECK-DAG: %[[V:.*]] = strata.param "v"
    %q = strata.param "q" : tensor<2x2x8x4xf32>
    %k = strata.param "k" : tensor<2x1x8x4xf32>
    %v = strata.param "v" : tensor<2x1x8x4xf32>
    // CHECK: %[[O:.*]], %[[LSE:.*]] = strata.causal_attention %[[Q]], %[[K]], %[[V]]
    %o, %lse = strata.causal_attention %q, %k, %v {scale = 5.000000e-01 : f64} : (tensor<2x2x8x4xf32>, tensor<2x1x8x4xf32>, tensor<2x1x8x4xf32>) -> (tensor<2x2x8x4xf32>, tensor<2x2x8xf32>)
    %l = strata.reshape %o : (tensor<2x2x8x4xf32>) -> tensor<32x4xf32>
    %loss = strata.cross_entropy %l, %targets : (tensor<32x4xf32>, tensor<32xi32>) -> tensor<f32>
    // CHECK: %[[DO:.*]] = strata.reshape %{{.*}} : (tensor<32x4xf32>) -> tensor<2x2x8x4xf32>
    // CHECK: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = strata.causal_attention_grad %[[DO]], %[[Q]], %[[K]], %[[V]], %[[O]], %[[LSE]] {scale = 5.000000e-01 : f64}
    // CHECK-SAME: -> (tensor<2x2x8x4xf32>, tensor<2x1x8x4xf32>, tensor<2x1x8x4xf32>)
    // CHECK-DAG: strata.accumulate_grad %[[DQ]] {param = "q"}
    // CHECK-DAG: strata.accumulate_grad %[[DK]] {param = "k"}
    // CHECK-DAG: strata.accumulate_grad %[[DV]] {param = "v"}
    return %loss : tensor<f32>
  }
}
