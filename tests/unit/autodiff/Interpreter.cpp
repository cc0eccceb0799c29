//===- Interpreter.cpp - float64 reference interpreter for strata ---------===//
//
// One function per op, each a direct transcription of the op's description
// in StrataOps.td. Result shapes are computed from the operands (not read off
// the IR) wherever the op defines them, and then compared with the IR types:
// a disagreement means the shape rule and the semantics have drifted apart.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/autodiff/Interpreter.h"

#include "tests/unit/autodiff/AttentionReference.h"
#include "tests/unit/autodiff/LlamaOpsReference.h"
#include "tests/unit/autodiff/UnaryReference.h"

#include "dialects/strata/StrataOps.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <unordered_map>

using namespace mlir;

namespace strata::reference {

static int64_t product(const std::vector<int64_t> &dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1},
                         std::multiplies<int64_t>());
}

Tensor::Tensor(std::vector<int64_t> shape, double fill)
    : shape(std::move(shape)) {
  data.assign(product(this->shape), fill);
}

Tensor::Tensor(std::vector<int64_t> shape, std::vector<double> data)
    : shape(std::move(shape)), data(std::move(data)) {}

std::string formatShape(const std::vector<int64_t> &shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "[";
  llvm::interleaveComma(shape, os);
  os << "]";
  return s;
}

namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588; // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

double gelu(double x) {
  return 0.5 * x *
         (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
}

double geluDerivative(double x) {
  double t = std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  double dInner = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * x * x);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dInner;
}

std::vector<int64_t> typeShape(Type type) {
  auto ranked = cast<RankedTensorType>(type);
  return std::vector<int64_t>(ranked.getShape().begin(),
                              ranked.getShape().end());
}

/// Splits a shape at `axis` into [outer, dim, inner] for axis-wise copies.
struct AxisView {
  int64_t outer, dim, inner;
};
AxisView viewAt(const std::vector<int64_t> &shape, int64_t axis) {
  AxisView v{1, shape[axis], 1};
  for (int64_t d = 0; d < axis; ++d)
    v.outer *= shape[d];
  for (int64_t d = axis + 1; d < static_cast<int64_t>(shape.size()); ++d)
    v.inner *= shape[d];
  return v;
}

/// Copies `size` entries along `axis` starting at `offset` of `in` into `out`
/// starting at `outOffset` (all other dimensions equal).
void copyAlongAxis(const Tensor &in, int64_t axis, int64_t offset, int64_t size,
                   Tensor &out, int64_t outOffset) {
  AxisView vi = viewAt(in.shape, axis), vo = viewAt(out.shape, axis);
  for (int64_t o = 0; o < vi.outer; ++o)
    for (int64_t d = 0; d < size; ++d)
      for (int64_t i = 0; i < vi.inner; ++i)
        out.data[(o * vo.dim + outOffset + d) * vo.inner + i] =
            in.data[(o * vi.dim + offset + d) * vi.inner + i];
}

/// Collectives that need the other ranks' values; the evaluator stops at
/// them and the group (evaluateGroup) supplies their results.
bool isGroupCollective(Operation *op) {
  return isa<AllReduceOp, AllGatherOp, ReduceScatterOp,
             VocabParallelCrossEntropyOp, VocabParallelCrossEntropyGradOp>(op);
}

class Evaluator {
public:
  Evaluator(const TensorMap &inputs, const TensorMap &params, Evaluation &out,
            int64_t rank, int64_t groupSize)
      : inputs(inputs), params(params), out(out), rank(rank),
        groupSize(groupSize) {}

  LogicalResult start(func::FuncOp func) {
    if (func.getNumArguments() != 0) {
      out.error = "function @" + func.getName().str() +
                  " takes arguments; the interpreter only runs functions "
                  "whose inputs come from strata.input and strata.param";
      return failure();
    }
    next = func.getBody().front().begin();
    end = func.getBody().front().end();
    return success();
  }

  /// Evaluates ops until the next group collective (returned in `pending`,
  /// its operand evaluated, its result not) or the end (`pending` null).
  LogicalResult runUntilCollective(Operation *&pending) {
    pending = nullptr;
    for (; next != end; ++next) {
      Operation *op = &*next;
      if (isGroupCollective(op)) {
        current = op;
        if (failed(checkOperands(op)))
          return failure();
        pending = op;
        ++next;
        return success();
      }
      if (failed(eval(op)))
        return failure();
    }
    return success();
  }

  const Tensor &operandOf(Operation *op, unsigned i = 0) {
    return get(op->getOperand(i));
  }

  /// Binds a collective's result computed by the group.
  LogicalResult setCollectiveResult(Operation *op, Tensor t) {
    current = op;
    return set(op->getResult(0), std::move(t));
  }

  LogicalResult failAt(Operation *op, const Twine &message) {
    current = op;
    return fail(message);
  }

private:
  const TensorMap &inputs;
  const TensorMap &params;
  Evaluation &out;
  int64_t rank, groupSize;
  Block::iterator next, end;
  /// Node-based, so references handed out by get() survive later set()s.
  std::unordered_map<const void *, Tensor> values;
  Operation *current = nullptr;

  LogicalResult fail(const Twine &message) {
    std::string loc;
    llvm::raw_string_ostream os(loc);
    current->getLoc().print(os);
    out.error = ("'" + current->getName().getStringRef() + "' at " + loc +
                 ": " + message)
                    .str();
    return failure();
  }

  const Tensor &get(Value v) {
    return values.find(v.getAsOpaquePointer())->second;
  }

  /// Binds `result` to `t` after checking `t`'s shape against the IR type.
  LogicalResult set(Value result, Tensor t) {
    std::vector<int64_t> expected = typeShape(result.getType());
    if (t.shape != expected)
      return fail("computed a result of shape " + formatShape(t.shape) +
                  " but the IR type says " + formatShape(expected));
    values[result.getAsOpaquePointer()] = std::move(t);
    return success();
  }

