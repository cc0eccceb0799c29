// RUN: strata-opt %s -strata-shard-tensor-parallel="tp=2 tp-rank=0" | FileCheck %s --check-prefix=RANK0
// RUN: strata-opt %s -strata-shard-tensor-parallel="tp=2 tp-rank=1" | FileCheck %s --check-prefix=RANK1
// RUN: strata-opt %s -strata-shard-tensor-parallel="tp=2 tp-rank=1 sp=true" | FileCheck %s --check-prefix=SP1
// RUN: strata-opt %s -strata-shard-tensor-parallel="tp=2 tp-rank=1" -strata-autodiff | FileCheck %s --check-prefix=GRAD1

// Pins the per-rank programs of a one-layer llama (strata import of
// family: llama, vocab 16, seq_len 4, hidden 8, heads 2, kv_heads 1,
// ffn_hidden 8, batch 1) under tp=2: fewer kv heads than ranks, so each
// rank reads the whole (replicated) k and v projections, whose
// gradients the replicate sums over the group, and its one query head
// needs no repeat_interleave; q by heads, o by input features, gate/up
// by rows and down by columns (nn.Linear layout), the untied lm_head and
// the embedding by vocabulary. Any rewrite of the tensor-parallel pass
// must produce these programs exactly.

module attributes {strata.model = {batch = 1 : i64, dtype = "float32", family = "llama", ffn_hidden = 8 : i64, heads = 2 : i64, hidden = 8 : i64, kv_heads = 1 : i64, layers = 1 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 4 : i64, tie_embeddings = false, vocab = 16 : i64}, strata.training = {global_batch = 1 : i64, grad_clip = 0.000000e+00 : f64, micro_batch = 1 : i64, optimizer = {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, kind = "adamw", lr = 1.000000e-03 : f64, momentum = 0.000000e+00 : f64, weight_decay = 0.000000e+00 : f64}, schedule = {kind = "constant", min_lr = 0.000000e+00 : f64, total_steps = 0 : i64, warmup_steps = 0 : i64}, seed = 0 : i64}} {
  func.func @forward() -> tensor<f32> {
    %0 = strata.input "tokens" : tensor<1x4xi32>
    %1 = strata.input "targets" : tensor<1x4xi32>
    %2 = strata.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %3 = strata.param "model.layers.0.self_attn.q_proj.weight" : tensor<8x8xf32>
    %4 = strata.param "model.layers.0.self_attn.k_proj.weight" : tensor<4x8xf32>
    %5 = strata.param "model.layers.0.self_attn.v_proj.weight" : tensor<4x8xf32>
    %6 = strata.param "model.layers.0.self_attn.o_proj.weight" : tensor<8x8xf32>
    %7 = strata.param "model.layers.0.mlp.gate_proj.weight" : tensor<8x8xf32>
    %8 = strata.param "model.layers.0.mlp.up_proj.weight" : tensor<8x8xf32>
    %9 = strata.param "model.layers.0.mlp.down_proj.weight" : tensor<8x8xf32>
    %10 = strata.param "model.layers.0.input_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<8xf32>
    %11 = strata.param "model.layers.0.post_attention_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<8xf32>
    %12 = strata.param "model.norm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<8xf32>
    %13 = strata.param "lm_head.weight" : tensor<16x8xf32>
    %14 = strata.embedding %2, %0 : (tensor<16x8xf32>, tensor<1x4xi32>) -> tensor<1x4x8xf32>
    %15 = strata.rms_norm %14, %10 {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
    %16 = strata.matmul %15, %3 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
    %17 = strata.reshape %16 {strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x4x2x4xf32>
    %18 = strata.transpose %17 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
    %19 = strata.rotary_embedding %18 {strata.layer = 0 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
    %20 = strata.matmul %15, %4 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
    %21 = strata.reshape %20 {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
    %22 = strata.transpose %21 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
    %23 = strata.rotary_embedding %22 {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
    %24 = strata.repeat_interleave %23 {axis = 1 : i64, repeats = 2 : i64, strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
    %25 = strata.matmul %15, %5 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
    %26 = strata.reshape %25 {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
    %27 = strata.transpose %26 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
    %28 = strata.repeat_interleave %27 {axis = 1 : i64, repeats = 2 : i64, strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
    %29 = strata.matmul %19, %24 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
    %30 = strata.softmax %29 {causal = true, scale = 5.000000e-01 : f64, strata.layer = 0 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
    %31 = strata.matmul %30, %28 {strata.layer = 0 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
    %32 = strata.transpose %31 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x4x2x4xf32>
    %33 = strata.reshape %32 {strata.layer = 0 : i64} : (tensor<1x4x2x4xf32>) -> tensor<1x4x8xf32>
    %34 = strata.matmul %33, %6 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
    %35 = strata.add %14, %34 {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
    %36 = strata.rms_norm %35, %11 {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
    %37 = strata.matmul %36, %7 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
    %38 = strata.matmul %36, %8 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
    %39 = strata.silu_mul %37, %38 {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
    %40 = strata.matmul %39, %9 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
    %41 = strata.add %35, %40 {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
    %42 = strata.rms_norm %41, %12 : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
    %43 = strata.matmul %42, %13 {transpose_b = true} : (tensor<1x4x8xf32>, tensor<16x8xf32>) -> tensor<1x4x16xf32>
    %44 = strata.cross_entropy %43, %1 : (tensor<1x4x16xf32>, tensor<1x4xi32>) -> tensor<f32>
    return %44 : tensor<f32>
  }
}


// RANK0-LABEL: func.func @forward
// RANK0-NEXT: %[[V0:.*]] = strata.input "tokens" : tensor<1x4xi32>
// RANK0-NEXT: %[[V1:.*]] = strata.input "targets" : tensor<1x4xi32>
// RANK0-NEXT: %[[V2:.*]] = strata.param "model.embed_tokens.weight" {strata.global_shape = array<i64: 16, 8>, strata.shard_start = array<i64: 0, 0>, strata.shard_view = array<i64: 16, 8>} : tensor<8x8xf32>
// RANK0-NEXT: %[[V3:.*]] = strata.param "model.layers.0.self_attn.q_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 0, 0, 0>, strata.shard_view = array<i64: 2, 4, 8>} : tensor<1x4x8xf32>
// RANK0-NEXT: %[[V4:.*]] = strata.reshape %[[V3]] {strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<4x8xf32>
// RANK0-NEXT: %[[V5:.*]] = strata.param "model.layers.0.self_attn.k_proj.weight" : tensor<4x8xf32>
// RANK0-NEXT: %[[V6:.*]] = strata.param "model.layers.0.self_attn.v_proj.weight" : tensor<4x8xf32>
// RANK0-NEXT: %[[V7:.*]] = strata.param "model.layers.0.self_attn.o_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 0, 0>, strata.shard_view = array<i64: 8, 8>} : tensor<8x4xf32>
// RANK0-NEXT: %[[V8:.*]] = strata.param "model.layers.0.mlp.gate_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 0, 0>, strata.shard_view = array<i64: 8, 8>} : tensor<4x8xf32>
// RANK0-NEXT: %[[V9:.*]] = strata.param "model.layers.0.mlp.up_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 0, 0>, strata.shard_view = array<i64: 8, 8>} : tensor<4x8xf32>
// RANK0-NEXT: %[[V10:.*]] = strata.param "model.layers.0.mlp.down_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 0, 0>, strata.shard_view = array<i64: 8, 8>} : tensor<8x4xf32>
// RANK0-NEXT: %[[V11:.*]] = strata.param "model.layers.0.input_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<8xf32>
// RANK0-NEXT: %[[V12:.*]] = strata.param "model.layers.0.post_attention_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<8xf32>
// RANK0-NEXT: %[[V13:.*]] = strata.param "model.norm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<8xf32>
// RANK0-NEXT: %[[V14:.*]] = strata.param "lm_head.weight" {strata.global_shape = array<i64: 16, 8>, strata.shard_start = array<i64: 0, 0>, strata.shard_view = array<i64: 16, 8>} : tensor<8x8xf32>
// RANK0-NEXT: %[[V15:.*]] = strata.embedding %[[V2]], %[[V0]] : (tensor<8x8xf32>, tensor<1x4xi32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V16:.*]] = strata.all_reduce %[[V15]] {group = "tp"} : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V17:.*]] = strata.rms_norm %[[V16]], %[[V11]] {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V18:.*]] = strata.replicate %[[V17]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V19:.*]] = strata.matmul %[[V18]], %[[V4]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// RANK0-NEXT: %[[V20:.*]] = strata.reshape %[[V19]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// RANK0-NEXT: %[[V21:.*]] = strata.transpose %[[V20]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// RANK0-NEXT: %[[V22:.*]] = strata.rotary_embedding %[[V21]] {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK0-NEXT: %[[V23:.*]] = strata.replicate %[[V5]] {group = "tp", strata.layer = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// RANK0-NEXT: %[[V24:.*]] = strata.matmul %[[V18]], %[[V23]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// RANK0-NEXT: %[[V25:.*]] = strata.reshape %[[V24]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// RANK0-NEXT: %[[V26:.*]] = strata.transpose %[[V25]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// RANK0-NEXT: %[[V27:.*]] = strata.rotary_embedding %[[V26]] {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK0-NEXT: %[[V28:.*]] = strata.replicate %[[V6]] {group = "tp", strata.layer = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// RANK0-NEXT: %[[V29:.*]] = strata.matmul %[[V18]], %[[V28]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// RANK0-NEXT: %[[V30:.*]] = strata.reshape %[[V29]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// RANK0-NEXT: %[[V31:.*]] = strata.transpose %[[V30]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// RANK0-NEXT: %[[V32:.*]] = strata.matmul %[[V22]], %[[V27]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK0-NEXT: %[[V33:.*]] = strata.softmax %[[V32]] {causal = true, scale = 5.000000e-01 : f64, strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK0-NEXT: %[[V34:.*]] = strata.matmul %[[V33]], %[[V31]] {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK0-NEXT: %[[V35:.*]] = strata.transpose %[[V34]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x4x1x4xf32>
// RANK0-NEXT: %[[V36:.*]] = strata.reshape %[[V35]] {strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x4x4xf32>
// RANK0-NEXT: %[[V37:.*]] = strata.matmul %[[V36]], %[[V7]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x4xf32>, tensor<8x4xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V38:.*]] = strata.all_reduce %[[V37]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V39:.*]] = strata.add %[[V16]], %[[V38]] {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V40:.*]] = strata.rms_norm %[[V39]], %[[V12]] {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V41:.*]] = strata.replicate %[[V40]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V42:.*]] = strata.matmul %[[V41]], %[[V8]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// RANK0-NEXT: %[[V43:.*]] = strata.matmul %[[V41]], %[[V9]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// RANK0-NEXT: %[[V44:.*]] = strata.silu_mul %[[V42]], %[[V43]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> tensor<1x4x4xf32>
// RANK0-NEXT: %[[V45:.*]] = strata.matmul %[[V44]], %[[V10]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x4xf32>, tensor<8x4xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V46:.*]] = strata.all_reduce %[[V45]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V47:.*]] = strata.add %[[V39]], %[[V46]] {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V48:.*]] = strata.rms_norm %[[V47]], %[[V13]] : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V49:.*]] = strata.replicate %[[V48]] {group = "tp"} : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V50:.*]] = strata.matmul %[[V49]], %[[V14]] {transpose_b = true} : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
// RANK0-NEXT: %[[V51:.*]] = strata.vocab_parallel_cross_entropy %[[V50]], %[[V1]] {group = "tp", valid = 8 : i64, vocab_start = 0 : i64} : (tensor<1x4x8xf32>, tensor<1x4xi32>) -> tensor<f32>
// RANK0-NEXT: return %[[V51]] : tensor<f32>
// RANK0-NEXT: }

// RANK1-LABEL: func.func @forward
// RANK1-NEXT: %[[V0:.*]] = strata.input "tokens" : tensor<1x4xi32>
// RANK1-NEXT: %[[V1:.*]] = strata.input "targets" : tensor<1x4xi32>
// RANK1-NEXT: %[[V2:.*]] = strata.param "model.embed_tokens.weight" {strata.global_shape = array<i64: 16, 8>, strata.shard_start = array<i64: 8, 0>, strata.shard_view = array<i64: 16, 8>} : tensor<8x8xf32>
// RANK1-NEXT: %[[V3:.*]] = strata.param "model.layers.0.self_attn.q_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 1, 0, 0>, strata.shard_view = array<i64: 2, 4, 8>} : tensor<1x4x8xf32>
// RANK1-NEXT: %[[V4:.*]] = strata.reshape %[[V3]] {strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<4x8xf32>
// RANK1-NEXT: %[[V5:.*]] = strata.param "model.layers.0.self_attn.k_proj.weight" : tensor<4x8xf32>
// RANK1-NEXT: %[[V6:.*]] = strata.param "model.layers.0.self_attn.v_proj.weight" : tensor<4x8xf32>
// RANK1-NEXT: %[[V7:.*]] = strata.param "model.layers.0.self_attn.o_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 0, 4>, strata.shard_view = array<i64: 8, 8>} : tensor<8x4xf32>
// RANK1-NEXT: %[[V8:.*]] = strata.param "model.layers.0.mlp.gate_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 4, 0>, strata.shard_view = array<i64: 8, 8>} : tensor<4x8xf32>
// RANK1-NEXT: %[[V9:.*]] = strata.param "model.layers.0.mlp.up_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 4, 0>, strata.shard_view = array<i64: 8, 8>} : tensor<4x8xf32>
// RANK1-NEXT: %[[V10:.*]] = strata.param "model.layers.0.mlp.down_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 0, 4>, strata.shard_view = array<i64: 8, 8>} : tensor<8x4xf32>
// RANK1-NEXT: %[[V11:.*]] = strata.param "model.layers.0.input_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<8xf32>
// RANK1-NEXT: %[[V12:.*]] = strata.param "model.layers.0.post_attention_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<8xf32>
// RANK1-NEXT: %[[V13:.*]] = strata.param "model.norm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<8xf32>
// RANK1-NEXT: %[[V14:.*]] = strata.param "lm_head.weight" {strata.global_shape = array<i64: 16, 8>, strata.shard_start = array<i64: 8, 0>, strata.shard_view = array<i64: 16, 8>} : tensor<8x8xf32>
// RANK1-NEXT: %[[V15:.*]] = strata.embedding %[[V2]], %[[V0]] {row_start = 8 : i64} : (tensor<8x8xf32>, tensor<1x4xi32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V16:.*]] = strata.all_reduce %[[V15]] {group = "tp"} : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V17:.*]] = strata.rms_norm %[[V16]], %[[V11]] {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V18:.*]] = strata.replicate %[[V17]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V19:.*]] = strata.matmul %[[V18]], %[[V4]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// RANK1-NEXT: %[[V20:.*]] = strata.reshape %[[V19]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// RANK1-NEXT: %[[V21:.*]] = strata.transpose %[[V20]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// RANK1-NEXT: %[[V22:.*]] = strata.rotary_embedding %[[V21]] {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK1-NEXT: %[[V23:.*]] = strata.replicate %[[V5]] {group = "tp", strata.layer = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// RANK1-NEXT: %[[V24:.*]] = strata.matmul %[[V18]], %[[V23]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// RANK1-NEXT: %[[V25:.*]] = strata.reshape %[[V24]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// RANK1-NEXT: %[[V26:.*]] = strata.transpose %[[V25]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// RANK1-NEXT: %[[V27:.*]] = strata.rotary_embedding %[[V26]] {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK1-NEXT: %[[V28:.*]] = strata.replicate %[[V6]] {group = "tp", strata.layer = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// RANK1-NEXT: %[[V29:.*]] = strata.matmul %[[V18]], %[[V28]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// RANK1-NEXT: %[[V30:.*]] = strata.reshape %[[V29]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// RANK1-NEXT: %[[V31:.*]] = strata.transpose %[[V30]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// RANK1-NEXT: %[[V32:.*]] = strata.matmul %[[V22]], %[[V27]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK1-NEXT: %[[V33:.*]] = strata.softmax %[[V32]] {causal = true, scale = 5.000000e-01 : f64, strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK1-NEXT: %[[V34:.*]] = strata.matmul %[[V33]], %[[V31]] {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK1-NEXT: %[[V35:.*]] = strata.transpose %[[V34]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x4x1x4xf32>
// RANK1-NEXT: %[[V36:.*]] = strata.reshape %[[V35]] {strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x4x4xf32>
// RANK1-NEXT: %[[V37:.*]] = strata.matmul %[[V36]], %[[V7]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x4xf32>, tensor<8x4xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V38:.*]] = strata.all_reduce %[[V37]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V39:.*]] = strata.add %[[V16]], %[[V38]] {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V40:.*]] = strata.rms_norm %[[V39]], %[[V12]] {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V41:.*]] = strata.replicate %[[V40]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V42:.*]] = strata.matmul %[[V41]], %[[V8]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// RANK1-NEXT: %[[V43:.*]] = strata.matmul %[[V41]], %[[V9]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// RANK1-NEXT: %[[V44:.*]] = strata.silu_mul %[[V42]], %[[V43]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> tensor<1x4x4xf32>
// RANK1-NEXT: %[[V45:.*]] = strata.matmul %[[V44]], %[[V10]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x4xf32>, tensor<8x4xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V46:.*]] = strata.all_reduce %[[V45]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V47:.*]] = strata.add %[[V39]], %[[V46]] {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V48:.*]] = strata.rms_norm %[[V47]], %[[V13]] : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V49:.*]] = strata.replicate %[[V48]] {group = "tp"} : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V50:.*]] = strata.matmul %[[V49]], %[[V14]] {transpose_b = true} : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
// RANK1-NEXT: %[[V51:.*]] = strata.vocab_parallel_cross_entropy %[[V50]], %[[V1]] {group = "tp", valid = 8 : i64, vocab_start = 8 : i64} : (tensor<1x4x8xf32>, tensor<1x4xi32>) -> tensor<f32>
// RANK1-NEXT: return %[[V51]] : tensor<f32>
// RANK1-NEXT: }

// SP1-LABEL: func.func @forward
// SP1-NEXT: %[[V0:.*]] = strata.input "tokens" : tensor<1x4xi32>
// SP1-NEXT: %[[V1:.*]] = strata.input "targets" : tensor<1x4xi32>
// SP1-NEXT: %[[V2:.*]] = strata.param "model.embed_tokens.weight" {strata.global_shape = array<i64: 16, 8>, strata.shard_start = array<i64: 8, 0>, strata.shard_view = array<i64: 16, 8>} : tensor<8x8xf32>
// SP1-NEXT: %[[V3:.*]] = strata.param "model.layers.0.self_attn.q_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 1, 0, 0>, strata.shard_view = array<i64: 2, 4, 8>} : tensor<1x4x8xf32>
// SP1-NEXT: %[[V4:.*]] = strata.reshape %[[V3]] {strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<4x8xf32>
// SP1-NEXT: %[[V5:.*]] = strata.param "model.layers.0.self_attn.k_proj.weight" : tensor<4x8xf32>
// SP1-NEXT: %[[V6:.*]] = strata.param "model.layers.0.self_attn.v_proj.weight" : tensor<4x8xf32>
// SP1-NEXT: %[[V7:.*]] = strata.param "model.layers.0.self_attn.o_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 0, 4>, strata.shard_view = array<i64: 8, 8>} : tensor<8x4xf32>
// SP1-NEXT: %[[V8:.*]] = strata.param "model.layers.0.mlp.gate_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 4, 0>, strata.shard_view = array<i64: 8, 8>} : tensor<4x8xf32>
// SP1-NEXT: %[[V9:.*]] = strata.param "model.layers.0.mlp.up_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 4, 0>, strata.shard_view = array<i64: 8, 8>} : tensor<4x8xf32>
// SP1-NEXT: %[[V10:.*]] = strata.param "model.layers.0.mlp.down_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 0, 4>, strata.shard_view = array<i64: 8, 8>} : tensor<8x4xf32>
// SP1-NEXT: %[[V11:.*]] = strata.param "model.layers.0.input_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<8xf32>
// SP1-NEXT: %[[V12:.*]] = strata.replicate %[[V11]] {group = "tp", strata.layer = 0 : i64} : (tensor<8xf32>) -> tensor<8xf32>
// SP1-NEXT: %[[V13:.*]] = strata.param "model.layers.0.post_attention_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<8xf32>
// SP1-NEXT: %[[V14:.*]] = strata.replicate %[[V13]] {group = "tp", strata.layer = 0 : i64} : (tensor<8xf32>) -> tensor<8xf32>
// SP1-NEXT: %[[V15:.*]] = strata.param "model.norm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<8xf32>
// SP1-NEXT: %[[V16:.*]] = strata.replicate %[[V15]] {group = "tp"} : (tensor<8xf32>) -> tensor<8xf32>
// SP1-NEXT: %[[V17:.*]] = strata.param "lm_head.weight" {strata.global_shape = array<i64: 16, 8>, strata.shard_start = array<i64: 8, 0>, strata.shard_view = array<i64: 16, 8>} : tensor<8x8xf32>
// SP1-NEXT: %[[V18:.*]] = strata.embedding %[[V2]], %[[V0]] {row_start = 8 : i64} : (tensor<8x8xf32>, tensor<1x4xi32>) -> tensor<1x4x8xf32>
// SP1-NEXT: %[[V19:.*]] = strata.reduce_scatter %[[V18]] {axis = 1 : i64, group = "tp", size = 2 : i64} : (tensor<1x4x8xf32>) -> tensor<1x2x8xf32>
// SP1-NEXT: %[[V20:.*]] = strata.rms_norm %[[V19]], %[[V12]] {strata.layer = 0 : i64} : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
// SP1-NEXT: %[[V21:.*]] = strata.all_gather %[[V20]] {axis = 1 : i64, group = "tp", size = 2 : i64, strata.layer = 0 : i64} : (tensor<1x2x8xf32>) -> tensor<1x4x8xf32>
// SP1-NEXT: %[[V22:.*]] = strata.matmul %[[V21]], %[[V4]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// SP1-NEXT: %[[V23:.*]] = strata.reshape %[[V22]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// SP1-NEXT: %[[V24:.*]] = strata.transpose %[[V23]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// SP1-NEXT: %[[V25:.*]] = strata.rotary_embedding %[[V24]] {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// SP1-NEXT: %[[V26:.*]] = strata.replicate %[[V5]] {group = "tp", strata.layer = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// SP1-NEXT: %[[V27:.*]] = strata.matmul %[[V21]], %[[V26]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// SP1-NEXT: %[[V28:.*]] = strata.reshape %[[V27]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// SP1-NEXT: %[[V29:.*]] = strata.transpose %[[V28]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// SP1-NEXT: %[[V30:.*]] = strata.rotary_embedding %[[V29]] {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// SP1-NEXT: %[[V31:.*]] = strata.replicate %[[V6]] {group = "tp", strata.layer = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// SP1-NEXT: %[[V32:.*]] = strata.matmul %[[V21]], %[[V31]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// SP1-NEXT: %[[V33:.*]] = strata.reshape %[[V32]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// SP1-NEXT: %[[V34:.*]] = strata.transpose %[[V33]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// SP1-NEXT: %[[V35:.*]] = strata.matmul %[[V25]], %[[V30]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// SP1-NEXT: %[[V36:.*]] = strata.softmax %[[V35]] {causal = true, scale = 5.000000e-01 : f64, strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// SP1-NEXT: %[[V37:.*]] = strata.matmul %[[V36]], %[[V34]] {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// SP1-NEXT: %[[V38:.*]] = strata.transpose %[[V37]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x4x1x4xf32>
// SP1-NEXT: %[[V39:.*]] = strata.reshape %[[V38]] {strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x4x4xf32>
// SP1-NEXT: %[[V40:.*]] = strata.matmul %[[V39]], %[[V7]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x4xf32>, tensor<8x4xf32>) -> tensor<1x4x8xf32>
// SP1-NEXT: %[[V41:.*]] = strata.reduce_scatter %[[V40]] {axis = 1 : i64, group = "tp", size = 2 : i64, strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x2x8xf32>
// SP1-NEXT: %[[V42:.*]] = strata.add %[[V19]], %[[V41]] {strata.layer = 0 : i64} : (tensor<1x2x8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
// SP1-NEXT: %[[V43:.*]] = strata.rms_norm %[[V42]], %[[V14]] {strata.layer = 0 : i64} : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
// SP1-NEXT: %[[V44:.*]] = strata.all_gather %[[V43]] {axis = 1 : i64, group = "tp", size = 2 : i64, strata.layer = 0 : i64} : (tensor<1x2x8xf32>) -> tensor<1x4x8xf32>
// SP1-NEXT: %[[V45:.*]] = strata.matmul %[[V44]], %[[V8]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// SP1-NEXT: %[[V46:.*]] = strata.matmul %[[V44]], %[[V9]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x4xf32>
// SP1-NEXT: %[[V47:.*]] = strata.silu_mul %[[V45]], %[[V46]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> tensor<1x4x4xf32>
// SP1-NEXT: %[[V48:.*]] = strata.matmul %[[V47]], %[[V10]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x4xf32>, tensor<8x4xf32>) -> tensor<1x4x8xf32>
// SP1-NEXT: %[[V49:.*]] = strata.reduce_scatter %[[V48]] {axis = 1 : i64, group = "tp", size = 2 : i64, strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x2x8xf32>
// SP1-NEXT: %[[V50:.*]] = strata.add %[[V42]], %[[V49]] {strata.layer = 0 : i64} : (tensor<1x2x8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
// SP1-NEXT: %[[V51:.*]] = strata.rms_norm %[[V50]], %[[V16]] : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
// SP1-NEXT: %[[V52:.*]] = strata.all_gather %[[V51]] {axis = 1 : i64, group = "tp", size = 2 : i64} : (tensor<1x2x8xf32>) -> tensor<1x4x8xf32>
// SP1-NEXT: %[[V53:.*]] = strata.matmul %[[V52]], %[[V17]] {transpose_b = true} : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
// SP1-NEXT: %[[V54:.*]] = strata.vocab_parallel_cross_entropy %[[V53]], %[[V1]] {group = "tp", valid = 8 : i64, vocab_start = 8 : i64} : (tensor<1x4x8xf32>, tensor<1x4xi32>) -> tensor<f32>
// SP1-NEXT: return %[[V54]] : tensor<f32>
// SP1-NEXT: }

// The replicated k and v projections: their gradients are summed over the
// group before they are accumulated.
// GRAD1-LABEL: func.func @train_microbatch
// GRAD1: %[[DV:.*]] = strata.all_reduce %{{.*}} {group = "tp", strata.layer = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// GRAD1-NEXT: strata.accumulate_grad %[[DV]] {param = "model.layers.0.self_attn.v_proj.weight"} : tensor<4x8xf32>
// GRAD1: %[[DK:.*]] = strata.all_reduce %{{.*}} {group = "tp", strata.layer = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// GRAD1-NEXT: strata.accumulate_grad %[[DK]] {param = "model.layers.0.self_attn.k_proj.weight"} : tensor<4x8xf32>
