//===- Recompute.cpp - Activation recomputation ---------------------------===//
//
// Recomputation is a rewrite of the training step, not a runtime feature:
// cloning a layer's forward ops in front of its backward ops changes which
// values the backward pass reads, and the emitter's lifetime-based memory
// plan turns that into saved bytes by itself.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/Pass.h"
#include "passes/Passes.h"
#include "llvm/ADT/MapVector.h"

namespace strata {
#define GEN_PASS_DEF_STRATARECOMPUTE
#include "passes/Passes.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

std::optional<int64_t> layerOf(Operation *op) {
  if (auto l = op->getAttrOfType<IntegerAttr>("strata.layer"))
    return l.getInt();
  return std::nullopt;
}

/// The attention core selective recomputation keeps out of memory: scores
/// [..., S, S] and everything computed from them up to the context matmul.
bool isAttentionCore(Operation *op) {
  if (op->getNumResults() != 1)
    return false;
  auto t = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  return t && t.getRank() >= 4 &&
         t.getDimSize(t.getRank() - 1) == t.getDimSize(t.getRank() - 2) &&
         isa<MatmulOp, SoftmaxOp, ScaleOp>(op);
}

struct RecomputePass : strata::impl::StrataRecomputeBase<RecomputePass> {
  using StrataRecomputeBase::StrataRecomputeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (mode != "full" && mode != "selective") {
      module.emitError("strata-recompute mode must be full or selective, got '")
          << mode << "'";
      return signalPassFailure();
    }
    auto step = module.lookupSymbol<func::FuncOp>("train_microbatch");
    if (!step) {
      module.emitError("strata-recompute runs after strata-autodiff "
                       "(needs @train_microbatch)");
      return signalPassFailure();
    }
    // Forward ops of each layer, and the first backward op of each layer.
    llvm::MapVector<int64_t, SmallVector<Operation *>> forwardOps;
    llvm::DenseMap<int64_t, Operation *> firstBackward;
    bool backward = false;
    for (Operation &op : step.getBody().front()) {
      backward |= op.hasAttr("strata.backward_begin");
      std::optional<int64_t> layer = layerOf(&op);
      if (!layer || isa<ParamOp, InputOp>(op))
        continue;
      if (!backward)
        forwardOps[*layer].push_back(&op);
      else if (!firstBackward.count(*layer))
        firstBackward[*layer] = &op;
    }

    OpBuilder b(module.getContext());
    for (auto &[layer, ops] : forwardOps) {
      Operation *insertBefore = firstBackward.lookup(layer);
      if (!insertBefore)
        continue;
      SmallVector<Operation *> toClone;
      for (Operation *op : ops)
        if (mode == "full" || isAttentionCore(op))
          toClone.push_back(op);
      if (toClone.empty())
        continue;
      // Clone in forward order; operands computed inside the recomputed set
      // come from the clones, the rest (layer inputs, parameters, kept
      // activations) are read as they are.
      b.setInsertionPoint(insertBefore);
      IRMapping map;
      for (Operation *op : toClone) {
        Operation *clone = b.clone(*op, map);
        clone->setAttr("strata.recomputed", b.getUnitAttr());
      }
      // Backward ops of this layer read the recomputed values.
      SmallVector<Operation *> clones;
      for (Operation *op : toClone) {
        Operation *copy = map.lookup(op);
        clones.push_back(copy);
        for (auto [orig, dup] : llvm::zip(op->getResults(), copy->getResults()))
          orig.replaceUsesWithIf(dup, [&](OpOperand &use) {
            Operation *user = use.getOwner();
            return user == insertBefore || insertBefore->isBeforeInBlock(user);
          });
      }
      // Clones nothing reads (the layer's output, read by the next layer's
      // kept forward) are dropped.
      for (Operation *copy : llvm::reverse(clones))
        if (copy->use_empty())
          copy->erase();
    }
  }
};

} // namespace
