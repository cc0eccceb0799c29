//===- SeedStatedDecisions.cpp - Stated decisions as sharding seeds -------===//
//
// strata-seed-stated-decisions: reads the decisions a model states on its
// parameters and ops (strata.tp_decision, strata.sp_decision) and writes
// them, resolved for a mesh, as the seeds strata-propagate-sharding reads.
//
//===----------------------------------------------------------------------===//

#include "passes/sharding/SeedStatedDecisions.h"

#include "dialects/strata/StrataOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Pass/Pass.h"
#include "passes/Passes.h"
#include "passes/sharding/Sharding.h"

namespace strata {
#define GEN_PASS_DEF_STRATASEEDSTATEDDECISIONS
#include "passes/Passes.h.inc"
} // namespace strata

using namespace mlir;

namespace strata {
namespace {

constexpr const char *kTpDecision = "strata.tp_decision";
constexpr const char *kTpDecisionView = "strata.tp_decision_view";
constexpr const char *kTpDecisionPadded = "strata.tp_decision_padded";
constexpr const char *kSpDecision = "strata.sp_decision";

std::optional<Sharding> readDecision(Operation *op, StringRef name) {
  auto list = op->getAttrOfType<ArrayAttr>(name);
  if (!list)
    return std::nullopt;
  Sharding s;
  for (Attribute entry : list) {
    auto str = dyn_cast<StringAttr>(entry);
    if (!str)
      return std::nullopt;
    s.push_back(str.str());
  }
  return s;
}

/// The size of the part of dimension `d` of `shape` that `split` divides:
/// the view dimension it names, or the major view dimension of `d`'s group
/// in `view` (the whole dimension when there is no view).
int64_t splitExtent(ArrayRef<int64_t> shape, ArrayRef<int64_t> view, size_t d,
                    const DimSplit &split) {
  if (split.viewed())
    return split.view[split.index];
  if (view.empty())
    return shape[d];
  size_t v = 0;
  for (size_t i = 0; i < d; ++i)
    for (int64_t product = 1; v < view.size() && product < shape[i];)
      product *= view[v++];
  return v < view.size() ? view[v] : shape[d];
}

LogicalResult seedParam(ParamOp p, int64_t tp) {
  std::optional<Sharding> s = readDecision(p, kTpDecision);
  auto shape = cast<RankedTensorType>(p.getType()).getShape();
  if (!s || s->size() != shape.size())
    return p.emitError("strata.tp_decision of parameter '")
           << p.getName() << "' is not one string per dimension";
  SmallVector<int64_t> view;
  if (auto attr = p->getAttrOfType<DenseI64ArrayAttr>(kTpDecisionView))
    view.assign(attr.asArrayRef().begin(), attr.asArrayRef().end());
  bool padded = p->hasAttr(kTpDecisionPadded);
  for (auto [d, entry] : llvm::enumerate(*s)) {
    if (entry.empty())
      continue;
    DimSplit split = parseDimSplit(entry);
    if (split.major) {
      // K key/value heads: split by head when tp divides them, else each
      // head shared by tp/K members (the weight stays whole, no view).
      if (split.major % tp == 0) {
        entry = split.axis;
      } else if (tp % split.major == 0) {
        view.clear();
        continue;
      } else {
        return p.emitError("tensor parallelism: tp=")
               << tp << " neither divides nor is a multiple of the "
               << split.major << " key/value heads of parameter '"
               << p.getName() << "'; pin a tp that is";
      }
    }
    int64_t extent = splitExtent(shape, view, d, parseDimSplit(entry));
    if (!padded && extent % tp)
      return p.emitError("tensor parallelism: tp=")
             << tp << " does not divide the " << extent
             << " parts of dimension " << d << " of parameter '" << p.getName()
             << "' (heads, features or rows); pin a tp that divides " << extent;
  }
  writeShardings(p, {*s});
  if (!view.empty() && ArrayRef<int64_t>(view) != shape)
    p->setAttr("strata.shard_view",
               DenseI64ArrayAttr::get(p->getContext(), view));
  return success();
}

} // namespace

LogicalResult seedStatedDecisions(ModuleOp module, int64_t tp, bool sp) {
  LogicalResult result = success();
  module.walk([&](Operation *op) {
    if (tp > 1 && succeeded(result)) {
      if (auto p = dyn_cast<ParamOp>(op); p && p->hasAttr(kTpDecision))
        result = seedParam(p, tp);
      if (std::optional<Sharding> s = readDecision(op, kSpDecision);
          sp && s && op->getNumResults() && succeeded(result)) {
        auto shape =
            cast<RankedTensorType>(op->getResult(0).getType()).getShape();
        for (auto [d, entry] : llvm::enumerate(*s))
          if (d < shape.size() && !entry.empty() && shape[d] % tp)
            result = op->emitError("sequence parallelism: tp=")
                     << tp << " does not divide dimension " << d << " ("
                     << shape[d] << ") of the residual stream; pin a tp "
                     << "that divides the sequence or sp=false";
        if (succeeded(result))
          writeShardings(op, {*s});
      }
    }
    for (const char *name :
         {kTpDecision, kTpDecisionView, kTpDecisionPadded, kSpDecision})
      op->removeAttr(name);
  });
  return result;
}

namespace {

struct SeedStatedDecisionsPass
    : impl::StrataSeedStatedDecisionsBase<SeedStatedDecisionsPass> {
  using StrataSeedStatedDecisionsBase::StrataSeedStatedDecisionsBase;

  void runOnOperation() override {
    if (meshSize < 1) {
      getOperation().emitError("strata-seed-stated-decisions: mesh-size ")
          << meshSize << " must be at least 1";
      return signalPassFailure();
    }
    if (failed(seedStatedDecisions(getOperation(), meshSize, sp)))
      signalPassFailure();
  }
};

} // namespace

} // namespace strata
