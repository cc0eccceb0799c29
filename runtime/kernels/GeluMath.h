//===- GeluMath.h - GELU (tanh form) and ReLU, per element ----------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Hugging Face "gelu_new": 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715
// x³). 0.5 (1 + tanh(u)) = σ(2u) and its derivative 0.5 (1 − tanh²(u)) =
// 2 s (1 − s): one exp per element and no cancellation. A backend evaluates
// s = σ(geluSigmoidArg(x)) with its own exp and passes it in.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_KERNELS_GELUMATH_H
#define STRATA_RUNTIME_KERNELS_GELUMATH_H

#include "runtime/kernels/HostDevice.h"

namespace strata::kernels {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

/// 2u: the argument of the sigmoid that equals 0.5 (1 + tanh(u)).
STRATA_HOST_DEVICE inline float geluSigmoidArg(float x) {
  return 2.0f * (kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
}

STRATA_HOST_DEVICE inline float geluForward(float x, float s) { return x * s; }

STRATA_HOST_DEVICE inline float geluBackward(float x, float s, float dy) {
  float du = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return dy * (s + 2.0f * x * s * (1.0f - s) * du);
}

STRATA_HOST_DEVICE inline float reluForward(float x) {
  return x > 0.0f ? x : 0.0f;
}

STRATA_HOST_DEVICE inline float reluBackward(float x, float dy) {
  return x > 0.0f ? dy : 0.0f;
}

} // namespace strata::kernels

#endif // STRATA_RUNTIME_KERNELS_GELUMATH_H
