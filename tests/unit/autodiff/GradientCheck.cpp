//===- GradientCheck.cpp - autodiff vs finite differences -----------------===//
//
// The check runs the real pass on real IR, so it covers the gradient rules
// and the pass's bookkeeping (summing the gradients of values with several
// uses, partial gradients of split) together.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/autodiff/GradientCheck.h"

#include "dialects/strata/StrataOps.h"
#include "passes/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <random>

using namespace mlir;

namespace strata::reference {

Tensor randomIds(std::vector<int64_t> shape, int64_t bound, uint64_t seed) {
  Tensor ids(std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, bound - 1);
  for (double &v : ids.data)
    v = static_cast<double>(dist(rng));
  return ids;
}

GradientCheckResult runGradientCheck(llvm::StringRef moduleText,
                                     const TensorMap &inputs, uint64_t seed,
                                     double eps, double lossScale) {
  GradientCheckResult result;
  DialectRegistry registry;
  registry.insert<StrataDialect, func::FuncDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    llvm::raw_string_ostream os(diagnostics);
    os << d.getLocation() << ": " << d << "\n";
    return success();
  });

  OwningOpRef<ModuleOp> forwardModule =
      parseSourceString<ModuleOp>(moduleText, &context);
  if (!forwardModule) {
    result.error = "cannot parse the module:\n" + diagnostics;
    return result;
  }
  auto forward = forwardModule->lookupSymbol<func::FuncOp>("forward");
  if (!forward) {
    result.error = "the module has no func.func @forward";
    return result;
  }

  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  forward.walk([&](ParamOp param) {
    auto type = cast<RankedTensorType>(param.getType());
    Tensor t(
        std::vector<int64_t>(type.getShape().begin(), type.getShape().end()));
    for (double &v : t.data)
      v = uniform(rng);
    result.params[param.getName().str()] = std::move(t);
  });

  OwningOpRef<ModuleOp> trainModule = forwardModule->clone();
  PassManager pm(&context);
  StrataAutodiffOptions options;
  options.lossScale = lossScale;
  pm.addPass(createStrataAutodiff(options));
  if (failed(pm.run(*trainModule))) {
    result.error = "strata-autodiff failed:\n" + diagnostics;
    return result;
  }
  auto train = trainModule->lookupSymbol<func::FuncOp>("train_microbatch");
  if (!train) {
    result.error = "strata-autodiff produced no @train_microbatch";
    return result;
  }

  Evaluation base = evaluate(forward, inputs, result.params);
  if (!base.ok()) {
    result.error = "@forward: " + base.error;
    return result;
  }
  result.loss = base.results.at(0).data.at(0);
  Evaluation step = evaluate(train, inputs, result.params);
  if (!step.ok()) {
    result.error = "@train_microbatch: " + step.error;
    return result;
  }
  // The training step must compute the same loss as the forward function.
  if (step.results.size() != 1 || step.results[0].data.at(0) != result.loss) {
    result.error = "@train_microbatch does not return @forward's loss";
    return result;
  }
  result.analytic = std::move(step.grads);

  TensorMap perturbed = result.params;
  auto lossAt = [&](double &slot, double value, double &loss) {
    double saved = slot;
    slot = value;
    Evaluation e = evaluate(forward, inputs, perturbed);
    slot = saved;
    if (!e.ok()) {
      result.error = "@forward (perturbed): " + e.error;
      return false;
    }
    loss = e.results.at(0).data.at(0);
    return true;
  };
  for (auto &[name, value] : perturbed) {
    Tensor fd(value.shape);
    for (int64_t i = 0; i < value.numElements(); ++i) {
      double &slot = value.data[i], x = slot, plus, minus;
      if (!lossAt(slot, x + eps, plus) || !lossAt(slot, x - eps, minus))
        return result;
      fd.data[i] = (plus - minus) / (2.0 * eps);
    }
    result.numeric[name] = std::move(fd);
  }
  return result;
}

std::vector<std::string> compareGradients(const TensorMap &analytic,
                                          const TensorMap &numeric,
                                          double tolerance) {
  std::vector<std::string> mismatches;
  for (const auto &[name, fd] : numeric) {
    auto it = analytic.find(name);
    if (it == analytic.end()) {
      mismatches.push_back("param \"" + name + "\": no strata.accumulate_grad");
      continue;
    }
    const Tensor &g = it->second;
    if (g.shape != fd.shape || g.numElements() != fd.numElements()) {
      mismatches.push_back("param \"" + name + "\": gradient shape " +
                           formatShape(g.shape) + ", parameter shape " +
                           formatShape(fd.shape));
      continue;
    }
    for (int64_t i = 0; i < fd.numElements(); ++i) {
      double a = g.data[i], n = fd.data[i];
      if (!(std::abs(a - n) <= tolerance * (1.0 + std::abs(n)))) {
        std::string line;
        llvm::raw_string_ostream os(line);
        os << "param \"" << name << "\" element " << i << ": autodiff " << a
           << ", finite difference " << n;
        mismatches.push_back(line);
      }
    }
  }
  for (const auto &entry : analytic)
    if (!numeric.count(entry.first))
      mismatches.push_back("gradient accumulated for \"" + entry.first +
                           "\", which is not a parameter of @forward");
  return mismatches;
}

} // namespace strata::reference
