//===- ElementwiseBinary.cpp - strata.binary: shape, cost, gradient -------===//
//
// Part of the Strata project.
//
// strata.binary (ODS in StrataOps.td; the functions in
// runtime/kernels/BinaryMath.h, which the kernels share): the shape rule
// (rhs broadcast over one run of lhs's dims), the verifier of the kind,
// the cost and the gradient, built from strata.binary, strata.mul and
// strata.bias_grad.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"
#include "runtime/kernels/BinaryMath.h"

#include "mlir/IR/Builders.h"

#include <array>
#include <optional>

using namespace mlir;
using namespace strata;

namespace k = strata::kernels;

namespace {

RankedTensorType ranked(Value v) { return cast<RankedTensorType>(v.getType()); }

std::optional<std::array<int64_t, 4>> broadcast(RankedTensorType x,
                                                RankedTensorType y) {
  return k::binaryBroadcast(x.getShape().data(), x.getRank(),
                            y.getShape().data(), y.getRank());
}

/// `grad` (lhs's shape, [lead, outer, mid, inner]) summed over lead and
/// mid to `type` (rhs's, [1, outer, 1, inner]).
Value sumToRhs(OpBuilder &b, Location loc, Value grad, RankedTensorType type) {
  RankedTensorType g = ranked(grad);
  if (g == type)
    return grad;
  auto [lead, outer, mid, inner] = *broadcast(g, type);
  Type f = g.getElementType();
  Value sum = grad;
  if (mid > 1) { // the run: mean over it, times its size
    Value v = b.create<ReshapeOp>(
        loc, RankedTensorType::get({lead * outer, mid, inner}, f), sum);
    Value mean = b.create<ReduceMeanOp>(loc, v, b.getI64IntegerAttr(1));
    sum = b.create<ScaleOp>(loc, mean, b.getF64FloatAttr(double(mid)));
  }
  if (lead > 1) { // the leading dims: bias_grad's sum over rows
    RankedTensorType s = ranked(sum);
    if (s.getRank() < 2 || s.getShape().back() != outer * inner)
      sum = b.create<ReshapeOp>(
          loc, RankedTensorType::get({lead, outer * inner}, f), sum);
    sum = b.create<BiasGradOp>(loc, sum);
  }
  if (ranked(sum) != type)
    sum = b.create<ReshapeOp>(loc, type, sum);
  return sum;
}

} // namespace

LogicalResult ElementwiseBinaryOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties, RegionRange,
    SmallVectorImpl<Type> &results) {
  auto x = cast<RankedTensorType>(operands[0].getType());
  auto y = cast<RankedTensorType>(operands[1].getType());
  if (x.getElementType() != y.getElementType() || !broadcast(x, y))
    return emitOptionalError(
        loc,
        "'strata.binary' rhs must have lhs's element type and, aligned to "
        "the right and past its leading 1s, lhs's dims but for one run of "
        "1s; got ",
        operands[0].getType(), " and ", operands[1].getType());
  results.push_back(x);
  return success();
}

LogicalResult ElementwiseBinaryOp::verify() {
  StringRef kind = getKind();
  if (k::binaryKindCode(std::string_view(kind.data(), kind.size())) >= 0)
    return success();
  std::string names;
  for (std::string_view n : k::kBinaryKindNames)
    names += (names.empty() ? "" : ", ") + std::string(n);
  return emitOpError() << "kind '" << kind
                       << "' is not a binary function; expected one of "
                       << names;
}

std::array<int64_t, 4> ElementwiseBinaryOp::getBroadcast() {
  return *broadcast(ranked(getLhs()), ranked(getRhs()));
}

int64_t ElementwiseBinaryOp::getFlops() {
  return ranked(getResult()).getNumElements();
}

// add: (dy, sum dy); sub: (dy, -sum dy); mul: (dy * y, sum dy * x);
// div: (dy / y, -(sum dy * x / y) / y). A strata.constant rhs gets none.
LogicalResult
ElementwiseBinaryOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value dy = resultGrads[0];
  RankedTensorType rhsType = ranked(getRhs());
  auto binary = [&](Value l, Value r, StringRef kind) -> Value {
    return b.create<ElementwiseBinaryOp>(loc, l, r, b.getStringAttr(kind));
  };
  StringRef kind = getKind();
  Value rhs = getRhs();
  while (auto rep = rhs.getDefiningOp<ReplicateOp>())
    rhs = rep.getInput();
  if (rhs.getDefiningOp<ConstantOp>()) {
    grads.push_back(
        kind == "add" || kind == "sub" ? dy : binary(dy, getRhs(), kind));
    grads.push_back(Value());
    return success();
  }
  if (kind == "add" || kind == "sub") {
    grads.push_back(dy);
    Value s = sumToRhs(b, loc, dy, rhsType);
    grads.push_back(
        kind == "add"
            ? s
            : b.create<ScaleOp>(loc, s, b.getF64FloatAttr(-1.0)).getResult());
    return success();
  }
  Value dyx = b.create<MulOp>(loc, dy, getLhs());
  if (kind == "mul") {
    grads.push_back(binary(dy, getRhs(), "mul"));
    grads.push_back(sumToRhs(b, loc, dyx, rhsType));
    return success();
  }
  grads.push_back(binary(dy, getRhs(), "div"));
  Value s = sumToRhs(b, loc, binary(dyx, getRhs(), "div"), rhsType);
  grads.push_back(b.create<ScaleOp>(loc, binary(s, getRhs(), "div"),
                                    b.getF64FloatAttr(-1.0)));
  return success();
}
