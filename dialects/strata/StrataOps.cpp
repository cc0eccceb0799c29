//===- StrataOps.cpp - strata dialect operations --------------------------===//
//
// Shape rules (inferReturnTypes) and verifiers, one per op. Errors go through
// the op's location, which the YAML frontend sets to the spec's file:line:col,
// so a shape mismatch in a hand-written graph points at the offending op.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace strata;

namespace {

/// "[8, 64, 512]" for messages.
std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "[";
  llvm::interleaveComma(shape, os);
  os << "]";
  return s;
}

RankedTensorType rankedType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

LogicalResult sameElementType(std::optional<Location> loc, StringRef op,
                              Value a, Value b, StringRef what) {
  if (rankedType(a).getElementType() != rankedType(b).getElementType())
    return emitOptionalError(loc, "'strata.", op, "' ", what,
                             " must have the element type of the input (",
                             rankedType(a).getElementType(), "), got ",
                             rankedType(b).getElementType());
  return success();
}

/// Normalises a possibly negative axis; fails if out of range.
FailureOr<int64_t> normaliseAxis(std::optional<Location> loc, StringRef op,
                                 int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    (void)emitOptionalError(loc, "'strata.", op, "' axis ", axis,
                            " is out of range for a tensor of rank ", rank,
                            "; expected an axis in [", -rank, ", ", rank - 1,
                            "]");
    return failure();
  }
  return a;
}

} // namespace

//===----------------------------------------------------------------------===//
// ParamOp
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  if (getName().empty())
    return emitOpError("needs a non-empty name");
  StringRef init = getInit();
  if (init != "normal" && init != "zeros" && init != "ones")
    return emitOpError("init must be one of normal, zeros, ones; got '")
           << init << "'";
  if (!(getInitStd().convertToDouble() >= 0.0))
    return emitOpError("init_std must be non-negative");
  return success();
}

//===----------------------------------------------------------------------===//
// EmbeddingOp
//===----------------------------------------------------------------------===//

