//===- Interpreter.h - float64 reference interpreter for strata -*- C++ -*-===//
//
// Evaluates a func.func of strata ops in double precision, one op at a time,
// straight from each op's documented semantics. It is deliberately simple
// (no kernels, no fusion) so that it can serve as the reference the gradient
// rules and, later, the runtime are checked against.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TESTS_UNIT_AUTODIFF_INTERPRETER_H
#define STRATA_TESTS_UNIT_AUTODIFF_INTERPRETER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata::reference {

/// A dense row-major tensor of doubles. Integer tensors (token ids) hold
/// integral values.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape, double fill = 0.0);
  Tensor(std::vector<int64_t> shape, std::vector<double> data);

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numElements() const { return static_cast<int64_t>(data.size()); }
};

/// Tensors by name: inputs, parameters, gradients.
using TensorMap = std::map<std::string, Tensor>;

/// "[2, 3, 4]".
std::string formatShape(const std::vector<int64_t> &shape);

/// The outcome of one evaluation.
struct Evaluation {
  /// Empty on success; otherwise names the op (and its location) that could
  /// not be evaluated and says why.
  std::string error;
  /// The operands of the function's return.
  std::vector<Tensor> results;
  /// Sum of the `strata.accumulate_grad` operands per parameter name (and
  /// the effect of `strata.clip_grad_norm` on them).
  TensorMap grads;

  bool ok() const { return error.empty(); }
};

/// Runs `func` (which must take no arguments) with `strata.input "n"` bound to
/// `inputs[n]` and `strata.param "n"` bound to `params[n]`. Every value's
/// computed shape is checked against its IR type, so shape-rule mistakes
/// surface as errors too. Never aborts on bad IR or data.
Evaluation evaluate(mlir::func::FuncOp func, const TensorMap &inputs,
                    const TensorMap &params);

/// Runs one function per rank of an SPMD group in lockstep (rank r is
/// `funcs[r]` with `inputs[r]` and `params[r]`). Each rank runs until its
/// next all_reduce, all_gather or reduce_scatter; when every rank has reached
/// one (the same op kind with the same attributes), the group combines their
/// operands as the ops document (sum; concatenation in rank order; sum then
/// rank r's slice), whatever the `group` attribute names: the ranks given
/// are the group. replicate and take_slice are evaluated per rank. On any
/// failure every rank's evaluation carries the error, naming the rank.
/// `evaluate` is the group of one.
std::vector<Evaluation> evaluateGroup(llvm::ArrayRef<mlir::func::FuncOp> funcs,
                                      llvm::ArrayRef<TensorMap> inputs,
                                      llvm::ArrayRef<TensorMap> params);

} // namespace strata::reference

#endif // STRATA_TESTS_UNIT_AUTODIFF_INTERPRETER_H
