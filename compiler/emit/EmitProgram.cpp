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
  /// Only in the last micro-batch of a step (data-parallel reductions).
  bool lastOnly = false;
};

/// A contiguous run [offset, offset + size) of a parameter's flat elements
/// that this rank updates, with its optimizer state.
struct UpdatePiece {
  int value = -1, grad = -1;
  std::vector<int> state;
  int64_t paramOffset = 0; ///< Within the parameter's flat elements.
};

/// Gradients (and, under ZeRO, values) of a bucket's parameters laid out
/// back to back in one flat buffer, padded to a multiple of the group size,
/// so that one collective reduces them all.
struct Bucket {
  std::string group;
  bool scatter = false; ///< reduce-scatter (ZeRO >= 1) instead of all-reduce
  std::vector<std::string> params;
  std::vector<int64_t> offsets; ///< Element offset of each param.
  int64_t elements = 0;         ///< Padded total.
  int flatGrad = -1, flatValue = -1, gradShard = -1;
  int slot = -1;
};

struct ParamInfo {
  ParamOp op;
  int value = -1, grad = -1;
  std::vector<UpdatePiece> pieces;
  bool weightDecay = false;
  bool updated = false;
  /// Whether this rank's copy counts toward the global gradient norm (each
  /// gradient element is counted on exactly one rank).
  bool normOwner = true;
  int bucket = -1;
  std::vector<int> emptyState; ///< when this rank updates none of it
};

int64_t product(ArrayRef<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

class ProgramEmitter {
public:
  ProgramEmitter(ModuleOp module, const ParallelContext &parallel)
      : module(module), parallel(parallel) {}
  LogicalResult run(rtf::ProgramBuilder &builder, EmitStats *stats);

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
            std::vector<int64_t> ints = {}, std::vector<double> floats = {},
            bool lastOnly = false) {
    int64_t pos = pending.size();
    for (int b : operands) {
      LogicalBuffer &root =
          buffers[buffers[b].root < 0 ? b : buffers[b].root];
      root.first = std::min(root.first, pos);
      root.last = std::max(root.last, pos);
    }
    pending.push_back({opcode, std::move(operands), std::move(ints),
                       std::move(floats), lastOnly});
  }
  FailureOr<int64_t> groupId(Operation *op, StringRef axis) {
    auto it = parallel.groupIds.find(axis.str());
    if (it == parallel.groupIds.end())
      return op->emitError("no process group '")
                 << axis << "' in this plan (the partition passes and the "
                 << "plan disagree)",
             failure();
    return it->second;
  }
  /// Ops that write their result with `+=` must start from zero unless the
  /// result is a gradient buffer (zeroed once per step).
  void zeroUnlessAccumulating(Value v, int buffer) {
    if (!accumulates(v))
      emit(rtf::Opcode::Fill, {buffer}, {}, {0.0});
  }

  // --- phases ---
  LogicalResult collectBuckets(func::FuncOp step);
  LogicalResult collectParams();
  LogicalResult bindGradients(func::FuncOp step);
  LogicalResult lowerCollective(Operation *op, bool &handled);
  void planUpdates();
  void emitUpdate(rtf::ProgramBuilder &builder);
  void bindValue(Value v, int grad, Operation *sink);
  LogicalResult lowerOp(Operation *op);
  LogicalResult lowerOptimizer(func::FuncOp opt);
  LogicalResult lowerMatmul(MatmulOp op);

  ModuleOp module;
  const ParallelContext &parallel;
  std::vector<Bucket> buckets;
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
  double adamBeta1 = 0.9, adamBeta2 = 0.999, adamEps = 1e-8;
  double sgdMomentum = 0.0;
  int64_t globalBatch = 1;
  bool sawUpdate = false;
  double clip = 0.0;
};