  LogicalResult requireSameShape(const Tensor &a, const Tensor &b,
                                 const Twine &what) {
    if (a.shape != b.shape)
      return fail(what + " have different shapes " + formatShape(a.shape) +
                  " and " + formatShape(b.shape));
    return success();
  }

  /// Index `x` into a dimension of size `bound`, or failure.
  LogicalResult toIndex(double x, int64_t bound, int64_t &index) {
    if (x != std::floor(x) || x < 0 || x >= static_cast<double>(bound))
      return fail("index " + std::to_string(x) + " is not an integer in [0, " +
                  std::to_string(bound) + ")");
    index = static_cast<int64_t>(x);
    return success();
  }

  /// The table row of id `x` for a table holding rows [rowStart, rowStart +
  /// rows): none for ids outside it; failure for a non-integer id.
  LogicalResult tableRow(double x, int64_t rowStart, int64_t rows,
                         std::optional<int64_t> &row) {
    if (x != std::floor(x))
      return fail("id " + std::to_string(x) + " is not an integer");
    double local = x - static_cast<double>(rowStart);
    row = std::nullopt;
    if (local >= 0 && local < static_cast<double>(rows))
      row = static_cast<int64_t>(local);
    return success();
  }

  LogicalResult normaliseAxis(int64_t axis, int64_t rank, int64_t &result) {
    result = axis < 0 ? axis + rank : axis;
    if (result < 0 || result >= rank)
      return fail("axis " + std::to_string(axis) +
                  " is out of range for rank " + std::to_string(rank));
    return success();
  }

  LogicalResult checkOperands(Operation *op) {
    for (Value operand : op->getOperands())
      if (!values.count(operand.getAsOpaquePointer()))
        return fail("an operand has no value (block arguments and values "
                    "from other functions are not supported)");
    return success();
  }

