//===- EmitPipeline.cpp - Pipeline-parallel schedules ---------------------===//
//
// A pipeline rank runs the ops of its stage(s) for every micro-batch in the
// order its schedule dictates (GPipe, 1F1B, or Megatron-LM's interleaved
// 1F1B), as one flat instruction sequence. Each micro-batch gets its own
// buffers, so the memory planner sees exactly which activations are in
// flight. Values that cross stages are sent without blocking right after
// they are computed and received (blocking) right before their first use;
// the tag names the value and the micro-batch.
//
//===----------------------------------------------------------------------===//

#include "compiler/emit/ProgramEmitter.h"

namespace strata::emit {

namespace {

struct Task {
  bool forward;
  int64_t chunk; ///< model chunk on this device, 0 .. vpp-1
  int64_t microbatch;
};

std::vector<Task> buildSchedule(const ParallelContext &pc) {
  int64_t m = pc.numMicrobatches, pp = pc.pp, s = pc.ppIndex, v = pc.vpp;
  std::vector<Task> tasks;
  if (pc.schedule == "gpipe") {
    for (int64_t c = 0; c < v; ++c)
      for (int64_t i = 0; i < m; ++i)
        tasks.push_back({true, c, i});
    for (int64_t c = v - 1; c >= 0; --c)
      for (int64_t i = 0; i < m; ++i)
        tasks.push_back({false, c, i});
    return tasks;
  }
  if (v == 1) {
    // 1F1B: fill the pipeline, then alternate, then drain.
    int64_t warmup = std::min(pp - 1 - s, m);
    for (int64_t i = 0; i < warmup; ++i)
      tasks.push_back({true, 0, i});
    for (int64_t i = 0; i + warmup < m; ++i) {
      tasks.push_back({true, 0, i + warmup});
      tasks.push_back({false, 0, i});
    }
    for (int64_t i = std::max<int64_t>(m - warmup, 0); i < m; ++i)
      tasks.push_back({false, 0, i});
    return tasks;
  }
  // Interleaved 1F1B (Narayanan et al. 2021): micro-batches advance in
  // groups of pp through the device's chunks in turn.
  int64_t total = m * v;
  auto chunkOf = [&](int64_t k, bool forward) {
    int64_t c = (k % (pp * v)) / pp;
    return forward ? c : v - 1 - c;
  };
  auto microbatchOf = [&](int64_t k) { return (k / (pp * v)) * pp + k % pp; };
  int64_t warmup = std::min((pp - s - 1) * 2 + (v - 1) * pp, total);
  for (int64_t k = 0; k < warmup; ++k)
    tasks.push_back({true, chunkOf(k, true), microbatchOf(k)});
  for (int64_t k = 0; k + warmup < total; ++k) {
    tasks.push_back(
        {true, chunkOf(k + warmup, true), microbatchOf(k + warmup)});
    tasks.push_back({false, chunkOf(k, false), microbatchOf(k)});
  }
  for (int64_t k = std::max<int64_t>(total - warmup, 0); k < total; ++k)
    tasks.push_back({false, chunkOf(k, false), microbatchOf(k)});
  return tasks;
}

} // namespace

LogicalResult ProgramEmitter::lowerPipelineOp(Operation *op,
                                              int64_t microbatch) {
  int64_t m = parallel.numMicrobatches;
  auto tagOf = [&](Value v) {
    return (crossingId.lookup(v) * m + microbatch) % (int64_t(1) << 20);
  };
  // Operands computed on another device arrive here.
  for (Value v : op->getOperands()) {
    if (valueBuffer.count(v))
      continue;
    Operation *def = v.getDefiningOp();
    if (!def || onThisDevice(def))
      continue;
    FailureOr<rtf::DType> dt = dtypeOf(op, v.getType());
    if (failed(dt))
      return failure();
    int buf = newBuffer(freshName(op) + ".recv",
                        cast<RankedTensorType>(v.getType()).getShape(), *dt);
    emit(rtf::Opcode::Recv, {buf},
         {parallel.ppRanks[stageOf(def) % parallel.pp], tagOf(v)});
    valueBuffer[v] = buf;
  }

  if (auto in = dyn_cast<InputOp>(op)) {
    // Each micro-batch loads its own rows into its own buffers.
    StringRef name = in.getName();
    int slot = name == "tokens" ? 0 : name == "targets" ? 1 : 2;
    if (slot == 2 && name != "positions")
      return in.emitError("the runtime feeds the inputs 'tokens', "
                          "'targets' and 'positions' only");
    int buf = newBuffer(freshName(op),
                        cast<RankedTensorType>(in.getType()).getShape(),
                        rtf::DType::I32);
    std::vector<int> ops{-1, -1, -1};
    ops[slot] = buf;
    emit(rtf::Opcode::LoadBatch, ops, {microbatch});
    valueBuffer[in] = buf;
    return success();
  }
  if (isa<func::ReturnOp>(op))
    return success();
  // Data-parallel reductions start once, in the last micro-batch (ZeRO-2
  // reduce-scatters the gradients of every micro-batch).
  if (isa<GradientBucketOp>(op) && microbatch != m - 1 && parallel.zero < 2)
    return success();
  if (failed(lowerOp(op)))
    return failure();
  if (isa<CrossEntropyOp, VocabParallelCrossEntropyOp>(op))
    emit(rtf::Opcode::Accumulate, {operand(op->getResult(0)), stepLoss});

  // Results used on other devices leave now, without blocking.
  for (Value r : op->getResults()) {
    if (!crossingId.count(r))
      continue;
    SmallVector<int64_t> devices;
    for (Operation *user : r.getUsers())
      if (!onThisDevice(user))
        devices.push_back(stageOf(user) % parallel.pp);
    llvm::sort(devices);
    devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
    for (int64_t d : devices) {
      int64_t firstSlot = buckets.size();
      int64_t slot =
          firstSlot + nextSendSlot++ % (rtf::kNumRequestSlots - firstSlot);
      if (slotBuffer[slot] >= 0) {
        keepAlive(slotBuffer[slot]);
        emit(rtf::Opcode::Wait, {}, {slot});
      }
      emit(rtf::Opcode::SendStart, {operand(r)},
           {parallel.ppRanks[d], tagOf(r), slot});
      slotBuffer[slot] = operand(r);
    }
  }
  return success();
}

LogicalResult ProgramEmitter::lowerPipeline(func::FuncOp step) {
  int64_t numStages = parallel.pp * parallel.vpp;
  std::vector<SmallVector<Operation *>> forwardOps(numStages),
      backwardOps(numStages);
  bool backward = false;
  int64_t nextId = 0;
  for (Operation &op : step.getBody().front()) {
    if (op.hasAttr("strata.backward_begin"))
      backward = true;
    if (stageOf(&op) >= numStages)
      return op.emitError("is on stage ")
             << stageOf(&op) << " but the plan has " << numStages;
    for (Value r : op.getResults())
      if (llvm::any_of(r.getUsers(), [&](Operation *u) {
            return stageOf(u) != stageOf(&op);
          }))
        crossingId.try_emplace(r, nextId++);
    if (!onThisDevice(&op) || isa<func::ReturnOp>(op))
      continue;
    (backward ? backwardOps : forwardOps)[stageOf(&op)].push_back(&op);
  }

  slotBuffer.assign(rtf::kNumRequestSlots, -1);
  bool lastDevice = parallel.ppIndex == parallel.pp - 1;
  if (lastDevice) {
    stepLoss = newBuffer("step_loss", {1}, rtf::DType::F32, true);
    emit(rtf::Opcode::Fill, {stepLoss}, {}, {0.0});
  }
  // One value -> buffer map (and saved statistics) per micro-batch.
  int64_t m = parallel.numMicrobatches;
  std::vector<llvm::DenseMap<Value, int>> instanceBuffers(m);
  std::vector<llvm::DenseMap<Operation *, std::pair<int, int>>> instanceStats(
      m);
  for (const Task &task : buildSchedule(parallel)) {
    int64_t stage = task.chunk * parallel.pp + parallel.ppIndex;
    std::swap(valueBuffer, instanceBuffers[task.microbatch]);
    std::swap(savedStats, instanceStats[task.microbatch]);
    LogicalResult r = success();
    lazyZeroDone.clear();
    emittingBackward = !task.forward;
    useGatheredValues(/*backward=*/!task.forward);
    for (Operation *op : task.forward ? forwardOps[stage] : backwardOps[stage])
      if (failed(r = lowerPipelineOp(op, task.microbatch)))
        break;
    finishGradientShards();
    std::swap(valueBuffer, instanceBuffers[task.microbatch]);
    std::swap(savedStats, instanceStats[task.microbatch]);
    if (failed(r))
      return failure();
  }
  emittingBackward = false;
  // Every send completes within the step.
  for (auto [slot, buf] : llvm::enumerate(slotBuffer))
    if (buf >= 0) {
      keepAlive(buf);
      emit(rtf::Opcode::Wait, {}, {int64_t(slot)});
      slotBuffer[slot] = -1;
    }
  if (lastDevice)
    emit(rtf::Opcode::Scale, {stepLoss, stepLoss}, {}, {1.0 / double(m)});
  return success();
}

} // namespace strata::emit
