//===- AssignPipelineStages.cpp - Ops to pipeline stages ------------------===//
//
// The stage of an op is a fact about the forward graph (which layer it
// computes); it is decided here once, before autodiff, so that every
// gradient op inherits its forward op's stage and the emitter only has to
// read attributes.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"
#include "passes/Passes.h"
#include "passes/partition/PipelineUnits.h"

namespace strata {
#define GEN_PASS_DEF_STRATAASSIGNPIPELINESTAGES
#include "passes/Passes.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

constexpr const char *kStage = "strata.stage";

struct AssignPipelineStagesPass
    : strata::impl::StrataAssignPipelineStagesBase<AssignPipelineStagesPass> {
  using StrataAssignPipelineStagesBase::StrataAssignPipelineStagesBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward) {
      module.emitError("strata-assign-pipeline-stages runs on @forward, "
                       "before strata-autodiff");
      return signalPassFailure();
    }
    if (pp < 1 || vpp < 1) {
      module.emitError("pp and vpp must be >= 1");
      return signalPassFailure();
    }
    int64_t numStages = pp * vpp;
    if (graphUnits) {
      if (failed(assignUnits(module, forward, numStages)))
        return signalPassFailure();
      declarePerStage(forward);
      return;
    }
    int64_t layers = 0;
    forward.walk([&](Operation *op) {
      if (auto l = op->getAttrOfType<IntegerAttr>("strata.layer"))
        layers = std::max(layers, l.getInt() + 1);
    });
    if (numStages > 1 && layers < numStages) {
      module.emitError("cannot split ")
          << layers << " layer(s) into " << numStages
          << " pipeline stages; use fewer stages (pp * vpp <= layers)";
      return signalPassFailure();
    }
    // Layer -> stage, from the plan's layer counts or an even split.
    SmallVector<int64_t> counts(stageLayers.begin(), stageLayers.end());
    if (counts.empty())
      for (int64_t s = 0; s < numStages; ++s)
        counts.push_back(layers / numStages + (s < layers % numStages));
    int64_t total = 0;
    for (int64_t c : counts)
      total += c;
    if (int64_t(counts.size()) != numStages || total != layers) {
      module.emitError("stage-layers must have pp * vpp = ")
          << numStages << " entries summing to the model's " << layers
          << " layers";
      return signalPassFailure();
    }
    SmallVector<int64_t> stageOfLayer;
    for (auto [s, c] : llvm::enumerate(counts))
      stageOfLayer.append(c, s);

    OpBuilder b(module.getContext());
    Block &body = forward.getBody().front();
    // Whether an op depends on some layer: decides embedding vs head side.
    llvm::DenseSet<Operation *> afterLayers;
    for (Operation &op : body) {
      if (auto l = op.getAttrOfType<IntegerAttr>("strata.layer")) {
        op.setAttr(kStage, b.getI64IntegerAttr(
                               numStages == 1 ? 0 : stageOfLayer[l.getInt()]));
        afterLayers.insert(&op);
        continue;
      }
      if (isa<ParamOp, InputOp, func::ReturnOp>(op))
        continue;
      bool after = llvm::any_of(op.getOperands(), [&](Value v) {
        return v.getDefiningOp() && afterLayers.count(v.getDefiningOp());
      });
      if (after)
        afterLayers.insert(&op);
      op.setAttr(kStage, b.getI64IntegerAttr(after ? numStages - 1 : 0));
    }
    // An op outside the layers that reads parameters only (a tensor-parallel
    // replicate or reshape of the final norm's weights) runs on the first
    // stage that uses it, so that its gradient is summed where the
    // parameter's gradient is accumulated rather than sent to stage 0. When
    // one layer uses it (a layer's qkv weight reshaped, or cast to bf16), it
    // belongs to that layer, so that full recomputation rebuilds it in the
    // backward instead of keeping each micro-batch's copy.
    llvm::DenseSet<Operation *> paramOnly;
    for (Operation &op : body) {
      if (op.hasAttr("strata.layer") || isa<ParamOp, InputOp>(op) ||
          op.getNumOperands() == 0)
        continue;
      if (llvm::all_of(op.getOperands(), [&](Value v) {
            Operation *def = v.getDefiningOp();
            return def && (isa<ParamOp>(def) || paramOnly.count(def));
          }))
        paramOnly.insert(&op);
    }
    for (Operation &op : llvm::reverse(body)) {
      if (!paramOnly.count(&op))
        continue;
      std::optional<int64_t> first;
      for (Operation *user : op.getUsers())
        if (auto s = user->getAttrOfType<IntegerAttr>(kStage))
          first = std::min(first.value_or(s.getInt()), s.getInt());
      if (first)
        op.setAttr(kStage, b.getI64IntegerAttr(*first));
      Attribute layer;
      bool oneLayer = !op.use_empty();
      for (Operation *user : op.getUsers()) {
        Attribute l = user->getAttr("strata.layer");
        oneLayer &= l && (!layer || l == layer);
        layer = l;
      }
      if (oneLayer)
        op.setAttr("strata.layer", layer);
    }

