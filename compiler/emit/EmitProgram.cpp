//===- EmitProgram.cpp - Training-step IR -> runtime program --------------===//
//
// Two phases. First every op of @train_microbatch is lowered to pending
// instructions over *logical* buffers, recording each buffer's lifetime
// (reshapes and contiguous splits are views of their input's bytes and keep
// it alive). Then the memory planner gives every root buffer an offset, and
// the instructions are written through rt::ProgramBuilder, which verifies
// each one against the runtime's opcode schema.
//
// Gradients flow into parameters' gradient buffers without temporaries where
// the kernel can accumulate (matmul with beta = 1, embedding and bias
// gradients, layer-norm gamma/beta gradients), including through the adds
// that sum the gradients of tied weights.
//
//===----------------------------------------------------------------------===//

#include "compiler/emit/EmitProgram.h"

#include "compiler/emit/MemoryPlan.h"
#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "runtime/format/ProgramBuilder.h"
#include "runtime/support/Error.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace strata;
namespace rtf = strata::rt;

namespace {

constexpr int64_t kPersistent = -1;

struct LogicalBuffer {
  std::string name;
  std::vector<int64_t> shape;
  rtf::DType dtype = rtf::DType::F32;
  int root = -1; ///< Index of the buffer whose bytes this views; -1: itself.
  uint64_t byteOffset = 0;
  bool persistent = false;
  int64_t first = INT64_MAX, last = -1;
  uint32_t emitted = rtf::kNoBuffer; ///< Index in the ProgramBuilder.
  uint64_t bytes() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return uint64_t(n) * rtf::dtypeBytes(dtype);
  }
};

struct PendingInstruction {
  rtf::Opcode opcode;
  std::vector<int> operands;
  std::vector<int64_t> ints;
  std::vector<double> floats;
};

struct ParamInfo {
  ParamOp op;
  int value = -1, grad = -1;
  std::vector<int> state;
  bool weightDecay = false;
  bool updated = false;
};

