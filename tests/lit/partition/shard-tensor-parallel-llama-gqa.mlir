// RUN: strata-opt %s -strata-shard-tensor-parallel="tp=4 tp-rank=3" | FileCheck %s --check-prefix=RANK3
// RUN: strata-opt %s -strata-shard-tensor-parallel="tp=2 tp-rank=1" | FileCheck %s --check-prefix=TP2

// Pins the per-rank programs of a one-layer llama with grouped-query
// attention (strata import of family: llama, vocab 16, seq_len 4, hidden
// 16, heads 4, kv_heads 2, ffn_hidden 8, batch 1). Under tp=4 each rank
// has one query head and slices the kv head it uses (rank 3: kv head 1,
// rows 4..7) out of the replicated k and v projections; under tp=2 the kv
// heads are split like the query heads and each rank repeats its one kv
// head for its two query heads.

module attributes {strata.model = {batch = 1 : i64, dtype = "float32", family = "llama", ffn_hidden = 8 : i64, heads = 4 : i64, hidden = 16 : i64, kv_heads = 2 : i64, layers = 1 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 4 : i64, tie_embeddings = false, vocab = 16 : i64}, strata.training = {global_batch = 1 : i64, grad_clip = 0.000000e+00 : f64, micro_batch = 1 : i64, optimizer = {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, kind = "adamw", lr = 1.000000e-03 : f64, momentum = 0.000000e+00 : f64, weight_decay = 0.000000e+00 : f64}, schedule = {kind = "constant", min_lr = 0.000000e+00 : f64, total_steps = 0 : i64, warmup_steps = 0 : i64}, seed = 0 : i64}} {
  func.func @forward() -> tensor<f32> {
    %0 = strata.input "tokens" : tensor<1x4xi32>
    %1 = strata.input "targets" : tensor<1x4xi32>
    %2 = strata.param "model.embed_tokens.weight" : tensor<16x16xf32>
    %3 = strata.param "model.layers.0.self_attn.q_proj.weight" : tensor<16x16xf32>
    %4 = strata.param "model.layers.0.self_attn.k_proj.weight" : tensor<8x16xf32>
    %5 = strata.param "model.layers.0.self_attn.v_proj.weight" : tensor<8x16xf32>
    %6 = strata.param "model.layers.0.self_attn.o_proj.weight" : tensor<16x16xf32>
    %7 = strata.param "model.layers.0.mlp.gate_proj.weight" : tensor<8x16xf32>
    %8 = strata.param "model.layers.0.mlp.up_proj.weight" : tensor<8x16xf32>
    %9 = strata.param "model.layers.0.mlp.down_proj.weight" : tensor<16x8xf32>
    %10 = strata.param "model.layers.0.input_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<16xf32>
    %11 = strata.param "model.layers.0.post_attention_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<16xf32>
    %12 = strata.param "model.norm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<16xf32>
    %13 = strata.param "lm_head.weight" : tensor<16x16xf32>
    %14 = strata.embedding %2, %0 : (tensor<16x16xf32>, tensor<1x4xi32>) -> tensor<1x4x16xf32>
    %15 = strata.rms_norm %14, %10 {strata.layer = 0 : i64} : (tensor<1x4x16xf32>, tensor<16xf32>) -> tensor<1x4x16xf32>
    %16 = strata.matmul %15, %3 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<16x16xf32>) -> tensor<1x4x16xf32>
    %17 = strata.reshape %16 {strata.layer = 0 : i64} : (tensor<1x4x16xf32>) -> tensor<1x4x4x4xf32>
    %18 = strata.transpose %17 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %19 = strata.rotary_embedding %18 {strata.layer = 0 : i64} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %20 = strata.matmul %15, %4 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8xf32>
    %21 = strata.reshape %20 {strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x4x2x4xf32>
    %22 = strata.transpose %21 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
    %23 = strata.rotary_embedding %22 {strata.layer = 0 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
    %24 = strata.repeat_interleave %23 {axis = 1 : i64, repeats = 2 : i64, strata.layer = 0 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x4x4x4xf32>
    %25 = strata.matmul %15, %5 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8xf32>
    %26 = strata.reshape %25 {strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x4x2x4xf32>
    %27 = strata.transpose %26 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
    %28 = strata.repeat_interleave %27 {axis = 1 : i64, repeats = 2 : i64, strata.layer = 0 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x4x4x4xf32>
    %29 = strata.matmul %19, %24 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %30 = strata.softmax %29 {causal = true, scale = 5.000000e-01 : f64, strata.layer = 0 : i64} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %31 = strata.matmul %30, %28 {strata.layer = 0 : i64} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %32 = strata.transpose %31 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %33 = strata.reshape %32 {strata.layer = 0 : i64} : (tensor<1x4x4x4xf32>) -> tensor<1x4x16xf32>
    %34 = strata.matmul %33, %6 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<16x16xf32>) -> tensor<1x4x16xf32>
    %35 = strata.add %14, %34 {strata.layer = 0 : i64} : (tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
    %36 = strata.rms_norm %35, %11 {strata.layer = 0 : i64} : (tensor<1x4x16xf32>, tensor<16xf32>) -> tensor<1x4x16xf32>
    %37 = strata.matmul %36, %7 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8xf32>
    %38 = strata.matmul %36, %8 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8xf32>
    %39 = strata.silu_mul %37, %38 {strata.layer = 0 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
    %40 = strata.matmul %39, %9 {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<16x8xf32>) -> tensor<1x4x16xf32>
    %41 = strata.add %35, %40 {strata.layer = 0 : i64} : (tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
    %42 = strata.rms_norm %41, %12 : (tensor<1x4x16xf32>, tensor<16xf32>) -> tensor<1x4x16xf32>
    %43 = strata.matmul %42, %13 {transpose_b = true} : (tensor<1x4x16xf32>, tensor<16x16xf32>) -> tensor<1x4x16xf32>
    %44 = strata.cross_entropy %43, %1 : (tensor<1x4x16xf32>, tensor<1x4xi32>) -> tensor<f32>
    return %44 : tensor<f32>
  }
}


// RANK3-LABEL: func.func @forward
// RANK3-NEXT: %[[V0:.*]] = strata.input "tokens" : tensor<1x4xi32>
// RANK3-NEXT: %[[V1:.*]] = strata.input "targets" : tensor<1x4xi32>
// RANK3-NEXT: %[[V2:.*]] = strata.param "model.embed_tokens.weight" {strata.global_shape = array<i64: 16, 16>, strata.shard_start = array<i64: 12, 0>, strata.shard_view = array<i64: 16, 16>} : tensor<4x16xf32>
// RANK3-NEXT: %[[V3:.*]] = strata.param "model.layers.0.self_attn.q_proj.weight" {strata.global_shape = array<i64: 16, 16>, strata.shard_start = array<i64: 3, 0, 0>, strata.shard_view = array<i64: 4, 4, 16>} : tensor<1x4x16xf32>
// RANK3-NEXT: %[[V4:.*]] = strata.reshape %[[V3]] {strata.layer = 0 : i64} : (tensor<1x4x16xf32>) -> tensor<4x16xf32>
// RANK3-NEXT: %[[V5:.*]] = strata.param "model.layers.0.self_attn.k_proj.weight" : tensor<8x16xf32>
// RANK3-NEXT: %[[V6:.*]] = strata.param "model.layers.0.self_attn.v_proj.weight" : tensor<8x16xf32>
// RANK3-NEXT: %[[V7:.*]] = strata.param "model.layers.0.self_attn.o_proj.weight" {strata.global_shape = array<i64: 16, 16>, strata.shard_start = array<i64: 0, 12>, strata.shard_view = array<i64: 16, 16>} : tensor<16x4xf32>
// RANK3-NEXT: %[[V8:.*]] = strata.param "model.layers.0.mlp.gate_proj.weight" {strata.global_shape = array<i64: 8, 16>, strata.shard_start = array<i64: 6, 0>, strata.shard_view = array<i64: 8, 16>} : tensor<2x16xf32>
// RANK3-NEXT: %[[V9:.*]] = strata.param "model.layers.0.mlp.up_proj.weight" {strata.global_shape = array<i64: 8, 16>, strata.shard_start = array<i64: 6, 0>, strata.shard_view = array<i64: 8, 16>} : tensor<2x16xf32>
// RANK3-NEXT: %[[V10:.*]] = strata.param "model.layers.0.mlp.down_proj.weight" {strata.global_shape = array<i64: 16, 8>, strata.shard_start = array<i64: 0, 6>, strata.shard_view = array<i64: 16, 8>} : tensor<16x2xf32>
// RANK3-NEXT: %[[V11:.*]] = strata.param "model.layers.0.input_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<16xf32>
// RANK3-NEXT: %[[V12:.*]] = strata.param "model.layers.0.post_attention_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<16xf32>
// RANK3-NEXT: %[[V13:.*]] = strata.param "model.norm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<16xf32>
// RANK3-NEXT: %[[V14:.*]] = strata.param "lm_head.weight" {strata.global_shape = array<i64: 16, 16>, strata.shard_start = array<i64: 12, 0>, strata.shard_view = array<i64: 16, 16>} : tensor<4x16xf32>
// RANK3-NEXT: %[[V15:.*]] = strata.embedding %[[V2]], %[[V0]] {row_start = 12 : i64} : (tensor<4x16xf32>, tensor<1x4xi32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V16:.*]] = strata.all_reduce %[[V15]] {group = "tp"} : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V17:.*]] = strata.rms_norm %[[V16]], %[[V11]] {strata.layer = 0 : i64} : (tensor<1x4x16xf32>, tensor<16xf32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V18:.*]] = strata.replicate %[[V17]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V19:.*]] = strata.matmul %[[V18]], %[[V4]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<4x16xf32>) -> tensor<1x4x4xf32>
// RANK3-NEXT: %[[V20:.*]] = strata.reshape %[[V19]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// RANK3-NEXT: %[[V21:.*]] = strata.transpose %[[V20]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// RANK3-NEXT: %[[V22:.*]] = strata.rotary_embedding %[[V21]] {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK3-NEXT: %[[V23:.*]] = strata.replicate %[[V5]] {group = "tp", strata.layer = 0 : i64} : (tensor<8x16xf32>) -> tensor<8x16xf32>
// RANK3-NEXT: %[[V24:.*]] = strata.slice %[[V23]] {axis = 0 : i64, offset = 4 : i64, size = 4 : i64, strata.layer = 0 : i64} : (tensor<8x16xf32>) -> tensor<4x16xf32>
// RANK3-NEXT: %[[V25:.*]] = strata.matmul %[[V18]], %[[V24]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<4x16xf32>) -> tensor<1x4x4xf32>
// RANK3-NEXT: %[[V26:.*]] = strata.reshape %[[V25]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// RANK3-NEXT: %[[V27:.*]] = strata.transpose %[[V26]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// RANK3-NEXT: %[[V28:.*]] = strata.rotary_embedding %[[V27]] {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK3-NEXT: %[[V29:.*]] = strata.replicate %[[V6]] {group = "tp", strata.layer = 0 : i64} : (tensor<8x16xf32>) -> tensor<8x16xf32>
// RANK3-NEXT: %[[V30:.*]] = strata.slice %[[V29]] {axis = 0 : i64, offset = 4 : i64, size = 4 : i64, strata.layer = 0 : i64} : (tensor<8x16xf32>) -> tensor<4x16xf32>
// RANK3-NEXT: %[[V31:.*]] = strata.matmul %[[V18]], %[[V30]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<4x16xf32>) -> tensor<1x4x4xf32>
// RANK3-NEXT: %[[V32:.*]] = strata.reshape %[[V31]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// RANK3-NEXT: %[[V33:.*]] = strata.transpose %[[V32]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// RANK3-NEXT: %[[V34:.*]] = strata.matmul %[[V22]], %[[V28]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK3-NEXT: %[[V35:.*]] = strata.softmax %[[V34]] {causal = true, scale = 5.000000e-01 : f64, strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK3-NEXT: %[[V36:.*]] = strata.matmul %[[V35]], %[[V33]] {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// RANK3-NEXT: %[[V37:.*]] = strata.transpose %[[V36]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x4x1x4xf32>
// RANK3-NEXT: %[[V38:.*]] = strata.reshape %[[V37]] {strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x4x4xf32>
// RANK3-NEXT: %[[V39:.*]] = strata.matmul %[[V38]], %[[V7]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x4xf32>, tensor<16x4xf32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V40:.*]] = strata.all_reduce %[[V39]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V41:.*]] = strata.add %[[V16]], %[[V40]] {strata.layer = 0 : i64} : (tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V42:.*]] = strata.rms_norm %[[V41]], %[[V12]] {strata.layer = 0 : i64} : (tensor<1x4x16xf32>, tensor<16xf32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V43:.*]] = strata.replicate %[[V42]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V44:.*]] = strata.matmul %[[V43]], %[[V8]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<2x16xf32>) -> tensor<1x4x2xf32>
// RANK3-NEXT: %[[V45:.*]] = strata.matmul %[[V43]], %[[V9]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<2x16xf32>) -> tensor<1x4x2xf32>
// RANK3-NEXT: %[[V46:.*]] = strata.silu_mul %[[V44]], %[[V45]] {strata.layer = 0 : i64} : (tensor<1x4x2xf32>, tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
// RANK3-NEXT: %[[V47:.*]] = strata.matmul %[[V46]], %[[V10]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x2xf32>, tensor<16x2xf32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V48:.*]] = strata.all_reduce %[[V47]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V49:.*]] = strata.add %[[V41]], %[[V48]] {strata.layer = 0 : i64} : (tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V50:.*]] = strata.rms_norm %[[V49]], %[[V13]] : (tensor<1x4x16xf32>, tensor<16xf32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V51:.*]] = strata.replicate %[[V50]] {group = "tp"} : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// RANK3-NEXT: %[[V52:.*]] = strata.matmul %[[V51]], %[[V14]] {transpose_b = true} : (tensor<1x4x16xf32>, tensor<4x16xf32>) -> tensor<1x4x4xf32>
// RANK3-NEXT: %[[V53:.*]] = strata.vocab_parallel_cross_entropy %[[V52]], %[[V1]] {group = "tp", valid = 4 : i64, vocab_start = 12 : i64} : (tensor<1x4x4xf32>, tensor<1x4xi32>) -> tensor<f32>
// RANK3-NEXT: return %[[V53]] : tensor<f32>
// RANK3-NEXT: }

// TP2-LABEL: func.func @forward
// TP2-NEXT: %[[V0:.*]] = strata.input "tokens" : tensor<1x4xi32>
// TP2-NEXT: %[[V1:.*]] = strata.input "targets" : tensor<1x4xi32>
// TP2-NEXT: %[[V2:.*]] = strata.param "model.embed_tokens.weight" {strata.global_shape = array<i64: 16, 16>, strata.shard_start = array<i64: 8, 0>, strata.shard_view = array<i64: 16, 16>} : tensor<8x16xf32>
// TP2-NEXT: %[[V3:.*]] = strata.param "model.layers.0.self_attn.q_proj.weight" {strata.global_shape = array<i64: 16, 16>, strata.shard_start = array<i64: 2, 0, 0>, strata.shard_view = array<i64: 4, 4, 16>} : tensor<2x4x16xf32>
// TP2-NEXT: %[[V4:.*]] = strata.reshape %[[V3]] {strata.layer = 0 : i64} : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
// TP2-NEXT: %[[V5:.*]] = strata.param "model.layers.0.self_attn.k_proj.weight" {strata.global_shape = array<i64: 8, 16>, strata.shard_start = array<i64: 1, 0, 0>, strata.shard_view = array<i64: 2, 4, 16>} : tensor<1x4x16xf32>
// TP2-NEXT: %[[V6:.*]] = strata.reshape %[[V5]] {strata.layer = 0 : i64} : (tensor<1x4x16xf32>) -> tensor<4x16xf32>
// TP2-NEXT: %[[V7:.*]] = strata.param "model.layers.0.self_attn.v_proj.weight" {strata.global_shape = array<i64: 8, 16>, strata.shard_start = array<i64: 1, 0, 0>, strata.shard_view = array<i64: 2, 4, 16>} : tensor<1x4x16xf32>
// TP2-NEXT: %[[V8:.*]] = strata.reshape %[[V7]] {strata.layer = 0 : i64} : (tensor<1x4x16xf32>) -> tensor<4x16xf32>
// TP2-NEXT: %[[V9:.*]] = strata.param "model.layers.0.self_attn.o_proj.weight" {strata.global_shape = array<i64: 16, 16>, strata.shard_start = array<i64: 0, 8>, strata.shard_view = array<i64: 16, 16>} : tensor<16x8xf32>
// TP2-NEXT: %[[V10:.*]] = strata.param "model.layers.0.mlp.gate_proj.weight" {strata.global_shape = array<i64: 8, 16>, strata.shard_start = array<i64: 4, 0>, strata.shard_view = array<i64: 8, 16>} : tensor<4x16xf32>
// TP2-NEXT: %[[V11:.*]] = strata.param "model.layers.0.mlp.up_proj.weight" {strata.global_shape = array<i64: 8, 16>, strata.shard_start = array<i64: 4, 0>, strata.shard_view = array<i64: 8, 16>} : tensor<4x16xf32>
// TP2-NEXT: %[[V12:.*]] = strata.param "model.layers.0.mlp.down_proj.weight" {strata.global_shape = array<i64: 16, 8>, strata.shard_start = array<i64: 0, 4>, strata.shard_view = array<i64: 16, 8>} : tensor<16x4xf32>
// TP2-NEXT: %[[V13:.*]] = strata.param "model.layers.0.input_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<16xf32>
// TP2-NEXT: %[[V14:.*]] = strata.param "model.layers.0.post_attention_layernorm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<16xf32>
// TP2-NEXT: %[[V15:.*]] = strata.param "model.norm.weight" {init = "ones", init_std = 0.000000e+00 : f64} : tensor<16xf32>
// TP2-NEXT: %[[V16:.*]] = strata.param "lm_head.weight" {strata.global_shape = array<i64: 16, 16>, strata.shard_start = array<i64: 8, 0>, strata.shard_view = array<i64: 16, 16>} : tensor<8x16xf32>
// TP2-NEXT: %[[V17:.*]] = strata.embedding %[[V2]], %[[V0]] {row_start = 8 : i64} : (tensor<8x16xf32>, tensor<1x4xi32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V18:.*]] = strata.all_reduce %[[V17]] {group = "tp"} : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V19:.*]] = strata.rms_norm %[[V18]], %[[V13]] {strata.layer = 0 : i64} : (tensor<1x4x16xf32>, tensor<16xf32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V20:.*]] = strata.replicate %[[V19]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V21:.*]] = strata.matmul %[[V20]], %[[V4]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8xf32>
// TP2-NEXT: %[[V22:.*]] = strata.reshape %[[V21]] {strata.layer = 0 : i64} : (tensor<1x4x8xf32>) -> tensor<1x4x2x4xf32>
// TP2-NEXT: %[[V23:.*]] = strata.transpose %[[V22]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
// TP2-NEXT: %[[V24:.*]] = strata.rotary_embedding %[[V23]] {strata.layer = 0 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
// TP2-NEXT: %[[V25:.*]] = strata.matmul %[[V20]], %[[V6]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<4x16xf32>) -> tensor<1x4x4xf32>
// TP2-NEXT: %[[V26:.*]] = strata.reshape %[[V25]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// TP2-NEXT: %[[V27:.*]] = strata.transpose %[[V26]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// TP2-NEXT: %[[V28:.*]] = strata.rotary_embedding %[[V27]] {strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
// TP2-NEXT: %[[V29:.*]] = strata.repeat_interleave %[[V28]] {axis = 1 : i64, repeats = 2 : i64, strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
// TP2-NEXT: %[[V30:.*]] = strata.matmul %[[V20]], %[[V8]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<4x16xf32>) -> tensor<1x4x4xf32>
// TP2-NEXT: %[[V31:.*]] = strata.reshape %[[V30]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x1x4xf32>
// TP2-NEXT: %[[V32:.*]] = strata.transpose %[[V31]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x4x1x4xf32>) -> tensor<1x1x4x4xf32>
// TP2-NEXT: %[[V33:.*]] = strata.repeat_interleave %[[V32]] {axis = 1 : i64, repeats = 2 : i64, strata.layer = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
// TP2-NEXT: %[[V34:.*]] = strata.matmul %[[V24]], %[[V29]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
// TP2-NEXT: %[[V35:.*]] = strata.softmax %[[V34]] {causal = true, scale = 5.000000e-01 : f64, strata.layer = 0 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
// TP2-NEXT: %[[V36:.*]] = strata.matmul %[[V35]], %[[V33]] {strata.layer = 0 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
// TP2-NEXT: %[[V37:.*]] = strata.transpose %[[V36]] {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x4x2x4xf32>
// TP2-NEXT: %[[V38:.*]] = strata.reshape %[[V37]] {strata.layer = 0 : i64} : (tensor<1x4x2x4xf32>) -> tensor<1x4x8xf32>
// TP2-NEXT: %[[V39:.*]] = strata.matmul %[[V38]], %[[V9]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x8xf32>, tensor<16x8xf32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V40:.*]] = strata.all_reduce %[[V39]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V41:.*]] = strata.add %[[V18]], %[[V40]] {strata.layer = 0 : i64} : (tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V42:.*]] = strata.rms_norm %[[V41]], %[[V14]] {strata.layer = 0 : i64} : (tensor<1x4x16xf32>, tensor<16xf32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V43:.*]] = strata.replicate %[[V42]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V44:.*]] = strata.matmul %[[V43]], %[[V10]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<4x16xf32>) -> tensor<1x4x4xf32>
// TP2-NEXT: %[[V45:.*]] = strata.matmul %[[V43]], %[[V11]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x16xf32>, tensor<4x16xf32>) -> tensor<1x4x4xf32>
// TP2-NEXT: %[[V46:.*]] = strata.silu_mul %[[V44]], %[[V45]] {strata.layer = 0 : i64} : (tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> tensor<1x4x4xf32>
// TP2-NEXT: %[[V47:.*]] = strata.matmul %[[V46]], %[[V12]] {strata.layer = 0 : i64, transpose_b = true} : (tensor<1x4x4xf32>, tensor<16x4xf32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V48:.*]] = strata.all_reduce %[[V47]] {group = "tp", strata.layer = 0 : i64} : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V49:.*]] = strata.add %[[V41]], %[[V48]] {strata.layer = 0 : i64} : (tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V50:.*]] = strata.rms_norm %[[V49]], %[[V15]] : (tensor<1x4x16xf32>, tensor<16xf32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V51:.*]] = strata.replicate %[[V50]] {group = "tp"} : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// TP2-NEXT: %[[V52:.*]] = strata.matmul %[[V51]], %[[V16]] {transpose_b = true} : (tensor<1x4x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8xf32>
// TP2-NEXT: %[[V53:.*]] = strata.vocab_parallel_cross_entropy %[[V52]], %[[V1]] {group = "tp", valid = 8 : i64, vocab_start = 8 : i64} : (tensor<1x4x8xf32>, tensor<1x4xi32>) -> tensor<f32>
// TP2-NEXT: return %[[V53]] : tensor<f32>
// TP2-NEXT: }