  LogicalResult eval(Operation *op) {
    current = op;
    if (failed(checkOperands(op)))
      return failure();
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case([&](ParamOp p) { return evalNamed(p, params, "parameter"); })
        .Case([&](InputOp p) { return evalNamed(p, inputs, "input"); })
        .Case([&](ConstantOp c) {
          return set(c.getResult(), Tensor(typeShape(c.getType()),
                                           c.getValue().convertToDouble()));
        })
        .Case([&](EmbeddingOp o) { return evalEmbedding(o); })
        .Case([&](MatmulOp o) { return evalMatmul(o); })
        .Case([&](BiasAddOp o) { return evalBiasAdd(o); })
        .Case([&](AddOp o) {
          return evalBinary(o, [](double a, double b) { return a + b; });
        })
        .Case([&](MulOp o) {
          return evalBinary(o, [](double a, double b) { return a * b; });
        })
        .Case([&](ScaleOp o) {
          double f = o.getFactor().convertToDouble();
          return evalUnary(o, [f](double x) { return f * x; });
        })
        .Case([&](GeluOp o) { return evalUnary(o, gelu); })
        .Case([&](ReluOp o) {
          return evalUnary(o, [](double x) { return x > 0.0 ? x : 0.0; });
        })
        .Case([&](LayerNormOp o) { return evalLayerNorm(o); })
        .Case([&](SoftmaxOp o) { return evalSoftmax(o); })
        .Case([&](ReshapeOp o) { return evalReshape(o); })
        .Case([&](TransposeOp o) { return evalTranspose(o); })
        .Case([&](SplitOp o) { return evalSplit(o); })
        .Case([&](ConcatOp o) { return evalConcat(o); })
        .Case([&](SliceOp o) { return evalSlice(o); })
        .Case([&](CrossEntropyOp o) { return evalCrossEntropy(o); })
        .Case([&](EmbeddingGradOp o) { return evalEmbeddingGrad(o); })
        .Case([&](BiasGradOp o) { return evalBiasGrad(o); })
        .Case(
            [&](GeluGradOp o) { return evalActivationGrad(o, geluDerivative); })
        .Case([&](ReluGradOp o) {
          return evalActivationGrad(
              o, [](double x) { return x > 0.0 ? 1.0 : 0.0; });
        })
        .Case([&](LayerNormGradOp o) { return evalLayerNormGrad(o); })
        .Case([&](SoftmaxGradOp o) { return evalSoftmaxGrad(o); })
        .Case([&](CrossEntropyGradOp o) { return evalCrossEntropyGrad(o); })
        .Case([&](AccumulateGradOp o) { return evalAccumulateGrad(o); })
        .Case([&](ReplicateOp o) {
          return set(o.getResult(), get(o.getInput()));
        })
        .Case([&](TakeSliceOp o) { return evalTakeSlice(o); })
        .Case([&](ClipGradNormOp o) { return evalClipGradNorm(o); })
        // Llama family (LlamaOpsReference.h).
        .Case([&](RmsNormOp o) {
          return set(o.getResult(),
                     rmsNorm(get(o.getInput()), get(o.getWeight()),
                             o.getEpsilon().convertToDouble()));
        })
        .Case([&](RmsNormGradOp o) -> LogicalResult {
          Tensor dx, dw;
          rmsNormGrad(get(o.getGrad()), get(o.getInput()), get(o.getWeight()),
                      o.getEpsilon().convertToDouble(), dx, dw);
          if (failed(set(o.getInputGrad(), std::move(dx))))
            return failure();
          return set(o.getWeightGrad(), std::move(dw));
        })
        .Case([&](RotaryEmbeddingOp o) {
          return set(o.getResult(), rotary(get(o.getInput()),
                                           o.getTheta().convertToDouble(), 1));
        })
        .Case([&](RotaryEmbeddingGradOp o) {
          return set(o.getResult(), rotary(get(o.getGrad()),
                                           o.getTheta().convertToDouble(), -1));
        })
        .Case([&](ElementwiseUnaryOp o) {
          return evalUnary(o, unaryReference(o.getKind()));
        })
        .Case([&](ElementwiseUnaryGradOp o) {
          return evalActivationGrad(o, unaryReferenceDerivative(o.getKind()));
        })
        .Case([&](ElementwiseBinaryOp o) -> LogicalResult {
          // y as [1, outer, 1, inner] under x [lead, outer, mid, inner].
          const Tensor &x = get(o.getLhs()), &y = get(o.getRhs());
          auto [lead, outer, mid, inner] = o.getBroadcast();
          (void)lead;
          StringRef kind = o.getKind();
          Tensor r = x;
          for (int64_t i = 0; i < r.numElements(); ++i) {
            double a = x.data[i],
                   b = y.data[i / (mid * inner) % outer * inner + i % inner];
            r.data[i] = kind == "add"   ? a + b
                        : kind == "sub" ? a - b
                        : kind == "mul" ? a * b
                                        : a / b;
          }
          return set(o.getResult(), std::move(r));
        })
        .Case([&](ReduceMeanOp o) {
          const Tensor &x = get(o.getInput());
          int64_t axis = o.getNormalizedAxis(), n = x.shape[axis];
          int64_t inner = product({x.shape.begin() + axis + 1, x.shape.end()});
          std::vector<int64_t> dims = x.shape;
          dims[axis] = 1;
          Tensor y(dims);
          for (int64_t i = 0; i < x.numElements(); ++i)
            y.data[(i / (n * inner)) * inner + i % inner] += x.data[i] / n;
          return set(o.getResult(), std::move(y));
        })
        .Case([&](ReduceMeanGradOp o) {
          const Tensor &g = get(o.getGrad());
          int64_t axis = static_cast<int64_t>(o.getAxis());
          if (axis < 0)
            axis += g.rank();
          int64_t n = o.getSize();
          int64_t inner = product({g.shape.begin() + axis + 1, g.shape.end()});
          std::vector<int64_t> dims = g.shape;
          dims[axis] = n;
          Tensor dx(dims);
          for (int64_t i = 0; i < dx.numElements(); ++i)
            dx.data[i] = g.data[(i / (n * inner)) * inner + i % inner] / n;
          return set(o.getResult(), std::move(dx));
        })
        .Case([&](SiluOp o) { return evalUnary(o, silu); })
        .Case(
            [&](SiluGradOp o) { return evalActivationGrad(o, siluDerivative); })
        .Case([&](SiluMulOp o) -> LogicalResult {
          const Tensor &g = get(o.getGate()), &u = get(o.getUp());
          if (failed(requireSameShape(g, u, "gate and up")))
            return failure();
          Tensor y = g;
          for (int64_t i = 0; i < y.numElements(); ++i)
            y.data[i] = silu(g.data[i]) * u.data[i];
          return set(o.getResult(), std::move(y));
        })
        .Case([&](SiluMulGradOp o) -> LogicalResult {
          const Tensor &dy = get(o.getGrad()), &g = get(o.getGate()),
                       &u = get(o.getUp());
          Tensor dg = dy, du = dy;
          for (int64_t i = 0; i < dy.numElements(); ++i) {
            dg.data[i] = dy.data[i] * u.data[i] * siluDerivative(g.data[i]);
            du.data[i] = dy.data[i] * silu(g.data[i]);
          }
          if (failed(set(o.getGateGrad(), std::move(dg))))
            return failure();
          return set(o.getUpGrad(), std::move(du));
        })
        .Case([&](RepeatInterleaveOp o) {
          return set(o.getResult(),
                     repeatInterleave(get(o.getInput()), o.getNormalizedAxis(),
                                      o.getRepeats()));
        })
        .Case([&](RepeatInterleaveGradOp o) {
          return set(o.getResult(), repeatInterleaveGrad(get(o.getGrad()),
                                                         o.getNormalizedAxis(),
                                                         o.getRepeats()));
        })
        // Fused attention (AttentionReference.h).
        .Case([&](CausalAttentionOp o) -> LogicalResult {
          Tensor y, lse;
          causalAttention(get(o.getQuery()), get(o.getKey()), get(o.getValue()),
                          o.getScale().convertToDouble(), y, lse);
          if (failed(set(o.getOutput(), std::move(y))))
            return failure();
          return set(o.getLse(), std::move(lse));
        })
        .Case([&](CausalAttentionGradOp o) -> LogicalResult {
          Tensor dq, dk, dv;
          causalAttentionGrad(get(o.getGrad()), get(o.getQuery()),
                              get(o.getKey()), get(o.getValue()),
                              o.getScale().convertToDouble(), dq, dk, dv);
          if (failed(set(o.getQueryGrad(), std::move(dq))) ||
              failed(set(o.getKeyGrad(), std::move(dk))))
            return failure();
          return set(o.getValueGrad(), std::move(dv));
        })
        .Case([&](func::ReturnOp r) {
          for (Value v : r.getOperands())
            out.results.push_back(get(v));
          return success();
        })
        .Default([&](Operation *) {
          return fail("the reference interpreter has no semantics for this "
                      "op");
        });
  }

  template <typename OpT>
  LogicalResult evalNamed(OpT op, const TensorMap &map, StringRef what) {
    auto it = map.find(op.getName().str());
    if (it == map.end())
      return fail("no value supplied for " + what + " \"" + op.getName() +
                  "\"");
    if (product(it->second.shape) != it->second.numElements())
      return fail("the value supplied for " + what + " \"" + op.getName() +
                  "\" has " + std::to_string(it->second.numElements()) +
                  " elements for shape " + formatShape(it->second.shape));
    return set(op.getResult(), it->second);
  }

  LogicalResult evalEmbedding(EmbeddingOp op) {
    const Tensor &table = get(op.getTable()), &ids = get(op.getIds());
    if (table.rank() != 2)
      return fail("table must be rank 2, got " + formatShape(table.shape));
    int64_t vocab = table.shape[0], hidden = table.shape[1];
    std::vector<int64_t> shape = ids.shape;
    shape.push_back(hidden);
    Tensor result(shape);
    for (int64_t i = 0; i < ids.numElements(); ++i) {
      std::optional<int64_t> row;
      if (failed(tableRow(ids.data[i], op.getRowStart(), vocab, row)))
        return failure();
      if (row)
        std::copy_n(table.data.begin() + *row * hidden, hidden,
                    result.data.begin() + i * hidden);
    }
    return set(op.getResult(), std::move(result));
  }