LogicalResult ProgramEmitter::collectBuckets(func::FuncOp step) {
  llvm::StringMap<int> seen;
  for (auto bucketOp : step.getOps<GradientBucketOp>()) {
    Bucket b;
    b.group = bucketOp.getGroup().str();
    b.scatter = bucketOp.getReduction() == "reduce_scatter";
    if (!b.scatter && bucketOp.getReduction() != "all_reduce")
      return bucketOp.emitError("unknown reduction '")
             << bucketOp.getReduction() << "'";
    if (failed(groupId(bucketOp, b.group)))
      return failure();
    for (Attribute a : bucketOp.getParams()) {
      StringRef name = cast<StringAttr>(a).getValue();
      if (!seen.try_emplace(name, buckets.size()).second)
        return bucketOp.emitError("parameter '")
               << name << "' is in two gradient buckets";
      b.params.push_back(name.str());
    }
    b.slot = buckets.size();
    if (b.slot >= rtf::kNumRequestSlots)
      return bucketOp.emitError("more than ")
             << rtf::kNumRequestSlots
             << " gradient buckets; raise strata-insert-gradient-reduction's "
                "bucket-bytes";
    buckets.push_back(std::move(b));
  }
  return success();
}

LogicalResult ProgramEmitter::collectParams() {
  llvm::StringMap<int> bucketOf;
  for (auto [i, b] : llvm::enumerate(buckets))
    for (const std::string &p : b.params)
      bucketOf[p] = i;
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
    if (failed(dtypeOf(p, p.getType())))
      return WalkResult::interrupt();
    ParamInfo info;
    info.op = p;
    auto b = bucketOf.find(p.getName());
    info.bucket = b == bucketOf.end() ? -1 : b->second;
    // A tensor-parallel shard is counted by every member; a replicated copy
    // only by the first, and data-parallel copies only by replica 0 unless
    // ZeRO gives every replica a distinct shard.
    bool sharded = p->hasAttr("strata.shard_view");
    info.normOwner = (sharded || parallel.tpIndex == 0);
    std::string name = p.getName().str();
    params[name] = info;
    paramOrder.push_back(name);
    return WalkResult::advance();
  });
  if (r.wasInterrupted())
    return failure();

  // Buckets: flat gradient (and under ZeRO value) buffers with the
  // parameters' buffers as views into them.
  for (Bucket &b : buckets) {
    int64_t size = parallel.groupSize(b.group);
    for (const std::string &name : b.params) {
      auto it = params.find(name);
      if (it == params.end())
        return module.emitError("gradient bucket names unknown parameter '")
               << name << "'";
      b.offsets.push_back(b.elements);
      b.elements +=
          cast<RankedTensorType>(it->second.op.getType()).getNumElements();
    }
    b.elements = (b.elements + size - 1) / size * size;
    std::string base = "bucket" + std::to_string(b.slot);
    b.flatGrad = newBuffer(base + ".grad", {b.elements}, rtf::DType::F32, true);
    if (b.scatter) {
      b.flatValue =
          newBuffer(base + ".value", {b.elements}, rtf::DType::F32, true);
      b.gradShard = newBuffer(base + ".grad_shard", {b.elements / size},
                              rtf::DType::F32, true);
    }
    for (auto [name, offset] : llvm::zip(b.params, b.offsets)) {
      ParamInfo &info = params[name];
      auto shape = cast<RankedTensorType>(info.op.getType()).getShape();
      info.grad = viewOf(b.flatGrad, name + ".grad", shape, offset * 4);
      if (b.scatter)
        info.value = viewOf(b.flatValue, name, shape, offset * 4);
    }
  }
  for (const std::string &name : paramOrder) {
    ParamInfo &info = params[name];
    auto shape = cast<RankedTensorType>(info.op.getType()).getShape();
    if (info.value < 0)
      info.value = newBuffer(name, shape, rtf::DType::F32, true);
    if (info.grad < 0)
      info.grad = newBuffer(name + ".grad", shape, rtf::DType::F32, true);
  }
  return success();
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