int64_t product(ArrayRef<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

class ProgramEmitter {
public:
  explicit ProgramEmitter(ModuleOp module) : module(module) {}
  FailureOr<rtf::Program> run(const EmitOptions &options, EmitStats *stats);

private:
  // --- buffers ---
  int newBuffer(const std::string &name, ArrayRef<int64_t> shape,
                rtf::DType dtype, bool persistent = false) {
    LogicalBuffer b;
    b.name = name;
    b.shape.assign(shape.begin(), shape.end());
    b.dtype = dtype;
    b.persistent = persistent;
    buffers.push_back(std::move(b));
    return buffers.size() - 1;
  }
  int viewOf(int base, const std::string &name, ArrayRef<int64_t> shape,
             uint64_t extraOffset) {
    int root = buffers[base].root < 0 ? base : buffers[base].root;
    int v = newBuffer(name, shape, buffers[base].dtype,
                      buffers[root].persistent);
    buffers[v].root = root;
    buffers[v].byteOffset = buffers[base].byteOffset + extraOffset;
    return v;
  }
  std::string freshName(Operation *op) {
    return "t" + std::to_string(nextName++) + "." +
           op->getName().stripDialect().str();
  }
  FailureOr<rtf::DType> dtypeOf(Operation *op, Type t) {
    Type e = cast<RankedTensorType>(t).getElementType();
    if (e.isF32())
      return rtf::DType::F32;
    if (e.isInteger(32))
      return rtf::DType::I32;
    return op->emitError("the CPU runtime computes in float32 (and int32 "
                         "token ids); got element type ")
               << e << "; set the model's dtype to float32",
           failure();
  }
  /// The buffer holding `v`, creating it (or using the gradient buffer it is
  /// bound to) on first request.
  FailureOr<int> result(Operation *op, Value v) {
    auto it = valueBuffer.find(v);
    if (it != valueBuffer.end())
      return it->second;
    auto bound = directBind.find(v);
    if (bound != directBind.end())
      return valueBuffer[v] = bound->second;
    FailureOr<rtf::DType> dt = dtypeOf(op, v.getType());
    if (failed(dt))
      return failure();
    int b = newBuffer(freshName(op), cast<RankedTensorType>(v.getType()).getShape(), *dt);
    return valueBuffer[v] = b;
  }
  int operand(Value v) { return valueBuffer.lookup(v); }
  bool accumulates(Value v) { return directBind.count(v) != 0; }

  void emit(rtf::Opcode opcode, std::vector<int> operands,
            std::vector<int64_t> ints = {}, std::vector<double> floats = {}) {
    int64_t pos = pending.size();
    for (int b : operands) {
      LogicalBuffer &root =
          buffers[buffers[b].root < 0 ? b : buffers[b].root];
      root.first = std::min(root.first, pos);
      root.last = std::max(root.last, pos);
    }
    pending.push_back({opcode, std::move(operands), std::move(ints),
                       std::move(floats)});
  }
  /// Ops that write their result with `+=` must start from zero unless the
  /// result is a gradient buffer (zeroed once per step).
  void zeroUnlessAccumulating(Value v, int buffer) {
    if (!accumulates(v))
      emit(rtf::Opcode::Fill, {buffer}, {}, {0.0});
  }

  // --- phases ---
  LogicalResult collectParams();
  LogicalResult bindGradients(func::FuncOp step);
  void bindValue(Value v, int grad, Operation *sink);
  LogicalResult lowerOp(Operation *op);
  LogicalResult lowerOptimizer(func::FuncOp opt);
  LogicalResult lowerMatmul(MatmulOp op);

  ModuleOp module;
  std::vector<LogicalBuffer> buffers;
  std::vector<PendingInstruction> pending;
  llvm::DenseMap<Value, int> valueBuffer;
  llvm::DenseMap<Value, int> directBind;
  /// Explicit `grad += v` instructions, emitted where `at` would have been.
  llvm::DenseMap<Operation *, SmallVector<std::pair<Value, int>>> accumulateAt;
  llvm::DenseSet<Operation *> absorbed;
  llvm::StringMap<ParamInfo> params;
  std::vector<std::string> paramOrder;
  /// Saved forward statistics the gradient ops reuse: layer_norm -> (mean,
  /// rstd), cross_entropy -> logsumexp.
  llvm::DenseMap<Operation *, std::pair<int, int>> savedStats;
  int tokens = -1, targets = -1, positions = -1, loss = -1;
  int nextName = 0;
  rtf::OptimizerKind optimizerKind = rtf::OptimizerKind::AdamW;
  double weightDecay = 0.0;
  bool sawUpdate = false;
  double clip = 0.0;
};

LogicalResult ProgramEmitter::collectParams() {
  WalkResult r = module.walk([&](ParamOp p) {
    auto it = params.find(p.getName());
    if (it != params.end()) {
      if (it->second.op.getType() != p.getType()) {
        p.emitError("parameter '") << p.getName()
                                   << "' is declared twice with different types";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    }
    auto shape = cast<RankedTensorType>(p.getType()).getShape();
    if (failed(dtypeOf(p, p.getType())))
      return WalkResult::interrupt();
    ParamInfo info;
    info.op = p;
    std::string name = p.getName().str();
    info.value = newBuffer(name, shape, rtf::DType::F32, true);
    info.grad = newBuffer(name + ".grad", shape, rtf::DType::F32, true);
    params[name] = info;
    paramOrder.push_back(name);
    return WalkResult::advance();
  });
  return failure(r.wasInterrupted());
}

/// Routes the gradient `v` of a parameter into its gradient buffer `grad`.
/// Single-use values computed by accumulating kernels write there directly;
/// single-use sums are split into their terms.
void ProgramEmitter::bindValue(Value v, int grad, Operation *sink) {
  Operation *def = v.getDefiningOp();
  if (def && v.hasOneUse()) {
    if (auto add = dyn_cast<AddOp>(def)) {
      absorbed.insert(add);
      bool twice = add.getLhs() == add.getRhs();
      for (Value term : add->getOperands()) {
        if (!twice && term.hasOneUse())
          bindValue(term, grad, add);
        else
          accumulateAt[add].push_back({term, grad});
      }
      return;
    }
    if (isa<MatmulOp, EmbeddingGradOp, BiasGradOp, LayerNormGradOp>(def) &&
        !(isa<LayerNormGradOp>(def) &&
          v == cast<LayerNormGradOp>(def).getInputGrad())) {
      directBind[v] = grad;
      return;
    }
  }
  accumulateAt[sink].push_back({v, grad});
}

LogicalResult ProgramEmitter::bindGradients(func::FuncOp step) {
  for (auto acc : step.getOps<AccumulateGradOp>()) {
    auto it = params.find(acc.getParam());
    if (it == params.end())
      return acc.emitError("accumulates into unknown parameter '")
             << acc.getParam() << "'";
    if (acc.getGrad().getType() != it->second.op.getType())
      return acc.emitError("gradient type ")
             << acc.getGrad().getType() << " differs from parameter type "
             << it->second.op.getType();
    bindValue(acc.getGrad(), it->second.grad, acc);
  }
  return success();
}

LogicalResult ProgramEmitter::lowerMatmul(MatmulOp op) {
  auto lhs = cast<RankedTensorType>(op.getLhs().getType());
  auto rhs = cast<RankedTensorType>(op.getRhs().getType());
  bool ta = op.getTransposeA(), tb = op.getTransposeB();
  int64_t lr = lhs.getRank();
  int64_t m = lhs.getDimSize(ta ? lr - 1 : lr - 2);
  int64_t k = lhs.getDimSize(ta ? lr - 2 : lr - 1);
  int64_t n = rhs.getDimSize(tb ? rhs.getRank() - 2 : rhs.getRank() - 1);
  int64_t batch = product(lhs.getShape().drop_back(2));
  bool broadcast = rhs.getRank() == 2 && batch > 1;
  if (broadcast && !ta) {
    // A weight shared by every batch entry: one GEMM over all rows.
    m *= batch;
    batch = 1;
    broadcast = false;
  }
  FailureOr<int> out = result(op, op.getResult());
  if (failed(out))
    return failure();
  emit(rtf::Opcode::Matmul, {operand(op.getLhs()), operand(op.getRhs()), *out},
       {batch, m, n, k, ta, tb, broadcast},
       {1.0, accumulates(op.getResult()) ? 1.0 : 0.0});
  return success();
}

LogicalResult ProgramEmitter::lowerOp(Operation *op) {
  auto lastDim = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getShape().back();
  };
  auto numel = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getNumElements();
  };
  auto out = [&](Value v) -> FailureOr<int> { return result(op, v); };
#define STRATA_OUT(var, value)                                                 \
  FailureOr<int> var##OrErr = out(value);                                      \
  if (failed(var##OrErr))                                                      \
    return failure();                                                          \
  int var = *var##OrErr;

  LogicalResult status =
      llvm::TypeSwitch<Operation *, LogicalResult>(op)
          .Case([&](ParamOp p) {
            valueBuffer[p] = params[p.getName()].value;
            return success();
          })
          .Case([&](InputOp in) -> LogicalResult {
            auto t = cast<RankedTensorType>(in.getType());
            if (in.getName() != "tokens" && in.getName() != "targets" &&
                in.getName() != "positions")
              return in.emitError("the runtime feeds the inputs 'tokens', "
                                  "'targets' and 'positions' only; got '")
                     << in.getName() << "'";
            if (!t.getElementType().isInteger(32) || t.getRank() != 2)
              return in.emitError("input '")
                     << in.getName() << "' must be i32 [batch, seq_len]";
            int &slot = in.getName() == "tokens"    ? tokens
                        : in.getName() == "targets" ? targets
                                                    : positions;
            if (slot < 0)
              slot = newBuffer(in.getName().str(), t.getShape(),
                               rtf::DType::I32, true);
            valueBuffer[in] = slot;
            return success();
          })
          .Case([&](ConstantOp c) -> LogicalResult {
            // A loss seed is folded into cross_entropy_bwd's scale.
            if (llvm::all_of(c->getUsers(), [](Operation *u) {
                  return isa<CrossEntropyGradOp>(u);
                }))
              return success();
            STRATA_OUT(o, c.getResult());
            emit(rtf::Opcode::Fill, {o}, {},
                 {c.getValue().convertToDouble()});
            return success();
          })
          .Case([&](EmbeddingOp e) -> LogicalResult {
            STRATA_OUT(o, e.getResult());
            auto table = cast<RankedTensorType>(e.getTable().getType());
            emit(rtf::Opcode::EmbeddingFwd,
                 {operand(e.getIds()), operand(e.getTable()), o},
                 {table.getDimSize(0), table.getDimSize(1),
                  int64_t(e.getRowStart())});
            return success();
          })
          .Case([&](EmbeddingGradOp e) -> LogicalResult {
            STRATA_OUT(o, e.getResult());
            zeroUnlessAccumulating(e.getResult(), o);
            auto table = cast<RankedTensorType>(e.getType());
            emit(rtf::Opcode::EmbeddingBwd,
                 {operand(e.getIds()), operand(e.getGrad()), o},
                 {table.getDimSize(0), table.getDimSize(1),
                  int64_t(e.getRowStart())});
            return success();
          })
          .Case([&](MatmulOp m) { return lowerMatmul(m); })
          .Case([&](BiasAddOp b) -> LogicalResult {
            STRATA_OUT(o, b.getResult());
            emit(rtf::Opcode::BiasAdd,
                 {operand(b.getInput()), operand(b.getBias()), o},
                 {lastDim(b.getInput())});
            return success();
          })
          .Case([&](BiasGradOp b) -> LogicalResult {
            STRATA_OUT(o, b.getResult());
            zeroUnlessAccumulating(b.getResult(), o);
            emit(rtf::Opcode::BiasGrad, {operand(b.getGrad()), o},
                 {lastDim(b.getGrad())});
            return success();
          })
          .Case([&](AddOp a) -> LogicalResult {
            if (absorbed.count(a))
              return success();
            STRATA_OUT(o, a.getResult());
            emit(rtf::Opcode::Add, {operand(a.getLhs()), operand(a.getRhs()), o});
            return success();
          })
          .Case([&](MulOp a) -> LogicalResult {
            STRATA_OUT(o, a.getResult());
            emit(rtf::Opcode::Mul, {operand(a.getLhs()), operand(a.getRhs()), o});
            return success();
          })
          .Case([&](ScaleOp s) -> LogicalResult {
            STRATA_OUT(o, s.getResult());
            emit(rtf::Opcode::Scale, {operand(s.getInput()), o}, {},
                 {s.getFactor().convertToDouble()});
            return success();
          })
          .Case([&](GeluOp g) -> LogicalResult {
            STRATA_OUT(o, g.getResult());
            emit(rtf::Opcode::GeluFwd, {operand(g.getInput()), o});
            return success();
          })
          .Case([&](GeluGradOp g) -> LogicalResult {
            STRATA_OUT(o, g.getResult());
            emit(rtf::Opcode::GeluBwd,
                 {operand(g.getInput()), operand(g.getGrad()), o});
            return success();
          })
          .Case([&](ReluOp g) -> LogicalResult {
            STRATA_OUT(o, g.getResult());
            emit(rtf::Opcode::ReluFwd, {operand(g.getInput()), o});
            return success();
          })
          .Case([&](ReluGradOp g) -> LogicalResult {
            STRATA_OUT(o, g.getResult());
            emit(rtf::Opcode::ReluBwd,
                 {operand(g.getInput()), operand(g.getGrad()), o});
            return success();
          })
          .Case([&](LayerNormOp l) -> LogicalResult {
            STRATA_OUT(o, l.getResult());
            int64_t n = lastDim(l.getInput());
            int64_t rows = numel(l.getInput()) / n;
            int mean = newBuffer(freshName(l) + ".mean", {rows}, rtf::DType::F32);
            int rstd = newBuffer(freshName(l) + ".rstd", {rows}, rtf::DType::F32);
            savedStats[l] = {mean, rstd};
            emit(rtf::Opcode::LayerNormFwd,
                 {operand(l.getInput()), operand(l.getGamma()),
                  operand(l.getBeta()), o, mean, rstd},
                 {n}, {l.getEpsilon().convertToDouble()});
            return success();
          })
          .Case([&](LayerNormGradOp l) -> LogicalResult {
            // The statistics of the forward layer_norm of the same input.
            std::pair<int, int> stats{-1, -1};
            for (Operation *user : l.getInput().getUsers())
              if (auto fwd = dyn_cast<LayerNormOp>(user))
                if (fwd.getGamma() == l.getGamma() && savedStats.count(fwd))
                  stats = savedStats[fwd];
            if (stats.first < 0)
              return l.emitError("has no forward strata.layer_norm of the "
                                 "same input and gamma to take statistics "
                                 "from");
            STRATA_OUT(dx, l.getInputGrad());
            STRATA_OUT(dg, l.getGammaGrad());
            STRATA_OUT(db, l.getBetaGrad());
            zeroUnlessAccumulating(l.getGammaGrad(), dg);
            zeroUnlessAccumulating(l.getBetaGrad(), db);
            emit(rtf::Opcode::LayerNormBwd,
                 {operand(l.getGrad()), operand(l.getInput()),
                  operand(l.getGamma()), stats.first, stats.second, dx, dg, db},
                 {lastDim(l.getInput())});
            return success();
          })
          .Case([&](SoftmaxOp s) -> LogicalResult {
            STRATA_OUT(o, s.getResult());
            emit(rtf::Opcode::SoftmaxFwd, {operand(s.getInput()), o},
                 {lastDim(s.getInput()), s.getCausal()},
                 {s.getScale().convertToDouble()});
            return success();
          })
          .Case([&](SoftmaxGradOp s) -> LogicalResult {
            STRATA_OUT(o, s.getResult());
            emit(rtf::Opcode::SoftmaxBwd,
                 {operand(s.getOutput()), operand(s.getGrad()), o},
                 {lastDim(s.getGrad())}, {s.getScale().convertToDouble()});
            return success();
          })
          .Case([&](CrossEntropyOp c) -> LogicalResult {
            STRATA_OUT(o, c.getResult());
            int64_t vocab = lastDim(c.getLogits());
            int lse = newBuffer(freshName(c) + ".lse",
                                {numel(c.getLogits()) / vocab}, rtf::DType::F32);
            savedStats[c] = {lse, -1};
            emit(rtf::Opcode::CrossEntropyFwd,
                 {operand(c.getLogits()), operand(c.getTargets()), o, lse},
                 {vocab});
            return success();
          })
          .Case([&](CrossEntropyGradOp c) -> LogicalResult {
            auto seed = c.getLossGrad().getDefiningOp<ConstantOp>();
            if (!seed)
              return c.emitError("the loss gradient must be a "
                                 "strata.constant (the autodiff seed)");
            int lse = -1;
            for (Operation *user : c.getLogits().getUsers())
              if (auto fwd = dyn_cast<CrossEntropyOp>(user))
                if (fwd.getTargets() == c.getTargets() && savedStats.count(fwd))
                  lse = savedStats[fwd].first;
            if (lse < 0)
              return c.emitError("has no forward strata.cross_entropy of the "
                                 "same logits and targets");
            STRATA_OUT(o, c.getResult());
            int64_t vocab = lastDim(c.getLogits());
            double rows = double(numel(c.getLogits()) / vocab);
            emit(rtf::Opcode::CrossEntropyBwd,
                 {operand(c.getLogits()), operand(c.getTargets()), lse, o},
                 {vocab}, {seed.getValue().convertToDouble() / rows});
            return success();
          })
          .Case([&](ReshapeOp r) -> LogicalResult {
            valueBuffer[r.getResult()] =
                viewOf(operand(r.getInput()), freshName(r),
                       cast<RankedTensorType>(r.getType()).getShape(), 0);
            return success();
          })
          .Case([&](TransposeOp t) -> LogicalResult {
            auto in = cast<RankedTensorType>(t.getInput().getType());
            if (in.getRank() > 5)
              return t.emitError("the runtime transposes tensors of rank <= 5");
            STRATA_OUT(o, t.getResult());
            std::vector<int64_t> ints{in.getRank()};
            ints.insert(ints.end(), in.getShape().begin(), in.getShape().end());
            ints.insert(ints.end(), t.getPermutation().begin(),
                        t.getPermutation().end());
            emit(rtf::Opcode::Transpose, {operand(t.getInput()), o}, ints);
            return success();
          })
          .Case([&](SplitOp s) -> LogicalResult {
            auto in = cast<RankedTensorType>(s.getInput().getType());
            int64_t axis = s.getNormalizedAxis();
            int64_t outer = product(in.getShape().take_front(axis));
            int64_t big = in.getDimSize(axis);
            int64_t inner = product(in.getShape().drop_front(axis + 1));
            int64_t small = big / s.getNumResults();
            for (auto [i, r] : llvm::enumerate(s.getResults())) {
              auto shape = cast<RankedTensorType>(r.getType()).getShape();
              if (outer == 1) {
                // Contiguous parts: views, no copy.
                valueBuffer[r] = viewOf(operand(s.getInput()), freshName(s),
                                        shape,
                                        i * small * inner *
                                            rtf::dtypeBytes(buffers[operand(s.getInput())].dtype));
                continue;
              }
              STRATA_OUT(o, r);
              emit(rtf::Opcode::SliceCopy, {operand(s.getInput()), o},
                   {outer, big, small, int64_t(i) * small, inner});
            }
            return success();
          })
          .Case([&](SliceOp s) -> LogicalResult {
            auto in = cast<RankedTensorType>(s.getInput().getType());
            int64_t axis = s.getNormalizedAxis();
            STRATA_OUT(o, s.getResult());
            emit(rtf::Opcode::SliceCopy, {operand(s.getInput()), o},
                 {product(in.getShape().take_front(axis)), in.getDimSize(axis),
                  int64_t(s.getSize()), int64_t(s.getOffset()),
                  product(in.getShape().drop_front(axis + 1))});
            return success();
          })
          .Case([&](ConcatOp c) -> LogicalResult {
            auto outType = cast<RankedTensorType>(c.getType());
            int64_t axis = c.getNormalizedAxis();
            STRATA_OUT(o, c.getResult());
            int64_t start = 0;
            for (Value in : c.getInputs()) {
              int64_t size = cast<RankedTensorType>(in.getType()).getDimSize(axis);
              emit(rtf::Opcode::SliceInsert, {operand(in), o},
                   {product(outType.getShape().take_front(axis)),
                    outType.getDimSize(axis), size, start,
                    product(outType.getShape().drop_front(axis + 1)), 0});
              start += size;
            }
            return success();
          })
          .Case([&](AccumulateGradOp) { return success(); })
          .Case([&](func::ReturnOp r) -> LogicalResult {
            if (r.getNumOperands() != 1)
              return r.emitError("@train_microbatch must return the loss only");
            loss = operand(r.getOperand(0));
            return success();
          })
          .Default([&](Operation *other) {
            return other->emitError("the CPU runtime has no lowering for this "
                                    "op");
          });
#undef STRATA_OUT
  if (failed(status))
    return failure();
  // Explicit accumulations that were due where this op stands.
  auto it = accumulateAt.find(op);
  if (it != accumulateAt.end())
    for (auto [v, grad] : it->second)
      emit(rtf::Opcode::Accumulate, {operand(v), grad});
  return success();
}

LogicalResult ProgramEmitter::lowerOptimizer(func::FuncOp opt) {
  for (Operation &op : opt.getBody().front().without_terminator()) {
    auto mark = [&](StringRef name, double wd) -> LogicalResult {
      auto it = params.find(name);
      if (it == params.end())
        return op.emitError("updates unknown parameter '") << name << "'";
      it->second.updated = true;
      it->second.weightDecay = wd != 0.0;
      if (wd != 0.0) {
        if (weightDecay != 0.0 && weightDecay != wd)
          return op.emitError("the runtime applies one weight decay value to "
                              "all decayed parameters; got ")
                 << weightDecay << " and " << wd;
        weightDecay = wd;
      }
      return success();
    };
    LogicalResult r =
        llvm::TypeSwitch<Operation *, LogicalResult>(&op)
            .Case([&](ClipGradNormOp c) {
              clip = c.getMaxNorm().convertToDouble();
              return success();
            })
            .Case([&](AdamWUpdateOp u) {
              optimizerKind = rtf::OptimizerKind::AdamW;
              sawUpdate = true;
              return mark(u.getParam(), u.getWeightDecay().convertToDouble());
            })
            .Case([&](SgdUpdateOp u) {
              optimizerKind = rtf::OptimizerKind::Sgd;
              sawUpdate = true;
              return mark(u.getParam(), u.getWeightDecay().convertToDouble());
            })
            .Default([&](Operation *o) {
              return o->emitError("is not an optimizer op");
            });
    if (failed(r))
      return failure();
  }
  for (const std::string &name : paramOrder)
    if (!params[name].updated)
      return params[name].op.emitError("parameter '")
             << name << "' has no update in @optimizer_step";
  return success();
}

int64_t getInt(DictionaryAttr d, StringRef key, int64_t fallback) {
  if (auto a = d ? d.getAs<IntegerAttr>(key) : nullptr)
    return a.getInt();
  return fallback;
}
double getF64(DictionaryAttr d, StringRef key, double fallback) {
  if (auto a = d ? d.getAs<FloatAttr>(key) : nullptr)
    return a.getValueAsDouble();
  return fallback;
}
std::string getStr(DictionaryAttr d, StringRef key, StringRef fallback) {
  if (auto a = d ? d.getAs<StringAttr>(key) : nullptr)
    return a.getValue().str();
  return fallback.str();
}

FailureOr<rtf::Program> ProgramEmitter::run(const EmitOptions &options,
                                            EmitStats *stats) {
  auto step = module.lookupSymbol<func::FuncOp>("train_microbatch");
  auto opt = module.lookupSymbol<func::FuncOp>("optimizer_step");
  if (!step || !opt)
    return module.emitError("emission needs @train_microbatch and "
                            "@optimizer_step (run strata-autodiff and "
                            "strata-build-optimizer first)"),
           failure();
  auto model = module->getAttrOfType<DictionaryAttr>("strata.model");
  auto training = module->getAttrOfType<DictionaryAttr>("strata.training");

  if (failed(collectParams()) || failed(bindGradients(step)) ||
      failed(lowerOptimizer(opt)))
    return failure();
  for (Operation &op : step.getBody().front())
    if (failed(lowerOp(&op)))
      return failure();
  if (tokens < 0 || targets < 0 || loss < 0)
    return step.emitError("the training step must read inputs 'tokens' and "
                          "'targets' and return the loss"),
           failure();

  // Optimizer state after the step's buffers are known.
  for (const std::string &name : paramOrder) {
    ParamInfo &p = params[name];
    auto shape = buffers[p.value].shape;
    if (optimizerKind == rtf::OptimizerKind::AdamW) {
      p.state.push_back(newBuffer(name + ".exp_avg", shape, rtf::DType::F32, true));
      p.state.push_back(newBuffer(name + ".exp_avg_sq", shape, rtf::DType::F32, true));
    } else {
      p.state.push_back(newBuffer(name + ".momentum", shape, rtf::DType::F32, true));
    }
  }

  // --- memory plan over root buffers ---
  int64_t end = pending.size() + 1;
  std::vector<MemoryRequest> requests;
  std::vector<int> roots;
  uint64_t persistentBytes = 0;
  for (auto [i, b] : llvm::enumerate(buffers)) {
    if (b.root >= 0)
      continue;
    MemoryRequest r;
    r.bytes = b.bytes();
    if (b.persistent) {
      r.firstUse = kPersistent;
      r.lastUse = end;
      persistentBytes += b.bytes();
    } else if (b.last < 0) {
      r.firstUse = r.lastUse = 0; // never used: any bytes will do
    } else {
      r.firstUse = b.first;
      r.lastUse = b.last;
    }
    // The loss is read by the executor after the micro-batch.
    if (int(i) == (buffers[loss].root < 0 ? loss : buffers[loss].root))
      r.lastUse = end;
    requests.push_back(r);
    roots.push_back(i);
  }
  MemoryPlanResult plan = planMemory(requests, rtf::kBufferAlignment);

  // --- write the program ---
  rtf::ModelMeta meta;
  meta.family = getStr(model, "family", "graph");
  meta.vocab = getInt(model, "vocab", 0);
  meta.seqLen = buffers[tokens].shape[1];
  meta.microBatch = buffers[tokens].shape[0];
  meta.globalBatch = getInt(training, "global_batch", meta.microBatch);
  if (meta.globalBatch % meta.microBatch != 0)
    return module.emitError("global_batch ")
               << meta.globalBatch << " is not a multiple of the micro-batch "
               << meta.microBatch,
           failure();
  meta.numMicrobatches = meta.globalBatch / meta.microBatch;
  meta.seed = getInt(training, "seed", 0);
  meta.planDescription = options.planDescription;
  if (meta.vocab <= 0)
    return module.emitError("the module's strata.model has no vocab"),
           failure();

  rtf::TrainConfig train;
  auto optAttr = training ? training.getAs<DictionaryAttr>("optimizer") : nullptr;
  auto sched = training ? training.getAs<DictionaryAttr>("schedule") : nullptr;
  train.optimizer = optimizerKind;
  train.lr = getF64(optAttr, "lr", 1e-3);
  train.momentum = getF64(optAttr, "momentum", 0.0);
  train.beta1 = getF64(optAttr, "beta1", 0.9);
  train.beta2 = getF64(optAttr, "beta2", 0.999);
  train.eps = getF64(optAttr, "eps", 1e-8);
  train.weightDecay = weightDecay;
  std::string kind = getStr(sched, "kind", "constant");
  train.schedule = kind == "cosine"   ? rtf::LrScheduleKind::Cosine
                   : kind == "linear" ? rtf::LrScheduleKind::Linear
                                      : rtf::LrScheduleKind::Constant;
  train.warmupSteps = getInt(sched, "warmup_steps", 0);
  train.minLr = getF64(sched, "min_lr", 0.0);
  train.totalSteps = getInt(sched, "total_steps", 0);
  train.gradClip = clip;
  train.defaultSteps = train.totalSteps > 0 ? train.totalSteps : 10;

  try {
    rtf::ProgramBuilder builder(meta, train);
    for (auto [root, offset] : llvm::zip(roots, plan.offsets)) {
      LogicalBuffer &b = buffers[root];
      b.emitted = builder.addBufferAt(b.name, b.shape, b.dtype, offset);
    }
    for (LogicalBuffer &b : buffers)
      if (b.root >= 0)
        b.emitted = builder.addAlias(b.name, buffers[b.root].emitted, b.shape,
                                     b.byteOffset);
    for (const std::string &name : paramOrder) {
      ParamInfo &p = params[name];
      rtf::ParamDesc desc;
      desc.name = name;
      desc.value = buffers[p.value].emitted;
      desc.grad = buffers[p.grad].emitted;
      for (int s : p.state)
        desc.state.push_back(buffers[s].emitted);
      StringRef init = p.op.getInit();
      desc.init = init == "ones"    ? rtf::InitKind::Ones
                  : init == "zeros" ? rtf::InitKind::Zeros
                                    : rtf::InitKind::Normal;
      desc.initStd = p.op.getInitStd().convertToDouble();
      desc.weightDecay = p.weightDecay;
      builder.addParamWithBuffers(desc);
    }
    builder.setInputs(buffers[tokens].emitted, buffers[targets].emitted,
                      buffers[loss].emitted);
    if (positions >= 0)
      builder.setPositions(buffers[positions].emitted);
    builder.emitZeroGrads();
    for (PendingInstruction &inst : pending) {
      std::vector<uint32_t> ops;
      for (int b : inst.operands)
        ops.push_back(buffers[b].emitted);
      builder.emit(rtf::SequenceKind::Microbatch, inst.opcode, ops, inst.ints,
                   inst.floats);
    }
    builder.emitOptimizerStep();
    rtf::Program program = builder.finish();
    if (stats) {
      stats->arenaBytes = program.ranks[0].arenaBytes;
      stats->persistentBytes = persistentBytes;
      stats->unsharedBytes = plan.unsharedBytes;
      stats->numInstructions = pending.size();
    }
    return program;
  } catch (const rtf::RuntimeError &e) {
    return module.emitError("internal error while emitting the program: ")
               << e.what(),
           failure();
  }
}

} // namespace

FailureOr<rtf::Program> strata::emitProgram(ModuleOp module,
                                            const EmitOptions &options,
                                            EmitStats *stats) {
  return ProgramEmitter(module).run(options, stats);
}
