//===- UnaryReference.h - strata.unary's functions in float64 -------------===//
//
// The reference interpreter's f and f' for each kind of strata.unary,
// written from the definitions (not from the runtime's UnaryMath.h), so the
// gradient checks and ONNX node tests compare two independent versions.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TESTS_UNIT_AUTODIFF_UNARYREFERENCE_H
#define STRATA_TESTS_UNIT_AUTODIFF_UNARYREFERENCE_H

#include "llvm/ADT/StringRef.h"

#include <cmath>
#include <functional>

namespace strata::reference {

/// f of the kind, or an empty function for an unknown kind.
inline std::function<double(double)> unaryReference(llvm::StringRef kind) {
  if (kind == "sqrt")
    return [](double x) { return std::sqrt(x); };
  if (kind == "reciprocal")
    return [](double x) { return 1.0 / x; };
  if (kind == "erf")
    return [](double x) { return std::erf(x); };
  if (kind == "tanh")
    return [](double x) { return std::tanh(x); };
  if (kind == "sigmoid")
    return [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  if (kind == "exp")
    return [](double x) { return std::exp(x); };
  if (kind == "neg")
    return [](double x) { return -x; };
  return {};
}

/// f' of the kind, or an empty function for an unknown kind.
inline std::function<double(double)>
unaryReferenceDerivative(llvm::StringRef kind) {
  if (kind == "sqrt")
    return [](double x) { return 0.5 / std::sqrt(x); };
  if (kind == "reciprocal")
    return [](double x) { return -1.0 / (x * x); };
  if (kind == "erf")
    return [](double x) { return 2.0 / std::sqrt(M_PI) * std::exp(-x * x); };
  if (kind == "tanh")
    return [](double x) { return 1.0 - std::tanh(x) * std::tanh(x); };
  if (kind == "sigmoid")
    return [](double x) {
      double s = 1.0 / (1.0 + std::exp(-x));
      return s * (1.0 - s);
    };
  if (kind == "exp")
    return [](double x) { return std::exp(x); };
  if (kind == "neg")
    return [](double) { return -1.0; };
  return {};
}

} // namespace strata::reference

#endif // STRATA_TESTS_UNIT_AUTODIFF_UNARYREFERENCE_H
