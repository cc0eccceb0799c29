//===- InsertGradientReduction.cpp - Data-parallel gradient buckets -------===//
//
// Decides *what* is reduced together and *when* it may start; the emitter
// decides how (non-blocking collectives in the last micro-batch, waits
// before the optimizer). Buckets follow the order in which gradients become
// final, like PyTorch DDP's reducer, so the first bucket's reduction overlaps
// the backward pass of the earlier layers.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"
#include "passes/Passes.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringSet.h"

namespace strata {
#define GEN_PASS_DEF_STRATAINSERTGRADIENTREDUCTION
#include "passes/Passes.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

int64_t tensorBytes(Type t) {
  auto tt = cast<RankedTensorType>(t);
  return tt.getNumElements() * ((tt.getElementTypeBitWidth() + 7) / 8);
}

struct InsertGradientReductionPass
    : strata::impl::StrataInsertGradientReductionBase<
          InsertGradientReductionPass> {
  using StrataInsertGradientReductionBase::StrataInsertGradientReductionBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_microbatch");
    if (!step) {
      module.emitError("strata-insert-gradient-reduction runs after "
                       "strata-autodiff (needs @train_microbatch)");
      return signalPassFailure();
    }
    if (zero < 0 || zero > 3) {
      module.emitError("zero must be 0, 1, 2 or 3; got ") << zero;
      return signalPassFailure();
    }
    if (bucketBytes <= 0) {
      module.emitError("bucket-bytes must be positive");
      return signalPassFailure();
    }
    if (!step.getOps<GradientBucketOp>().empty()) {
      module.emitError("@train_microbatch already has gradient buckets");
      return signalPassFailure();
    }

    // The last accumulation of each parameter, in program order.
    llvm::MapVector<StringRef, AccumulateGradOp> last;
    for (auto acc : step.getOps<AccumulateGradOp>()) {
      last.erase(acc.getParam());
      last[acc.getParam()] = acc;
    }
    std::vector<AccumulateGradOp> order;
    for (auto &[name, acc] : last)
      order.push_back(acc);
    llvm::sort(order, [](AccumulateGradOp a, AccumulateGradOp b) {
      return a->isBeforeInBlock(b);
    });

    // Parameters declared on several pipeline stages (a tied embedding) are
    // first summed across those stages; the emitter reduces them whole.
    llvm::StringSet<> tied;
    module.walk([&](ParamOp p) {
      if (p->hasAttr("strata.tied"))
        tied.insert(p.getName());
    });
    llvm::erase_if(order, [&](AccumulateGradOp acc) {
      return tied.contains(acc.getParam());
    });

    StringRef reduction = zero == 0 ? "all_reduce" : "reduce_scatter";
    OpBuilder b(module.getContext());
    SmallVector<Attribute> names;
    int64_t bytes = 0;
    auto flush = [&](AccumulateGradOp after) {
      if (names.empty())
        return;
      b.setInsertionPointAfter(after);
      auto bucket = b.create<GradientBucketOp>(
          after.getLoc(), b.getStringAttr(group), b.getArrayAttr(names),
          b.getStringAttr(reduction));
      // A bucket never spans pipeline stages.
      if (Attribute stage = after->getAttr("strata.stage"))
        bucket->setAttr("strata.stage", stage);
      names.clear();
      bytes = 0;
    };
    for (auto [i, acc] : llvm::enumerate(order)) {
      names.push_back(acc.getParamAttr());
      bytes += tensorBytes(acc.getGrad().getType());
      bool lastOfStage =
          i + 1 == order.size() ||
          order[i + 1]->getAttr("strata.stage") != acc->getAttr("strata.stage");
      if (bytes >= bucketBytes || lastOfStage)
        flush(acc);
    }
  }
};

} // namespace
