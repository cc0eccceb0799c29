//===- AttentionKernels.h - Fused causal attention on the CPU -------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// FlashAttention-2 forward and backward over row-major fp32 tensors: query
// [batch, heads, seq, headDim], key and value [batch, kvHeads, seq,
// headDim] (query head h reads kv head h / (heads / kvHeads)), the
// per-row log-sum-exp [batch, heads, seq]. Scores exist only as one
// kRowTile x kKeyTile tile at a time; the tile products run on oneDNN's
// sgemm. The per-element math is runtime/kernels/AttentionMath.h.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CPU_ATTENTIONKERNELS_H
#define STRATA_RUNTIME_CPU_ATTENTIONKERNELS_H

#include <cstdint>

namespace strata::rt::cpu {

struct AttentionShape {
  int64_t batch = 1, heads = 1, kvHeads = 1, seq = 1, headDim = 1;
};

/// Query rows and keys per tile: a 128 x 128 score tile (64 KiB) and the
/// operand tiles stay in L2 while the products run; measured against 64
/// and 256 (bench/kernels/AttentionKernelBench.cpp, docs/benchmarks.md).
constexpr int64_t kRowTile = 128, kKeyTile = 128;

/// out = softmax(scale * q k^T, causal) v; lse = the per-row log of the
/// softmax denominator.
void causalAttentionFwd(const float *q, const float *k, const float *v,
                        float *out, float *lse, const AttentionShape &s,
                        float scale);

/// dq, dk, dv from dout, the forward operands, out and lse (overwritten,
/// not accumulated into).
void causalAttentionBwd(const float *dout, const float *q, const float *k,
                        const float *v, const float *out, const float *lse,
                        float *dq, float *dk, float *dv,
                        const AttentionShape &s, float scale);

/// bfloat16 q, k, v, out (and dout, dq, dk, dv); lse stays float32. Each
/// head is widened as it is reached into float32 rows of one head (seq x
/// headDim, the tiles' source), computed by the float32 code above with
/// float32 accumulation, and its results rounded once into the bf16
/// tensors (dk and dv after the last query head of their kv head): bit for
/// bit the float32 kernels on widened tensors, without whole-tensor copies.
void causalAttentionFwd(const uint16_t *q, const uint16_t *k, const uint16_t *v,
                        uint16_t *out, float *lse, const AttentionShape &s,
                        float scale);
void causalAttentionBwd(const uint16_t *dout, const uint16_t *q,
                        const uint16_t *k, const uint16_t *v,
                        const uint16_t *out, const float *lse, uint16_t *dq,
                        uint16_t *dk, uint16_t *dv, const AttentionShape &s,
                        float scale);

} // namespace strata::rt::cpu

#endif // STRATA_RUNTIME_CPU_ATTENTIONKERNELS_H
