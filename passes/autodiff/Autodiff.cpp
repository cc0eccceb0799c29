//===- Autodiff.cpp - Reverse-mode differentiation of @forward ------------===//
//
// The pass knows no op: it walks the forward ops in reverse and asks each
// one for its gradient rule. What it owns is the bookkeeping — summing the
// gradients of values with several uses, skipping ops no gradient reaches,
// and handing parameter gradients to the training state.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/Pass.h"
#include "passes/Passes.h"
#include "llvm/ADT/DenseMap.h"

namespace strata {
#define GEN_PASS_DEF_STRATAAUTODIFF
#include "passes/Passes.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

/// micro_batch / global_batch from the module's training settings, else 1.
double defaultLossScale(ModuleOp module) {
  auto training = module->getAttrOfType<DictionaryAttr>("strata.training");
  if (!training)
    return 1.0;
  auto global = training.getAs<IntegerAttr>("global_batch");
  auto micro = training.getAs<IntegerAttr>("micro_batch");
  if (!global || !micro || global.getInt() <= 0)
    return 1.0;
  return double(micro.getInt()) / double(global.getInt());
}

struct AutodiffPass : strata::impl::StrataAutodiffBase<AutodiffPass> {
  using StrataAutodiffBase::StrataAutodiffBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward) {
      module.emitError("strata-autodiff needs a func.func @forward");
      return signalPassFailure();
    }
    auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
    if (ret.getNumOperands() == 0 ||
        cast<RankedTensorType>(ret.getOperand(0).getType()).getRank() != 0) {
      forward.emitError("@forward's first result must be the scalar loss");
      return signalPassFailure();
    }
    double scale = lossScale != 0.0 ? lossScale : defaultLossScale(module);

    // The training step returns only the loss: extra forward outputs are
    // for inspection, not for training.
    OpBuilder b(forward);
    auto step = b.create<func::FuncOp>(
        forward.getLoc(), "train_microbatch",
        b.getFunctionType({}, {ret.getOperand(0).getType()}));
    Block *body = step.addEntryBlock();
    b.setInsertionPointToStart(body);
    IRMapping map;
    SmallVector<Operation *> forwardOps;
    for (Operation &op : forward.getBody().front().without_terminator())
      forwardOps.push_back(b.clone(op, map));
    Value loss = map.lookup(ret.getOperand(0));

    // Reverse sweep. grads[v] is the (summed) gradient of the loss wrt v.
    llvm::DenseMap<Value, Value> grads;
    Location lossLoc = loss.getLoc();
    auto seed =
        b.create<ConstantOp>(lossLoc, loss.getType(), b.getF64FloatAttr(scale));
    if (Operation *lossOp = loss.getDefiningOp())
      if (Attribute stage = lossOp->getAttr("strata.stage"))
        seed->setAttr("strata.stage", stage);
    // Marks where the backward pass begins (pipeline schedules need it).
    seed->setAttr("strata.backward_begin", b.getUnitAttr());
    grads[loss] = seed;
    // A parameter's gradient is final once its earliest use (in forward
    // order) has been differentiated; it is handed to the training state
    // right then, so that data-parallel reduction can start while the rest
    // of the backward pass runs.
    llvm::DenseMap<Value, unsigned> pendingUses;
    for (Operation *op : forwardOps)
      if (auto param = dyn_cast<ParamOp>(op))
        pendingUses[param] = llvm::range_size(param->getUses());
    auto release = [&](Operation *user) {
      for (Value operand : user->getOperands()) {
        auto param = operand.getDefiningOp<ParamOp>();
        if (!param || --pendingUses[operand] != 0)
          continue;
        if (Value g = grads.lookup(operand)) {
          auto acc =
              b.create<AccumulateGradOp>(param.getLoc(), g, param.getName());
          if (Attribute stage = param->getAttr("strata.stage"))
            acc->setAttr("strata.stage", stage);
        }
      }
    };
    for (Operation *op : llvm::reverse(forwardOps)) {
      // A constant's gradient is dropped (strata.binary by a constant
      // scalar builds none; one reaching it through a copy stops here).
      if (isa<ParamOp, InputOp, ConstantOp>(op))
        continue;
      SmallVector<Value> resultGrads;
      bool reached = false;
      for (Value r : op->getResults()) {
        Value g = grads.lookup(r);
        reached |= static_cast<bool>(g);
        resultGrads.push_back(g);
      }
      if (reached) {
        auto diff = dyn_cast<DifferentiableOpInterface>(op);
        if (!diff) {
          op->emitError("has no gradient rule (DifferentiableOpInterface)");
          return signalPassFailure();
        }
        // Ops whose results get only partial gradients (split) handle
        // nulls themselves; the others have a single result.
        SmallVector<Value> operandGrads;
        Operation *before = b.getInsertionBlock()->empty()
                                ? nullptr
                                : &b.getInsertionBlock()->back();
        if (failed(diff.buildGradients(b, resultGrads, operandGrads)))
          return signalPassFailure();
        // Gradient ops belong where their forward op does: the same layer
        // and pipeline stage.
        for (Operation *created = before ? before->getNextNode()
                                         : &b.getInsertionBlock()->front();
             created; created = created->getNextNode())
          for (StringRef attr : {"strata.layer", "strata.stage"})
            if (Attribute a = op->getAttr(attr))
              created->setAttr(attr, a);
        for (auto [operand, g] : llvm::zip(op->getOperands(), operandGrads)) {
          if (!g)
            continue;
          Value &acc = grads[operand];
          if (!acc) {
            acc = g;
            continue;
          }
          // The sum is the gradient of `operand`: it lives where that value
          // is defined, unless both addends come from one later pipeline
          // stage (the users of a stage's input): then it is added there,
          // so that the stage sends one gradient back, not its pieces.
          auto sum = b.create<AddOp>(op->getLoc(), acc, g);
          Operation *home = operand.getDefiningOp();
          Operation *accDef = acc.getDefiningOp();
          auto stageOf = [](Operation *o) {
            return o ? o->getAttr("strata.stage") : Attribute();
          };
          if (stageOf(op) && stageOf(op) == stageOf(accDef) &&
              stageOf(op) != stageOf(home))
            home = op;
          if (home)
            for (StringRef attr : {"strata.layer", "strata.stage"})
              if (Attribute a = home->getAttr(attr))
                sum->setAttr(attr, a);
          acc = sum;
        }
      }
      release(op);
    }
    b.create<func::ReturnOp>(forward.getLoc(), loss);
    forward.erase();
  }
};

} // namespace
