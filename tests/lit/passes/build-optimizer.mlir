// RUN: strata-opt %s -split-input-file -strata-build-optimizer | FileCheck %s

// AdamW with clipping: weight decay only on rank >= 2 parameters.
module attributes {strata.training = {global_batch = 8 : i64, grad_clip = 1.0 : f64, optimizer = {kind = "adamw", lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.5 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64}}} {
  func.func @forward() {
    %w = strata.param "w" : tensor<8x16xf32>
    %b = strata.param "b" {init = "zeros"} : tensor<16xf32>
    return
  }
}
// CHECK-LABEL: func.func @optimizer_step()
// CHECK-NEXT: strata.clip_grad_norm {max_norm = 1.000000e+00 : f64}
// CHECK-NEXT: strata.adamw_update {beta1 = 9.000000e-01 : f64, beta2 = 5.000000e-01 : f64, eps = 1.000000e-08 : f64, param = "w", weight_decay = 1.000000e-01 : f64}
// CHECK-NEXT: strata.adamw_update {beta1 = 9.000000e-01 : f64, beta2 = 5.000000e-01 : f64, eps = 1.000000e-08 : f64, param = "b", weight_decay = 0.000000e+00 : f64}
// CHECK-NEXT: return

// -----

// SGD with momentum, no clipping.
module attributes {strata.training = {global_batch = 8 : i64, grad_clip = 0.0 : f64, optimizer = {kind = "sgd", lr = 0.1 : f64, momentum = 0.9 : f64, weight_decay = 0.01 : f64}}} {
  func.func @forward() {
    %w = strata.param "w" : tensor<8x16xf32>
    return
  }
}
// CHECK-LABEL: func.func @optimizer_step()
// CHECK-NOT: clip_grad_norm
// CHECK-NEXT: strata.sgd_update {momentum = 9.000000e-01 : f64, param = "w", weight_decay = 1.000000e-02 : f64}