LogicalResult
EmbeddingOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                              ValueRange operands, DictionaryAttr attrs,
                              OpaqueProperties props, RegionRange regions,
                              SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  auto table = rankedType(adaptor.getTable());
  auto ids = rankedType(adaptor.getIds());
  if (table.getRank() != 2)
    return emitOptionalError(loc,
                             "'strata.embedding' table must be rank 2 "
                             "[vocab, hidden], got ",
                             shapeStr(table.getShape()));
  SmallVector<int64_t> shape(ids.getShape());
  shape.push_back(table.getDimSize(1));
  results.push_back(RankedTensorType::get(shape, table.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// MatmulOp
//===----------------------------------------------------------------------===//

LogicalResult
MatmulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                           ValueRange operands, DictionaryAttr attrs,
                           OpaqueProperties props, RegionRange regions,
                           SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  auto lhs = rankedType(adaptor.getLhs());
  auto rhs = rankedType(adaptor.getRhs());
  if (lhs.getRank() < 2 || rhs.getRank() < 2)
    return emitOptionalError(loc,
                             "'strata.matmul' operands must have rank >= "
                             "2, got ",
                             shapeStr(lhs.getShape()), " and ",
                             shapeStr(rhs.getShape()));
  if (failed(sameElementType(loc, "matmul", adaptor.getLhs(), adaptor.getRhs(),
                             "rhs")))
    return failure();
  int64_t lr = lhs.getRank(), rr = rhs.getRank();
  bool ta = adaptor.getTransposeA(), tb = adaptor.getTransposeB();
  int64_t m = lhs.getDimSize(ta ? lr - 1 : lr - 2);
  int64_t k = lhs.getDimSize(ta ? lr - 2 : lr - 1);
  int64_t k2 = rhs.getDimSize(tb ? rr - 1 : rr - 2);
  int64_t n = rhs.getDimSize(tb ? rr - 2 : rr - 1);
  if (k != k2)
    return emitOptionalError(
        loc, "'strata.matmul' contraction dimensions differ: lhs ",
        shapeStr(lhs.getShape()), (ta ? " (transposed)" : ""), " has K=", k,
        ", rhs ", shapeStr(rhs.getShape()), (tb ? " (transposed)" : ""),
        " has K=", k2, "; expected equal sizes");
  ArrayRef<int64_t> batch = lhs.getShape().drop_back(2);
  if (rr != 2 && rhs.getShape().drop_back(2) != batch)
    return emitOptionalError(
        loc, "'strata.matmul' batch dimensions differ: lhs ",
        shapeStr(lhs.getShape()), ", rhs ", shapeStr(rhs.getShape()),
        "; expected rhs to have lhs's batch dimensions or rank 2");
  SmallVector<int64_t> shape(batch);
  shape.push_back(m);
  shape.push_back(n);
  results.push_back(RankedTensorType::get(shape, lhs.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult
BiasAddOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                            ValueRange operands, DictionaryAttr attrs,
                            OpaqueProperties props, RegionRange regions,
                            SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  auto in = rankedType(adaptor.getInput());
  auto bias = rankedType(adaptor.getBias());
  if (in.getRank() < 1 || bias.getRank() != 1 ||
      bias.getDimSize(0) != in.getShape().back())
    return emitOptionalError(loc,
                             "'strata.bias_add' bias must be a vector of "
                             "the input's last dimension: input ",
                             shapeStr(in.getShape()), ", bias ",
                             shapeStr(bias.getShape()));
  if (failed(sameElementType(loc, "bias_add", adaptor.getInput(),
                             adaptor.getBias(), "bias")))
    return failure();
  results.push_back(in);
  return success();
}

static LogicalResult inferBinary(StringRef op, std::optional<Location> loc,
                                 Value lhs, Value rhs,
                                 SmallVectorImpl<Type> &results) {
  if (lhs.getType() != rhs.getType())
    return emitOptionalError(loc, "'strata.", op,
                             "' operands must have identical types, got ",
                             lhs.getType(), " and ", rhs.getType());
  results.push_back(lhs.getType());
  return success();
}

LogicalResult AddOp::inferReturnTypes(MLIRContext *,
                                      std::optional<Location> loc,
                                      ValueRange operands, DictionaryAttr,
                                      OpaqueProperties, RegionRange,
                                      SmallVectorImpl<Type> &results) {
  return inferBinary("add", loc, operands[0], operands[1], results);
}

LogicalResult MulOp::inferReturnTypes(MLIRContext *,
                                      std::optional<Location> loc,
                                      ValueRange operands, DictionaryAttr,
                                      OpaqueProperties, RegionRange,
                                      SmallVectorImpl<Type> &results) {
  return inferBinary("mul", loc, operands[0], operands[1], results);
}

#define STRATA_SAME_AS_INPUT(OP)                                               \
  LogicalResult OP::inferReturnTypes(MLIRContext *, std::optional<Location>,   \
                                     ValueRange operands, DictionaryAttr,      \
                                     OpaqueProperties, RegionRange,            \
                                     SmallVectorImpl<Type> &results) {         \
    results.push_back(operands[0].getType());                                  \
    return success();                                                          \
  }
STRATA_SAME_AS_INPUT(ScaleOp)
STRATA_SAME_AS_INPUT(GeluOp)
STRATA_SAME_AS_INPUT(ReluOp)
#undef STRATA_SAME_AS_INPUT

//===----------------------------------------------------------------------===//
// LayerNormOp, SoftmaxOp
//===----------------------------------------------------------------------===//

LogicalResult
LayerNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                              ValueRange operands, DictionaryAttr attrs,
                              OpaqueProperties props, RegionRange regions,
                              SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  auto in = rankedType(adaptor.getInput());
  if (in.getRank() < 1)
    return emitOptionalError(loc, "'strata.layer_norm' input must have rank "
                                  ">= 1");
  for (auto [what, v] :
       {std::pair<StringRef, Value>{"gamma", adaptor.getGamma()},
        {"beta", adaptor.getBeta()}}) {
    auto t = rankedType(v);
    if (t.getRank() != 1 || t.getDimSize(0) != in.getShape().back())
      return emitOptionalError(loc, "'strata.layer_norm' ", what,
                               " must be a vector of the input's last "
                               "dimension: input ",
                               shapeStr(in.getShape()), ", ", what, " ",
                               shapeStr(t.getShape()));
    if (failed(sameElementType(loc, "layer_norm", adaptor.getInput(), v, what)))
      return failure();
  }
  if (!(adaptor.getEpsilon().convertToDouble() > 0.0))
    return emitOptionalError(loc, "'strata.layer_norm' epsilon must be > 0");
  results.push_back(in);
  return success();
}

LogicalResult
SoftmaxOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                            ValueRange operands, DictionaryAttr attrs,
                            OpaqueProperties props, RegionRange regions,
                            SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  auto in = rankedType(adaptor.getInput());
  if (in.getRank() < 1)
    return emitOptionalError(loc, "'strata.softmax' input must have rank >= 1");
  if (adaptor.getCausal() &&
      (in.getRank() < 2 ||
       in.getDimSize(in.getRank() - 1) != in.getDimSize(in.getRank() - 2)))
    return emitOptionalError(loc,
                             "'strata.softmax' with causal = true needs "
                             "an input of shape [..., S, S], got ",
                             shapeStr(in.getShape()));
  results.push_back(in);
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto in = rankedType(getInput());
  auto out = rankedType(getResult());
  if (in.getElementType() != out.getElementType())
    return emitOpError("cannot change the element type (")
           << in.getElementType() << " to " << out.getElementType() << ")";
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("element counts differ: ")
           << shapeStr(in.getShape()) << " has " << in.getNumElements() << ", "
           << shapeStr(out.getShape()) << " has " << out.getNumElements();
  return success();
}

LogicalResult
TransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                              ValueRange operands, DictionaryAttr attrs,
                              OpaqueProperties props, RegionRange regions,
                              SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  auto in = rankedType(adaptor.getInput());
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  if (static_cast<int64_t>(perm.size()) != in.getRank())
    return emitOptionalError(loc, "'strata.transpose' permutation has ",
                             perm.size(), " entries for a tensor of rank ",
                             in.getRank());
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= in.getRank() || seen[p])
      return emitOptionalError(loc, "'strata.transpose' permutation ",
                               shapeStr(perm), " is not a permutation of 0..",
                               in.getRank() - 1);
    seen[p] = true;
    shape.push_back(in.getDimSize(p));
  }
  results.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

