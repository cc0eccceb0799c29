//===- StrataGradients.cpp - Gradient rules of the strata ops -------------===//
//
// DifferentiableOpInterface::buildGradients for every forward op. Each rule
// builds ordinary strata ops, so gradients are IR like the forward pass and
// later passes (partitioning, recomputation, memory planning) see them.
// tests/unit/autodiff checks every rule against finite differences.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace strata;

namespace {

RankedTensorType rankedType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// A zero tensor standing in for a result that received no gradient.
Value zerosLike(OpBuilder &b, Location loc, Type type) {
  return b.create<ConstantOp>(loc, type, b.getF64FloatAttr(0.0));
}

/// Collapses all but the last dimension: [..., K] -> [prod(...), K].
Value flattenRows(OpBuilder &b, Location loc, Value v) {
  auto t = rankedType(v);
  if (t.getRank() == 2)
    return v;
  int64_t cols = t.getShape().back();
  auto flat = RankedTensorType::get({t.getNumElements() / cols, cols},
                                    t.getElementType());
  return b.create<ReshapeOp>(loc, flat, v);
}

Value matmul(OpBuilder &b, Location loc, Value lhs, Value rhs, bool ta,
             bool tb) {
  return b.create<MatmulOp>(loc, lhs, rhs, ta, tb);
}

} // namespace

LogicalResult EmbeddingOp::buildGradients(OpBuilder &b,
                                          ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<EmbeddingGradOp>(getLoc(), getTable().getType(),
                                            resultGrads[0], getIds(),
                                            getRowStartAttr()));
  grads.push_back(nullptr);
  return success();
}

LogicalResult MatmulOp::buildGradients(OpBuilder &b,
                                       ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value dy = resultGrads[0], a = getLhs(), w = getRhs();
  bool ta = getTransposeA(), tb = getTransposeB();
  bool broadcast = rankedType(w).getRank() == 2 && rankedType(a).getRank() > 2;

  // Y = op(A) op(B). dop(A) = dY op(B)^T and dop(B) = op(A)^T dY; a
  // transposed operand's gradient is the transpose of that.
  Value da;
  if (!ta)
    da = matmul(b, loc, dy, w, false, !tb);
  else if (!broadcast)
    da = tb ? matmul(b, loc, w, dy, true, true)
            : matmul(b, loc, w, dy, false, true);
  else
    return emitOpError("gradient of a transposed batched lhs against a "
                       "broadcast rhs is not supported; transpose the lhs "
                       "explicitly");

  Value db;
  if (!broadcast) {
    db = tb ? matmul(b, loc, dy, a, true, ta)
            : matmul(b, loc, a, dy, !ta, false);
  } else {
    // B was shared by every batch entry: its gradient sums over the batch,
    // which is one matmul over the flattened rows.
    if (ta)
      return emitOpError("gradient of a transposed batched lhs against a "
                         "broadcast rhs is not supported");
    Value a2 = flattenRows(b, loc, a), dy2 = flattenRows(b, loc, dy);
    db = tb ? matmul(b, loc, dy2, a2, true, false)
            : matmul(b, loc, a2, dy2, true, false);
  }
  grads.push_back(da);
  grads.push_back(db);
  return success();
}

LogicalResult BiasAddOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &grads) {
  grads.push_back(resultGrads[0]);
  grads.push_back(b.create<BiasGradOp>(getLoc(), resultGrads[0]));
  return success();
}

LogicalResult AddOp::buildGradients(OpBuilder &, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &grads) {
  grads.push_back(resultGrads[0]);
  grads.push_back(resultGrads[0]);
  return success();
}

LogicalResult MulOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<MulOp>(getLoc(), resultGrads[0], getRhs()));
  grads.push_back(b.create<MulOp>(getLoc(), resultGrads[0], getLhs()));
  return success();
}

LogicalResult ScaleOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<ScaleOp>(getLoc(), resultGrads[0], getFactorAttr()));
  return success();
}

LogicalResult GeluOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<GeluGradOp>(getLoc(), resultGrads[0], getInput()));
  return success();
}

LogicalResult ReluOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<ReluGradOp>(getLoc(), resultGrads[0], getInput()));
  return success();
}

LogicalResult LayerNormOp::buildGradients(OpBuilder &b,
                                          ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &grads) {
  auto g = b.create<LayerNormGradOp>(getLoc(), resultGrads[0], getInput(),
                                     getGamma(), getEpsilonAttr());
  grads.append({g.getInputGrad(), g.getGammaGrad(), g.getBetaGrad()});
  return success();
}

LogicalResult SoftmaxOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<SoftmaxGradOp>(getLoc(), resultGrads[0], getResult(),
                                          getScaleAttr()));
  return success();
}

LogicalResult ReshapeOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &grads) {
  grads.push_back(
      b.create<ReshapeOp>(getLoc(), getInput().getType(), resultGrads[0]));
  return success();
}

LogicalResult TransposeOp::buildGradients(OpBuilder &b,
                                          ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &grads) {
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = i;
  grads.push_back(b.create<TransposeOp>(getLoc(), resultGrads[0],
                                        b.getDenseI64ArrayAttr(inverse)));
  return success();
}

