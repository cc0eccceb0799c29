// RUN: strata-opt %s -strata-mixed-precision | FileCheck %s
// RUN: strata-opt %s -strata-mixed-precision -strata-autodiff | FileCheck %s --check-prefix=GRAD

// A bf16 linear model: parameters become float32 masters, each use reads a
// cast, the embedding gathers float32 rows and casts them, the loss reads
// float32 logits; autodiff casts each gradient back to float32.

module attributes {strata.training = {global_batch = 8 : i64, micro_batch = 2 : i64}} {
  func.func @forward() -> tensor<f32> {
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    // CHECK: %[[E:.*]] = strata.param "embed.weight" : tensor<16x8xf32>
    %e = strata.param "embed.weight" : tensor<16x8xbf16>
    // CHECK: %[[W:.*]] = strata.param "head.weight" : tensor<8x16xf32>
    %w = strata.param "head.weight" : tensor<8x16xbf16>
    // CHECK: %[[X32:.*]] = strata.embedding %[[E]], %{{.*}} : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    // CHECK-NEXT: %[[X:.*]] = strata.cast %[[X32]] : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
    %x = strata.embedding %e, %tokens : (tensor<16x8xbf16>, tensor<2x4xi32>) -> tensor<2x4x8xbf16>
    // CHECK-NEXT: %[[WB:.*]] = strata.cast %[[W]] : (tensor<8x16xf32>) -> tensor<8x16xbf16>
    // CHECK-NEXT: %[[Y:.*]] = strata.matmul %[[X]], %[[WB]] : (tensor<2x4x8xbf16>, tensor<8x16xbf16>) -> tensor<2x4x16xbf16>
    %y = strata.matmul %x, %w : (tensor<2x4x8xbf16>, tensor<8x16xbf16>) -> tensor<2x4x16xbf16>
    // CHECK-NEXT: %[[Y32:.*]] = strata.cast %[[Y]] : (tensor<2x4x16xbf16>) -> tensor<2x4x16xf32>
    // CHECK-NEXT: strata.cross_entropy %[[Y32]], %{{.*}} : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    %loss = strata.cross_entropy %y, %targets : (tensor<2x4x16xbf16>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// The head weight's gradient: computed in bf16 from bf16 operands, cast to
// float32 and accumulated into the float32 parameter; the embedding's
// gradient is scattered in float32.
// GRAD: %[[DL:.*]] = strata.cross_entropy_grad {{.*}} -> tensor<2x4x16xf32>
// GRAD: %[[DLB:.*]] = strata.cast %[[DL]] : (tensor<2x4x16xf32>) -> tensor<2x4x16xbf16>
// GRAD: %[[DW:.*]] = strata.matmul {{.*}} {transpose_a = true} : (tensor<8x8xbf16>, tensor<8x16xbf16>) -> tensor<8x16xbf16>
// GRAD-NEXT: %[[DW32:.*]] = strata.cast %[[DW]] : (tensor<8x16xbf16>) -> tensor<8x16xf32>
// GRAD-NEXT: strata.accumulate_grad %[[DW32]] {param = "head.weight"} : tensor<8x16xf32>
// GRAD: strata.embedding_grad {{.*}} -> tensor<16x8xf32>
// GRAD: strata.accumulate_grad {{.*}} {param = "embed.weight"} : tensor<16x8xf32>
