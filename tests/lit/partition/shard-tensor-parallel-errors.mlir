// RUN: strata-opt %s -split-input-file -verify-diagnostics -strata-shard-tensor-parallel="tp=2 tp-rank=1 sp=true"
// RUN: strata import %examples/models/gpt-tiny.yaml | not strata-opt -strata-shard-tensor-parallel="tp=3 tp-rank=0" 2>&1 | FileCheck %s --check-prefix=HEADS
// RUN: strata import %examples/models/gpt-tiny.yaml | not strata-opt -strata-shard-tensor-parallel="tp=2 tp-rank=2" 2>&1 | FileCheck %s --check-prefix=RANK
// RUN: strata import %examples/models/gpt-tiny.yaml | not strata-opt -strata-shard-tensor-parallel="tp=0" 2>&1 | FileCheck %s --check-prefix=TP0

// The error points at the attention block's column matmul (in-process, as
// in `strata compile`, that location is the model spec's file:line:col).
// HEADS: <stdin>:38:11: error: strata-shard-tensor-parallel: tp=3 does not divide the 4 attention heads of this block; choose a tp that divides it
// RANK: error: strata-shard-tensor-parallel: option tp-rank=2 must be in [0, tp) = [0, 2)
// TP0: error: strata-shard-tensor-parallel: option tp=0 must be at least 1

// An MLP block whose 3 hidden features do not split over 2 ranks.
func.func @forward() -> tensor<f32> {
  %tokens = strata.input "tokens" : tensor<2x4xi32>
  %targets = strata.input "targets" : tensor<2x4xi32>
  %e = strata.param "embed.weight" : tensor<5x4xf32>
  %w1 = strata.param "fc1.weight" : tensor<4x3xf32>
  %w2 = strata.param "fc2.weight" : tensor<3x4xf32>
  %head = strata.param "head.weight" : tensor<4x5xf32>
  %x = strata.embedding %e, %tokens : (tensor<5x4xf32>, tensor<2x4xi32>) -> tensor<2x4x4xf32>
  // expected-error @+1 {{strata-shard-tensor-parallel: tp=2 does not divide the 3 hidden features (ffn_hidden) of this block; choose a tp that divides it}}
  %h = strata.matmul %x, %w1 : (tensor<2x4x4xf32>, tensor<4x3xf32>) -> tensor<2x4x3xf32>
  %a = strata.relu %h : (tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
  %y = strata.matmul %a, %w2 : (tensor<2x4x3xf32>, tensor<3x4xf32>) -> tensor<2x4x4xf32>
  %l = strata.matmul %y, %head : (tensor<2x4x4xf32>, tensor<4x5xf32>) -> tensor<2x4x5xf32>
  %loss = strata.cross_entropy %l, %targets : (tensor<2x4x5xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// With sp, the sequence (3) must split over the ranks.
func.func @forward() -> tensor<f32> {
  %tokens = strata.input "tokens" : tensor<2x3xi32>
  %targets = strata.input "targets" : tensor<2x3xi32>
  %e = strata.param "embed.weight" : tensor<5x4xf32>
  %head = strata.param "head.weight" : tensor<4x5xf32>
  // expected-error @+1 {{strata-shard-tensor-parallel: sp=true splits the sequence of 3 tokens over tp=2 ranks, which does not divide it; choose a tp that divides seq_len or set sp=false}}
  %x = strata.embedding %e, %tokens : (tensor<5x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  %l = strata.matmul %x, %head : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  %loss = strata.cross_entropy %l, %targets : (tensor<2x3x5xf32>, tensor<2x3xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A matmul with a parameter outside any recognised structure: its result
// is the residual of something that is not a row-parallel matmul.
func.func @forward() -> tensor<f32> {
  %tokens = strata.input "tokens" : tensor<2x4xi32>
  %targets = strata.input "targets" : tensor<2x4xi32>
  %e = strata.param "embed.weight" : tensor<5x4xf32>
  %w = strata.param "mix.weight" : tensor<4x4xf32>
  %head = strata.param "head.weight" : tensor<4x5xf32>
  %x = strata.embedding %e, %tokens : (tensor<5x4xf32>, tensor<2x4xi32>) -> tensor<2x4x4xf32>
  // expected-error @+1 {{strata-shard-tensor-parallel: this matmul with parameter "mix.weight" is neither half of a column-parallel -> row-parallel block nor the vocabulary projection before the loss}}
  %m = strata.matmul %x, %w : (tensor<2x4x4xf32>, tensor<4x4xf32>) -> tensor<2x4x4xf32>
  %r = strata.add %m, %x : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %l = strata.matmul %r, %head : (tensor<2x4x4xf32>, tensor<4x5xf32>) -> tensor<2x4x5xf32>
  %loss = strata.cross_entropy %l, %targets : (tensor<2x4x5xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// No loss over a vocabulary: nothing to shard the vocabulary by.
// expected-error @+1 {{strata-shard-tensor-parallel: found no vocabulary projection}}
func.func @forward() -> tensor<f32> {
  %x = strata.param "x" : tensor<2x4xf32>
  %targets = strata.input "targets" : tensor<2xi32>
  %loss = strata.cross_entropy %x, %targets : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// With sp, only token-wise ops may run on sequence shards.
func.func @forward() -> tensor<f32> {
  %tokens = strata.input "tokens" : tensor<2x4xi32>
  %targets = strata.input "targets" : tensor<2x4xi32>
  %e = strata.param "embed.weight" : tensor<5x4xf32>
  %head = strata.param "head.weight" : tensor<4x5xf32>
  %x = strata.embedding %e, %tokens : (tensor<5x4xf32>, tensor<2x4xi32>) -> tensor<2x4x4xf32>
  // expected-error @+1 {{strata-shard-tensor-parallel: with sp=true this op would run on sequence shards, but only token-wise ops}}
  %s = strata.softmax %x : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %l = strata.matmul %s, %head : (tensor<2x4x4xf32>, tensor<4x5xf32>) -> tensor<2x4x5xf32>
  %loss = strata.cross_entropy %l, %targets : (tensor<2x4x5xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