/// Lowers the SPMD collectives. The runtime's all_gather/reduce_scatter
/// work on rank-major flat chunks, so a gather or scatter along an inner
/// axis goes through a staging buffer laid out chunk by chunk.
LogicalResult ProgramEmitter::lowerCollective(Operation *op, bool &handled) {
  handled = true;
  auto chunkDims = [](RankedTensorType t, int64_t axis) {
    // outer x axis x inner, the slice_copy/insert view of a tensor.
    int64_t outer = product(t.getShape().take_front(axis));
    int64_t inner = product(t.getShape().drop_front(axis + 1));
    return std::array<int64_t, 3>{outer, t.getDimSize(axis), inner};
  };
  if (auto ar = dyn_cast<AllReduceOp>(op)) {
    FailureOr<int64_t> g = groupId(op, ar.getGroup());
    FailureOr<int> out = result(op, ar.getResult());
    if (failed(g) || failed(out))
      return failure();
    emit(rtf::Opcode::Copy, {operand(ar.getInput()), *out});
    emit(rtf::Opcode::AllReduce, {*out}, {*g, 0});
    return success();
  }
  if (auto rep = dyn_cast<ReplicateOp>(op)) {
    // Identity forward: a view of the input.
    valueBuffer[rep.getResult()] =
        viewOf(operand(rep.getInput()), freshName(op),
               cast<RankedTensorType>(rep.getType()).getShape(), 0);
    return success();
  }
  if (auto ag = dyn_cast<AllGatherOp>(op)) {
    FailureOr<int64_t> g = groupId(op, ag.getGroup());
    FailureOr<int> out = result(op, ag.getResult());
    if (failed(g) || failed(out))
      return failure();
    auto in = cast<RankedTensorType>(ag.getInput().getType());
    auto outType = cast<RankedTensorType>(ag.getType());
    int64_t axis = ag.getNormalizedAxis(), size = ag.getSize();
    auto [outer, local, inner] = chunkDims(in, axis);
    if (outer == 1) {
      emit(rtf::Opcode::AllGather, {operand(ag.getInput()), *out}, {*g});
      return success();
    }
    int staging = newBuffer(freshName(op) + ".staging",
                            {outType.getNumElements()}, rtf::DType::F32);
    emit(rtf::Opcode::AllGather, {operand(ag.getInput()), staging}, {*g});
    int64_t chunk = in.getNumElements();
    for (int64_t k = 0; k < size; ++k) {
      int part = viewOf(staging, freshName(op) + ".part", {chunk}, k * chunk * 4);
      emit(rtf::Opcode::SliceInsert, {part, *out},
           {outer, local * size, local, k * local, inner, 0});
    }
    return success();
  }
  if (auto rs = dyn_cast<ReduceScatterOp>(op)) {
    FailureOr<int64_t> g = groupId(op, rs.getGroup());
    FailureOr<int> out = result(op, rs.getResult());
    if (failed(g) || failed(out))
      return failure();
    auto in = cast<RankedTensorType>(rs.getInput().getType());
    int64_t axis = rs.getNormalizedAxis(), size = rs.getSize();
    auto [outer, whole, inner] = chunkDims(in, axis);
    if (outer == 1) {
      emit(rtf::Opcode::ReduceScatter, {operand(rs.getInput()), *out}, {*g});
      return success();
    }
    int64_t local = whole / size, chunk = in.getNumElements() / size;
    int staging = newBuffer(freshName(op) + ".staging",
                            {in.getNumElements()}, rtf::DType::F32);
    for (int64_t k = 0; k < size; ++k) {
      int part = viewOf(staging, freshName(op) + ".part", {chunk}, k * chunk * 4);
      emit(rtf::Opcode::SliceCopy, {operand(rs.getInput()), part},
           {outer, whole, local, k * local, inner});
    }
    emit(rtf::Opcode::ReduceScatter, {staging, *out}, {*g});
    return success();
  }
  if (auto ts = dyn_cast<TakeSliceOp>(op)) {
    FailureOr<int> out = result(op, ts.getResult());
    if (failed(out))
      return failure();
    auto in = cast<RankedTensorType>(ts.getInput().getType());
    int64_t axis = ts.getNormalizedAxis();
    auto [outer, whole, inner] = chunkDims(in, axis);
    int64_t local = whole / ts.getSize();
    int64_t start = parallel.groupRank(ts.getGroup().str()) * local;
    emit(rtf::Opcode::SliceCopy, {operand(ts.getInput()), *out},
         {outer, whole, local, start, inner});
    return success();
  }
  if (auto gb = dyn_cast<GradientBucketOp>(op)) {
    const Bucket *bucket = nullptr;
    for (const Bucket &b : buckets)
      if (!b.params.empty() &&
          b.params.front() ==
              cast<StringAttr>(gb.getParams()[0]).getValue().str())
        bucket = &b;
    if (!bucket)
      return gb.emitError("unknown gradient bucket");
    int64_t g = parallel.groupIds.at(bucket->group);
    // Started in the last micro-batch only, overlapping the backward of the
    // earlier layers; the update waits for it.
    if (bucket->scatter)
      emit(rtf::Opcode::ReduceScatterStart,
           {bucket->flatGrad, bucket->gradShard}, {g, bucket->slot}, {},
           /*lastOnly=*/true);
    else
      emit(rtf::Opcode::AllReduceStart, {bucket->flatGrad},
           {g, 0, bucket->slot}, {}, /*lastOnly=*/true);
    return success();
  }
  handled = false;
  return success();
}

