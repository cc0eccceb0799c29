//===- ReduceMean.cpp - strata.reduce_mean: shape, cost, gradient ---------===//
//
// Everything the compiler knows about strata.reduce_mean and its gradient
// op in one place: the shape rules (the reduced dimension kept with size
// 1), the arithmetic per element and the gradient rule (the incoming
// gradient spread back over the dimension, divided by its size). The
// sharding rule (the reduced dimension a reduction factor) is in
// StrataShardingRules.cpp.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace strata;

namespace {

/// `axis` of a rank-`rank` tensor made non-negative, or failure.
FailureOr<int64_t> normalizedAxis(std::optional<Location> loc, StringRef op,
                                  int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    return emitOptionalError(loc, "'strata.", op, "' axis ", axis,
                             " is out of range for a tensor of rank ", rank),
           failure();
  return a;
}

} // namespace

LogicalResult
ReduceMeanOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                               ValueRange operands, DictionaryAttr attrs,
                               OpaqueProperties props, RegionRange regions,
                               SmallVectorImpl<Type> &results) {
  Adaptor a(operands, attrs, props, regions);
  auto in = cast<RankedTensorType>(a.getInput().getType());
  FailureOr<int64_t> axis =
      normalizedAxis(loc, "reduce_mean", a.getAxis(), in.getRank());
  if (failed(axis))
    return failure();
  SmallVector<int64_t> dims(in.getShape());
  dims[*axis] = 1;
  results.push_back(RankedTensorType::get(dims, in.getElementType()));
  return success();
}

// One add per input element and one multiply per result element.
int64_t ReduceMeanOp::getFlops() {
  return cast<RankedTensorType>(getInput().getType()).getNumElements() +
         cast<RankedTensorType>(getResult().getType()).getNumElements();
}

LogicalResult ReduceMeanOp::buildGradients(OpBuilder &b,
                                           ArrayRef<Value> resultGrads,
                                           SmallVectorImpl<Value> &grads) {
  int64_t axis = getNormalizedAxis();
  int64_t size = cast<RankedTensorType>(getInput().getType()).getDimSize(axis);
  grads.push_back(b.create<ReduceMeanGradOp>(getLoc(), resultGrads[0],
                                             b.getI64IntegerAttr(axis),
                                             b.getI64IntegerAttr(size)));
  return success();
}

LogicalResult
ReduceMeanGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                   ValueRange operands, DictionaryAttr attrs,
                                   OpaqueProperties props, RegionRange regions,
                                   SmallVectorImpl<Type> &results) {
  Adaptor a(operands, attrs, props, regions);
  auto g = cast<RankedTensorType>(a.getGrad().getType());
  FailureOr<int64_t> axis =
      normalizedAxis(loc, "reduce_mean_grad", a.getAxis(), g.getRank());
  if (failed(axis))
    return failure();
  if (g.getDimSize(*axis) != 1 || static_cast<int64_t>(a.getSize()) < 1)
    return emitOptionalError(loc,
                             "'strata.reduce_mean_grad' needs a gradient of "
                             "size 1 along axis ",
                             *axis, " and a size >= 1, got ", g, " and size ",
                             a.getSize());
  SmallVector<int64_t> dims(g.getShape());
  dims[*axis] = a.getSize();
  results.push_back(RankedTensorType::get(dims, g.getElementType()));
  return success();
}

int64_t ReduceMeanGradOp::getFlops() {
  return cast<RankedTensorType>(getResult().getType()).getNumElements();
}
