//===- LayerNormMath.h - Layer norm forward and backward, per element -----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// y = (x − μ) r γ + β with the biased variance and r = 1 / sqrt(var + eps)
// (torch.nn.LayerNorm). Backward, with d = dy γ and x̂ = (x − μ) r, and the
// row means mD = mean(d), mDX = mean(d x̂):
//   dx = r (d − mD − x̂ mDX),   dγ += dy x̂,   dβ += dy.
// A backend computes the row sums (Σ x, Σ (x − μ)², Σ d, Σ d x̂) its own way;
// these functions are everything else.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_KERNELS_LAYERNORMMATH_H
#define STRATA_RUNTIME_KERNELS_LAYERNORMMATH_H

#include "runtime/kernels/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace strata::kernels {

/// 1 / sqrt(Σ (x − μ)² / n + eps).
STRATA_HOST_DEVICE inline float layerNormRstd(float sumSquaredDev, int64_t n,
                                              float eps) {
  return 1.0f / sqrtf(sumSquaredDev / float(n) + eps);
}

STRATA_HOST_DEVICE inline float layerNormNormalized(float x, float mean,
                                                    float rstd) {
  return (x - mean) * rstd;
}

STRATA_HOST_DEVICE inline float
layerNormForward(float x, float mean, float rstd, float gamma, float beta) {
  return layerNormNormalized(x, mean, rstd) * gamma + beta;
}

/// dx of one element from the row means mD = mean(dy γ), mDX = mean(dy γ x̂).
STRATA_HOST_DEVICE inline float layerNormInputGrad(float dy, float gamma,
                                                   float xhat, float rstd,
                                                   float meanD, float meanDX) {
  return rstd * (dy * gamma - meanD - xhat * meanDX);
}

} // namespace strata::kernels

#endif // STRATA_RUNTIME_KERNELS_LAYERNORMMATH_H
