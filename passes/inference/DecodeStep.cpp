//===- DecodeStep.cpp - One generation step with a key/value cache --------===//
//
// Generation reuses the training forward, op for op, for one new position:
// the frontend builds @forward for [B, 1] inputs, and this pass swaps each
// attention core (a fused strata.causal_attention, or matmul, causal
// softmax, matmul) for a cached attention over the positions generated so
// far. Everything else (embeddings, norms, projections, the tied head) is
// untouched, which is why decode logits equal the training forward's.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"
#include "passes/Passes.h"

namespace strata {
#define GEN_PASS_DEF_STRATADECODESTEP
#include "passes/Passes.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

/// The attention core around a causal softmax: scores = q k^T, probs =
/// softmax(scores), context = probs v. Null when `softmax` is not in one.
struct AttentionCore {
  MatmulOp scores, context;
  SoftmaxOp softmax;
};

std::optional<AttentionCore> matchCore(SoftmaxOp softmax) {
  auto scores = softmax.getInput().getDefiningOp<MatmulOp>();
  if (!scores || scores.getTransposeA() || !scores.getTransposeB() ||
      !scores->hasOneUse() || !softmax->hasOneUse())
    return std::nullopt;
  auto context = dyn_cast<MatmulOp>(*softmax->getUsers().begin());
  if (!context || context.getLhs() != softmax.getResult() ||
      context.getTransposeA() || context.getTransposeB())
    return std::nullopt;
  return AttentionCore{scores, context, softmax};
}

struct DecodeStepPass : strata::impl::StrataDecodeStepBase<DecodeStepPass> {
  using StrataDecodeStepBase::StrataDecodeStepBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward) {
      module.emitError("strata-decode-step needs func.func @forward");
      return signalPassFailure();
    }
    int64_t cacheLen = maxLen;
    if (cacheLen <= 0)
      if (auto model = module->getAttrOfType<DictionaryAttr>("strata.model"))
        if (auto s = model.getAs<IntegerAttr>("seq_len"))
          cacheLen = s.getInt();
    if (cacheLen <= 0) {
      module.emitError("strata-decode-step: no max-len given and no "
                       "strata.model seq_len");
      return signalPassFailure();
    }
    if (failed(returnLogits(forward)) ||
        failed(cacheAttention(forward, cacheLen)))
      return signalPassFailure();
    positionRotary(forward);
    forward.setSymName("decode_step");
  }

  /// @forward returns the loss of the logits; @decode_step returns them.
  LogicalResult returnLogits(func::FuncOp forward) {
    auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
    auto loss = ret.getNumOperands() > 0
                    ? ret.getOperand(0).getDefiningOp<CrossEntropyOp>()
                    : CrossEntropyOp();
    if (!loss)
      return forward.emitError("generation needs a model whose loss is "
                               "strata.cross_entropy of the logits");
    Value logits = loss.getLogits();
    auto logitsType = cast<RankedTensorType>(logits.getType());
    if (logitsType.getRank() != 3 || logitsType.getDimSize(1) != 1)
      return loss.emitError("generation needs logits [batch, 1, vocab] for "
                            "one new position, got ")
             << logitsType;
    OpBuilder b(ret);
    b.create<func::ReturnOp>(ret.getLoc(), logits);
    ret.erase();
    Value targets = loss.getTargets();
    loss.erase();
    if (auto in = targets.getDefiningOp<InputOp>(); in && in->use_empty())
      in.erase();
    forward.setFunctionType(FunctionType::get(
        forward.getContext(), forward.getArgumentTypes(), {logitsType}));
    return success();
  }

  LogicalResult cacheAttention(func::FuncOp forward, int64_t cacheLen) {
    // A fused attention already takes the kv heads once.
    SmallVector<CausalAttentionOp> fused;
    forward.walk([&](CausalAttentionOp a) { fused.push_back(a); });
    for (CausalAttentionOp attention : fused) {
      if (!attention.getLse().use_empty())
        return attention.emitError("generation needs the lse of "
                                   "strata.causal_attention to be unused");
      OpBuilder b(attention);
      auto cached = b.create<CachedAttentionOp>(
          attention.getLoc(), attention.getQuery(), attention.getKey(),
          attention.getValue(), attention.getScaleAttr(),
          b.getI64IntegerAttr(cacheLen));
      if (Attribute a = attention->getAttr("strata.layer"))
        cached->setAttr("strata.layer", a);
      attention.getOutput().replaceAllUsesWith(cached.getResult());
      attention.erase();
    }
    SmallVector<SoftmaxOp> softmaxes;
    forward.walk([&](SoftmaxOp s) { softmaxes.push_back(s); });
    for (SoftmaxOp softmax : softmaxes) {
      std::optional<AttentionCore> core = matchCore(softmax);
      if (!softmax.getCausal() || !core)
        return softmax.emitError(
            "generation supports causal attention written as matmul(q, k, "
            "transpose_b), causal softmax, matmul(probs, v); this softmax "
            "is not part of one");
      OpBuilder b(core->context);
      // Grouped-query attention repeats each kv head for its query heads;
      // the cache keeps the kv heads once (kv_attention maps the heads).
      auto unrepeated = [](Value v) {
        auto rep = v.getDefiningOp<RepeatInterleaveOp>();
        return rep && rep.getNormalizedAxis() == 1 ? rep.getInput() : v;
      };
      Value key = unrepeated(core->scores.getRhs()),
            value = unrepeated(core->context.getRhs());
      if (key.getType() != value.getType()) {
        key = core->scores.getRhs();
        value = core->context.getRhs();
      }
      auto cached = b.create<CachedAttentionOp>(
          core->context.getLoc(), core->scores.getLhs(), key, value,
          b.getF64FloatAttr(softmax.getScale().convertToDouble()),
          b.getI64IntegerAttr(cacheLen));
      for (StringRef attr : {"strata.layer"})
        if (Attribute a = core->context->getAttr(attr))
          cached->setAttr(attr, a);
      Value keyIn = core->scores.getRhs(), valueIn = core->context.getRhs();
      core->context.getResult().replaceAllUsesWith(cached.getResult());
      core->context.erase();
      softmax.erase();
      core->scores.erase();
      for (Value v : {keyIn, valueIn})
        if (Operation *def = v.getDefiningOp();
            def && isa<RepeatInterleaveOp>(def) && def->use_empty())
          def->erase();
    }
    return success();
  }

  /// A rotary embedding of one position rotates by the position being fed,
  /// not by the index within the one-position tensor.
  void positionRotary(func::FuncOp forward) {
    SmallVector<RotaryEmbeddingOp> rotaries;
    forward.walk([&](RotaryEmbeddingOp r) { rotaries.push_back(r); });
    for (RotaryEmbeddingOp r : rotaries) {
      OpBuilder b(r);
      auto at = b.create<RotaryEmbeddingAtPositionOp>(r.getLoc(), r.getInput(),
                                                      r.getThetaAttr());
      for (StringRef attr : {"strata.layer"})
        if (Attribute a = r->getAttr(attr))
          at->setAttr(attr, a);
      r.getResult().replaceAllUsesWith(at.getResult());
      r.erase();
    }
  }
};

} // namespace