  LogicalResult evalMatmul(MatmulOp op) {
    const Tensor &a = get(op.getLhs()), &b = get(op.getRhs());
    int64_t ra = a.rank(), rb = b.rank();
    if (ra < 2 || rb < 2)
      return fail("operands must have rank >= 2");
    bool ta = op.getTransposeA(), tb = op.getTransposeB();
    int64_t m = a.shape[ta ? ra - 1 : ra - 2],
            k = a.shape[ta ? ra - 2 : ra - 1];
    int64_t kb = b.shape[tb ? rb - 1 : rb - 2],
            n = b.shape[tb ? rb - 2 : rb - 1];
    if (k != kb)
      return fail("contraction sizes differ: " + std::to_string(k) + " and " +
                  std::to_string(kb));
    std::vector<int64_t> batchShape(a.shape.begin(), a.shape.end() - 2);
    bool broadcast = rb == 2;
    if (!broadcast &&
        std::vector<int64_t>(b.shape.begin(), b.shape.end() - 2) != batchShape)
      return fail("rhs " + formatShape(b.shape) +
                  " has neither lhs's batch dimensions nor rank 2");
    std::vector<int64_t> shape = batchShape;
    shape.push_back(m);
    shape.push_back(n);
    Tensor result(shape);
    int64_t batch = product(batchShape);
    for (int64_t p = 0; p < batch; ++p) {
      const double *pa = a.data.data() + p * m * k;
      const double *pb = b.data.data() + (broadcast ? 0 : p * k * n);
      double *pc = result.data.data() + p * m * n;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0.0;
          for (int64_t l = 0; l < k; ++l)
            sum += (ta ? pa[l * m + i] : pa[i * k + l]) *
                   (tb ? pb[j * k + l] : pb[l * n + j]);
          pc[i * n + j] = sum;
        }
    }
    return set(op.getResult(), std::move(result));
  }

  LogicalResult evalBiasAdd(BiasAddOp op) {
    const Tensor &x = get(op.getInput()), &bias = get(op.getBias());
    if (x.rank() < 1 || bias.rank() != 1 || bias.shape[0] != x.shape.back())
      return fail("bias " + formatShape(bias.shape) +
                  " is not a vector of the last dimension of " +
                  formatShape(x.shape));
    Tensor result = x;
    int64_t cols = bias.shape[0];
    for (int64_t i = 0; i < result.numElements(); ++i)
      result.data[i] += bias.data[i % cols];
    return set(op.getResult(), std::move(result));
  }

  template <typename OpT, typename Fn> LogicalResult evalBinary(OpT op, Fn fn) {
    const Tensor &a = get(op.getLhs()), &b = get(op.getRhs());
    if (failed(requireSameShape(a, b, "operands")))
      return failure();
    Tensor result = a;
    for (int64_t i = 0; i < result.numElements(); ++i)
      result.data[i] = fn(a.data[i], b.data[i]);
    return set(op.getResult(), std::move(result));
  }

  template <typename OpT, typename Fn> LogicalResult evalUnary(OpT op, Fn fn) {
    Tensor result = get(op.getInput());
    for (double &x : result.data)
      x = fn(x);
    return set(op.getResult(), std::move(result));
  }

  /// Mean and 1/sqrt(biased variance + epsilon) of row `r` of `x`.
  static std::pair<double, double> rowMoments(const Tensor &x, int64_t r,
                                              int64_t cols, double epsilon) {
    const double *row = x.data.data() + r * cols;
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < cols; ++c)
      mean += row[c];
    mean /= cols;
    for (int64_t c = 0; c < cols; ++c)
      var += (row[c] - mean) * (row[c] - mean);
    var /= cols;
    return {mean, 1.0 / std::sqrt(var + epsilon)};
  }

  LogicalResult checkNormVectors(const Tensor &x,
                                 std::initializer_list<const Tensor *> vecs) {
    if (x.rank() < 1)
      return fail("input must have rank >= 1");
    for (const Tensor *v : vecs)
      if (v->rank() != 1 || v->shape[0] != x.shape.back())
        return fail("gamma/beta " + formatShape(v->shape) +
                    " is not a vector of the last dimension of " +
                    formatShape(x.shape));
    return success();
  }

  LogicalResult evalLayerNorm(LayerNormOp op) {
    const Tensor &x = get(op.getInput()), &gamma = get(op.getGamma()),
                 &beta = get(op.getBeta());
    if (failed(checkNormVectors(x, {&gamma, &beta})))
      return failure();
    double epsilon = op.getEpsilon().convertToDouble();
    int64_t cols = x.shape.back(), rows = x.numElements() / cols;
    Tensor result(x.shape);
    for (int64_t r = 0; r < rows; ++r) {
      auto [mean, rstd] = rowMoments(x, r, cols, epsilon);
      for (int64_t c = 0; c < cols; ++c)
        result.data[r * cols + c] =
            (x.data[r * cols + c] - mean) * rstd * gamma.data[c] + beta.data[c];
    }
    return set(op.getResult(), std::move(result));
  }

  LogicalResult evalSoftmax(SoftmaxOp op) {
    const Tensor &x = get(op.getInput());
    bool causal = op.getCausal();
    double scale = op.getScale().convertToDouble();
    if (x.rank() < 1)
      return fail("input must have rank >= 1");
    int64_t cols = x.shape.back(), rows = x.numElements() / cols;
    if (causal && (x.rank() < 2 || x.shape[x.rank() - 2] != cols))
      return fail("causal softmax needs [..., S, S], got " +
                  formatShape(x.shape));
    Tensor result(x.shape);
    for (int64_t r = 0; r < rows; ++r) {
      // Row r is query position r mod S; keys j > that position are masked.
      int64_t visible = causal ? r % cols + 1 : cols;
      const double *in = x.data.data() + r * cols;
      double *y = result.data.data() + r * cols;
      double max = -INFINITY;
      for (int64_t j = 0; j < visible; ++j)
        max = std::max(max, scale * in[j]);
      double sum = 0.0;
      for (int64_t j = 0; j < visible; ++j)
        sum += y[j] = std::exp(scale * in[j] - max);
      for (int64_t j = 0; j < visible; ++j)
        y[j] /= sum;
    }
    return set(op.getResult(), std::move(result));
  }

  LogicalResult evalReshape(ReshapeOp op) {
    const Tensor &x = get(op.getInput());
    std::vector<int64_t> shape = typeShape(op.getType());
    if (product(shape) != x.numElements())
      return fail("cannot reshape " + formatShape(x.shape) + " to " +
                  formatShape(shape));
    return set(op.getResult(), Tensor(shape, x.data));
  }

  LogicalResult evalTranspose(TransposeOp op) {
    const Tensor &x = get(op.getInput());
    ArrayRef<int64_t> perm = op.getPermutation();
    int64_t rank = x.rank();
    if (static_cast<int64_t>(perm.size()) != rank)
      return fail("permutation size differs from the rank");
    std::vector<int64_t> inStrides(rank, 1), shape(rank);
    for (int64_t d = rank - 2; d >= 0; --d)
      inStrides[d] = inStrides[d + 1] * x.shape[d + 1];
    std::vector<bool> seen(rank, false);
    for (int64_t d = 0; d < rank; ++d) {
      if (perm[d] < 0 || perm[d] >= rank || seen[perm[d]])
        return fail("not a permutation");
      seen[perm[d]] = true;
      shape[d] = x.shape[perm[d]];
    }
    Tensor result(shape);
    // Walk the result in row-major order, keeping the input offset in step.
    std::vector<int64_t> index(rank, 0);
    int64_t offset = 0;
    for (int64_t i = 0; i < result.numElements(); ++i) {
      result.data[i] = x.data[offset];
      for (int64_t d = rank - 1; d >= 0; --d) {
        offset += inStrides[perm[d]];
        if (++index[d] < shape[d])
          break;
        offset -= inStrides[perm[d]] * shape[d];
        index[d] = 0;
      }
    }
    return set(op.getResult(), std::move(result));
  }

  LogicalResult evalSplit(SplitOp op) {
    const Tensor &x = get(op.getInput());
    int64_t axis, parts = op.getNumResults();
    if (failed(normaliseAxis(op.getAxis(), x.rank(), axis)))
      return failure();
    if (parts == 0 || x.shape[axis] % parts != 0)
      return fail("dimension of size " + std::to_string(x.shape[axis]) +
                  " does not split into " + std::to_string(parts) + " parts");
    int64_t size = x.shape[axis] / parts;
    for (int64_t p = 0; p < parts; ++p) {
      std::vector<int64_t> shape = x.shape;
      shape[axis] = size;
      Tensor part(shape);
      copyAlongAxis(x, axis, p * size, size, part, 0);
      if (failed(set(op.getResult(p), std::move(part))))
        return failure();
    }
    return success();
  }

  LogicalResult evalConcat(ConcatOp op) {
    if (op.getInputs().empty())
      return fail("needs at least one input");
    const Tensor &first = get(op.getInputs()[0]);
    int64_t axis;
    if (failed(normaliseAxis(op.getAxis(), first.rank(), axis)))
      return failure();
    std::vector<int64_t> shape = first.shape;
    shape[axis] = 0;
    for (Value v : op.getInputs()) {
      std::vector<int64_t> s = get(v).shape;
      if (static_cast<int64_t>(s.size()) != first.rank())
        return fail("inputs differ in rank");
      s[axis] = first.shape[axis];
      if (s != first.shape)
        return fail("inputs differ outside the concatenation axis");
      shape[axis] += get(v).shape[axis];
    }
    Tensor result(shape);
    int64_t offset = 0;
    for (Value v : op.getInputs()) {
      const Tensor &in = get(v);
      copyAlongAxis(in, axis, 0, in.shape[axis], result, offset);
      offset += in.shape[axis];
    }
    return set(op.getResult(), std::move(result));
  }

  LogicalResult evalSlice(SliceOp op) {
    const Tensor &x = get(op.getInput());
    int64_t axis, offset = op.getOffset(), size = op.getSize();
    if (failed(normaliseAxis(op.getAxis(), x.rank(), axis)))
      return failure();
    if (offset < 0 || size <= 0 || offset + size > x.shape[axis])
      return fail("range is outside the dimension");
    std::vector<int64_t> shape = x.shape;
    shape[axis] = size;
    Tensor result(shape);
    copyAlongAxis(x, axis, offset, size, result, 0);
    return set(op.getResult(), std::move(result));
  }

  /// Checks logits [..., C] against targets [...]; sets rows and classes.
  LogicalResult checkLogits(const Tensor &logits, const Tensor &targets,
                            int64_t &rows, int64_t &classes) {
    if (logits.rank() < 1 ||
        std::vector<int64_t>(logits.shape.begin(), logits.shape.end() - 1) !=
            targets.shape)
      return fail("targets " + formatShape(targets.shape) +
                  " do not match logits " + formatShape(logits.shape));
    classes = logits.shape.back();
    rows = targets.numElements();
    return success();
  }

  /// softmax of one row of logits, in place into `probs`; returns log-sum-exp.
  static double softmaxRow(const double *row, int64_t classes,
                           std::vector<double> &probs) {
    double max = -INFINITY;
    for (int64_t c = 0; c < classes; ++c)
      max = std::max(max, row[c]);
    double sum = 0.0;
    probs.resize(classes);
    for (int64_t c = 0; c < classes; ++c)
      sum += probs[c] = std::exp(row[c] - max);
    for (double &p : probs)
      p /= sum;
    return max + std::log(sum);
  }

  LogicalResult evalCrossEntropy(CrossEntropyOp op) {
    const Tensor &logits = get(op.getLogits()), &targets = get(op.getTargets());
    int64_t rows, classes;
    if (failed(checkLogits(logits, targets, rows, classes)))
      return failure();
    double total = 0.0;
    std::vector<double> probs;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t t;
      if (failed(toIndex(targets.data[r], classes, t)))
        return failure();
      const double *row = logits.data.data() + r * classes;
      total += softmaxRow(row, classes, probs) - row[t];
    }
    return set(op.getResult(), Tensor({}, total / rows));
  }

  LogicalResult evalEmbeddingGrad(EmbeddingGradOp op) {
    const Tensor &grad = get(op.getGrad()), &ids = get(op.getIds());
    std::vector<int64_t> shape = typeShape(op.getType());
    if (shape.size() != 2 || grad.rank() != ids.rank() + 1 ||
        grad.shape.back() != shape[1])
      return fail("grad " + formatShape(grad.shape) + " and ids " +
                  formatShape(ids.shape) + " do not fit a table " +
                  formatShape(shape));
    int64_t hidden = shape[1];
    Tensor result(shape);
    for (int64_t i = 0; i < ids.numElements(); ++i) {
      std::optional<int64_t> row;
      if (failed(tableRow(ids.data[i], op.getRowStart(), shape[0], row)))
        return failure();
      if (row)
        for (int64_t h = 0; h < hidden; ++h)
          result.data[*row * hidden + h] += grad.data[i * hidden + h];
    }
    return set(op.getResult(), std::move(result));
  }

  LogicalResult evalBiasGrad(BiasGradOp op) {
    const Tensor &grad = get(op.getGrad());
    if (grad.rank() < 1)
      return fail("grad must have rank >= 1");
    int64_t cols = grad.shape.back();
    Tensor result({cols});
    for (int64_t i = 0; i < grad.numElements(); ++i)
      result.data[i % cols] += grad.data[i];
    return set(op.getResult(), std::move(result));
  }

  template <typename OpT, typename Fn>
  LogicalResult evalActivationGrad(OpT op, Fn derivative) {
    const Tensor &grad = get(op.getGrad()), &x = get(op.getInput());
    if (failed(requireSameShape(grad, x, "grad and input")))
      return failure();
    Tensor result = grad;
    for (int64_t i = 0; i < result.numElements(); ++i)
      result.data[i] *= derivative(x.data[i]);
    return set(op.getResult(), std::move(result));
  }

  LogicalResult evalLayerNormGrad(LayerNormGradOp op) {
    const Tensor &dy = get(op.getGrad()), &x = get(op.getInput()),
                 &gamma = get(op.getGamma());
    if (failed(requireSameShape(dy, x, "grad and input")) ||
        failed(checkNormVectors(x, {&gamma})))
      return failure();
    double epsilon = op.getEpsilon().convertToDouble();
    int64_t cols = x.shape.back(), rows = x.numElements() / cols;
    Tensor dx(x.shape), dgamma({cols}), dbeta({cols});
    std::vector<double> xhat(cols), dxhat(cols);
    for (int64_t r = 0; r < rows; ++r) {
      auto [mean, rstd] = rowMoments(x, r, cols, epsilon);
      double meanDxhat = 0.0, meanDxhatXhat = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        double g = dy.data[r * cols + c];
        xhat[c] = (x.data[r * cols + c] - mean) * rstd;
        dxhat[c] = g * gamma.data[c];
        dgamma.data[c] += g * xhat[c];
        dbeta.data[c] += g;
        meanDxhat += dxhat[c];
        meanDxhatXhat += dxhat[c] * xhat[c];
      }
      meanDxhat /= cols;
      meanDxhatXhat /= cols;
      for (int64_t c = 0; c < cols; ++c)
        dx.data[r * cols + c] =
            rstd * (dxhat[c] - meanDxhat - xhat[c] * meanDxhatXhat);
    }
    if (failed(set(op.getInputGrad(), std::move(dx))) ||
        failed(set(op.getGammaGrad(), std::move(dgamma))))
      return failure();
    return set(op.getBetaGrad(), std::move(dbeta));
  }

  LogicalResult evalSoftmaxGrad(SoftmaxGradOp op) {
    const Tensor &dy = get(op.getGrad()), &y = get(op.getOutput());
    if (failed(requireSameShape(dy, y, "grad and output")))
      return failure();
    if (y.rank() < 1)
      return fail("output must have rank >= 1");
    double scale = op.getScale().convertToDouble();
    int64_t cols = y.shape.back(), rows = y.numElements() / cols;
    Tensor result(y.shape);
    for (int64_t r = 0; r < rows; ++r) {
      double dot = 0.0;
      for (int64_t c = 0; c < cols; ++c)
        dot += dy.data[r * cols + c] * y.data[r * cols + c];
      for (int64_t c = 0; c < cols; ++c)
        result.data[r * cols + c] =
            scale * y.data[r * cols + c] * (dy.data[r * cols + c] - dot);
    }
    return set(op.getResult(), std::move(result));
  }

  LogicalResult evalCrossEntropyGrad(CrossEntropyGradOp op) {
    const Tensor &logits = get(op.getLogits()), &targets = get(op.getTargets()),
                 &lossGrad = get(op.getLossGrad());
    int64_t rows, classes;
    if (failed(checkLogits(logits, targets, rows, classes)))
      return failure();
    if (lossGrad.numElements() != 1)
      return fail("loss_grad must be a scalar");
    double factor = lossGrad.data[0] / rows;
    Tensor result(logits.shape);
    std::vector<double> probs;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t t;
      if (failed(toIndex(targets.data[r], classes, t)))
        return failure();
      softmaxRow(logits.data.data() + r * classes, classes, probs);
      probs[t] -= 1.0;
      for (int64_t c = 0; c < classes; ++c)
        result.data[r * classes + c] = factor * probs[c];
    }
    return set(op.getResult(), std::move(result));
  }

  LogicalResult evalTakeSlice(TakeSliceOp op) {
    const Tensor &x = get(op.getInput());
    int64_t axis;
    if (failed(normaliseAxis(op.getAxis(), x.rank(), axis)))
      return failure();
    if (op.getSize() != groupSize || x.shape[axis] % groupSize != 0)
      return fail("size " + std::to_string(op.getSize()) + " and dimension " +
                  std::to_string(x.shape[axis]) + " do not fit a group of " +
                  std::to_string(groupSize));
    std::vector<int64_t> shape = x.shape;
    shape[axis] /= groupSize;
    Tensor result(shape);
    copyAlongAxis(x, axis, rank * shape[axis], shape[axis], result, 0);
    return set(op.getResult(), std::move(result));
  }

  LogicalResult evalAccumulateGrad(AccumulateGradOp op) {
    const Tensor &grad = get(op.getGrad());
    auto [it, inserted] = out.grads.try_emplace(op.getParam().str(), grad);
    if (inserted)
      return success();
    if (failed(requireSameShape(it->second, grad,
                                "accumulated gradients of one parameter")))
      return failure();
    for (int64_t i = 0; i < grad.numElements(); ++i)
      it->second.data[i] += grad.data[i];
    return success();
  }

  // torch.nn.utils.clip_grad_norm_: scale by min(1, max_norm / (norm + 1e-6)).
  LogicalResult evalClipGradNorm(ClipGradNormOp op) {
    double sumSquares = 0.0;
    for (auto &[name, g] : out.grads)
      for (double v : g.data)
        sumSquares += v * v;
    double coefficient =
        op.getMaxNorm().convertToDouble() / (std::sqrt(sumSquares) + 1e-6);
    if (coefficient < 1.0)
      for (auto &[name, g] : out.grads)
        for (double &v : g.data)
          v *= coefficient;
    return success();
  }
};

} // namespace

