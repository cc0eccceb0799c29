// RUN: strata-opt %s -strata-assign-pipeline-stages="pp=2" | FileCheck %s

// An op outside the layers that reads parameters only (here the reshape a
// tensor-parallel shard view adds, and a replicate of the final norm's
// weight) runs on the stage of its first user, not on stage 0: the last
// stage reshapes its own weight and sums its own gradient. One that a single
// layer uses (the reshape) belongs to that layer, so that full recomputation
// rebuilds it; one that the head uses (the replicate) stays outside.

module attributes {strata.training = {global_batch = 2 : i64, micro_batch = 2 : i64}} {
  func.func @forward() -> tensor<f32> {
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    %e = strata.param "wte.weight" : tensor<16x8xf32>
    %w0 = strata.param "l0.weight" : tensor<8x8xf32>
    %w1 = strata.param "l1.weight" : tensor<8x2x4xf32>
    %g = strata.param "ln_f.weight" : tensor<8xf32>
    %b = strata.param "ln_f.bias" : tensor<8xf32>
    %w1r = strata.reshape %w1 : (tensor<8x2x4xf32>) -> tensor<8x8xf32>
    %gr = strata.replicate %g {group = "tp"} : (tensor<8xf32>) -> tensor<8xf32>
    %x = strata.embedding %e, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %h0 = strata.matmul %x, %w0 {strata.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %h1 = strata.matmul %h0, %w1r {strata.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %n = strata.layer_norm %h1, %gr, %b : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %logits = strata.matmul %n, %e {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK-NOT: strata.param "l1.weight" {strata.stage = 0 : i64}
// CHECK-NOT: strata.param "ln_f.weight" {strata.stage = 0 : i64}
// CHECK: %[[W1:.*]] = strata.param "l1.weight" {strata.stage = 1 : i64}
// CHECK: %[[G:.*]] = strata.param "ln_f.weight" {strata.stage = 1 : i64}
// CHECK: strata.reshape %[[W1]] {strata.layer = 1 : i64, strata.stage = 1 : i64}
// CHECK: strata.replicate %[[G]] {group = "tp", strata.stage = 1 : i64}
