// RUN: strata-opt %s -strata-shard-tensor-parallel="tp=2 tp-rank=0" | FileCheck %s --check-prefixes=CHECK,RANK0
// RUN: strata-opt %s -strata-shard-tensor-parallel="tp=2 tp-rank=1" | FileCheck %s --check-prefixes=CHECK,RANK1
// RUN: strata-opt %s -strata-shard-tensor-parallel="tp=1" | FileCheck %s --check-prefix=TP1
// RUN: strata-opt %s -strata-shard-tensor-parallel="tp=2 tp-rank=1" -strata-autodiff | FileCheck %s --check-prefix=GRAD

// One GPT-2 block (hidden 8, 2 heads of 4, ffn 16, vocabulary 10), as the
// gpt preset builds it, split over two tensor-parallel ranks.

// TP1-NOT: strata.all_reduce
// TP1-NOT: shard_view
// TP1: strata.param "h.0.attn.c_attn.weight" : tensor<8x24xf32>

// CHECK-LABEL: func.func @forward
func.func @forward() -> tensor<f32> {
  // CHECK: %[[TOK:.*]] = strata.input "tokens" : tensor<2x4xi32>
  %tokens = strata.input "tokens" : tensor<2x4xi32>
  %positions = strata.input "positions" : tensor<2x4xi32>
  %targets = strata.input "targets" : tensor<2x4xi32>
  // Vocabulary rows [5r, 5r + 5).
  // RANK0: %[[WTE:.*]] = strata.param "wte.weight" {strata.global_shape = array<i64: 10, 8>, strata.shard_start = array<i64: 0, 0>, strata.shard_view = array<i64: 10, 8>} : tensor<5x8xf32>
  // RANK1: %[[WTE:.*]] = strata.param "wte.weight" {strata.global_shape = array<i64: 10, 8>, strata.shard_start = array<i64: 5, 0>, strata.shard_view = array<i64: 10, 8>} : tensor<5x8xf32>
  %wte = strata.param "wte.weight" : tensor<10x8xf32>
  // Replicated parameters keep their shape and get no shard attributes.
  // CHECK: strata.param "wpe.weight" : tensor<4x8xf32>
  %wpe = strata.param "wpe.weight" : tensor<4x8xf32>
  // CHECK: strata.param "h.0.ln_1.weight" : tensor<8xf32>
  %ln1w = strata.param "h.0.ln_1.weight" : tensor<8xf32>
  %ln1b = strata.param "h.0.ln_1.bias" : tensor<8xf32>
  // The fused QKV weight by heads: view [8, (q|k|v), head, head_dim], the
  // rank's head of each of q, k and v, reshaped to the local [8, 12].
  // RANK0: %[[QKVW:.*]] = strata.param "h.0.attn.c_attn.weight" {strata.global_shape = array<i64: 8, 24>, strata.shard_start = array<i64: 0, 0, 0, 0>, strata.shard_view = array<i64: 8, 3, 2, 4>} : tensor<8x3x1x4xf32>
  // RANK1: %[[QKVW:.*]] = strata.param "h.0.attn.c_attn.weight" {strata.global_shape = array<i64: 8, 24>, strata.shard_start = array<i64: 0, 0, 1, 0>, strata.shard_view = array<i64: 8, 3, 2, 4>} : tensor<8x3x1x4xf32>
  // CHECK: %[[QKV:.*]] = strata.reshape %[[QKVW]] {strata.layer = 0 : i64} : (tensor<8x3x1x4xf32>) -> tensor<8x12xf32>
  %qkvw = strata.param "h.0.attn.c_attn.weight" : tensor<8x24xf32>
  // RANK1: %[[QKVB:.*]] = strata.param "h.0.attn.c_attn.bias" {strata.global_shape = array<i64: 24>, strata.shard_start = array<i64: 0, 1, 0>, strata.shard_view = array<i64: 3, 2, 4>} : tensor<3x1x4xf32>
  // CHECK: strata.reshape %{{.*}} : (tensor<3x1x4xf32>) -> tensor<12xf32>
  %qkvb = strata.param "h.0.attn.c_attn.bias" : tensor<24xf32>
  // Row-parallel: the rows of the rank's head.
  // RANK0: %[[PROJW:.*]] = strata.param "h.0.attn.c_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 0, 0>, strata.shard_view = array<i64: 8, 8>} : tensor<4x8xf32>
  // RANK1: %[[PROJW:.*]] = strata.param "h.0.attn.c_proj.weight" {strata.global_shape = array<i64: 8, 8>, strata.shard_start = array<i64: 4, 0>, strata.shard_view = array<i64: 8, 8>} : tensor<4x8xf32>
  %projw = strata.param "h.0.attn.c_proj.weight" : tensor<8x8xf32>
  // CHECK: %[[PROJB:.*]] = strata.param "h.0.attn.c_proj.bias" : tensor<8xf32>
  %projb = strata.param "h.0.attn.c_proj.bias" : tensor<8xf32>
  %ln2w = strata.param "h.0.ln_2.weight" : tensor<8xf32>
  %ln2b = strata.param "h.0.ln_2.bias" : tensor<8xf32>
  // RANK1: strata.param "h.0.mlp.c_fc.weight" {strata.global_shape = array<i64: 8, 16>, strata.shard_start = array<i64: 0, 8>, strata.shard_view = array<i64: 8, 16>} : tensor<8x8xf32>
  %fcw = strata.param "h.0.mlp.c_fc.weight" : tensor<8x16xf32>
  // RANK1: strata.param "h.0.mlp.c_fc.bias" {strata.global_shape = array<i64: 16>, strata.shard_start = array<i64: 8>, strata.shard_view = array<i64: 16>} : tensor<8xf32>
  %fcb = strata.param "h.0.mlp.c_fc.bias" : tensor<16xf32>
  // RANK1: strata.param "h.0.mlp.c_proj.weight" {strata.global_shape = array<i64: 16, 8>, strata.shard_start = array<i64: 8, 0>, strata.shard_view = array<i64: 16, 8>} : tensor<8x8xf32>
  %mpw = strata.param "h.0.mlp.c_proj.weight" : tensor<16x8xf32>
  %mpb = strata.param "h.0.mlp.c_proj.bias" : tensor<8xf32>
  %lnfw = strata.param "ln_f.weight" : tensor<8xf32>
  %lnfb = strata.param "ln_f.bias" : tensor<8xf32>

  // Vocabulary-parallel embedding: own rows, then the sum over the ranks.
  // RANK0: %[[E:.*]] = strata.embedding %[[WTE]], %[[TOK]] : (tensor<5x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  // RANK1: %[[E:.*]] = strata.embedding %[[WTE]], %[[TOK]] {row_start = 5 : i64} : (tensor<5x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  // CHECK-NEXT: strata.all_reduce %[[E]] {group = "tp"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %e = strata.embedding %wte, %tokens : (tensor<10x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  %p = strata.embedding %wpe, %positions : (tensor<4x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  %x0 = strata.add %e, %p : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: %[[LN1:.*]] = strata.layer_norm
  %h1 = strata.layer_norm %x0, %ln1w, %ln1b {strata.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // Attention over the rank's head.
  // CHECK-NEXT: %[[R1:.*]] = strata.replicate %[[LN1]] {group = "tp", strata.layer = 0 : i64}
  // CHECK-NEXT: strata.matmul %[[R1]], %[[QKV]] {{.*}}: (tensor<2x4x8xf32>, tensor<8x12xf32>) -> tensor<2x4x12xf32>
  %c = strata.matmul %h1, %qkvw {strata.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x24xf32>) -> tensor<2x4x24xf32>
  // CHECK-NEXT: strata.bias_add {{.*}} -> tensor<2x4x12xf32>
  %cb = strata.bias_add %c, %qkvb {strata.layer = 0 : i64} : (tensor<2x4x24xf32>, tensor<24xf32>) -> tensor<2x4x24xf32>
  // CHECK-NEXT: strata.reshape {{.*}} -> tensor<2x4x3x1x4xf32>
  %r = strata.reshape %cb {strata.layer = 0 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x3x2x4xf32>
  // CHECK-NEXT: strata.transpose {{.*}} -> tensor<3x2x1x4x4xf32>
  %t = strata.transpose %r {permutation = array<i64: 2, 0, 3, 1, 4>, strata.layer = 0 : i64} : (tensor<2x4x3x2x4xf32>) -> tensor<3x2x2x4x4xf32>
  %s:3 = strata.split %t {axis = 0 : i64, strata.layer = 0 : i64} : (tensor<3x2x2x4x4xf32>) -> (tensor<1x2x2x4x4xf32>, tensor<1x2x2x4x4xf32>, tensor<1x2x2x4x4xf32>)
  %q = strata.reshape %s#0 {strata.layer = 0 : i64} : (tensor<1x2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %k = strata.reshape %s#1 {strata.layer = 0 : i64} : (tensor<1x2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %v = strata.reshape %s#2 {strata.layer = 0 : i64} : (tensor<1x2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %qk = strata.matmul %q, %k {strata.layer = 0 : i64, transpose_b = true} : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  // CHECK: strata.softmax {{.*}} : (tensor<2x1x4x4xf32>) -> tensor<2x1x4x4xf32>
  %sm = strata.softmax %qk {causal = true, scale = 5.000000e-01 : f64, strata.layer = 0 : i64} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %o = strata.matmul %sm, %v {strata.layer = 0 : i64} : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %ot = strata.transpose %o {permutation = array<i64: 0, 2, 1, 3>, strata.layer = 0 : i64} : (tensor<2x2x4x4xf32>) -> tensor<2x4x2x4xf32>
  // CHECK: %[[HEADS:.*]] = strata.reshape {{.*}} : (tensor<2x4x1x4xf32>) -> tensor<2x4x4xf32>
  %om = strata.reshape %ot {strata.layer = 0 : i64} : (tensor<2x4x2x4xf32>) -> tensor<2x4x8xf32>
  // Row-parallel projection, partial sums completed, bias added once after.
  // CHECK-NEXT: %[[PART:.*]] = strata.matmul %[[HEADS]], %[[PROJW]] {{.*}}: (tensor<2x4x4xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK-NEXT: %[[SUM:.*]] = strata.all_reduce %[[PART]] {group = "tp", strata.layer = 0 : i64}
  // CHECK-NEXT: strata.bias_add %[[SUM]], %[[PROJB]]
  %pr = strata.matmul %om, %projw {strata.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %prb = strata.bias_add %pr, %projb {strata.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %x1 = strata.add %x0, %prb {strata.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // MLP: half of the 16 features per rank.
  // CHECK: strata.replicate
  // CHECK-NEXT: strata.matmul {{.*}} -> tensor<2x4x8xf32>
  // CHECK-NEXT: strata.bias_add {{.*}} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // CHECK-NEXT: strata.gelu {{.*}} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK-NEXT: strata.matmul {{.*}} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  // CHECK-NEXT: strata.all_reduce
  // CHECK-NEXT: strata.bias_add
  %h2 = strata.layer_norm %x1, %ln2w, %ln2b {strata.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %f = strata.matmul %h2, %fcw {strata.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %fb = strata.bias_add %f, %fcb {strata.layer = 0 : i64} : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %g = strata.gelu %fb {strata.layer = 0 : i64} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %m = strata.matmul %g, %mpw {strata.layer = 0 : i64} : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  %mb = strata.bias_add %m, %mpb {strata.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %x2 = strata.add %x1, %mb {strata.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // Tied output projection on the local vocabulary rows; the loss is
  // vocabulary-parallel (classes 0-4 on rank 0, 5-9 on rank 1; no padding).
  // CHECK: %[[LNF:.*]] = strata.layer_norm
  // CHECK-NEXT: %[[R3:.*]] = strata.replicate %[[LNF]] {group = "tp"}
  // CHECK-NEXT: %[[LOCAL:.*]] = strata.matmul %[[R3]], %[[WTE]] {transpose_b = true} : (tensor<2x4x8xf32>, tensor<5x8xf32>) -> tensor<2x4x5xf32>
  // RANK0-NEXT: strata.vocab_parallel_cross_entropy %[[LOCAL]], %{{.*}} {group = "tp", valid = 5 : i64, vocab_start = 0 : i64} : (tensor<2x4x5xf32>, tensor<2x4xi32>) -> tensor<f32>
  // RANK1-NEXT: strata.vocab_parallel_cross_entropy %[[LOCAL]], %{{.*}} {group = "tp", valid = 5 : i64, vocab_start = 5 : i64} : (tensor<2x4x5xf32>, tensor<2x4xi32>) -> tensor<f32>
  %hf = strata.layer_norm %x2, %lnfw, %lnfb : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %logits = strata.matmul %hf, %wte {transpose_b = true} : (tensor<2x4x8xf32>, tensor<10x8xf32>) -> tensor<2x4x10xf32>
  %loss = strata.cross_entropy %logits, %targets : (tensor<2x4x10xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// The conjugate collectives appear in the backward pass by the gradient
// rules: the loss gives this rank's slice of the logits gradient, each replicate an
// all-reduce of its input gradient, and the local shards get gradients of
// their own shapes.
// GRAD-LABEL: func.func @train_microbatch
// GRAD: strata.vocab_parallel_cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} {group = "tp", valid = 5 : i64, vocab_start = 5 : i64} : (tensor<2x4x5xf32>, tensor<2x4xi32>, tensor<f32>) -> tensor<2x4x5xf32>
// GRAD: strata.all_reduce
// GRAD: strata.embedding_grad %{{.*}}, %{{.*}} {row_start = 5 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<5x8xf32>
// GRAD-DAG: strata.accumulate_grad %{{.*}} {param = "h.0.attn.c_attn.weight"} : tensor<8x3x1x4xf32>
// GRAD-DAG: strata.accumulate_grad %{{.*}} {param = "wte.weight"} : tensor<5x8xf32>