LogicalResult ProgramEmitter::lowerOp(Operation *op) {
  bool handled = false;
  if (failed(lowerCollective(op, handled)))
    return failure();
  if (handled)
    return success();
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
              adamBeta1 = u.getBeta1().convertToDouble();
              adamBeta2 = u.getBeta2().convertToDouble();
              adamEps = u.getEps().convertToDouble();
              sawUpdate = true;
              return mark(u.getParam(), u.getWeightDecay().convertToDouble());
            })
            .Case([&](SgdUpdateOp u) {
              optimizerKind = rtf::OptimizerKind::Sgd;
              sgdMomentum = u.getMomentum().convertToDouble();
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

/// Decides which flat ranges of which parameters this rank updates (all of
/// each parameter, or under ZeRO the part inside its shard of the bucket),
/// and gives each range its optimizer state.
void ProgramEmitter::planUpdates() {
  int nstate = optimizerKind == rtf::OptimizerKind::AdamW ? 2 : 1;
  const char *stateNames[2] = {
      optimizerKind == rtf::OptimizerKind::AdamW ? ".exp_avg" : ".momentum",
      ".exp_avg_sq"};
  for (const std::string &name : paramOrder) {
    ParamInfo &p = params[name];
    int64_t n = cast<RankedTensorType>(p.op.getType()).getNumElements();
    int64_t begin = 0, end = n;
    bool distinct = false; // each data-parallel replica updates other elements
    if (p.bucket >= 0 && buckets[p.bucket].scatter) {
      const Bucket &b = buckets[p.bucket];
      int64_t shard = b.elements / parallel.groupSize(b.group);
      int64_t lo = parallel.groupRank(b.group) * shard, hi = lo + shard;
      int64_t off = b.offsets[llvm::find(b.params, name) - b.params.begin()];
      begin = std::clamp(lo - off, int64_t(0), n);
      end = std::clamp(hi - off, int64_t(0), n);
      distinct = true;
    }
    if (begin >= end) {
      // Another replica updates all of it: empty state ranges keep the
      // parameter table uniform (the runtime saves nothing for them).
      for (int k = 0; k < nstate; ++k)
        p.emptyState.push_back(newBuffer(name + stateNames[k], {0},
                                         rtf::DType::F32, true));
      continue;
    }
    UpdatePiece piece;
    piece.paramOffset = begin;
    bool whole = begin == 0 && end == n;
    piece.value = whole ? p.value
                        : viewOf(p.value, name + ".update", {end - begin},
                                 begin * 4);
    if (p.bucket >= 0 && buckets[p.bucket].scatter) {
      // The reduced gradient lives in the bucket's shard buffer.
      const Bucket &b = buckets[p.bucket];
      int64_t shard = b.elements / parallel.groupSize(b.group);
      int64_t off = b.offsets[llvm::find(b.params, name) - b.params.begin()];
      int64_t inShard = off + begin - parallel.groupRank(b.group) * shard;
      piece.grad = viewOf(b.gradShard, name + ".grad_piece", {end - begin},
                          inShard * 4);
    } else {
      piece.grad = p.grad;
    }
    for (int k = 0; k < nstate; ++k)
      piece.state.push_back(newBuffer(name + stateNames[k],
                                      whole ? buffers[p.value].shape
                                            : std::vector<int64_t>{end - begin},
                                      rtf::DType::F32, true));
    p.pieces.push_back(piece);
  }
}

/// The update sequence: wait for the gradient reductions, the global
/// gradient norm (each element counted once across the world), clipping,
/// the optimizer on this rank's pieces, and under ZeRO the all-gather that
/// gives every replica the updated parameters.
void ProgramEmitter::emitUpdate(rtf::ProgramBuilder &b) {
  auto id = [&](int buf) { return buffers[buf].emitted; };
  const auto U = rtf::SequenceKind::Update;
  for (const Bucket &bucket : buckets)
    b.emit(U, rtf::Opcode::Wait, {}, {bucket.slot});

  uint32_t sumsq = b.addBuffer("grad_sumsq", {1}, rtf::DType::F64);
  b.rankProgram().gradSumSq = sumsq;
  std::vector<uint32_t> owned, updated;
  for (const std::string &name : paramOrder)
    for (const UpdatePiece &piece : params[name].pieces) {
      updated.push_back(id(piece.grad));
      if (params[name].normOwner)
        owned.push_back(id(piece.grad));
    }
  if (owned.empty()) {
    // Nothing of ours counts (e.g. a shard that is all padding): add zero.
    uint32_t zero = b.addBuffer("grad_norm_zero", {1}, rtf::DType::F32);
    b.emit(U, rtf::Opcode::Fill, {zero}, {}, {0.0});
    owned.push_back(zero);
  }
  std::vector<uint32_t> sumsqOps{sumsq};
  sumsqOps.insert(sumsqOps.end(), owned.begin(), owned.end());
  b.emit(U, rtf::Opcode::GradSumSq, sumsqOps);
  // The ranks holding distinct gradient elements: tensor-parallel shards,
  // and data-parallel shards under ZeRO (plain replicas hold copies).
  bool dpDistinct = parallel.dp > 1 && llvm::any_of(buckets, [](const Bucket &b) {
                      return b.scatter;
                    });
  const char *normGroup = dpDistinct && parallel.tp > 1 ? "world"
                          : dpDistinct                  ? "dp"
                          : parallel.tp > 1             ? "tp"
                                                        : nullptr;
  if (normGroup)
    b.emit(U, rtf::Opcode::AllReduce, {sumsq},
           {parallel.groupIds.at(normGroup), 0});
  if (clip > 0.0 && !updated.empty()) {
    std::vector<uint32_t> ops{sumsq};
    ops.insert(ops.end(), updated.begin(), updated.end());
    b.emit(U, rtf::Opcode::ClipGrads, ops, {}, {clip});
  }
  for (const std::string &name : paramOrder) {
    const ParamInfo &p = params[name];
    double wd = p.weightDecay ? weightDecay : 0.0;
    for (const UpdatePiece &piece : p.pieces) {
      if (optimizerKind == rtf::OptimizerKind::AdamW)
        b.emit(U, rtf::Opcode::AdamWStep,
               {id(piece.value), id(piece.grad), id(piece.state[0]),
                id(piece.state[1])},
               {}, {adamBeta1, adamBeta2, adamEps, wd});
      else
        b.emit(U, rtf::Opcode::SgdStep,
               {id(piece.value), id(piece.grad), id(piece.state[0])}, {},
               {sgdMomentum, wd});
    }
  }
  for (const Bucket &bucket : buckets) {
    if (!bucket.scatter)
      continue;
    int64_t shard = bucket.elements / parallel.groupSize(bucket.group);
    int64_t start = parallel.groupRank(bucket.group) * shard;
    uint32_t mine = b.addAlias("bucket" + std::to_string(bucket.slot) +
                                   ".value_mine",
                               id(bucket.flatValue), {shard}, start * 4);
    // In place: this replica's updated chunk is gathered into everyone's
    // copy of the bucket.
    b.emit(U, rtf::Opcode::AllGather, {mine, id(bucket.flatValue)},
           {parallel.groupIds.at(bucket.group)});
  }
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

LogicalResult ProgramEmitter::run(rtf::ProgramBuilder &builder,
                                  EmitStats *stats) {
  auto step = module.lookupSymbol<func::FuncOp>("train_microbatch");
  auto opt = module.lookupSymbol<func::FuncOp>("optimizer_step");
  if (!step || !opt)
    return module.emitError("emission needs @train_microbatch and "
                            "@optimizer_step (run strata-autodiff and "
                            "strata-build-optimizer first)");
  auto training = module->getAttrOfType<DictionaryAttr>("strata.training");
  if (auto g = training ? training.getAs<IntegerAttr>("global_batch") : nullptr)
    globalBatch = g.getInt();
  if (failed(collectBuckets(step)) || failed(collectParams()) ||
      failed(bindGradients(step)) || failed(lowerOptimizer(opt)))
    return failure();
  for (Operation &op : step.getBody().front())
    if (failed(lowerOp(&op)))
      return failure();
  if (tokens < 0 || targets < 0 || loss < 0)
    return step.emitError("the training step must read inputs 'tokens' and "
                          "'targets' and return the loss");
  planUpdates();

  // --- memory plan over root buffers ---
  int64_t end = pending.size() + 1;
  std::vector<MemoryRequest> requests;
  std::vector<int> roots;
  uint64_t persistentBytes = 0;
  int lossRoot = buffers[loss].root < 0 ? loss : buffers[loss].root;
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
    if (int(i) == lossRoot)
      r.lastUse = end;
    requests.push_back(r);
    roots.push_back(i);
  }
  MemoryPlanResult plan = planMemory(requests, rtf::kBufferAlignment);

  try {
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
      if (!p.pieces.empty()) {
        for (int s : p.pieces.front().state)
          desc.state.push_back(buffers[s].emitted);
        desc.stateOffset = p.pieces.front().paramOffset;
      } else {
        for (int s : p.emptyState)
          desc.state.push_back(buffers[s].emitted);
      }
      StringRef init = p.op.getInit();
      desc.init = init == "ones"    ? rtf::InitKind::Ones
                  : init == "zeros" ? rtf::InitKind::Zeros
                                    : rtf::InitKind::Normal;
      desc.initStd = p.op.getInitStd().convertToDouble();
      desc.weightDecay = p.weightDecay;
      auto dims = [&](StringRef attr) {
        std::vector<int64_t> v;
        if (auto a = p.op->getAttrOfType<DenseI64ArrayAttr>(attr))
          v.assign(a.asArrayRef().begin(), a.asArrayRef().end());
        return v;
      };
      desc.globalShape = dims("strata.shard_view");
      desc.shardStart = dims("strata.shard_start");
      desc.checkpointShape = dims("strata.global_shape");
      builder.addParamWithBuffers(desc);
    }
    builder.setInputs(buffers[tokens].emitted, buffers[targets].emitted,
                      buffers[loss].emitted);
    if (positions >= 0)
      builder.setPositions(buffers[positions].emitted);
    builder.setDataRowStart(parallel.dpIndex *
                            (globalBatch / std::max<int64_t>(parallel.dp, 1)));

    // Gradients start each step at zero (bucket padding included).
    llvm::DenseSet<int> zeroed;
    for (const std::string &name : paramOrder) {
      int g = params[name].grad;
      int root = buffers[g].root < 0 ? g : buffers[g].root;
      if (zeroed.insert(root).second)
        builder.emit(rtf::SequenceKind::StepBegin, rtf::Opcode::Fill,
                     {buffers[root].emitted}, {}, {0.0});
    }
    bool anyLastOnly = false;
    for (PendingInstruction &inst : pending) {
      std::vector<uint32_t> ops;
      for (int b : inst.operands)
        ops.push_back(buffers[b].emitted);
      if (!inst.lastOnly)
        builder.emit(rtf::SequenceKind::Microbatch, inst.opcode, ops,
                     inst.ints, inst.floats);
      anyLastOnly |= inst.lastOnly;
    }
    if (anyLastOnly)
      for (PendingInstruction &inst : pending) {
        std::vector<uint32_t> ops;
        for (int b : inst.operands)
          ops.push_back(buffers[b].emitted);
        builder.emit(rtf::SequenceKind::LastMicrobatch, inst.opcode, ops,
                     inst.ints, inst.floats);
      }
    emitUpdate(builder);
    if (stats) {
      stats->arenaBytes = builder.rankProgram().arenaBytes;
      stats->persistentBytes = persistentBytes;
      stats->unsharedBytes = plan.unsharedBytes;
      stats->numInstructions = pending.size();
    }
    return success();
  } catch (const rtf::RuntimeError &e) {
    return module.emitError("internal error while emitting the program: ")
           << e.what();
  }
}

} // namespace