LogicalResult SplitOp::verify() {
  auto in = rankedType(getInput());
  FailureOr<int64_t> axis =
      normaliseAxis(getLoc(), "split", getAxis(), in.getRank());
  if (failed(axis))
    return failure();
  int64_t parts = getNumResults();
  if (parts == 0)
    return emitOpError("needs at least one result");
  if (in.getDimSize(*axis) % parts != 0)
    return emitOpError("cannot split dimension ")
           << *axis << " of size " << in.getDimSize(*axis) << " into " << parts
           << " equal parts";
  SmallVector<int64_t> shape(in.getShape());
  shape[*axis] /= parts;
  auto expected = RankedTensorType::get(shape, in.getElementType());
  for (Value r : getResults())
    if (r.getType() != expected)
      return emitOpError("result type ")
             << r.getType() << " differs from the expected " << expected;
  return success();
}

LogicalResult
ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                           ValueRange operands, DictionaryAttr attrs,
                           OpaqueProperties props, RegionRange regions,
                           SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  if (operands.empty())
    return emitOptionalError(loc, "'strata.concat' needs at least one input");
  auto first = rankedType(operands[0]);
  FailureOr<int64_t> axis =
      normaliseAxis(loc, "concat", adaptor.getAxis(), first.getRank());
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(first.getShape());
  shape[*axis] = 0;
  for (Value v : operands) {
    auto t = rankedType(v);
    bool ok = t.getRank() == first.getRank() &&
              t.getElementType() == first.getElementType();
    for (int64_t d = 0; ok && d < t.getRank(); ++d)
      ok = d == *axis || t.getDimSize(d) == first.getDimSize(d);
    if (!ok)
      return emitOptionalError(
          loc, "'strata.concat' inputs ", shapeStr(first.getShape()), " and ",
          shapeStr(t.getShape()), " differ outside the concatenation axis ",
          *axis);
    shape[*axis] += t.getDimSize(*axis);
  }
  results.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// CrossEntropyOp
//===----------------------------------------------------------------------===//

LogicalResult
CrossEntropyOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                 ValueRange operands, DictionaryAttr attrs,
                                 OpaqueProperties props, RegionRange regions,
                                 SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  auto logits = rankedType(adaptor.getLogits());
  auto targets = rankedType(adaptor.getTargets());
  if (logits.getRank() < 1 ||
      logits.getShape().drop_back() != targets.getShape())
    return emitOptionalError(
        loc,
        "'strata.cross_entropy' targets must have the logits' shape "
        "without the class dimension: logits ",
        shapeStr(logits.getShape()), ", targets ", shapeStr(targets.getShape()),
        "; expected targets ", shapeStr(logits.getShape().drop_back()));
  // The loss is accumulated and reported in float32 whatever the compute
  // dtype (mixed precision keeps the loss in full precision).
  results.push_back(
      RankedTensorType::get({}, logits.getElementType().isF64()
                                    ? logits.getElementType()
                                    : Float32Type::get(logits.getContext())));
  return success();
}

