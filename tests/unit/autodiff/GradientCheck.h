//===- GradientCheck.h - autodiff vs finite differences ---------*- C++ -*-===//
//
// Runs strata-autodiff on a module's @forward and compares the gradients it
// accumulates with central finite differences of the forward loss, both
// evaluated by the float64 reference interpreter.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TESTS_UNIT_AUTODIFF_GRADIENTCHECK_H
#define STRATA_TESTS_UNIT_AUTODIFF_GRADIENTCHECK_H

#include "tests/unit/autodiff/Interpreter.h"

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace strata::reference {

struct GradientCheckResult {
  /// Empty on success; otherwise the parse, pass or interpreter failure.
  std::string error;
  /// The random parameter values the check used.
  TensorMap params;
  /// The forward loss at `params`.
  double loss = 0.0;
  /// What `strata.accumulate_grad` collected in @train_microbatch.
  TensorMap analytic;
  /// Central finite differences of the forward loss, per parameter.
  TensorMap numeric;
};

/// Parses `moduleText` (which defines `func.func @forward`), gives every
/// `strata.param` uniform random values in [-1, 1] drawn from `seed`, runs
/// strata-autodiff with loss-scale = `lossScale` (0: the pass's default,
/// micro_batch / global_batch) and evaluates @train_microbatch and, for every
/// parameter element, @forward at +/- `eps`.
GradientCheckResult runGradientCheck(llvm::StringRef moduleText,
                                     const TensorMap &inputs, uint64_t seed = 1,
                                     double eps = 1e-6, double lossScale = 1.0);

/// One line per disagreement: an element where |analytic - numeric| exceeds
/// tolerance * (1 + |numeric|), a parameter without an accumulated
/// gradient, a gradient for an unknown parameter, or a shape mismatch.
std::vector<std::string> compareGradients(const TensorMap &analytic,
                                          const TensorMap &numeric,
                                          double tolerance = 1e-6);

/// Token ids (or targets) of `shape`, uniform in [0, bound).
Tensor randomIds(std::vector<int64_t> shape, int64_t bound, uint64_t seed);

} // namespace strata::reference

#endif // STRATA_TESTS_UNIT_AUTODIFF_GRADIENTCHECK_H
