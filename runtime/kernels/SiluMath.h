//===- SiluMath.h - SiLU and SwiGLU forward and backward, per element -----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// silu(x) = x σ(x) and silu'(x) = σ(x) (1 + x (1 − σ(x))). Each function
// takes s = σ(x), which a backend evaluates with its own exp (a vectorisable
// polynomial on the CPU, __expf on a GPU).
// SwiGLU: out = silu(g) · u; dg = dy · u · silu'(g); du = dy · silu(g).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_KERNELS_SILUMATH_H
#define STRATA_RUNTIME_KERNELS_SILUMATH_H

#include "runtime/kernels/HostDevice.h"

namespace strata::kernels {

STRATA_HOST_DEVICE inline float silu(float x, float s) { return x * s; }

STRATA_HOST_DEVICE inline float siluDerivative(float x, float s) {
  return s * (1.0f + x * (1.0f - s));
}

STRATA_HOST_DEVICE inline float siluMul(float gate, float s, float up) {
  return silu(gate, s) * up;
}

STRATA_HOST_DEVICE inline void siluMulGrad(float gate, float s, float up,
                                           float dy, float &dgate, float &dup) {
  dgate = dy * up * siluDerivative(gate, s);
  dup = dy * silu(gate, s);
}

} // namespace strata::kernels

#endif // STRATA_RUNTIME_KERNELS_SILUMATH_H
