// RUN: strata-opt %s -strata-autodiff | FileCheck %s
// RUN: strata-opt %s -strata-autodiff=loss-scale=0.5 | FileCheck %s --check-prefix=SCALE

// A linear model: the backward pass is built from each op's gradient rule
// and every parameter's gradient is handed to the training state.

module attributes {strata.training = {global_batch = 8 : i64, micro_batch = 2 : i64}} {
  // CHECK-NOT: func.func @forward
  // CHECK-LABEL: func.func @train_microbatch() -> tensor<f32>
  func.func @forward() -> tensor<f32> {
    // CHECK: %[[TOK:.*]] = strata.input "tokens"
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    // CHECK: %[[E:.*]] = strata.param "embed.weight"
    %e = strata.param "embed.weight" : tensor<16x8xf32>
    // CHECK: %[[W:.*]] = strata.param "head.weight"
    %w = strata.param "head.weight" : tensor<8x16xf32>
    %b = strata.param "head.bias" {init = "zeros"} : tensor<16xf32>
    // CHECK: %[[X:.*]] = strata.embedding %[[E]], %[[TOK]]
    %x = strata.embedding %e, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %y = strata.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %l = strata.bias_add %y, %b : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
    // CHECK: %[[LOSS:.*]] = strata.cross_entropy
    %loss = strata.cross_entropy %l, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    // micro_batch / global_batch = 0.25
    // CHECK: %[[SEED:.*]] = strata.constant {strata.backward_begin, value = 2.500000e-01 : f64} : tensor<f32>
    // SCALE: strata.constant {strata.backward_begin, value = 5.000000e-01 : f64} : tensor<f32>
    // CHECK: %[[DL:.*]] = strata.cross_entropy_grad %{{.*}}, %{{.*}}, %[[SEED]]
    // Each parameter's gradient goes to the training state as soon as it is
    // final, in reverse order of use.
    // CHECK: %[[DB:.*]] = strata.bias_grad %[[DL]]
    // CHECK-NEXT: strata.accumulate_grad %[[DB]] {param = "head.bias"}
    // dX = dY W^T
    // CHECK: %[[DX:.*]] = strata.matmul %[[DL]], %[[W]] {transpose_b = true}
    // dW sums over the batch: flatten the rows, then X^T dY.
    // CHECK: %[[XF:.*]] = strata.reshape %[[X]] : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
    // CHECK: %[[DYF:.*]] = strata.reshape %[[DL]] : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
    // CHECK: %[[DW:.*]] = strata.matmul %[[XF]], %[[DYF]] {transpose_a = true} : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
    // CHECK-NEXT: strata.accumulate_grad %[[DW]] {param = "head.weight"}
    // CHECK: %[[DE:.*]] = strata.embedding_grad %[[DX]], %[[TOK]] : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<16x8xf32>
    // CHECK-NEXT: strata.accumulate_grad %[[DE]] {param = "embed.weight"}
    // CHECK-NEXT: return %[[LOSS]]
    return %loss : tensor<f32>
  }
}
