// RUN: strata-opt %s -strata-shard-tensor-parallel="tp=2 tp-rank=1" | FileCheck %s

// The mlp preset's structure with a vocabulary of 5 over 2 ranks: padded to
// 6, each rank holds 3 rows of the embedding and 3 columns of the head; the
// last rank's boxes extend one past the checkpoint (zero-filled padding),
// and its vocabulary-parallel loss ignores the padding column (valid = 2).

// CHECK-LABEL: func.func @forward
func.func @forward() -> tensor<f32> {
  %tokens = strata.input "tokens" : tensor<2x4xi32>
  %targets = strata.input "targets" : tensor<2x4xi32>
  // CHECK: %[[E:.*]] = strata.param "embed.weight" {strata.global_shape = array<i64: 5, 4>, strata.shard_start = array<i64: 3, 0>, strata.shard_view = array<i64: 5, 4>} : tensor<3x4xf32>
  %e = strata.param "embed.weight" : tensor<5x4xf32>
  // CHECK: strata.param "layers.0.fc1.weight" {strata.global_shape = array<i64: 4, 8>, strata.shard_start = array<i64: 0, 4>, strata.shard_view = array<i64: 4, 8>} : tensor<4x4xf32>
  %w1 = strata.param "layers.0.fc1.weight" : tensor<4x8xf32>
  %b1 = strata.param "layers.0.fc1.bias" : tensor<8xf32>
  %w2 = strata.param "layers.0.fc2.weight" : tensor<8x4xf32>
  // CHECK: %[[B2:.*]] = strata.param "layers.0.fc2.bias" : tensor<4xf32>
  %b2 = strata.param "layers.0.fc2.bias" : tensor<4xf32>
  // CHECK: %[[HEAD:.*]] = strata.param "head.weight" {strata.global_shape = array<i64: 4, 5>, strata.shard_start = array<i64: 0, 3>, strata.shard_view = array<i64: 4, 5>} : tensor<4x3xf32>
  %head = strata.param "head.weight" : tensor<4x5xf32>
  // CHECK: %[[HB:.*]] = strata.param "head.bias" {strata.global_shape = array<i64: 5>, strata.shard_start = array<i64: 3>, strata.shard_view = array<i64: 5>} : tensor<3xf32>
  %hb = strata.param "head.bias" : tensor<5xf32>
  // CHECK: %[[X:.*]] = strata.embedding %[[E]], %{{.*}} {row_start = 3 : i64} : (tensor<3x4xf32>, tensor<2x4xi32>) -> tensor<2x4x4xf32>
  // CHECK-NEXT: %[[XS:.*]] = strata.all_reduce %[[X]]
  %x = strata.embedding %e, %tokens : (tensor<5x4xf32>, tensor<2x4xi32>) -> tensor<2x4x4xf32>
  // CHECK-NEXT: strata.replicate %[[XS]]
  // CHECK-NEXT: strata.matmul {{.*}} -> tensor<2x4x4xf32>
  // CHECK-NEXT: strata.bias_add {{.*}} -> tensor<2x4x4xf32>
  // CHECK-NEXT: strata.relu {{.*}} -> tensor<2x4x4xf32>
  // CHECK-NEXT: strata.matmul {{.*}} : (tensor<2x4x4xf32>, tensor<4x4xf32>) -> tensor<2x4x4xf32>
  // CHECK-NEXT: %[[S:.*]] = strata.all_reduce
  // CHECK-NEXT: strata.bias_add %[[S]], %[[B2]]
  %h = strata.matmul %x, %w1 {strata.layer = 0 : i64} : (tensor<2x4x4xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  %hb1 = strata.bias_add %h, %b1 {strata.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %a = strata.relu %hb1 {strata.layer = 0 : i64} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %y = strata.matmul %a, %w2 {strata.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> tensor<2x4x4xf32>
  %yb = strata.bias_add %y, %b2 {strata.layer = 0 : i64} : (tensor<2x4x4xf32>, tensor<4xf32>) -> tensor<2x4x4xf32>
  %r = strata.add %x, %yb {strata.layer = 0 : i64} : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  // CHECK: %[[L:.*]] = strata.matmul %{{.*}}, %[[HEAD]] : (tensor<2x4x4xf32>, tensor<4x3xf32>) -> tensor<2x4x3xf32>
  // CHECK-NEXT: %[[LB:.*]] = strata.bias_add %[[L]], %[[HB]] : (tensor<2x4x3xf32>, tensor<3xf32>) -> tensor<2x4x3xf32>
  // CHECK-NEXT: strata.vocab_parallel_cross_entropy %[[LB]], %{{.*}} {group = "tp", valid = 2 : i64, vocab_start = 3 : i64} : (tensor<2x4x3xf32>, tensor<2x4xi32>) -> tensor<f32>
  %l = strata.matmul %r, %head : (tensor<2x4x4xf32>, tensor<4x5xf32>) -> tensor<2x4x5xf32>
  %lb = strata.bias_add %l, %hb : (tensor<2x4x5xf32>, tensor<5xf32>) -> tensor<2x4x5xf32>
  %loss = strata.cross_entropy %lb, %targets : (tensor<2x4x5xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