namespace {

/// The result of group collective `ops[r]` (one per rank) for every rank,
/// or an error message.
std::string combine(ArrayRef<Operation *> ops, ArrayRef<const Tensor *> in,
                    std::vector<Tensor> &out) {
  int64_t n = static_cast<int64_t>(ops.size());
  Operation *first = ops[0];
  for (int64_t r = 1; r < n; ++r) {
    if (ops[r]->getName() != first->getName() ||
        ops[r]->getAttrDictionary() != first->getAttrDictionary())
      return "rank " + std::to_string(r) + " reached '" +
             ops[r]->getName().getStringRef().str() +
             "' where rank 0 reached '" +
             first->getName().getStringRef().str() +
             "' (with other attributes): the ranks' collectives disagree";
    if (in[r]->shape != in[0]->shape)
      return "ranks 0 and " + std::to_string(r) + " contribute shapes " +
             formatShape(in[0]->shape) + " and " + formatShape(in[r]->shape);
  }
  Tensor sum = *in[0];
  for (int64_t r = 1; r < n; ++r)
    for (int64_t i = 0; i < sum.numElements(); ++i)
      sum.data[i] += in[r]->data[i];
  if (isa<AllReduceOp>(first)) {
    out.assign(n, sum);
    return "";
  }
  int64_t rank = in[0]->rank(), size, axis;
  if (auto g = dyn_cast<AllGatherOp>(first)) {
    size = g.getSize();
    axis = g.getAxis();
  } else {
    auto s = cast<ReduceScatterOp>(first);
    size = s.getSize();
    axis = s.getAxis();
  }
  axis = axis < 0 ? axis + rank : axis;
  if (size != n || axis < 0 || axis >= rank)
    return "size " + std::to_string(size) + " or axis does not fit a group " +
           "of " + std::to_string(n) + " and operand rank " +
           std::to_string(rank);
  std::vector<int64_t> shape = in[0]->shape;
  if (isa<AllGatherOp>(first)) {
    int64_t part = shape[axis];
    shape[axis] *= n;
    Tensor gathered(shape);
    for (int64_t r = 0; r < n; ++r)
      copyAlongAxis(*in[r], axis, 0, part, gathered, r * part);
    out.assign(n, gathered);
    return "";
  }
  if (shape[axis] % n != 0)
    return "dimension " + std::to_string(shape[axis]) +
           " does not divide into " + std::to_string(n) + " parts";
  shape[axis] /= n;
  out.clear();
  for (int64_t r = 0; r < n; ++r) {
    Tensor part(shape);
    copyAlongAxis(sum, axis, r * shape[axis], shape[axis], part, 0);
    out.push_back(std::move(part));
  }
  return "";
}

} // namespace