LogicalResult SplitOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &grads) {
  SmallVector<Value> parts;
  for (auto [r, g] : llvm::zip(getResults(), resultGrads))
    parts.push_back(g ? g : zerosLike(b, getLoc(), r.getType()));
  grads.push_back(b.create<ConcatOp>(getLoc(), parts, getAxisAttr()));
  return success();
}

LogicalResult ConcatOp::buildGradients(OpBuilder &b,
                                       ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &grads) {
  int64_t axis = getNormalizedAxis();
  int64_t offset = 0;
  for (Value in : getInputs()) {
    int64_t size = rankedType(in).getDimSize(axis);
    grads.push_back(
        b.create<SliceOp>(getLoc(), resultGrads[0], axis, offset, size));
    offset += size;
  }
  return success();
}

LogicalResult CrossEntropyOp::buildGradients(OpBuilder &b,
                                             ArrayRef<Value> resultGrads,
                                             SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<CrossEntropyGradOp>(getLoc(), getLogits(),
                                               getTargets(), resultGrads[0]));
  grads.push_back(nullptr);
  return success();
}

LogicalResult AllReduceOp::buildGradients(OpBuilder &,
                                          ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &grads) {
  // The sum is replicated: every member's loss term sees the same value, so
  // the gradient of its contribution is the replicated result gradient.
  grads.push_back(resultGrads[0]);
  return success();
}

LogicalResult ReplicateOp::buildGradients(OpBuilder &b,
                                          ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &grads) {
  grads.push_back(
      b.create<AllReduceOp>(getLoc(), resultGrads[0], getGroupAttr()));
  return success();
}

LogicalResult AllGatherOp::buildGradients(OpBuilder &b,
                                          ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &grads) {
  if (getReplicated())
    grads.push_back(b.create<TakeSliceOp>(getLoc(), resultGrads[0],
                                          getGroupAttr(), getAxisAttr(),
                                          getSizeAttr()));
  else
    grads.push_back(b.create<ReduceScatterOp>(getLoc(), resultGrads[0],
                                              getGroupAttr(), getAxisAttr(),
                                              getSizeAttr()));
  return success();
}

LogicalResult ReduceScatterOp::buildGradients(OpBuilder &b,
                                              ArrayRef<Value> resultGrads,
                                              SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<AllGatherOp>(getLoc(), resultGrads[0],
                                        getGroupAttr(), getAxisAttr(),
                                        getSizeAttr(), b.getBoolAttr(false)));
  return success();
}

LogicalResult SliceOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &grads) {
  auto in = rankedType(getInput());
  int64_t axis = getNormalizedAxis();
  int64_t before = getOffset(),
          after = in.getDimSize(axis) - before - getSize();
  SmallVector<Value> parts;
  auto zeros = [&](int64_t n) {
    SmallVector<int64_t> shape(in.getShape());
    shape[axis] = n;
    return zerosLike(b, getLoc(),
                     RankedTensorType::get(shape, in.getElementType()));
  };
  if (before > 0)
    parts.push_back(zeros(before));
  parts.push_back(resultGrads[0]);
  if (after > 0)
    parts.push_back(zeros(after));
  grads.push_back(
      parts.size() == 1
          ? parts[0]
          : b.create<ConcatOp>(getLoc(), parts, b.getI64IntegerAttr(axis))
                .getResult());
  return success();
}

LogicalResult VocabParallelCrossEntropyOp::buildGradients(
    OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &grads) {
  // The loss is replicated, so this member's logits get the true gradient
  // of their slice; no reduction follows.
  grads.push_back(b.create<VocabParallelCrossEntropyGradOp>(
      getLoc(), getLogits(), getTargets(), resultGrads[0], getGroupAttr(),
      getVocabStartAttr(), getValidAttr()));
  grads.push_back(nullptr);
  return success();
}

//===----------------------------------------------------------------------===//
// Llama family
//===----------------------------------------------------------------------===//

LogicalResult RmsNormOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &grads) {
  auto g = b.create<RmsNormGradOp>(getLoc(), resultGrads[0], getInput(),
                                   getWeight(), getEpsilonAttr());
  grads.append({g.getInputGrad(), g.getWeightGrad()});
  return success();
}

LogicalResult RotaryEmbeddingOp::buildGradients(OpBuilder &b,
                                                ArrayRef<Value> resultGrads,
                                                SmallVectorImpl<Value> &grads) {
  // A rotation's transpose is the rotation by the opposite angle.
  grads.push_back(b.create<RotaryEmbeddingGradOp>(getLoc(), resultGrads[0],
                                                  getThetaAttr()));
  return success();
}

LogicalResult SiluOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<SiluGradOp>(getLoc(), resultGrads[0], getInput()));
  return success();
}

LogicalResult SiluMulOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &grads) {
  auto g =
      b.create<SiluMulGradOp>(getLoc(), resultGrads[0], getGate(), getUp());
  grads.append({g.getGateGrad(), g.getUpGrad()});
  return success();
}

LogicalResult
RepeatInterleaveOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<RepeatInterleaveGradOp>(
      getLoc(), resultGrads[0], getAxisAttr(), getRepeatsAttr()));
  return success();
}

LogicalResult CastOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &grads) {
  // The gradient flows back in the input's precision.
  grads.push_back(
      b.create<CastOp>(getLoc(), getInput().getType(), resultGrads[0]));
  return success();
}