#define GET_OP_CLASSES
#include "dialects/strata/StrataOps.cpp.inc"

//===----------------------------------------------------------------------===//
// CostOpInterface
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataInterfaces.cpp.inc"

static int64_t numElements(Value v) { return rankedType(v).getNumElements(); }

int64_t MatmulOp::getFlops() {
  auto lhs = rankedType(getLhs());
  int64_t k =
      lhs.getDimSize(getTransposeA() ? lhs.getRank() - 2 : lhs.getRank() - 1);
  return 2 * numElements(getResult()) * k;
}
int64_t EmbeddingOp::getFlops() { return 0; }
int64_t BiasAddOp::getFlops() { return numElements(getResult()); }
int64_t AddOp::getFlops() { return numElements(getResult()); }
int64_t MulOp::getFlops() { return numElements(getResult()); }
int64_t ScaleOp::getFlops() { return numElements(getResult()); }
// tanh-GELU: cube, fma chain, tanh, scale: ~8 flops, tanh counted as one.
int64_t GeluOp::getFlops() { return 8 * numElements(getResult()); }
int64_t ReluOp::getFlops() { return numElements(getResult()); }
// mean, variance, normalise, affine: ~8 flops per element.
int64_t LayerNormOp::getFlops() { return 8 * numElements(getResult()); }
// scale, max, exp, sum, divide: ~5 flops per element.
int64_t SoftmaxOp::getFlops() { return 5 * numElements(getResult()); }
int64_t CrossEntropyOp::getFlops() { return 5 * numElements(getLogits()); }
int64_t ReshapeOp::getFlops() { return 0; }
int64_t ReshapeOp::getBytesAccessed() { return 0; }
int64_t TransposeOp::getFlops() { return 0; }
int64_t SplitOp::getFlops() { return 0; }
int64_t ConcatOp::getFlops() { return 0; }

//===----------------------------------------------------------------------===//
// Slice and gradient ops
//===----------------------------------------------------------------------===//

LogicalResult
SliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                          ValueRange operands, DictionaryAttr attrs,
                          OpaqueProperties props, RegionRange regions,
                          SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  auto in = rankedType(adaptor.getInput());
  FailureOr<int64_t> axis =
      normaliseAxis(loc, "slice", adaptor.getAxis(), in.getRank());
  if (failed(axis))
    return failure();
  int64_t offset = adaptor.getOffset(), size = adaptor.getSize();
  if (offset < 0 || size <= 0 || offset + size > in.getDimSize(*axis))
    return emitOptionalError(loc, "'strata.slice' range [", offset, ", ",
                             offset + size, ") is outside dimension ", *axis,
                             " of size ", in.getDimSize(*axis));
  SmallVector<int64_t> shape(in.getShape());
  shape[*axis] = size;
  results.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}
int64_t SliceOp::getFlops() { return 0; }

LogicalResult EmbeddingGradOp::verify() {
  auto grad = rankedType(getGrad());
  auto ids = rankedType(getIds());
  auto out = rankedType(getResult());
  if (out.getRank() != 2 || grad.getShape().drop_back() != ids.getShape() ||
      grad.getShape().back() != out.getDimSize(1) ||
      grad.getElementType() != out.getElementType())
    return emitOpError("expects grad [..., H] with the ids' leading shape and "
                       "a result [V, H]; got grad ")
           << shapeStr(grad.getShape()) << ", ids " << shapeStr(ids.getShape())
           << ", result " << shapeStr(out.getShape());
  return success();
}

LogicalResult BiasGradOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           ValueRange operands, DictionaryAttr,
                                           OpaqueProperties, RegionRange,
                                           SmallVectorImpl<Type> &results) {
  auto in = rankedType(operands[0]);
  if (in.getRank() < 1)
    return emitOptionalError(loc, "'strata.bias_grad' needs rank >= 1");
  results.push_back(
      RankedTensorType::get({in.getShape().back()}, in.getElementType()));
  return success();
}
int64_t BiasGradOp::getFlops() { return numElements(getGrad()); }

static LogicalResult inferSameAsGrad(StringRef op, std::optional<Location> loc,
                                     Value grad, Value other,
                                     SmallVectorImpl<Type> &results) {
  if (grad.getType() != other.getType())
    return emitOptionalError(loc, "'strata.", op,
                             "' grad and forward value must have identical "
                             "types, got ",
                             grad.getType(), " and ", other.getType());
  results.push_back(grad.getType());
  return success();
}

