//===- UnaryMath.h - strata.unary's functions and derivatives -------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The elementwise functions of strata.unary (docs/dialect.md), one code per
// kind, shared by the CPU and CUDA kernels: value f(x) and derivative f'(x),
// both from the input x (the backward recomputes f, it saves nothing).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_KERNELS_UNARYMATH_H
#define STRATA_RUNTIME_KERNELS_UNARYMATH_H

#include "runtime/kernels/HostDevice.h"

#include <cmath>
#include <cstdint>
#include <string_view>

namespace strata::kernels {

/// The runtime code of each kind (the `kind` attribute of unary_fwd/bwd).
enum class UnaryKind : int64_t {
  Sqrt = 0,
  Reciprocal = 1,
  Erf = 2,
  Tanh = 3,
  Sigmoid = 4,
  Exp = 5,
  Neg = 6,
};
inline constexpr int64_t kNumUnaryKinds = 7;

/// The IR name of each kind, indexed by its code.
inline constexpr std::string_view kUnaryKindNames[kNumUnaryKinds] = {
    "sqrt", "reciprocal", "erf", "tanh", "sigmoid", "exp", "neg"};

/// The code of an IR kind name, or -1.
inline int64_t unaryKindCode(std::string_view name) {
  for (int64_t i = 0; i < kNumUnaryKinds; ++i)
    if (kUnaryKindNames[i] == name)
      return i;
  return -1;
}

STRATA_HOST_DEVICE inline float unaryValue(UnaryKind k, float x) {
  switch (k) {
  case UnaryKind::Sqrt:
    return sqrtf(x);
  case UnaryKind::Reciprocal:
    return 1.0f / x;
  case UnaryKind::Erf:
    return erff(x);
  case UnaryKind::Tanh:
    return tanhf(x);
  case UnaryKind::Sigmoid:
    return 1.0f / (1.0f + expf(-x));
  case UnaryKind::Exp:
    return expf(x);
  case UnaryKind::Neg:
    return -x;
  }
  return x;
}

STRATA_HOST_DEVICE inline float unaryDerivative(UnaryKind k, float x) {
  switch (k) {
  case UnaryKind::Sqrt:
    return 0.5f / sqrtf(x);
  case UnaryKind::Reciprocal:
    return -1.0f / (x * x);
  case UnaryKind::Erf:
    return 1.1283791670955126f * expf(-x * x); // 2 / sqrt(pi)
  case UnaryKind::Tanh: {
    float t = tanhf(x);
    return 1.0f - t * t;
  }
  case UnaryKind::Sigmoid: {
    float s = 1.0f / (1.0f + expf(-x));
    return s * (1.0f - s);
  }
  case UnaryKind::Exp:
    return expf(x);
  case UnaryKind::Neg:
    return -1.0f;
  }
  return 1.0f;
}

} // namespace strata::kernels

#endif // STRATA_RUNTIME_KERNELS_UNARYMATH_H
