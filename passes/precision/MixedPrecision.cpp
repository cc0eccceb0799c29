//===- MixedPrecision.cpp - fp32 masters, bf16 compute --------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Megatron-LM's bf16 recipe as a rewrite of @forward. The frontend imports a
// `dtype: bfloat16` model with bfloat16 parameters and activations; this
// pass makes every low-precision parameter a float32 master and gives each
// of its uses an explicit `strata.cast` to the working precision. Autodiff
// then differentiates the casts like any op (the gradient of a cast is the
// cast back), so parameter gradients reach `strata.accumulate_grad` in
// float32; the optimizer, clipping, checkpoints and data-parallel reduction
// see float32 parameters only.
//
// One cast per use rather than per parameter: each use's gradient is then
// cast to float32 on its own and the uses' gradients are summed in float32
// (the emitter folds such a cast into the kernel that produces the
// gradient, which then writes or accumulates float32 directly).
//
// Embedding lookups keep reading the float32 table and their rows are cast
// instead: a gather needs no bf16 copy of the whole table. The loss reads
// float32 logits (as Megatron's cross-entropy casts them to float): the
// emitter lets the head matmul write them in float32 directly.
//
// Tensor-parallel collectives (all_reduce, reduce_scatter, replicate,
// all_gather, and so their gradients) run in float32 between casts: the
// partial matmul results are summed in float32 and rounded to bf16 once,
// as the one-device matmul rounds its float32 accumulator once, so every
// plan computes what one device computes up to summation order.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"
#include "passes/Passes.h"

namespace strata {
#define GEN_PASS_DEF_STRATAMIXEDPRECISION
#include "passes/Passes.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

/// Copies the placement attributes (pipeline stage, layer) of `from`.
void copyPlacement(Operation *from, Operation *to) {
  for (NamedAttribute a : from->getDiscardableAttrs())
    if (a.getName().getValue() == "strata.stage" ||
        a.getName().getValue() == "strata.layer")
      to->setAttr(a.getName(), a.getValue());
}

struct MixedPrecisionPass
    : strata::impl::StrataMixedPrecisionBase<MixedPrecisionPass> {
  using StrataMixedPrecisionBase::StrataMixedPrecisionBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward) {
      module.emitError("strata-mixed-precision needs func.func @forward");
      return signalPassFailure();
    }
    SmallVector<ParamOp> lowParams;
    forward.walk([&](ParamOp p) {
      Type e = p.getType().getElementType();
      if (isa<FloatType>(e) && !e.isF32() && !e.isF64())
        lowParams.push_back(p);
    });
    OpBuilder b(module.getContext());
    for (ParamOp p : lowParams) {
      auto lowType = p.getType();
      auto masterType =
          RankedTensorType::get(lowType.getShape(), b.getF32Type());
      p.getResult().setType(masterType);
      SmallVector<OpOperand *> uses;
      for (OpOperand &use : p.getResult().getUses())
        uses.push_back(&use);
      for (OpOperand *use : uses) {
        Operation *user = use->getOwner();
        if (auto emb = dyn_cast<EmbeddingOp>(user);
            emb && use->getOperandNumber() == 0) {
          // Gather float32 rows, then cast the rows.
          auto rowsType = cast<RankedTensorType>(emb.getType());
          emb.getResult().setType(
              RankedTensorType::get(rowsType.getShape(), b.getF32Type()));
          b.setInsertionPointAfter(emb);
          auto c = b.create<CastOp>(emb.getLoc(), rowsType, emb.getResult());
          copyPlacement(emb, c);
          emb.getResult().replaceAllUsesExcept(c.getResult(), c);
          continue;
        }
        b.setInsertionPoint(user);
        auto c = b.create<CastOp>(p.getLoc(), lowType, p.getResult());
        copyPlacement(user, c);
        use->set(c.getResult());
      }
    }
    if (lowParams.empty())
      return;
    SmallVector<Operation *> collectives;
    forward.walk([&](Operation *op) {
      if (isa<AllReduceOp, ReduceScatterOp, ReplicateOp, AllGatherOp>(op))
        collectives.push_back(op);
    });
    for (Operation *op : collectives) {
      auto in = cast<RankedTensorType>(op->getOperand(0).getType());
      auto out = cast<RankedTensorType>(op->getResult(0).getType());
      if (in.getElementType().isF32() || in.getElementType().isF64())
        continue;
      // A float32 value cast down just before the collective (a replicated
      // parameter under sp) goes in as it is: the forward rounds it once
      // after the collective either way, and the backward then keeps the
      // summed gradient in float32 instead of rounding it to bf16 on its
      // way to the float32 main gradient.
      auto narrowed = op->getOperand(0).getDefiningOp<CastOp>();
      if (narrowed &&
          narrowed.getInput().getType() ==
              RankedTensorType::get(in.getShape(), b.getF32Type())) {
        op->setOperand(0, narrowed.getInput());
        if (narrowed->use_empty())
          narrowed->erase();
      } else {
        b.setInsertionPoint(op);
        auto wide = b.create<CastOp>(
            op->getLoc(), RankedTensorType::get(in.getShape(), b.getF32Type()),
            op->getOperand(0));
        copyPlacement(op, wide);
        op->setOperand(0, wide.getResult());
      }
      op->getResult(0).setType(
          RankedTensorType::get(out.getShape(), b.getF32Type()));
      b.setInsertionPointAfter(op);
      auto narrow = b.create<CastOp>(op->getLoc(), out, op->getResult(0));
      copyPlacement(op, narrow);
      op->getResult(0).replaceAllUsesExcept(narrow.getResult(), narrow);
    }
    // Cross-entropy in float32 over float32 logits.
    forward.walk([&](Operation *op) {
      if (!isa<CrossEntropyOp, VocabParallelCrossEntropyOp>(op))
        return;
      OpOperand &logits = op->getOpOperand(0);
      auto t = cast<RankedTensorType>(logits.get().getType());
      if (t.getElementType().isF32() || t.getElementType().isF64())
        return;
      b.setInsertionPoint(op);
      auto c = b.create<CastOp>(
          op->getLoc(), RankedTensorType::get(t.getShape(), b.getF32Type()),
          logits.get());
      copyPlacement(op, c);
      logits.set(c.getResult());
    });
  }
};

} // namespace
