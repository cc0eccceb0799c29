//===- ProgramEmitter.h - Lowering state shared by the emitter --*- C++ -*-===//
//
// Private to compiler/emit: the state of lowering one rank's training step.
// EmitProgram.cpp lowers ops, EmitUpdate.cpp the gradient buckets and the
// optimizer step, EmitPipeline.cpp pipeline schedules.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_EMIT_PROGRAMEMITTER_H
#define STRATA_COMPILER_EMIT_PROGRAMEMITTER_H

#include "compiler/emit/EmitProgram.h"
#include "compiler/emit/MemoryPlan.h"
#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "runtime/format/ProgramBuilder.h"
#include "runtime/support/Error.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <functional>
#include <string>
#include <vector>

namespace strata::emit {

using namespace mlir;
namespace rtf = strata::rt;

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
  /// Part of the backward pass; the eval sequences leave it out.
  bool backward = false;
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
  /// ZeRO-2: reduce-scatter after every micro-batch into gradPartial and
  /// accumulate into gradShard; flatGrad is transient.
  bool shardGradsEachMicrobatch = false;
  int gradPartial = -1;
  /// ZeRO-3: only `valueShard` persists; the full parameters are gathered
  /// into `flatValue` (forward) and `flatValueBackward` before first use.
  bool shardParams = false;
  int flatValueBackward = -1, valueShard = -1;
  int slot = -1;
  /// bfloat16 reduction (plan grad_reduce_dtype): the flat gradient rounded
  /// to bf16, and under ZeRO-1 the bf16 shard the reduce-scatter writes.
  int lowGrad = -1, lowShard = -1;
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
  bool tied = false; ///< declared on several pipeline stages
  /// ZeRO-3: the gathered full value seen by forward and backward ops
  /// (`value` is then this rank's persistent piece).
  int valueForward = -1, valueBackward = -1;
  /// The gradient buffer the runtime is told about when it is not `grad`
  /// (ZeRO-2/3: the piece of the persistent shard).
  int descGrad = -1;
  std::vector<int> emptyState; ///< when this rank updates none of it
};

