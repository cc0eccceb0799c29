//===- AttentionMath.h - FlashAttention-2 math, per element and per row ---===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The arithmetic of fused causal attention (FlashAttention-2, Dao 2023)
// that does not depend on how a backend tiles the products q k^T, P V,
// dO V^T, dS K and dS^T Q:
//
//   forward, per query row i and key tile j (online softmax):
//     m' = max(m, max_j s_ij);  c = exp(m - m');  p_ij = exp(s_ij - m');
//     l' = c l + sum_j p_ij;     o' = c o + sum_j p_ij v_j;
//   at the end o = o / l and lse = m + log(l);
//   backward, with D_i = sum_d dO_id O_id:
//     p_ij = exp(s_ij - lse_i);  dS_ij = p_ij (dP_ij - D_i) * scale.
//
// s_ij is the scaled score scale * q_i . k_j; entries with j > i are masked
// (p_ij = 0). exp and log are arguments: each backend evaluates them its
// own way (a vectorisable polynomial on the CPU, __expf on a GPU).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_KERNELS_ATTENTIONMATH_H
#define STRATA_RUNTIME_KERNELS_ATTENTIONMATH_H

#include "runtime/kernels/HostDevice.h"

#include <cstdint>

namespace strata::kernels {

/// The number of keys query row `row` sees in the key tile that starts at
/// `tileStart` and holds `tileCols` keys: keys j <= row only.
STRATA_HOST_DEVICE inline int64_t
causalValidKeys(int64_t row, int64_t tileStart, int64_t tileCols) {
  int64_t valid = row - tileStart + 1;
  return valid < 0 ? 0 : (valid > tileCols ? tileCols : valid);
}

/// The factor that rescales a row's running sum and output when its
/// running maximum moves from `oldMax` to `newMax` (1 on a row's first
/// tile, where oldMax is -inf and nothing has been accumulated yet).
template <typename Exp>
STRATA_HOST_DEVICE inline float onlineRescale(float oldMax, float newMax,
                                              Exp exp) {
  return oldMax == newMax ? 1.0f : exp(oldMax - newMax);
}

/// The saved statistic of a finished row: log of the softmax denominator
/// of the scaled scores.
template <typename Log>
STRATA_HOST_DEVICE inline float logSumExp(float rowMax, float rowSum, Log log) {
  return rowMax + log(rowSum);
}

/// The probability recomputed in the backward pass from the raw score
/// q_i . k_j and the row's saved log-sum-exp.
template <typename Exp>
STRATA_HOST_DEVICE inline float
recomputedProbability(float rawScore, float scale, float lse, Exp exp) {
  return exp(scale * rawScore - lse);
}

/// The gradient with respect to the raw score q_i . k_j, given the
/// probability, dP_ij = dO_i . v_j and D_i = dO_i . O_i.
STRATA_HOST_DEVICE inline float rawScoreGradient(float p, float dp,
                                                 float rowDot, float scale) {
  return scale * p * (dp - rowDot);
}

} // namespace strata::kernels

#endif // STRATA_RUNTIME_KERNELS_ATTENTIONMATH_H
