//===- BuildOptimizer.cpp - The optimizer step as IR ----------------------===//
//
// The optimizer lives in the IR (not hidden in the runtime) so that the
// planner and the partition passes can see and shard its state per
// parameter (ZeRO).
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"
#include "passes/Passes.h"
#include "llvm/ADT/StringSet.h"

namespace strata {
#define GEN_PASS_DEF_STRATABUILDOPTIMIZER
#include "passes/Passes.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

double getF64(DictionaryAttr d, StringRef key, double fallback) {
  if (auto f = d ? d.getAs<FloatAttr>(key) : nullptr)
    return f.getValueAsDouble();
  return fallback;
}

struct BuildOptimizerPass
    : strata::impl::StrataBuildOptimizerBase<BuildOptimizerPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto training = module->getAttrOfType<DictionaryAttr>("strata.training");
    if (!training) {
      module.emitError("strata-build-optimizer needs the module's "
                       "strata.training settings (import a spec with a "
                       "training: section or the defaults)");
      return signalPassFailure();
    }
    if (module.lookupSymbol("optimizer_step")) {
      module.emitError("the module already has an @optimizer_step");
      return signalPassFailure();
    }
    auto opt = training.getAs<DictionaryAttr>("optimizer");
    StringRef kind = "adamw";
    if (auto k = opt ? opt.getAs<StringAttr>("kind") : nullptr)
      kind = k.getValue();
    if (kind != "adamw" && kind != "sgd") {
      module.emitError("unknown optimizer kind '") << kind << "'";
      return signalPassFailure();
    }
    double weightDecay = getF64(opt, "weight_decay", 0.0);

    // One update per distinct parameter, in declaration order.
    SmallVector<ParamOp> params;
    llvm::StringSet<> seen;
    module.walk([&](ParamOp p) {
      if (seen.insert(p.getName()).second)
        params.push_back(p);
    });

    OpBuilder b(module.getBodyRegion());
    b.setInsertionPointToEnd(module.getBody());
    auto func = b.create<func::FuncOp>(module.getLoc(), "optimizer_step",
                                       b.getFunctionType({}, {}));
    b.setInsertionPointToStart(func.addEntryBlock());
    double clip = getF64(training, "grad_clip", 0.0);
    if (clip > 0.0)
      b.create<ClipGradNormOp>(module.getLoc(), b.getF64FloatAttr(clip));
    for (ParamOp p : params) {
      bool decays = cast<RankedTensorType>(p.getType()).getRank() >= 2;
      auto wd = b.getF64FloatAttr(decays ? weightDecay : 0.0);
      if (kind == "sgd")
        b.create<SgdUpdateOp>(p.getLoc(), p.getNameAttr(),
                              b.getF64FloatAttr(getF64(opt, "momentum", 0.0)),
                              wd);
      else
        b.create<AdamWUpdateOp>(p.getLoc(), p.getNameAttr(),
                                b.getF64FloatAttr(getF64(opt, "beta1", 0.9)),
                                b.getF64FloatAttr(getF64(opt, "beta2", 0.999)),
                                b.getF64FloatAttr(getF64(opt, "eps", 1e-8)),
                                wd);
    }
    b.create<func::ReturnOp>(module.getLoc());
  }
};

} // namespace