inline int64_t product(ArrayRef<int64_t> dims) {
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
  /// Lowers @decode_step (strata-decode-step) into the builder's rank as an
  /// inference program (EmitDecode.cpp).
  LogicalResult runDecode(rtf::ProgramBuilder &builder);

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
    int v =
        newBuffer(name, shape, buffers[base].dtype, buffers[root].persistent);
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
    if (e.isBF16())
      return rtf::DType::BF16;
    if (e.isInteger(32))
      return rtf::DType::I32;
    return op->emitError("the CPU runtime computes in float32 or bfloat16 "
                         "(and int32 token ids); got element type ")
               << e << "; set the model's dtype to float32 or bfloat16",
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
    // A matmul whose only use is a cast writes the cast's dtype itself (it
    // accumulates in float32 either way): the float32 logits of a bf16
    // model's head.
    if (foldsCastIntoResult(v))
      if (auto c = dyn_cast<CastOp>(*v.getUsers().begin());
          c && !absorbed.count(c)) {
        FailureOr<int> b = result(c, c.getResult());
        if (failed(b))
          return failure();
        foldedCasts.insert(c);
        return valueBuffer[v] = *b;
      }
    FailureOr<rtf::DType> dt = dtypeOf(op, v.getType());
    if (failed(dt))
      return failure();
    int b = newBuffer(freshName(op),
                      cast<RankedTensorType>(v.getType()).getShape(), *dt);
    return valueBuffer[v] = b;
  }
  /// Whether `v`'s producer writes the dtype of `v`'s only use, a cast,
  /// itself: any matmul; and the parameter-gradient results of the norm
  /// and bias gradients when cast to float32 (under sp these are partial
  /// sums, all-reduced in float32 before they reach the main gradient).
  static bool foldsCastIntoResult(Value v) {
    Operation *def = v.getDefiningOp();
    if (!def || !v.hasOneUse())
      return false;
    if (isa<MatmulOp>(def))
      return true;
    auto c = dyn_cast<CastOp>(*v.getUsers().begin());
    if (!c || !cast<RankedTensorType>(c.getType()).getElementType().isF32())
      return false;
    if (auto ln = dyn_cast<LayerNormGradOp>(def))
      return v != ln.getInputGrad();
    if (auto rms = dyn_cast<RmsNormGradOp>(def))
      return v != rms.getInputGrad();
    return isa<BiasGradOp>(def);
  }
  int operand(Value v) { return valueBuffer.lookup(v); }
  /// Lets `result` of `op` overwrite `input`'s buffer when `op` is the last
  /// reader of `input` (the logits gradient over the logits: the largest
  /// activation of a language model). Kernels that allow it read each
  /// element before writing it.
  void reuseForResult(Operation *op, Value input, Value result) {
    if (valueBuffer.count(result) || directBind.count(result) ||
        input.getType() != result.getType() || !valueBuffer.count(input))
      return;
    // Only a buffer of its own (not a view of, or viewed by, another value)
    // whose every other reader comes earlier.
    int buf = valueBuffer.lookup(input);
    if (buffers[buf].root >= 0 || buffers[buf].persistent)
      return;
    for (Operation *user : input.getUsers())
      if (user != op &&
          (isa<ReshapeOp, SplitOp, ReplicateOp>(user) ||
           user->getBlock() != op->getBlock() || op->isBeforeInBlock(user)))
        return;
    valueBuffer[result] = buf;
  }
  bool accumulates(Value v) { return directBind.count(v) != 0; }

  void emit(rtf::Opcode opcode, std::vector<int> operands,
            std::vector<int64_t> ints = {}, std::vector<double> floats = {},
            bool lastOnly = false) {
    for (int b : operands) {
      if (emittingGather)
        break;
      // A transient accumulation buffer starts each use at zero; a ZeRO-3
      // parameter bucket is gathered before its first use.
      int root = b < 0 ? -1 : buffers[b].root < 0 ? b : buffers[b].root;
      if (root >= 0 && lazyZero.count(root) && lazyZeroDone.insert(root).second)
        emit(rtf::Opcode::Fill, {root}, {}, {0.0});
      auto gather = root >= 0 ? lazyGather.find(root) : lazyGather.end();
      if (gather != lazyGather.end() && lazyZeroDone.insert(root).second)
        gatherParameters(root);
    }
    int64_t pos = pending.size();
    for (int b : operands) {
      if (b < 0) // an absent optional operand (load_batch)
        continue;
      LogicalBuffer &root = buffers[buffers[b].root < 0 ? b : buffers[b].root];
      root.first = std::min(root.first, pos);
      root.last = std::max(root.last, pos);
    }
    pending.push_back({opcode, std::move(operands), std::move(ints),
                       std::move(floats), lastOnly, emittingBackward});
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

  /// Keeps `b` alive up to the next instruction (a pending send).
  void keepAlive(int b) {
    LogicalBuffer &root = buffers[buffers[b].root < 0 ? b : buffers[b].root];
    root.last = std::max<int64_t>(root.last, pending.size());
  }
  bool pipelined() const { return parallel.pp > 1; }
  static int64_t stageOf(Operation *op) {
    auto s = op->getAttrOfType<IntegerAttr>("strata.stage");
    return s ? s.getInt() : 0;
  }
  /// Whether this rank runs `op` (its stage is on this pipeline device).
  bool onThisDevice(Operation *op) const {
    return !pipelined() || stageOf(op) % parallel.pp == parallel.ppIndex;
  }

  /// Waits for this micro-batch's ZeRO-2 gradient reduce-scatters and adds
  /// them into the gradient shards.
  void finishGradientShards();

  /// Plans the arena over root buffers by lifetime (persistent ones for
  /// the whole program; `output` up to its end) and adds every buffer and
  /// alias to the builder.
  MemoryPlanResult placeBuffers(rtf::ProgramBuilder &builder, int output,
                                uint64_t &persistentBytes,
                                EmitStats *stats = nullptr);

  // --- phases ---
  LogicalResult lowerPipeline(func::FuncOp step);
  LogicalResult lowerPipelineOp(Operation *op, int64_t microbatch);
  LogicalResult collectBuckets(func::FuncOp step);
  LogicalResult collectParams();
  LogicalResult bindGradients(func::FuncOp step);
  LogicalResult lowerCollective(Operation *op, bool &handled);
  /// The Llama family's ops (EmitLlamaOps.cpp); `handled` is false for any
  /// other op.
  LogicalResult lowerLlamaOp(Operation *op, bool &handled);
  /// Fused causal attention and its gradient (EmitAttentionOps.cpp).
  LogicalResult lowerAttentionOp(Operation *op, bool &handled);
  void planUpdates();
  void emitUpdate(rtf::ProgramBuilder &builder);
  void bindValue(Value v, int grad, Operation *sink);
  LogicalResult lowerOp(Operation *op);
  LogicalResult lowerOptimizer(func::FuncOp opt);
  LogicalResult lowerMatmul(MatmulOp op);

  ModuleOp module;
  const ParallelContext &parallel;
  std::vector<Bucket> buckets;
  /// Transient buffers zero-filled before their first use in a micro-batch.
  llvm::DenseSet<int> lazyZero, lazyZeroDone;
  /// Transient ZeRO-3 buffers -> (persistent shard, group id) to gather from.
  llvm::DenseMap<int, std::pair<int, int64_t>> lazyGather;
  /// Points ZeRO-3 parameters at their backward (or forward) gathers.
  void useGatheredValues(bool backward);
  /// Makes the ZeRO-3 bucket `root` available (waiting for its prefetch or
  /// gathering it) and prefetches the bucket used next.
  void gatherParameters(int root);
  /// ZeRO-3 buckets in order of first use (forward, then backward).
  std::vector<int> gatherOrder;
  /// Set while emitting gathers, whose operands must not trigger gathers.
  bool emittingGather = false;
  /// Set while lowering backward ops (from the autodiff seed on, or a
  /// pipeline's backward tasks).
  bool emittingBackward = false;
  /// Emits the eval sequence: the forward instructions, plus the waits of
  /// the requests they start, where the step waits for them.
  void emitEval(
      rtf::ProgramBuilder &builder,
      const std::function<std::vector<uint32_t>(const PendingInstruction &)>
          &operandsOf);
  /// Bucket buffers whose gather was started ahead, with the slot.
  llvm::DenseMap<int, int64_t> prefetchSlot;
  /// ZeRO-2 buckets whose reduce-scatter is in flight in this micro-batch.
  std::vector<int> shardsInFlight;
  std::vector<LogicalBuffer> buffers;
  std::vector<PendingInstruction> pending;
  llvm::DenseMap<Value, int> valueBuffer;
  llvm::DenseMap<Value, int> directBind;
  /// Explicit `grad += v` instructions, emitted where `at` would have been.
  llvm::DenseMap<Operation *, SmallVector<std::pair<Value, int>>> accumulateAt;
  llvm::DenseSet<Operation *> absorbed;
  /// Casts whose producer writes the cast's dtype itself (see result()).
  llvm::DenseSet<Operation *> foldedCasts;
  llvm::StringMap<ParamInfo> params;
  std::vector<std::string> paramOrder;
  /// Saved forward statistics the gradient ops reuse: layer_norm -> (mean,
  /// rstd), cross_entropy -> logsumexp.
  llvm::DenseMap<Operation *, std::pair<int, int>> savedStats;
  int tokens = -1, targets = -1, positions = -1, loss = -1;
  /// Lowering @decode_step: the return value is the logits, not a loss.
  bool decoding = false;
  // --- pipeline state ---
  /// Values that cross stages, numbered identically on every rank (tags).
  llvm::DenseMap<Value, int64_t> crossingId;
  /// Step loss (mean over micro-batches) on the last stage.
  int stepLoss = -1;
  /// Send slots in flight and the buffers they read.
  std::vector<int> slotBuffer;
  int64_t nextSendSlot = 0;
  int nextName = 0;
  rtf::OptimizerKind optimizerKind = rtf::OptimizerKind::AdamW;
  double weightDecay = 0.0;
  double adamBeta1 = 0.9, adamBeta2 = 0.999, adamEps = 1e-8;
  double sgdMomentum = 0.0;
  int64_t globalBatch = 1;
  double clip = 0.0;
};

int64_t getInt(DictionaryAttr d, StringRef key, int64_t fallback);
double getF64(DictionaryAttr d, StringRef key, double fallback);
std::string getStr(DictionaryAttr d, StringRef key, StringRef fallback);

} // namespace strata::emit

#endif // STRATA_COMPILER_EMIT_PROGRAMEMITTER_H
