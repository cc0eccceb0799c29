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

/// Query rows and keys per tile: a 64 x 64 score tile (16 KiB) and the
/// operand tiles stay in L1/L2 while the products run.
constexpr int64_t kRowTile = 64, kKeyTile = 64;

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

} // namespace strata::rt::cpu

#endif // STRATA_RUNTIME_CPU_ATTENTIONKERNELS_H
