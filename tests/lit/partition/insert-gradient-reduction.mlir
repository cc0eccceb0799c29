// RUN: strata-opt %s -strata-autodiff -strata-insert-gradient-reduction=bucket-bytes=600 | FileCheck %s
// RUN: strata-opt %s -strata-autodiff -strata-insert-gradient-reduction="zero=1 bucket-bytes=1000000" | FileCheck %s --check-prefix=ZERO
// RUN: not strata-opt %s -strata-insert-gradient-reduction 2>&1 | FileCheck %s --check-prefix=ORDER

// Buckets follow the order gradients become final (head first), each
// placed right after its last gradient so the reduction overlaps the rest
// of the backward pass.

module attributes {strata.training = {global_batch = 4 : i64, micro_batch = 2 : i64}} {
  func.func @forward() -> tensor<f32> {
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    %e = strata.param "embed.weight" : tensor<16x8xf32>
    %w = strata.param "head.weight" : tensor<8x16xf32>
    %b = strata.param "head.bias" {init = "zeros"} : tensor<16xf32>
    %x = strata.embedding %e, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %y = strata.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %l = strata.bias_add %y, %b : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %l, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// head.bias (64 B) + head.weight (512 B) reach 600 B only with embed (512 B).
// CHECK: strata.accumulate_grad {{.*}} {param = "head.bias"}
// CHECK: strata.accumulate_grad {{.*}} {param = "head.weight"}
// CHECK: strata.embedding_grad
// CHECK-NEXT: strata.accumulate_grad {{.*}} {param = "embed.weight"}
// CHECK-NEXT: strata.gradient_bucket {group = "dp", params = ["head.bias", "head.weight", "embed.weight"], reduction = "all_reduce"}
// CHECK-NEXT: return

// ZERO: strata.gradient_bucket {group = "dp", params = ["head.bias", "head.weight", "embed.weight"], reduction = "reduce_scatter"}

// ORDER: strata-insert-gradient-reduction runs after strata-autodiff
