//===- ElementwiseUnary.cpp - strata.unary: shape, cost, gradient ---------===//
//
// Everything the compiler knows about strata.unary and strata.unary_grad in
// one place: the kinds (their names and runtime codes come from
// runtime/kernels/UnaryMath.h, which the kernels share), the shape rule, the
// arithmetic per element, and the gradient rule. The sharding rule (every
// dim a shared factor) is with the other elementwise ops in
// StrataShardingRules.cpp.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"
#include "runtime/kernels/UnaryMath.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace strata;

namespace k = strata::kernels;

namespace {

LogicalResult verifyKind(Operation *op, StringRef kind) {
  if (k::unaryKindCode(std::string_view(kind.data(), kind.size())) >= 0)
    return success();
  std::string names;
  for (std::string_view n : k::kUnaryKindNames)
    names += (names.empty() ? "" : ", ") + std::string(n);
  return op->emitOpError() << "kind '" << kind
                           << "' is not a unary function; expected one of "
                           << names;
}

int64_t elements(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}

} // namespace

LogicalResult ElementwiseUnaryOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, ValueRange operands, DictionaryAttr,
    OpaqueProperties, RegionRange, SmallVectorImpl<Type> &results) {
  results.push_back(operands[0].getType());
  return success();
}

LogicalResult ElementwiseUnaryOp::verify() {
  return verifyKind(*this, getKind());
}

// One transcendental or division per element counted as one flop; sigmoid
// is exp, add, divide.
int64_t ElementwiseUnaryOp::getFlops() {
  return (getKind() == "sigmoid" ? 3 : 1) * elements(getResult());
}

LogicalResult
ElementwiseUnaryOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &grads) {
  grads.push_back(b.create<ElementwiseUnaryGradOp>(getLoc(), resultGrads[0],
                                                   getInput(), getKindAttr()));
  return success();
}

LogicalResult ElementwiseUnaryGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties, RegionRange,
    SmallVectorImpl<Type> &results) {
  if (operands[0].getType() != operands[1].getType())
    return emitOptionalError(loc,
                             "'strata.unary_grad' grad and forward value must "
                             "have identical types, got ",
                             operands[0].getType(), " and ",
                             operands[1].getType());
  results.push_back(operands[0].getType());
  return success();
}

LogicalResult ElementwiseUnaryGradOp::verify() {
  return verifyKind(*this, getKind());
}

// f'(x) recomputed (about two flops) times the incoming gradient.
int64_t ElementwiseUnaryGradOp::getFlops() { return 3 * elements(getResult()); }
