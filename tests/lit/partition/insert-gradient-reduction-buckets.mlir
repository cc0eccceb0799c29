// RUN: strata-opt %s -strata-autodiff -strata-insert-gradient-reduction=bucket-bytes=64 | FileCheck %s

// Small buckets: one per parameter here, each right after its gradient.
module attributes {strata.training = {global_batch = 2 : i64, micro_batch = 2 : i64}} {
  func.func @forward() -> tensor<f32> {
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    %e = strata.param "embed.weight" : tensor<16x8xf32>
    %w = strata.param "head.weight" : tensor<8x16xf32>
    %x = strata.embedding %e, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %y = strata.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %y, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
// CHECK: strata.accumulate_grad {{.*}} {param = "head.weight"}
// CHECK-NEXT: strata.gradient_bucket {group = "dp", params = ["head.weight"], reduction = "all_reduce"}
// CHECK: strata.embedding_grad
// CHECK: strata.accumulate_grad {{.*}} {param = "embed.weight"}
// CHECK-NEXT: strata.gradient_bucket {group = "dp", params = ["embed.weight"], reduction = "all_reduce"}