LogicalResult GeluGradOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           ValueRange operands, DictionaryAttr,
                                           OpaqueProperties, RegionRange,
                                           SmallVectorImpl<Type> &results) {
  return inferSameAsGrad("gelu_grad", loc, operands[0], operands[1], results);
}
int64_t GeluGradOp::getFlops() { return 14 * numElements(getResult()); }

LogicalResult ReluGradOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           ValueRange operands, DictionaryAttr,
                                           OpaqueProperties, RegionRange,
                                           SmallVectorImpl<Type> &results) {
  return inferSameAsGrad("relu_grad", loc, operands[0], operands[1], results);
}
int64_t ReluGradOp::getFlops() { return numElements(getResult()); }

LogicalResult SoftmaxGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              ValueRange operands,
                                              DictionaryAttr, OpaqueProperties,
                                              RegionRange,
                                              SmallVectorImpl<Type> &results) {
  return inferSameAsGrad("softmax_grad", loc, operands[0], operands[1],
                         results);
}
int64_t SoftmaxGradOp::getFlops() { return 4 * numElements(getResult()); }

LogicalResult
LayerNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                  ValueRange operands, DictionaryAttr attrs,
                                  OpaqueProperties props, RegionRange regions,
                                  SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  SmallVector<Type> inputType;
  if (failed(inferSameAsGrad("layer_norm_grad", loc, adaptor.getGrad(),
                             adaptor.getInput(), inputType)))
    return failure();
  auto in = rankedType(adaptor.getInput());
  auto gamma = rankedType(adaptor.getGamma());
  if (gamma.getRank() != 1 || gamma.getDimSize(0) != in.getShape().back())
    return emitOptionalError(loc, "'strata.layer_norm_grad' gamma must be a "
                                  "vector of the input's last dimension");
  results.push_back(in);
  results.push_back(gamma);
  results.push_back(gamma);
  return success();
}
int64_t LayerNormGradOp::getFlops() { return 12 * numElements(getGrad()); }

LogicalResult CrossEntropyGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attrs, OpaqueProperties props, RegionRange regions,
    SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  auto logits = rankedType(adaptor.getLogits());
  auto targets = rankedType(adaptor.getTargets());
  if (logits.getRank() < 1 ||
      logits.getShape().drop_back() != targets.getShape())
    return emitOptionalError(loc, "'strata.cross_entropy_grad' targets must "
                                  "have the logits' shape without the class "
                                  "dimension");
  results.push_back(logits);
  return success();
}
int64_t CrossEntropyGradOp::getFlops() { return 5 * numElements(getLogits()); }

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

LogicalResult AllReduceOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location>,
                                            ValueRange operands, DictionaryAttr,
                                            OpaqueProperties, RegionRange,
                                            SmallVectorImpl<Type> &results) {
  results.push_back(operands[0].getType());
  return success();
}
int64_t AllReduceOp::getFlops() { return numElements(getResult()); }

LogicalResult ReplicateOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location>,
                                            ValueRange operands, DictionaryAttr,
                                            OpaqueProperties, RegionRange,
                                            SmallVectorImpl<Type> &results) {
  results.push_back(operands[0].getType());
  return success();
}
int64_t ReplicateOp::getFlops() { return 0; }

/// Shared shape rule of the axis-changing collectives: the `axis` dimension
/// is multiplied (gather) or divided (scatter, slice) by `size`.
static LogicalResult inferAxisCollective(StringRef op,
                                         std::optional<Location> loc,
                                         Value input, int64_t axis,
                                         int64_t size, bool grow,
                                         SmallVectorImpl<Type> &results) {
  auto in = rankedType(input);
  FailureOr<int64_t> a = normaliseAxis(loc, op, axis, in.getRank());
  if (failed(a))
    return failure();
  if (size < 1)
    return emitOptionalError(loc, "'strata.", op, "' size must be >= 1");
  SmallVector<int64_t> shape(in.getShape());
  if (grow) {
    shape[*a] *= size;
  } else {
    if (shape[*a] % size != 0)
      return emitOptionalError(loc, "'strata.", op, "' dimension ", *a,
                               " of size ", shape[*a], " does not divide into ",
                               size, " parts");
    shape[*a] /= size;
  }
  results.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

LogicalResult
AllGatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                              ValueRange operands, DictionaryAttr attrs,
                              OpaqueProperties props, RegionRange regions,
                              SmallVectorImpl<Type> &results) {
  Adaptor a(operands, attrs, props, regions);
  return inferAxisCollective("all_gather", loc, a.getInput(), a.getAxis(),
                             a.getSize(), true, results);
}
int64_t AllGatherOp::getFlops() { return 0; }

