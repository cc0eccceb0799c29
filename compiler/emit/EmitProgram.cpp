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
// gradients, layer-norm gamma/beta and RMSNorm weight gradients), including
// through the adds that sum the gradients of tied weights.
//
//===----------------------------------------------------------------------===//

#include "compiler/emit/EmitProgram.h"

#include "compiler/emit/MemoryPlan.h"
#include "compiler/emit/ProgramEmitter.h"
#include "runtime/format/OpSchema.h"
#include "runtime/kernels/BinaryMath.h"
#include "runtime/kernels/UnaryMath.h"
#include "runtime/support/Error.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace strata;
using namespace strata::emit;

namespace strata::emit {

/// strata.unary's kind as its runtime code (the op's verifier has checked
/// the name).
static int64_t unaryKindCode(StringRef kind) {
  return kernels::unaryKindCode(std::string_view(kind.data(), kind.size()));
}

static int64_t tensorRank(Value v) {
  return cast<RankedTensorType>(v.getType()).getRank();
}

/// [outer, n, inner] of `v` around dimension `axis`.
static std::array<int64_t, 3> shapeAroundAxis(Value v, int64_t axis) {
  ArrayRef<int64_t> shape = cast<RankedTensorType>(v.getType()).getShape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  for (int64_t d = axis + 1; d < int64_t(shape.size()); ++d)
    inner *= shape[d];
  return {outer, shape[axis], inner};
}

/// Routes the gradient `v` of a parameter into its gradient buffer `grad`.
/// Single-use values computed by accumulating kernels write there directly;
/// single-use sums are split into their terms.
void ProgramEmitter::bindValue(Value v, int grad, Operation *sink) {
  Operation *def = v.getDefiningOp();
  if (def && v.hasOneUse()) {
    // Mixed precision: a gradient cast to the float32 parameter is folded
    // into its producer, which then writes (or accumulates into) the
    // float32 gradient itself; kernels take operands of either dtype.
    if (auto c = dyn_cast<CastOp>(def); c && c.getInput().hasOneUse()) {
      absorbed.insert(c);
      // A tensor-parallel shard's gradient is reshaped to the parameter's
      // sharded view before its cast (c_attn's [hidden, 3, heads, dim]):
      // the reshape is only a view, so its producer writes the float32
      // gradient too, rather than rounding it to bf16 and accumulating.
      Value input = c.getInput();
      if (auto r = input.getDefiningOp<ReshapeOp>();
          r && r.getInput().hasOneUse() && r.getInput().getDefiningOp()) {
        absorbed.insert(r);
        input = r.getInput();
      }
      bindValue(input, grad, sink);
      return;
    }
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
    if (isa<MatmulOp, EmbeddingGradOp, BiasGradOp, LayerNormGradOp,
            RmsNormGradOp>(def) &&
        !(isa<LayerNormGradOp>(def) &&
          v == cast<LayerNormGradOp>(def).getInputGrad()) &&
        !(isa<RmsNormGradOp>(def) &&
          v == cast<RmsNormGradOp>(def).getInputGrad())) {
      directBind[v] = grad;
      return;
    }
  }
  accumulateAt[sink].push_back({v, grad});
}

LogicalResult ProgramEmitter::bindGradients(func::FuncOp step) {
  for (auto acc : step.getOps<AccumulateGradOp>()) {
    if (!onThisDevice(acc))
      continue;
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
    rtf::DType dt = buffers[operand(ag.getInput())].dtype;
    int staging =
        newBuffer(freshName(op) + ".staging", {outType.getNumElements()}, dt);
    emit(rtf::Opcode::AllGather, {operand(ag.getInput()), staging}, {*g});
    int64_t chunk = in.getNumElements();
    for (int64_t k = 0; k < size; ++k) {
      int part = viewOf(staging, freshName(op) + ".part", {chunk},
                        k * chunk * rtf::dtypeBytes(dt));
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
    rtf::DType dt = buffers[operand(rs.getInput())].dtype;
    int staging =
        newBuffer(freshName(op) + ".staging", {in.getNumElements()}, dt);
    for (int64_t k = 0; k < size; ++k) {
      int part = viewOf(staging, freshName(op) + ".part", {chunk},
                        k * chunk * rtf::dtypeBytes(dt));
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
    // bf16 reduction: the collective reads a rounded copy.
    int reduced = bucket->lowGrad >= 0 ? bucket->lowGrad : bucket->flatGrad;
    if (bucket->shardGradsEachMicrobatch) {
      // ZeRO-2: every micro-batch, finished at the micro-batch's end.
      if (reduced != bucket->flatGrad)
        emit(rtf::Opcode::Convert, {bucket->flatGrad, reduced});
      emit(rtf::Opcode::ReduceScatterStart, {reduced, bucket->gradPartial},
           {g, bucket->slot});
      shardsInFlight.push_back(bucket - buckets.data());
      return success();
    }
    // (A pipeline schedule lowers it in the last micro-batch only.)
    bool lastOnly = !pipelined();
    if (reduced != bucket->flatGrad)
      emit(rtf::Opcode::Convert, {bucket->flatGrad, reduced}, {}, {}, lastOnly);
    if (bucket->scatter)
      emit(rtf::Opcode::ReduceScatterStart,
           {reduced,
            bucket->lowShard >= 0 ? bucket->lowShard : bucket->gradShard},
           {g, bucket->slot}, {}, lastOnly);
    else
      emit(rtf::Opcode::AllReduceStart, {reduced}, {g, 0, bucket->slot}, {},
           lastOnly);
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
            const ParamInfo &info = params[p.getName()];
            valueBuffer[p] =
                info.valueForward >= 0 ? info.valueForward : info.value;
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
            // Backward begins: ZeRO-3 parameters are gathered afresh.
            if (c->hasAttr("strata.backward_begin") && !pipelined()) {
              emittingBackward = true;
              useGatheredValues(/*backward=*/true);
            }
            // A loss seed is folded into cross_entropy_bwd's scale.
            if (llvm::all_of(c->getUsers(), [](Operation *u) {
                  return isa<CrossEntropyGradOp,
                             VocabParallelCrossEntropyGradOp>(u);
                }))
              return success();
            STRATA_OUT(o, c.getResult());
            emit(rtf::Opcode::Fill, {o}, {}, {c.getValue().convertToDouble()});
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
            emit(rtf::Opcode::Add,
                 {operand(a.getLhs()), operand(a.getRhs()), o});
            return success();
          })
          .Case([&](CastOp c) -> LogicalResult {
            if (absorbed.count(c) || foldedCasts.count(c))
              return success();
            STRATA_OUT(o, c.getResult());
            emit(rtf::Opcode::Convert, {operand(c.getInput()), o});
            return success();
          })
          .Case([&](MulOp a) -> LogicalResult {
            STRATA_OUT(o, a.getResult());
            emit(rtf::Opcode::Mul,
                 {operand(a.getLhs()), operand(a.getRhs()), o});
            return success();
          })
          .Case([&](ScaleOp s) -> LogicalResult {
            STRATA_OUT(o, s.getResult());
            emit(rtf::Opcode::Scale, {operand(s.getInput()), o}, {},
                 {s.getFactor().convertToDouble()});
            return success();
          })
          .Case<GeluOp, ReluOp>([&](auto g) -> LogicalResult {
            STRATA_OUT(o, g.getResult());
            emit(isa<GeluOp>(g) ? rtf::Opcode::GeluFwd : rtf::Opcode::ReluFwd,
                 {operand(g.getInput()), o});
            return success();
          })
          .Case<GeluGradOp, ReluGradOp>([&](auto g) -> LogicalResult {
            STRATA_OUT(o, g.getResult());
            emit(isa<GeluGradOp>(g) ? rtf::Opcode::GeluBwd
                                    : rtf::Opcode::ReluBwd,
                 {operand(g.getInput()), operand(g.getGrad()), o});
            return success();
          })
          .Case([&](ElementwiseUnaryOp u) -> LogicalResult {
            STRATA_OUT(o, u.getResult());
            emit(rtf::Opcode::UnaryFwd, {operand(u.getInput()), o},
                 {unaryKindCode(u.getKind())});
            return success();
          })
          .Case([&](ElementwiseBinaryOp e) -> LogicalResult {
            STRATA_OUT(o, e.getResult());
            StringRef kind = e.getKind();
            auto [lead, outer, mid, inner] = e.getBroadcast();
            (void)lead; // the rest of x's elements
            emit(rtf::Opcode::BinaryFwd,
                 {operand(e.getLhs()), operand(e.getRhs()), o},
                 {kernels::binaryKindCode(
                      std::string_view(kind.data(), kind.size())),
                  outer, mid, inner});
            return success();
          })
          .Case([&](ElementwiseUnaryGradOp u) -> LogicalResult {
            STRATA_OUT(o, u.getResult());
            emit(rtf::Opcode::UnaryBwd,
                 {operand(u.getInput()), operand(u.getGrad()), o},
                 {unaryKindCode(u.getKind())});
            return success();
          })
          .Case([&](ReduceMeanOp r) -> LogicalResult {
            // The sum over the axis (repeat_interleave's backward with one
            // entry repeated n times), then times 1/n in place.
            STRATA_OUT(o, r.getResult());
            auto [outer, n, inner] =
                shapeAroundAxis(r.getInput(), r.getNormalizedAxis());
            emit(rtf::Opcode::RepeatInterleaveBwd, {operand(r.getInput()), o},
                 {outer, 1, n, inner});
            emit(rtf::Opcode::Scale, {o, o}, {}, {1.0 / double(n)});
            return success();
          })
          .Case([&](ReduceMeanGradOp r) -> LogicalResult {
            STRATA_OUT(o, r.getResult());
            int64_t axis = static_cast<int64_t>(r.getAxis());
            if (axis < 0)
              axis += tensorRank(r.getGrad());
            auto [outer, n, inner] = shapeAroundAxis(r.getResult(), axis);
            emit(rtf::Opcode::RepeatInterleave, {operand(r.getGrad()), o},
                 {outer, 1, n, inner});
            emit(rtf::Opcode::Scale, {o, o}, {}, {1.0 / double(n)});
            return success();
          })
          .Case([&](LayerNormOp l) -> LogicalResult {
            STRATA_OUT(o, l.getResult());
            int64_t n = lastDim(l.getInput());
            int64_t rows = numel(l.getInput()) / n;
            int mean =
                newBuffer(freshName(l) + ".mean", {rows}, rtf::DType::F32);
            int rstd =
                newBuffer(freshName(l) + ".rstd", {rows}, rtf::DType::F32);
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
            int lse =
                newBuffer(freshName(c) + ".lse", {numel(c.getLogits()) / vocab},
                          rtf::DType::F32);
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
            reuseForResult(c, c.getLogits(), c.getResult());
            STRATA_OUT(o, c.getResult());
            int64_t vocab = lastDim(c.getLogits());
            double rows = double(numel(c.getLogits()) / vocab);
            emit(rtf::Opcode::CrossEntropyBwd,
                 {operand(c.getLogits()), operand(c.getTargets()), lse, o},
                 {vocab}, {seed.getValue().convertToDouble() / rows});
            return success();
          })
          .Case([&](VocabParallelCrossEntropyOp c) -> LogicalResult {
            // Megatron-LM's vocabulary-parallel loss: the row maxima, then
            // the sums of exponentials and target logits, are all-reduced;
            // the logits never leave the rank.
            FailureOr<int64_t> g = groupId(c, c.getGroup());
            if (failed(g))
              return failure();
            STRATA_OUT(o, c.getResult());
            int64_t n = lastDim(c.getLogits());
            int64_t rows = numel(c.getLogits()) / n;
            int64_t start = c.getVocabStart(), valid = c.getValid();
            std::string base = freshName(c);
            int rowmax = newBuffer(base + ".max", {rows}, rtf::DType::F32);
            int stats = newBuffer(base + ".stats", {2 * rows}, rtf::DType::F32);
            int lse = newBuffer(base + ".lse", {rows}, rtf::DType::F32);
            savedStats[c] = {lse, -1};
            emit(rtf::Opcode::CeVpMax, {operand(c.getLogits()), rowmax},
                 {n, valid});
            emit(rtf::Opcode::AllReduce, {rowmax}, {*g, 1});
            emit(rtf::Opcode::CeVpSumExp,
                 {operand(c.getLogits()), operand(c.getTargets()), rowmax,
                  stats},
                 {n, start, valid});
            emit(rtf::Opcode::AllReduce, {stats}, {*g, 0});
            emit(rtf::Opcode::CeVpLoss, {rowmax, stats, o, lse}, {rows});
            return success();
          })
          .Case([&](VocabParallelCrossEntropyGradOp c) -> LogicalResult {
            auto seed = c.getLossGrad().getDefiningOp<ConstantOp>();
            if (!seed)
              return c.emitError("the loss gradient must be a "
                                 "strata.constant (the autodiff seed)");
            int lse = -1;
            for (Operation *user : c.getLogits().getUsers())
              if (auto fwd = dyn_cast<VocabParallelCrossEntropyOp>(user))
                if (fwd.getTargets() == c.getTargets() && savedStats.count(fwd))
                  lse = savedStats[fwd].first;
            if (lse < 0)
              return c.emitError("has no forward "
                                 "strata.vocab_parallel_cross_entropy of the "
                                 "same logits and targets");
            reuseForResult(c, c.getLogits(), c.getResult());
            STRATA_OUT(o, c.getResult());
            int64_t n = lastDim(c.getLogits());
            double rows = double(numel(c.getLogits()) / n);
            emit(rtf::Opcode::CeVpBwd,
                 {operand(c.getLogits()), operand(c.getTargets()), lse, o},
                 {n, int64_t(c.getVocabStart()), int64_t(c.getValid())},
                 {seed.getValue().convertToDouble() / rows});
            return success();
          })
          .Case([&](ReshapeOp r) -> LogicalResult {
            if (absorbed.count(r))
              return success();
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
                valueBuffer[r] = viewOf(
                    operand(s.getInput()), freshName(s), shape,
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
              int64_t size =
                  cast<RankedTensorType>(in.getType()).getDimSize(axis);
              emit(rtf::Opcode::SliceInsert, {operand(in), o},
                   {product(outType.getShape().take_front(axis)),
                    outType.getDimSize(axis), size, start,
                    product(outType.getShape().drop_front(axis + 1)), 0});
              start += size;
            }
            return success();
          })
          .Case([&](CachedAttentionOp a) -> LogicalResult {
            // Each op keeps its own key and value cache across runs.
            auto q = cast<RankedTensorType>(a.getQuery().getType());
            auto k = cast<RankedTensorType>(a.getKey().getType());
            int64_t batch = q.getDimSize(0), heads = q.getDimSize(1),
                    kvHeads = k.getDimSize(1), dim = q.getDimSize(3),
                    len = a.getMaxLen();
            std::string base = freshName(a);
            int keys = newBuffer(base + ".key_cache",
                                 {batch, kvHeads, len, dim}, rtf::DType::F32,
                                 /*persistent=*/true);
            int values = newBuffer(base + ".value_cache",
                                   {batch, kvHeads, len, dim}, rtf::DType::F32,
                                   /*persistent=*/true);
            STRATA_OUT(o, a.getResult());
            emit(rtf::Opcode::KvAttention,
                 {operand(a.getQuery()), operand(a.getKey()),
                  operand(a.getValue()), keys, values, o},
                 {batch, heads, kvHeads, len, dim},
                 {a.getScale().convertToDouble()});
            return success();
          })
          .Case([&](RotaryEmbeddingAtPositionOp r) -> LogicalResult {
            STRATA_OUT(o, r.getResult());
            emit(rtf::Opcode::RotaryAtPosition, {operand(r.getInput()), o},
                 {lastDim(r.getInput())}, {r.getTheta().convertToDouble()});
            return success();
          })
          .Case([&](AccumulateGradOp) { return success(); })
          .Case([&](func::ReturnOp r) -> LogicalResult {
            if (r.getNumOperands() != 1)
              return r.emitError(decoding ? "@decode_step must return the "
                                            "logits only"
                                          : "@train_microbatch must return "
                                            "the loss only");
            loss = operand(r.getOperand(0));
            return success();
          })
          .Default([&](Operation *other) -> LogicalResult {
            bool llama = false;
            if (failed(lowerLlamaOp(other, llama)))
              return failure();
            if (llama)
              return success();
            bool attention = false;
            if (failed(lowerAttentionOp(other, attention)))
              return failure();
            if (attention)
              return success();
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

MemoryPlanResult ProgramEmitter::placeBuffers(rtf::ProgramBuilder &builder,
                                              int output,
                                              uint64_t &persistentBytes,
                                              EmitStats *stats) {
  int64_t end = pending.size() + 1;
  std::vector<MemoryRequest> requests;
  std::vector<int> roots;
  int outputRoot = output < 0                 ? -1
                   : buffers[output].root < 0 ? output
                                              : buffers[output].root;
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
    // The output (loss, logits) is read by the executor after the sequence.
    if (int(i) == outputRoot)
      r.lastUse = end;
    requests.push_back(r);
    roots.push_back(i);
  }
  MemoryPlanResult plan = planMemory(requests, rtf::kBufferAlignment);
  // The transient buffers live where the most bytes are (the first such
  // position), for --memory-report.
  if (stats && stats->collectPeakBuffers) {
    auto aligned = [](uint64_t b) {
      uint64_t a = rtf::kBufferAlignment;
      return std::max<uint64_t>((b + a - 1) / a * a, a);
    };
    std::vector<int64_t> delta(end + 2, 0);
    for (const MemoryRequest &r : requests)
      if (r.firstUse != kPersistent) {
        delta[std::min(r.firstUse, r.lastUse)] += aligned(r.bytes);
        delta[std::max(r.firstUse, r.lastUse) + 1] -= aligned(r.bytes);
      }
    int64_t live = 0, best = -1, at = 0;
    for (int64_t t = 0; t <= end; ++t) {
      live += delta[t];
      if (live > best)
        best = live, at = t;
    }
    for (auto [r, root] : llvm::zip(requests, roots))
      if (r.firstUse != kPersistent && std::min(r.firstUse, r.lastUse) <= at &&
          at <= std::max(r.firstUse, r.lastUse))
        stats->peakBuffers.emplace_back(buffers[root].name, aligned(r.bytes));
    llvm::stable_sort(stats->peakBuffers, [](const auto &a, const auto &b) {
      return a.second > b.second;
    });
  }
  for (auto [root, offset] : llvm::zip(roots, plan.offsets)) {
    LogicalBuffer &b = buffers[root];
    b.emitted = builder.addBufferAt(b.name, b.shape, b.dtype, offset);
  }
  for (LogicalBuffer &b : buffers)
    if (b.root >= 0)
      b.emitted = builder.addAlias(b.name, buffers[b.root].emitted, b.shape,
                                   b.byteOffset);
  return plan;
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
  if (pipelined()) {
    if (failed(lowerPipeline(step)))
      return failure();
    loss = stepLoss;
  } else {
    // ZeRO-3 buckets in the order the micro-batch first uses them, for
    // prefetching.
    bool backward = false;
    for (Operation &op : step.getBody().front()) {
      backward |= op.hasAttr("strata.backward_begin");
      for (Value v : op.getOperands())
        if (auto param = v.getDefiningOp<ParamOp>()) {
          const ParamInfo &info = params[param.getName()];
          if (info.valueForward < 0)
            continue;
          const Bucket &b = buckets[info.bucket];
          int root = backward ? b.flatValueBackward : b.flatValue;
          if (!llvm::is_contained(gatherOrder, root))
            gatherOrder.push_back(root);
        }
    }
    for (Operation &op : step.getBody().front())
      if (failed(lowerOp(&op)))
        return failure();
    finishGradientShards();
    if (tokens < 0 || targets < 0 || loss < 0)
      return step.emitError("the training step must read inputs 'tokens' "
                            "and 'targets' and return the loss");
  }
  planUpdates();

  uint64_t persistentBytes = 0;
  MemoryPlanResult plan;
  try {
    plan = placeBuffers(builder, loss, persistentBytes, stats);
    for (const std::string &name : paramOrder) {
      ParamInfo &p = params[name];
      rtf::ParamDesc desc;
      desc.name = name;
      desc.value = buffers[p.value].emitted;
      desc.grad = buffers[p.grad].emitted;
      // Under ZeRO-2/3 the full gradient is transient: name the shard's piece.
      if (p.descGrad >= 0)
        desc.grad = buffers[p.descGrad].emitted;
      if (!p.pieces.empty()) {
        for (int s : p.pieces.front().state)
          desc.state.push_back(buffers[s].emitted);
        desc.stateOffset = p.pieces.front().paramOffset;
      } else {
        for (int s : p.emptyState)
          desc.state.push_back(buffers[s].emitted);
      }
      if (p.valueForward >= 0) {
        desc.valueSharded = true;
        auto box = cast<RankedTensorType>(p.op.getType()).getShape();
        desc.boxShape.assign(box.begin(), box.end());
        if (!p.pieces.empty())
          desc.stateOffset = p.pieces.front().paramOffset;
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
    if (!pipelined())
      builder.setInputs(buffers[tokens].emitted, buffers[targets].emitted,
                        buffers[loss].emitted);
    else if (loss >= 0)
      builder.setLoss(buffers[loss].emitted);
    if (positions >= 0)
      builder.setPositions(buffers[positions].emitted);
    builder.setDataRowStart(parallel.dpIndex *
                            (globalBatch / std::max<int64_t>(parallel.dp, 1)));

    // Gradients start each step at zero (bucket padding included); under
    // ZeRO-2 what persists is the shard.
    llvm::DenseSet<int> zeroed;
    for (const std::string &name : paramOrder) {
      int g = params[name].grad;
      int root = buffers[g].root < 0 ? g : buffers[g].root;
      if (!lazyZero.count(root) && zeroed.insert(root).second)
        builder.emit(rtf::SequenceKind::StepBegin, rtf::Opcode::Fill,
                     {buffers[root].emitted}, {}, {0.0});
    }
    for (const Bucket &bucket : buckets)
      if (bucket.shardGradsEachMicrobatch)
        builder.emit(rtf::SequenceKind::StepBegin, rtf::Opcode::Fill,
                     {buffers[bucket.gradShard].emitted}, {}, {0.0});
    auto operandsOf = [&](const PendingInstruction &inst) {
      std::vector<uint32_t> ops;
      for (int b : inst.operands)
        ops.push_back(b < 0 ? rtf::kNoBuffer : buffers[b].emitted);
      return ops;
    };
    // A pipeline rank runs its whole schedule once per step; otherwise the
    // micro-batch sequence repeats, its last run with the reductions.
    bool anyLastOnly = false;
    for (PendingInstruction &inst : pending) {
      if (!inst.lastOnly)
        builder.emit(pipelined() ? rtf::SequenceKind::Schedule
                                 : rtf::SequenceKind::Microbatch,
                     inst.opcode, operandsOf(inst), inst.ints, inst.floats);
      anyLastOnly |= inst.lastOnly;
    }
    if (anyLastOnly)
      for (PendingInstruction &inst : pending)
        builder.emit(rtf::SequenceKind::LastMicrobatch, inst.opcode,
                     operandsOf(inst), inst.ints, inst.floats);
    emitEval(builder, operandsOf);
    emitUpdate(builder);
    if (stats) {
      stats->arenaBytes = builder.rankProgram().arenaBytes;
      stats->persistentBytes = persistentBytes;
      stats->unsharedBytes = plan.unsharedBytes;
      stats->peakLiveBytes = plan.peakLiveBytes;
      stats->numInstructions = pending.size();
    }
    return success();
  } catch (const rtf::RuntimeError &e) {
    return module.emitError("internal error while emitting the program: ")
           << e.what();
  }
}

void ProgramEmitter::emitEval(
    rtf::ProgramBuilder &builder,
    const std::function<std::vector<uint32_t>(const PendingInstruction &)>
        &operandsOf) {
  // The forward instructions are an order-preserving subsequence of the
  // step, so buffers the memory plan keeps apart in the step stay apart.
  // A request they start (a pipeline send, a ZeRO-3 prefetch) is waited
  // for where the step waits for it, even inside backward code, so that its
  // buffer is not reused before the request completes.
  std::vector<bool> busy(rtf::kNumRequestSlots, false);
  for (const PendingInstruction &inst : pending) {
    if (inst.lastOnly)
      continue;
    rtf::Instruction probe;
    probe.opcode = inst.opcode;
    probe.ints = inst.ints;
    int64_t slot = -1;
    rtf::SlotUse use = rtf::slotUse(probe, &slot);
    bool include =
        use == rtf::SlotUse::Wait ? bool(busy[slot]) : !inst.backward;
    if (!include)
      continue;
    if (use != rtf::SlotUse::None)
      busy[slot] = use == rtf::SlotUse::Start;
    builder.emit(pipelined() ? rtf::SequenceKind::EvalSchedule
                             : rtf::SequenceKind::Eval,
                 inst.opcode, operandsOf(inst), inst.ints, inst.floats);
  }
}

} // namespace strata::emit

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

  auto optAttr =
      training ? training.getAs<DictionaryAttr>("optimizer") : nullptr;
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
