//===- CausalAttention.cpp - Fused causal attention: shape, cost, gradient ===//
//
// Everything the compiler knows about strata.causal_attention and its
// gradient op, in one place: the shape rules, the arithmetic the CPU kernel
// performs (runtime/cpu/AttentionKernels.cpp: only the unmasked tiles, the
// backward pass recomputing the probabilities), and the gradient rule.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace strata;

namespace {

RankedTensorType rankedType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "[";
  llvm::interleaveComma(shape, os);
  os << "]";
  return s;
}

/// Checks query [B, heads, S, D] and key, value [B, kv_heads, S, D] with
/// kv_heads dividing heads and one element type.
LogicalResult verifyOperands(std::optional<Location> loc, StringRef op,
                             Value query, Value key, Value value) {
  auto q = rankedType(query), k = rankedType(key), v = rankedType(value);
  if (q.getRank() != 4 || k.getRank() != 4 || k != v ||
      q.getDimSize(0) != k.getDimSize(0) ||
      q.getDimSize(2) != k.getDimSize(2) ||
      q.getDimSize(3) != k.getDimSize(3) || k.getDimSize(1) < 1 ||
      q.getDimSize(1) % k.getDimSize(1) != 0)
    return emitOptionalError(
        loc, "'strata.", op,
        "' needs query [B, heads, S, D] and key, value [B, kv_heads, S, D] "
        "with kv_heads dividing heads, got ",
        shapeStr(q.getShape()), ", ", shapeStr(k.getShape()), ", ",
        shapeStr(v.getShape()));
  if (q.getElementType() != k.getElementType())
    return emitOptionalError(loc, "'strata.", op,
                             "' query, key and value must have one element "
                             "type, got ",
                             q.getElementType(), " and ", k.getElementType());
  return success();
}

LogicalResult verifyScale(std::optional<Location> loc, StringRef op,
                          double scale) {
  if (!(scale > 0.0) || !std::isfinite(scale))
    return emitOptionalError(loc, "'strata.", op,
                             "' scale must be positive and finite, got ",
                             scale);
  return success();
}

/// The per-row statistics: [B, heads, S] in float32 (float64 for float64
/// operands: the reference interpreter's gradient checks).
RankedTensorType lseType(RankedTensorType query) {
  Type element = query.getElementType().isF64()
                     ? query.getElementType()
                     : Float32Type::get(query.getContext());
  return RankedTensorType::get(query.getShape().drop_back(), element);
}

/// (query, key) pairs the causal mask keeps, summed over batch and heads.
int64_t causalPairs(Value query) {
  auto q = rankedType(query);
  int64_t s = q.getDimSize(2);
  return q.getDimSize(0) * q.getDimSize(1) * s * (s + 1) / 2;
}

} // namespace

//===----------------------------------------------------------------------===//
// CausalAttentionOp
//===----------------------------------------------------------------------===//

LogicalResult
CausalAttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                    ValueRange operands, DictionaryAttr attrs,
                                    OpaqueProperties props, RegionRange regions,
                                    SmallVectorImpl<Type> &results) {
  Adaptor a(operands, attrs, props, regions);
  if (failed(verifyOperands(loc, "causal_attention", a.getQuery(), a.getKey(),
                            a.getValue())) ||
      failed(
          verifyScale(loc, "causal_attention", a.getScale().convertToDouble())))
    return failure();
  auto q = rankedType(a.getQuery());
  results.push_back(q);
  results.push_back(lseType(q));
  return success();
}

/// Per kept pair: q.k and p.v (2 * D each) and ~5 for scale, max, exp, sum.
int64_t CausalAttentionOp::getFlops() {
  int64_t d = rankedType(getQuery()).getDimSize(3);
  return causalPairs(getQuery()) * (4 * d + 5);
}

LogicalResult CausalAttentionOp::buildGradients(OpBuilder &b,
                                                ArrayRef<Value> resultGrads,
                                                SmallVectorImpl<Value> &grads) {
  if (resultGrads[1])
    return emitOpError("lse feeds the loss; only the output of "
                       "strata.causal_attention has a gradient rule");
  Value grad = resultGrads[0];
  if (!grad)
    grad = b.create<ConstantOp>(getLoc(), getOutput().getType(),
                                b.getF64FloatAttr(0.0));
  auto g = b.create<CausalAttentionGradOp>(getLoc(), grad, getQuery(), getKey(),
                                           getValue(), getOutput(), getLse(),
                                           getScaleAttr());
  grads.push_back(g.getQueryGrad());
  grads.push_back(g.getKeyGrad());
  grads.push_back(g.getValueGrad());
  return success();
}

//===----------------------------------------------------------------------===//
// CausalAttentionGradOp
//===----------------------------------------------------------------------===//

LogicalResult CausalAttentionGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attrs, OpaqueProperties props, RegionRange regions,
    SmallVectorImpl<Type> &results) {
  Adaptor a(operands, attrs, props, regions);
  StringRef op = "causal_attention_grad";
  if (failed(verifyOperands(loc, op, a.getQuery(), a.getKey(), a.getValue())) ||
      failed(verifyScale(loc, op, a.getScale().convertToDouble())))
    return failure();
  auto q = rankedType(a.getQuery());
  if (a.getGrad().getType() != q || a.getOutput().getType() != q ||
      a.getLse().getType() != lseType(q))
    return emitOptionalError(
        loc,
        "'strata.causal_attention_grad' needs grad and output of the "
        "query's type ",
        q, " and lse ", lseType(q), ", got ", a.getGrad().getType(), ", ",
        a.getOutput().getType(), " and ", a.getLse().getType());
  results.push_back(q);
  results.push_back(a.getKey().getType());
  results.push_back(a.getValue().getType());
  return success();
}

/// Per kept pair: the recomputed q.k, then dV += P^T dO, dP = dO V^T,
/// dQ += dS K and dK += dS^T Q (2 * D each), and ~6 for exp and dS; plus
/// D_i = sum(dO_i * O_i) per row.
int64_t CausalAttentionGradOp::getFlops() {
  int64_t d = rankedType(getQuery()).getDimSize(3);
  return causalPairs(getQuery()) * (10 * d + 6) +
         2 * rankedType(getQuery()).getNumElements();
}