namespace {

/// Vocabulary-parallel cross-entropy (and its gradient) over the group:
/// ranks[r] holds logits for classes vocab_start .. vocab_start + valid.
std::string combineVocabParallel(ArrayRef<Operation *> ops,
                                 ArrayRef<std::vector<const Tensor *>> in,
                                 std::vector<Tensor> &out) {
  int64_t n = static_cast<int64_t>(ops.size());
  bool grad = isa<VocabParallelCrossEntropyGradOp>(ops[0]);
  auto range = [&](int64_t r) {
    if (auto f = dyn_cast<VocabParallelCrossEntropyOp>(ops[r]))
      return std::pair<int64_t, int64_t>(f.getVocabStart(), f.getValid());
    auto g = cast<VocabParallelCrossEntropyGradOp>(ops[r]);
    return std::pair<int64_t, int64_t>(g.getVocabStart(), g.getValid());
  };
  for (int64_t r = 0; r < n; ++r)
    if (ops[r]->getName() != ops[0]->getName())
      return "the ranks' collectives disagree: rank " + std::to_string(r) +
             " reached '" + ops[r]->getName().getStringRef().str() + "'";
  const Tensor &targets = *in[0][1];
  int64_t rows = targets.numElements();
  std::vector<double> mx(rows, -std::numeric_limits<double>::infinity()),
      sum(rows, 0.0), target(rows, 0.0);
  auto at = [&](int64_t r, int64_t row, int64_t c) {
    const Tensor &l = *in[r][0];
    return l.data[row * l.shape.back() + c];
  };
  for (int64_t r = 0; r < n; ++r) {
    auto [start, valid] = range(r);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < valid; ++c)
        mx[i] = std::max(mx[i], at(r, i, c));
  }
  for (int64_t r = 0; r < n; ++r) {
    auto [start, valid] = range(r);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t c = 0; c < valid; ++c)
        sum[i] += std::exp(at(r, i, c) - mx[i]);
      int64_t t = static_cast<int64_t>(targets.data[i]) - start;
      if (t >= 0 && t < valid)
        target[i] = at(r, i, t);
    }
  }
  if (!grad) {
    double loss = 0;
    for (int64_t i = 0; i < rows; ++i)
      loss += mx[i] + std::log(sum[i]) - target[i];
    Tensor result(std::vector<int64_t>{});
    result.data[0] = loss / double(rows);
    out.assign(n, result);
    return "";
  }
  out.clear();
  for (int64_t r = 0; r < n; ++r) {
    auto [start, valid] = range(r);
    const Tensor &logits = *in[r][0];
    double seed = in[r][2]->data[0];
    Tensor dl(logits.shape);
    int64_t cols = logits.shape.back();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < valid; ++c) {
        double p = std::exp(at(r, i, c) - mx[i]) / sum[i];
        bool hit = static_cast<int64_t>(targets.data[i]) == start + c;
        dl.data[i * cols + c] = seed * (p - (hit ? 1.0 : 0.0)) / double(rows);
      }
    out.push_back(std::move(dl));
  }
  return "";
}

