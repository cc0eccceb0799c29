//===- OptimizerMath.h - AdamW and SGD updates, per element ---------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// torch.optim.AdamW and torch.optim.SGD (dampening 0, no nesterov) in
// torch's operation order. The step's scalars are rounded to float once
// (torch turns Python scalars into the tensor's dtype) by the *Coefficients
// functions, on the host; the per-element updates then run on any backend.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_KERNELS_OPTIMIZERMATH_H
#define STRATA_RUNTIME_KERNELS_OPTIMIZERMATH_H

#include "runtime/kernels/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace strata::kernels {

struct AdamWCoefficients {
  float decay; ///< 1 − lr · weight_decay
  float beta1, oneMinusBeta1, beta2, oneMinusBeta2;
  float negStepSize; ///< −lr / (1 − β1^step)
  float bc2Sqrt;     ///< sqrt(1 − β2^step)
  float eps;
};

/// The coefficients of step `step` (counted from 1).
inline AdamWCoefficients adamwCoefficients(double lr, double beta1,
                                           double beta2, double eps,
                                           double weightDecay, int64_t step) {
  AdamWCoefficients c;
  c.decay = float(1.0 - lr * weightDecay);
  c.beta1 = float(beta1);
  c.oneMinusBeta1 = float(1.0 - beta1);
  c.beta2 = float(beta2);
  c.oneMinusBeta2 = float(1.0 - beta2);
  double biasCorrection1 = 1.0 - std::pow(beta1, double(step));
  double biasCorrection2 = 1.0 - std::pow(beta2, double(step));
  c.negStepSize = float(-(lr / biasCorrection1));
  c.bc2Sqrt = float(std::sqrt(biasCorrection2));
  c.eps = float(eps);
  return c;
}

/// One element: updates p, m (exp_avg) and v (exp_avg_sq) in place.
STRATA_HOST_DEVICE inline void
adamwUpdate(float &p, float g, float &m, float &v, const AdamWCoefficients &c) {
  float decayed = p * c.decay;
  m = m * c.beta1 + c.oneMinusBeta1 * g;
  v = v * c.beta2 + c.oneMinusBeta2 * g * g;
  float denom = sqrtf(v) / c.bc2Sqrt + c.eps;
  p = decayed + c.negStepSize * m / denom;
}

struct SgdCoefficients {
  float weightDecay, momentum, negLr;
};

inline SgdCoefficients sgdCoefficients(double lr, double momentum,
                                       double weightDecay) {
  return {float(weightDecay), float(momentum), float(-lr)};
}

/// One element: g' = g + wd p; buf = momentum buf + g'; p += −lr buf. A
/// zero buf on the first step gives torch's buf = g'.
STRATA_HOST_DEVICE inline void sgdUpdate(float &p, float g, float &buf,
                                         const SgdCoefficients &c) {
  float gd = g + c.weightDecay * p;
  buf = buf * c.momentum + gd;
  p = p + c.negLr * buf;
}

/// torch.nn.utils.clip_grad_norm_'s coefficient max_norm / (norm + 1e-6);
/// the gradients are scaled only when it is < 1.
STRATA_HOST_DEVICE inline double clipCoefficient(double sumSquares,
                                                 double maxNorm) {
  return maxNorm / (sqrt(sumSquares) + 1e-6);
}

} // namespace strata::kernels

#endif // STRATA_RUNTIME_KERNELS_OPTIMIZERMATH_H
