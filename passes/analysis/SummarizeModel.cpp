//===- SummarizeModel.cpp - Parameter, op and FLOP summary ----------------===//
//
// A read-only pass that tells a person what a model is: its parameters, its
// ops, and what one forward pass costs according to each op's cost rule.
//
//===----------------------------------------------------------------------===//

#include "passes/analysis/SummarizeModel.h"
#include "mlir/Pass/Pass.h"

#include "dialects/strata/StrataOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

namespace strata {
#define GEN_PASS_DEF_STRATASUMMARIZEMODEL
#include "passes/Passes.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

ModelSummary strata::summarizeModel(ModuleOp module) {
  ModelSummary s;
  module.walk([&](Operation *op) {
    if (auto param = dyn_cast<ParamOp>(op)) {
      auto t = cast<RankedTensorType>(param.getType());
      s.numParams += t.getNumElements();
      s.paramBytes +=
          t.getNumElements() * ((t.getElementTypeBitWidth() + 7) / 8);
      ++s.numParamTensors;
    }
    if (op->getDialect() && op->getDialect()->getNamespace() == "strata")
      ++s.opCounts[op->getName().getStringRef().str()];
    if (auto cost = dyn_cast<CostOpInterface>(op)) {
      s.forwardFlops += cost.getFlops();
      s.forwardBytes += cost.getBytesAccessed();
    }
  });
  return s;
}

void strata::printModelSummary(const ModelSummary &s, llvm::raw_ostream &os) {
  os << llvm::format("parameters:     %lld in %lld tensors (%.1f MiB)\n",
                     (long long)s.numParams, (long long)s.numParamTensors,
                     s.paramBytes / 1048576.0);
  os << llvm::format("forward FLOPs:  %.4g per batch\n",
                     double(s.forwardFlops));
  os << llvm::format("forward bytes:  %.4g accessed (op by op)\n",
                     double(s.forwardBytes));
  os << "ops:";
  for (const auto &[name, count] : s.opCounts)
    os << " " << name << "=" << count;
  os << "\n";
}

namespace {
struct SummarizeModelPass
    : strata::impl::StrataSummarizeModelBase<SummarizeModelPass> {
  void runOnOperation() override {
    std::string text;
    llvm::raw_string_ostream os(text);
    printModelSummary(summarizeModel(getOperation()), os);
    getOperation().emitRemark() << "model summary\n" << text;
  }
};
} // namespace