    declarePerStage(forward);
  }

  /// Stages over the graph's pipeline units (`graph-units`).
  LogicalResult assignUnits(ModuleOp module, func::FuncOp forward,
                            int64_t numStages) {
    SmallVector<PipelineUnit> units = pipelineUnits(forward);
    int64_t n = int64_t(units.size());
    if (n < numStages)
      return module.emitError("cannot split ")
             << n << " pipeline unit(s) into " << numStages
             << " stages; use fewer stages";
    SmallVector<int64_t> counts(stageLayers.begin(), stageLayers.end());
    if (counts.empty())
      for (int64_t s = 0; s < numStages; ++s)
        counts.push_back(n / numStages + (s < n % numStages));
    int64_t total = 0;
    for (int64_t c : counts)
      total += c;
    if (int64_t(counts.size()) != numStages || total != n)
      return module.emitError("stage-layers must have pp * vpp = ")
             << numStages << " entries summing to the graph's " << n
             << " pipeline units";
    OpBuilder b(module.getContext());
    int64_t unit = 0;
    for (auto [stage, count] : llvm::enumerate(counts))
      for (int64_t k = 0; k < count; ++k, ++unit)
        for (Operation *op : units[unit])
          op->setAttr(kStage, b.getI64IntegerAttr(int64_t(stage)));
    return success();
  }

  void declarePerStage(func::FuncOp forward) {
    OpBuilder b(forward.getContext());
    Block &body = forward.getBody().front();
    // Declarations follow their users; one copy per stage that uses them.
    SmallVector<Operation *> decls;
    for (Operation &op : body)
      if (isa<ParamOp, InputOp>(op))
        decls.push_back(&op);
    for (Operation *decl : decls) {
      SmallVector<int64_t> stages;
      for (Operation *user : decl->getUsers())
        if (auto s = user->getAttrOfType<IntegerAttr>(kStage))
          stages.push_back(s.getInt());
      if (stages.empty())
        stages.push_back(0);
      llvm::sort(stages);
      stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
      decl->setAttr(kStage, b.getI64IntegerAttr(stages[0]));
      if (stages.size() > 1 && isa<ParamOp>(decl))
        decl->setAttr("strata.tied", b.getUnitAttr());
      Operation *insertAfter = decl;
      for (int64_t s : llvm::drop_begin(stages)) {
        b.setInsertionPointAfter(insertAfter);
        Operation *copy = b.clone(*decl);
        insertAfter = copy;
        copy->setAttr(kStage, b.getI64IntegerAttr(s));
        decl->getResult(0).replaceUsesWithIf(
            copy->getResult(0), [&](OpOperand &use) {
              auto us = use.getOwner()->getAttrOfType<IntegerAttr>(kStage);
              return us && us.getInt() == s;
            });
      }
    }
  }
};

} // namespace