LogicalResult
ReduceScatterOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                  ValueRange operands, DictionaryAttr attrs,
                                  OpaqueProperties props, RegionRange regions,
                                  SmallVectorImpl<Type> &results) {
  Adaptor a(operands, attrs, props, regions);
  return inferAxisCollective("reduce_scatter", loc, a.getInput(), a.getAxis(),
                             a.getSize(), false, results);
}
int64_t ReduceScatterOp::getFlops() { return numElements(getInput()); }

LogicalResult
TakeSliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                              ValueRange operands, DictionaryAttr attrs,
                              OpaqueProperties props, RegionRange regions,
                              SmallVectorImpl<Type> &results) {
  Adaptor a(operands, attrs, props, regions);
  return inferAxisCollective("take_slice", loc, a.getInput(), a.getAxis(),
                             a.getSize(), false, results);
}
int64_t TakeSliceOp::getFlops() { return 0; }

//===----------------------------------------------------------------------===//
// Vocabulary-parallel cross-entropy
//===----------------------------------------------------------------------===//

static LogicalResult checkVocabShard(std::optional<Location> loc, StringRef op,
                                     RankedTensorType logits,
                                     RankedTensorType targets, int64_t start,
                                     int64_t valid) {
  if (logits.getRank() < 1 ||
      logits.getShape().drop_back() != targets.getShape())
    return emitOptionalError(loc, "'strata.", op,
                             "' targets must have the logits' shape without "
                             "the class dimension");
  if (start < 0 || valid < 0 || valid > logits.getShape().back())
    return emitOptionalError(loc, "'strata.", op,
                             "' needs vocab_start >= 0 "
                             "and 0 <= valid <= ",
                             logits.getShape().back(), ", got ", start, " and ",
                             valid);
  return success();
}

LogicalResult VocabParallelCrossEntropyOp::inferReturnTypes(
    MLIRContext *ctx, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attrs, OpaqueProperties props, RegionRange regions,
    SmallVectorImpl<Type> &results) {
  Adaptor a(operands, attrs, props, regions);
  auto logits = rankedType(a.getLogits());
  if (failed(checkVocabShard(loc, "vocab_parallel_cross_entropy", logits,
                             rankedType(a.getTargets()), a.getVocabStart(),
                             a.getValid())))
    return failure();
  results.push_back(RankedTensorType::get({}, logits.getElementType().isF64()
                                                  ? logits.getElementType()
                                                  : Float32Type::get(ctx)));
  return success();
}
int64_t VocabParallelCrossEntropyOp::getFlops() {
  return 5 * numElements(getLogits());
}

LogicalResult VocabParallelCrossEntropyGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attrs, OpaqueProperties props, RegionRange regions,
    SmallVectorImpl<Type> &results) {
  Adaptor a(operands, attrs, props, regions);
  auto logits = rankedType(a.getLogits());
  if (failed(checkVocabShard(loc, "vocab_parallel_cross_entropy_grad", logits,
                             rankedType(a.getTargets()), a.getVocabStart(),
                             a.getValid())))
    return failure();
  results.push_back(logits);
  return success();
}
int64_t VocabParallelCrossEntropyGradOp::getFlops() {
  return 5 * numElements(getLogits());
}

//===----------------------------------------------------------------------===//
// Llama family
//===----------------------------------------------------------------------===//

LogicalResult
RmsNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                            ValueRange operands, DictionaryAttr attrs,
                            OpaqueProperties props, RegionRange regions,
                            SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  auto in = rankedType(adaptor.getInput());
  auto w = rankedType(adaptor.getWeight());
  if (in.getRank() < 1)
    return emitOptionalError(loc, "'strata.rms_norm' input must have rank >= "
                                  "1");
  if (w.getRank() != 1 || w.getDimSize(0) != in.getShape().back())
    return emitOptionalError(loc,
                             "'strata.rms_norm' weight must be a vector of "
                             "the input's last dimension: input ",
                             shapeStr(in.getShape()), ", weight ",
                             shapeStr(w.getShape()));
  if (failed(sameElementType(loc, "rms_norm", adaptor.getInput(),
                             adaptor.getWeight(), "weight")))
    return failure();
  if (!(adaptor.getEpsilon().convertToDouble() > 0.0))
    return emitOptionalError(loc, "'strata.rms_norm' epsilon must be > 0");
  results.push_back(in);
  return success();
}
// square, mean, rsqrt, normalise, scale: ~4 flops per element.
int64_t RmsNormOp::getFlops() { return 4 * numElements(getResult()); }