/// The results of the group's pending collectives, or an error.
template <typename EvaluatorT>
std::string combinePending(ArrayRef<Operation *> ops,
                           ArrayRef<EvaluatorT *> ranks,
                           std::vector<Tensor> &out) {
  if (isa<VocabParallelCrossEntropyOp, VocabParallelCrossEntropyGradOp>(
          ops[0])) {
    std::vector<std::vector<const Tensor *>> in;
    for (auto [r, op] : llvm::enumerate(ops)) {
      in.emplace_back();
      for (unsigned i = 0; i < op->getNumOperands(); ++i)
        in.back().push_back(&ranks[r]->operandOf(op, i));
    }
    return combineVocabParallel(ops, in, out);
  }
  std::vector<const Tensor *> in;
  for (auto [r, op] : llvm::enumerate(ops))
    in.push_back(&ranks[r]->operandOf(op));
  return combine(ops, in, out);
}

} // namespace

std::vector<Evaluation> evaluateGroup(ArrayRef<func::FuncOp> funcs,
                                      ArrayRef<TensorMap> inputs,
                                      ArrayRef<TensorMap> params) {
  int64_t n = static_cast<int64_t>(funcs.size());
  std::vector<Evaluation> outs(n);
  auto failAll = [&](int64_t culprit, const std::string &message) {
    for (int64_t r = 0; r < n; ++r) {
      outs[r].error = "rank " + std::to_string(culprit) + ": " + message;
      outs[r].results.clear();
    }
    return outs;
  };
  if (n == 0 || static_cast<int64_t>(inputs.size()) != n ||
      static_cast<int64_t>(params.size()) != n) {
    outs.assign(std::max<int64_t>(n, 1), Evaluation());
    outs[0].error = "evaluateGroup needs one function, input map and "
                    "parameter map per rank";
    return outs;
  }
  std::vector<std::unique_ptr<Evaluator>> ranks;
  for (int64_t r = 0; r < n; ++r) {
    ranks.push_back(
        std::make_unique<Evaluator>(inputs[r], params[r], outs[r], r, n));
    if (failed(ranks[r]->start(funcs[r])))
      return failAll(r, outs[r].error);
  }
  while (true) {
    std::vector<Operation *> pending(n);
    for (int64_t r = 0; r < n; ++r)
      if (failed(ranks[r]->runUntilCollective(pending[r])))
        return failAll(r, outs[r].error);
    int64_t waiting = llvm::count_if(pending, [](Operation *op) { return op; });
    if (waiting == 0)
      return outs;
    if (waiting != n) {
      int64_t done = llvm::find(pending, nullptr) - pending.begin();
      return failAll(done, "finished while other ranks wait in a collective");
    }
    std::vector<Evaluator *> rankPtrs;
    for (auto &rank : ranks)
      rankPtrs.push_back(rank.get());
    std::vector<Tensor> results;
    std::string error =
        combinePending(ArrayRef<Operation *>(pending),
                       ArrayRef<Evaluator *>(rankPtrs), results);
    if (!error.empty()) {
      (void)ranks[0]->failAt(pending[0], error);
      return failAll(0, outs[0].error);
    }
    for (int64_t r = 0; r < n; ++r)
      if (failed(
              ranks[r]->setCollectiveResult(pending[r], std::move(results[r]))))
        return failAll(r, outs[r].error);
  }
}

Evaluation evaluate(func::FuncOp func, const TensorMap &inputs,
                    const TensorMap &params) {
  Evaluation out;
  Evaluator evaluator(inputs, params, out, /*rank=*/0, /*groupSize=*/1);
  if (succeeded(evaluator.start(func))) {
    Operation *pending = nullptr;
    while (succeeded(evaluator.runUntilCollective(pending)) && pending) {
      // A group of one: every collective passes its operand through.
      std::vector<Tensor> results;
      Evaluator *self = &evaluator;
      std::string error = combinePending(ArrayRef<Operation *>(pending),
                                         ArrayRef<Evaluator *>(self), results);
      if (!error.empty()) {
        (void)evaluator.failAt(pending, error);
        break;
      }
      if (failed(evaluator.setCollectiveResult(pending, std::move(results[0]))))
        break;
    }
  }
  if (!out.ok())
    out.results.clear();
  return out;
}

} // namespace strata::reference
