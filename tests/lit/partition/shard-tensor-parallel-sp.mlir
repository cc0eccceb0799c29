// RUN: strata import %examples/models/gpt-tiny.yaml | strata-opt -strata-shard-tensor-parallel="tp=4 tp-rank=2 sp=true" | FileCheck %s

// Sequence parallelism on gpt-tiny (sequence 64, 4 ranks): the residual
// stream and the layer norms work on [4, 16, 64] sequence shards.

// Parameters of the sequence-sharded regions are wrapped in replicate, so
// that their partial gradients are summed over the group.
// CHECK: %[[WPE:.*]] = strata.param "wpe.weight" : tensor<64x64xf32>
// CHECK-NEXT: %[[WPER:.*]] = strata.replicate %[[WPE]] {group = "tp"}
// CHECK: %[[LN1W:.*]] = strata.param "h.0.ln_1.weight"
// CHECK-NEXT: %[[LN1WR:.*]] = strata.replicate %[[LN1W]] {group = "tp", strata.layer = 0 : i64}
// CHECK: %[[PROJB:.*]] = strata.param "h.0.attn.c_proj.bias"
// CHECK-NEXT: %[[PROJBR:.*]] = strata.replicate %[[PROJB]] {group = "tp", strata.layer = 0 : i64}

// The token embedding's partial sums are reduce-scattered onto sequence
// shards; positions are this rank's slice.
// CHECK: %[[E:.*]] = strata.embedding %{{.*}}, %{{.*}} {row_start = 256 : i64} : (tensor<128x64xf32>, tensor<4x64xi32>) -> tensor<4x64x64xf32>
// CHECK-NEXT: %[[ES:.*]] = strata.reduce_scatter %[[E]] {axis = 1 : i64, group = "tp", size = 4 : i64} : (tensor<4x64x64xf32>) -> tensor<4x16x64xf32>
// CHECK-NEXT: %[[POS:.*]] = strata.slice %{{.*}} {axis = 1 : i64, offset = 32 : i64, size = 16 : i64} : (tensor<4x64xi32>) -> tensor<4x16xi32>
// CHECK-NEXT: %[[P:.*]] = strata.embedding %[[WPER]], %[[POS]] : (tensor<64x64xf32>, tensor<4x16xi32>) -> tensor<4x16x64xf32>
// CHECK-NEXT: %[[X:.*]] = strata.add %[[ES]], %[[P]] : (tensor<4x16x64xf32>, tensor<4x16x64xf32>) -> tensor<4x16x64xf32>
// CHECK-NEXT: %[[LN:.*]] = strata.layer_norm %[[X]], %[[LN1WR]], %{{.*}} {{.*}}: (tensor<4x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<4x16x64xf32>

// Column-parallel blocks start with a gather of the sequence (its gradient
// is a reduce-scatter), row-parallel blocks end with a reduce-scatter.
// CHECK-NEXT: %[[G:.*]] = strata.all_gather %[[LN]] {axis = 1 : i64, group = "tp", size = 4 : i64, strata.layer = 0 : i64} : (tensor<4x16x64xf32>) -> tensor<4x64x64xf32>
// CHECK-NEXT: strata.matmul %[[G]], %{{[0-9]+}} {{.*}}: (tensor<4x64x64xf32>, tensor<64x48xf32>) -> tensor<4x64x48xf32>
// CHECK: %[[PART:.*]] = strata.matmul %{{.*}}, %{{.*}} {{.*}}: (tensor<4x64x16xf32>, tensor<16x64xf32>) -> tensor<4x64x64xf32>
// CHECK-NEXT: %[[RS:.*]] = strata.reduce_scatter %[[PART]] {axis = 1 : i64, group = "tp", size = 4 : i64, strata.layer = 0 : i64} : (tensor<4x64x64xf32>) -> tensor<4x16x64xf32>
// CHECK-NEXT: strata.bias_add %[[RS]], %[[PROJBR]] {{.*}}: (tensor<4x16x64xf32>, tensor<64xf32>) -> tensor<4x16x64xf32>
// CHECK-NEXT: strata.add %[[X]], %{{.*}} : (tensor<4x16x64xf32>, tensor<4x16x64xf32>) -> tensor<4x16x64xf32>

// The sequence is gathered once more before the logits.
// CHECK: %[[LNF:.*]] = strata.layer_norm %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : (tensor<4x16x64xf32>
// CHECK-NEXT: %[[GF:.*]] = strata.all_gather %[[LNF]] {axis = 1 : i64, group = "tp", size = 4 : i64} : (tensor<4x16x64xf32>) -> tensor<4x64x64xf32>
// CHECK-NEXT: %[[L:.*]] = strata.matmul %[[GF]], %{{.*}} {transpose_b = true} : (tensor<4x64x64xf32>, tensor<128x64xf32>) -> tensor<4x64x128xf32>
// CHECK-NEXT: strata.vocab_parallel_cross_entropy %[[L]], %{{.*}} {group = "tp", valid = 128 : i64, vocab_start = 256 : i64} : (tensor<4x64x128xf32>, tensor<4x64xi32>) -> tensor<f32>
