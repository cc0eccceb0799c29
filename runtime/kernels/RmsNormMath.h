//===- RmsNormMath.h - RMSNorm forward and backward, per element ----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// y = x · r · w with r = 1 / sqrt(mean(x²) + eps) (Hugging Face LlamaRMSNorm).
// Backward, with dot = Σ_i w_i dy_i x_i over the row:
//   dx_j = r (w_j dy_j − x_j · r² dot / n),   dw_j += dy_j x_j r.
// A backend computes the row sums (Σ x², dot) its own way; these functions
// are everything else.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_KERNELS_RMSNORMMATH_H
#define STRATA_RUNTIME_KERNELS_RMSNORMMATH_H

#include "runtime/kernels/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace strata::kernels {

/// 1 / sqrt(sumSquares / n + eps): the row's reciprocal root mean square.
STRATA_HOST_DEVICE inline float rmsNormRstd(float sumSquares, int64_t n,
                                            float eps) {
  return 1.0f / sqrtf(sumSquares / float(n) + eps);
}

STRATA_HOST_DEVICE inline float rmsNormForward(float x, float rstd, float w) {
  return x * rstd * w;
}

/// The per-row coefficient of the input gradient: r² · dot / n.
STRATA_HOST_DEVICE inline float rmsNormGradCoefficient(float dot, float rstd,
                                                       int64_t n) {
  return dot * rstd * rstd / float(n);
}

STRATA_HOST_DEVICE inline float rmsNormInputGrad(float dy, float x, float w,
                                                 float rstd, float coeff) {
  return rstd * (w * dy - x * coeff);
}

STRATA_HOST_DEVICE inline float rmsNormWeightGrad(float dy, float x,
                                                  float rstd) {
  return dy * x * rstd;
}

} // namespace strata::kernels

#endif // STRATA_RUNTIME_KERNELS_RMSNORMMATH_H