/// The rotary ops' shared rule: [..., S, D] with D even, theta > 0.
static LogicalResult checkRotary(std::optional<Location> loc, StringRef op,
                                 Value input, double theta) {
  auto in = rankedType(input);
  if (in.getRank() < 2 || in.getShape().back() % 2 != 0)
    return emitOptionalError(loc, "'strata.", op,
                             "' needs an input [..., S, D] with an even D, "
                             "got ",
                             shapeStr(in.getShape()));
  if (!(theta > 0.0))
    return emitOptionalError(loc, "'strata.", op, "' theta must be > 0");
  return success();
}

LogicalResult
RotaryEmbeddingOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                    ValueRange operands, DictionaryAttr attrs,
                                    OpaqueProperties props, RegionRange regions,
                                    SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  if (failed(checkRotary(loc, "rotary_embedding", adaptor.getInput(),
                         adaptor.getTheta().convertToDouble())))
    return failure();
  results.push_back(adaptor.getInput().getType());
  return success();
}
// Two multiplies and an add per element (the tables are per position).
int64_t RotaryEmbeddingOp::getFlops() { return 3 * numElements(getResult()); }

LogicalResult RotaryEmbeddingGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attrs, OpaqueProperties props, RegionRange regions,
    SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  if (failed(checkRotary(loc, "rotary_embedding_grad", adaptor.getGrad(),
                         adaptor.getTheta().convertToDouble())))
    return failure();
  results.push_back(adaptor.getGrad().getType());
  return success();
}
int64_t RotaryEmbeddingGradOp::getFlops() {
  return 3 * numElements(getResult());
}

LogicalResult SiluOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                       ValueRange operands, DictionaryAttr,
                                       OpaqueProperties, RegionRange,
                                       SmallVectorImpl<Type> &results) {
  results.push_back(operands[0].getType());
  return success();
}
// exp, add, divide, multiply: ~4 flops, exp counted as one.
int64_t SiluOp::getFlops() { return 4 * numElements(getResult()); }

LogicalResult SiluGradOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           ValueRange operands, DictionaryAttr,
                                           OpaqueProperties, RegionRange,
                                           SmallVectorImpl<Type> &results) {
  return inferSameAsGrad("silu_grad", loc, operands[0], operands[1], results);
}
int64_t SiluGradOp::getFlops() { return 7 * numElements(getResult()); }

LogicalResult SiluMulOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          ValueRange operands, DictionaryAttr,
                                          OpaqueProperties, RegionRange,
                                          SmallVectorImpl<Type> &results) {
  return inferBinary("silu_mul", loc, operands[0], operands[1], results);
}
int64_t SiluMulOp::getFlops() { return 5 * numElements(getResult()); }

LogicalResult
SiluMulGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                ValueRange operands, DictionaryAttr attrs,
                                OpaqueProperties props, RegionRange regions,
                                SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  Type t = adaptor.getGrad().getType();
  if (adaptor.getGate().getType() != t || adaptor.getUp().getType() != t)
    return emitOptionalError(loc,
                             "'strata.silu_mul_grad' grad, gate and up "
                             "must have identical types, got ",
                             t, ", ", adaptor.getGate().getType(), " and ",
                             adaptor.getUp().getType());
  results.push_back(t);
  results.push_back(t);
  return success();
}
int64_t SiluMulGradOp::getFlops() { return 10 * numElements(getGrad()); }

/// repeat_interleave multiplies `axis` by `repeats`; its gradient divides.
static LogicalResult inferRepeat(StringRef op, std::optional<Location> loc,
                                 Value input, int64_t axis, int64_t repeats,
                                 bool grow, SmallVectorImpl<Type> &results) {
  if (repeats < 1)
    return emitOptionalError(loc, "'strata.", op, "' repeats must be >= 1");
  return inferAxisCollective(op, loc, input, axis, repeats, grow, results);
}

LogicalResult RepeatInterleaveOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attrs, OpaqueProperties props, RegionRange regions,
    SmallVectorImpl<Type> &results) {
  Adaptor a(operands, attrs, props, regions);
  return inferRepeat("repeat_interleave", loc, a.getInput(), a.getAxis(),
                     a.getRepeats(), /*grow=*/true, results);
}
int64_t RepeatInterleaveOp::getFlops() { return 0; }