LogicalResult strata::readProgramConfig(ModuleOp module, rtf::ModelMeta &meta,
                                        rtf::TrainConfig &train) {
  auto model = module->getAttrOfType<DictionaryAttr>("strata.model");
  auto training = module->getAttrOfType<DictionaryAttr>("strata.training");
  auto step = module.lookupSymbol<func::FuncOp>("train_microbatch");
  auto opt = module.lookupSymbol<func::FuncOp>("optimizer_step");
  if (!step || !opt)
    return module.emitError("emission needs @train_microbatch and "
                            "@optimizer_step (run strata-autodiff and "
                            "strata-build-optimizer first)");
  InputOp tokens;
  step.walk([&](InputOp in) {
    if (in.getName() == "tokens")
      tokens = in;
  });
  if (!tokens)
    return step.emitError("the training step reads no 'tokens' input");
  auto shape = cast<RankedTensorType>(tokens.getType()).getShape();
  if (shape.size() != 2)
    return tokens.emitError("'tokens' must be [batch, seq_len]");
  meta.family = getStr(model, "family", "graph");
  meta.vocab = getInt(model, "vocab", 0);
  meta.seqLen = shape[1];
  meta.microBatch = shape[0];
  meta.globalBatch = getInt(training, "global_batch", meta.microBatch);
  meta.seed = getInt(training, "seed", 0);
  if (meta.vocab <= 0)
    return module.emitError("the module's strata.model has no vocab");

  auto optAttr = training ? training.getAs<DictionaryAttr>("optimizer") : nullptr;
  auto sched = training ? training.getAs<DictionaryAttr>("schedule") : nullptr;
  train.lr = getF64(optAttr, "lr", 1e-3);
  train.momentum = getF64(optAttr, "momentum", 0.0);
  train.beta1 = getF64(optAttr, "beta1", 0.9);
  train.beta2 = getF64(optAttr, "beta2", 0.999);
  train.eps = getF64(optAttr, "eps", 1e-8);
  std::string kind = getStr(sched, "kind", "constant");
  train.schedule = kind == "cosine"   ? rtf::LrScheduleKind::Cosine
                   : kind == "linear" ? rtf::LrScheduleKind::Linear
                                      : rtf::LrScheduleKind::Constant;
  train.warmupSteps = getInt(sched, "warmup_steps", 0);
  train.minLr = getF64(sched, "min_lr", 0.0);
  train.totalSteps = getInt(sched, "total_steps", 0);
  train.defaultSteps = train.totalSteps > 0 ? train.totalSteps : 10;
  train.gradClip = 0.0;
  train.weightDecay = 0.0;
  for (Operation &op : opt.getBody().front().without_terminator()) {
    if (auto c = dyn_cast<ClipGradNormOp>(op))
      train.gradClip = c.getMaxNorm().convertToDouble();
    if (auto u = dyn_cast<AdamWUpdateOp>(op)) {
      train.optimizer = rtf::OptimizerKind::AdamW;
      train.beta1 = u.getBeta1().convertToDouble();
      train.beta2 = u.getBeta2().convertToDouble();
      train.eps = u.getEps().convertToDouble();
      if (u.getWeightDecay().convertToDouble() != 0.0)
        train.weightDecay = u.getWeightDecay().convertToDouble();
    }
    if (auto u = dyn_cast<SgdUpdateOp>(op)) {
      train.optimizer = rtf::OptimizerKind::Sgd;
      train.momentum = u.getMomentum().convertToDouble();
      if (u.getWeightDecay().convertToDouble() != 0.0)
        train.weightDecay = u.getWeightDecay().convertToDouble();
    }
  }
  return success();
}

LogicalResult strata::emitRankProgram(ModuleOp module,
                                      const ParallelContext &parallel,
                                      rtf::ProgramBuilder &builder,
                                      EmitStats *stats) {
  return ProgramEmitter(module, parallel).run(builder, stats);
}

FailureOr<rtf::Program> strata::emitProgram(ModuleOp module,
                                            const std::string &planDescription,
                                            EmitStats *stats) {
  rtf::ModelMeta meta;
  rtf::TrainConfig train;
  if (failed(readProgramConfig(module, meta, train)))
    return failure();
  if (meta.globalBatch % meta.microBatch != 0)
    return module.emitError("global_batch ")
               << meta.globalBatch << " is not a multiple of the micro-batch "
               << meta.microBatch,
           failure();
  meta.numMicrobatches = meta.globalBatch / meta.microBatch;
  meta.planDescription = planDescription;
  ParallelContext single;
  single.groupIds["world"] = 0;
  try {
    rtf::ProgramBuilder builder(meta, train);
    if (failed(emitRankProgram(module, single, builder, stats)))
      return failure();
    return builder.finish();
  } catch (const rtf::RuntimeError &e) {
    return module.emitError("internal error while emitting the program: ")
               << e.what(),
           failure();
  }
}