LogicalResult RepeatInterleaveGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attrs, OpaqueProperties props, RegionRange regions,
    SmallVectorImpl<Type> &results) {
  Adaptor a(operands, attrs, props, regions);
  return inferRepeat("repeat_interleave_grad", loc, a.getGrad(), a.getAxis(),
                     a.getRepeats(), /*grow=*/false, results);
}
int64_t RepeatInterleaveGradOp::getFlops() { return numElements(getGrad()); }

LogicalResult
RmsNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                ValueRange operands, DictionaryAttr attrs,
                                OpaqueProperties props, RegionRange regions,
                                SmallVectorImpl<Type> &results) {
  Adaptor adaptor(operands, attrs, props, regions);
  SmallVector<Type> inputType;
  if (failed(inferSameAsGrad("rms_norm_grad", loc, adaptor.getGrad(),
                             adaptor.getInput(), inputType)))
    return failure();
  auto in = rankedType(adaptor.getInput());
  auto w = rankedType(adaptor.getWeight());
  if (w.getRank() != 1 || w.getDimSize(0) != in.getShape().back())
    return emitOptionalError(loc, "'strata.rms_norm_grad' weight must be a "
                                  "vector of the input's last dimension");
  results.push_back(in);
  results.push_back(w);
  return success();
}
int64_t RmsNormGradOp::getFlops() { return 8 * numElements(getGrad()); }

//===----------------------------------------------------------------------===//
// Inference
//===----------------------------------------------------------------------===//

LogicalResult
CachedAttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                    ValueRange operands, DictionaryAttr attrs,
                                    OpaqueProperties props, RegionRange regions,
                                    SmallVectorImpl<Type> &results) {
  Adaptor a(operands, attrs, props, regions);
  auto q = rankedType(a.getQuery()), k = rankedType(a.getKey()),
       v = rankedType(a.getValue());
  auto fourD = [](RankedTensorType t) {
    return t.getRank() == 4 && t.getDimSize(2) == 1;
  };
  if (!fourD(q) || !fourD(k) || k != v || q.getDimSize(0) != k.getDimSize(0) ||
      q.getDimSize(3) != k.getDimSize(3) ||
      q.getElementType() != k.getElementType() || k.getDimSize(1) < 1 ||
      q.getDimSize(1) % k.getDimSize(1) != 0)
    return emitOptionalError(
        loc,
        "'strata.cached_attention' needs query [B, heads, 1, D] and key, "
        "value [B, kv_heads, 1, D] with kv_heads dividing heads, got ",
        shapeStr(q.getShape()), ", ", shapeStr(k.getShape()), ", ",
        shapeStr(v.getShape()));
  if (a.getMaxLen() < 1)
    return emitOptionalError(loc,
                             "'strata.cached_attention' needs max_len >= 1");
  results.push_back(q);
  return success();
}
/// At a full cache: scores, softmax and the weighted sum over max_len rows.
int64_t CachedAttentionOp::getFlops() {
  return 4 * numElements(getQuery()) * int64_t(getMaxLen());
}

LogicalResult RotaryEmbeddingAtPositionOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attrs, OpaqueProperties props, RegionRange regions,
    SmallVectorImpl<Type> &results) {
  Adaptor a(operands, attrs, props, regions);
  auto in = rankedType(a.getInput());
  if (in.getRank() < 2 || in.getDimSize(in.getRank() - 2) != 1 ||
      in.getShape().back() % 2 != 0)
    return emitOptionalError(loc,
                             "'strata.rotary_embedding_at_position' needs an "
                             "input [..., 1, D] with D even, got ",
                             shapeStr(in.getShape()));
  results.push_back(in);
  return success();
}
int64_t RotaryEmbeddingAtPositionOp::getFlops() {
  return 3 * numElements(getInput());
}

//===----------------------------------------------------------------------===//
// Mixed precision
//===----------------------------------------------------------------------===//

LogicalResult CastOp::verify() {
  auto in = rankedType(getInput());
  auto out = rankedType(getResult());
  if (in.getShape() != out.getShape())
    return emitOpError("cannot change the shape (")
           << shapeStr(in.getShape()) << " to " << shapeStr(out.getShape())
           << ")";
  return success();
}
int64_t CastOp::getFlops() { return 0; }
