//===- EmitUpdate.cpp - Parameters, gradient buckets, optimizer step ------===//
//
// Where parameters, gradients and optimizer state live (whole, or in flat
// data-parallel buckets), which ranges this rank updates (ZeRO), and the
// update sequence: gradient reductions, global norm, clipping, the
// optimizer, and the all-gather of ZeRO-sharded parameters.
//
//===----------------------------------------------------------------------===//

#include "compiler/emit/ProgramEmitter.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/SaveAndRestore.h"

#include <algorithm>

namespace strata::emit {

LogicalResult ProgramEmitter::collectBuckets(func::FuncOp step) {
  llvm::StringMap<int> seen;
  for (auto bucketOp : step.getOps<GradientBucketOp>()) {
    if (!onThisDevice(bucketOp))
      continue;
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
  // Pipeline devices holding each tied parameter: the lowest one counts it
  // toward the gradient norm.
  llvm::StringMap<int64_t> lowestDevice;
  module.walk([&](ParamOp p) {
    int64_t d = pipelined() ? stageOf(p) % parallel.pp : 0;
    auto [it, inserted] = lowestDevice.try_emplace(p.getName(), d);
    if (!inserted)
      it->second = std::min(it->second, d);
  });
  WalkResult r = module.walk([&](ParamOp p) {
    if (!onThisDevice(p))
      return WalkResult::advance();
    auto it = params.find(p.getName());
    if (it != params.end()) {
      if (it->second.op.getType() != p.getType()) {
        p.emitError("parameter '")
            << p.getName() << "' is declared twice with different types";
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
    info.tied = p->hasAttr("strata.tied");
    info.normOwner =
        (sharded || parallel.tpIndex == 0) &&
        (!info.tied || lowestDevice.lookup(p.getName()) == parallel.ppIndex);
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
    // ZeRO-2 keeps only the shard of the gradient between micro-batches: the
    // full flat gradient lives from its first write in a micro-batch's
    // backward to its reduce-scatter.
    b.shardGradsEachMicrobatch = b.scatter && parallel.zero >= 2;
    b.flatGrad = newBuffer(base + ".grad", {b.elements}, rtf::DType::F32,
                           !b.shardGradsEachMicrobatch);
    bool low = parallel.bf16GradReduce;
    if (b.shardGradsEachMicrobatch) {
      lazyZero.insert(b.flatGrad);
      b.gradPartial = newBuffer(base + ".grad_partial", {b.elements / size},
                                low ? rtf::DType::BF16 : rtf::DType::F32);
    }
    if (low) {
      // Persistent unless the reduction finishes inside the micro-batch.
      b.lowGrad = newBuffer(base + ".grad_bf16", {b.elements}, rtf::DType::BF16,
                            !b.shardGradsEachMicrobatch);
      if (b.scatter && !b.shardGradsEachMicrobatch)
        b.lowShard = newBuffer(base + ".grad_shard_bf16", {b.elements / size},
                               rtf::DType::BF16, true);
    }
    b.shardParams = b.scatter && parallel.zero >= 3;
    if (b.scatter) {
      b.flatValue = newBuffer(base + ".value", {b.elements}, rtf::DType::F32,
                              !b.shardParams);
      b.gradShard = newBuffer(base + ".grad_shard", {b.elements / size},
                              rtf::DType::F32, true);
    }
    if (b.shardParams) {
      b.valueShard = newBuffer(base + ".value_shard", {b.elements / size},
                               rtf::DType::F32, true);
      b.flatValueBackward =
          newBuffer(base + ".value_backward", {b.elements}, rtf::DType::F32);
      int64_t g = parallel.groupIds.at(b.group);
      lazyGather[b.flatValue] = {b.valueShard, g};
      lazyGather[b.flatValueBackward] = {b.valueShard, g};
    }
    for (auto [name, offset] : llvm::zip(b.params, b.offsets)) {
      ParamInfo &info = params[name];
      auto shape = cast<RankedTensorType>(info.op.getType()).getShape();
      info.grad = viewOf(b.flatGrad, name + ".grad", shape, offset * 4);
      if (b.shardParams) {
        info.valueForward =
            viewOf(b.flatValue, name + ".gathered", shape, offset * 4);
        info.valueBackward =
            viewOf(b.flatValueBackward, name + ".gathered_backward", shape,
                   offset * 4);
      } else if (b.scatter) {
        info.value = viewOf(b.flatValue, name, shape, offset * 4);
      }
    }
  }
  for (const std::string &name : paramOrder) {
    ParamInfo &info = params[name];
    auto shape = cast<RankedTensorType>(info.op.getType()).getShape();
    if (info.value < 0 && info.valueForward < 0)
      info.value = newBuffer(name, shape, rtf::DType::F32, true);
    if (info.grad < 0)
      info.grad = newBuffer(name + ".grad", shape, rtf::DType::F32, true);
  }
  return success();
}

LogicalResult ProgramEmitter::lowerOptimizer(func::FuncOp opt) {
  for (Operation &op : opt.getBody().front().without_terminator()) {
    auto mark = [&](StringRef name, double wd) -> LogicalResult {
      auto it = params.find(name);
      if (it == params.end() && pipelined())
        return success(); // a parameter of another pipeline stage
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
              return mark(u.getParam(), u.getWeightDecay().convertToDouble());
            })
            .Case([&](SgdUpdateOp u) {
              optimizerKind = rtf::OptimizerKind::Sgd;
              sgdMomentum = u.getMomentum().convertToDouble();
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
    // Plain data-parallel replicas hold copies: replica 0 counts them.
    if (!distinct && parallel.dpIndex != 0)
      p.normOwner = false;
    if (begin >= end) {
      if (p.valueForward >= 0)
        p.value = viewOf(buckets[p.bucket].valueShard, name, {0}, 0);
      if (p.bucket >= 0 && buckets[p.bucket].shardGradsEachMicrobatch)
        p.descGrad =
            viewOf(buckets[p.bucket].gradShard, name + ".grad_piece", {0}, 0);
      // Another replica updates all of it: empty state ranges keep the
      // parameter table uniform (the runtime saves nothing for them).
      for (int k = 0; k < nstate; ++k)
        p.emptyState.push_back(
            newBuffer(name + stateNames[k], {0}, rtf::DType::F32, true));
      continue;
    }
    UpdatePiece piece;
    piece.paramOffset = begin;
    bool whole = begin == 0 && end == n;
    if (p.valueForward >= 0) {
      // ZeRO-3: the piece of the persistent shard is the parameter's value.
      const Bucket &b = buckets[p.bucket];
      int64_t shard = b.elements / parallel.groupSize(b.group);
      int64_t off = b.offsets[llvm::find(b.params, name) - b.params.begin()];
      int64_t inShard = off + begin - parallel.groupRank(b.group) * shard;
      p.value = viewOf(b.valueShard, name, {end - begin}, inShard * 4);
      piece.value = p.value;
    } else {
      piece.value =
          whole ? p.value
                : viewOf(p.value, name + ".update", {end - begin}, begin * 4);
    }
    if (p.bucket >= 0 && buckets[p.bucket].scatter) {
      // The reduced gradient lives in the bucket's shard buffer.
      const Bucket &b = buckets[p.bucket];
      int64_t shard = b.elements / parallel.groupSize(b.group);
      int64_t off = b.offsets[llvm::find(b.params, name) - b.params.begin()];
      int64_t inShard = off + begin - parallel.groupRank(b.group) * shard;
      piece.grad =
          viewOf(b.gradShard, name + ".grad_piece", {end - begin}, inShard * 4);
    } else {
      piece.grad = p.grad;
    }
    if (p.bucket >= 0 && buckets[p.bucket].shardGradsEachMicrobatch)
      p.descGrad = piece.grad;
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
  for (const Bucket &bucket : buckets) {
    if (bucket.shardGradsEachMicrobatch)
      continue;
    b.emit(U, rtf::Opcode::Wait, {}, {bucket.slot});
    // bf16 reduction: back into the float32 (shard of the) main gradient.
    if (bucket.lowShard >= 0)
      b.emit(U, rtf::Opcode::Convert,
             {id(bucket.lowShard), id(bucket.gradShard)});
    else if (bucket.lowGrad >= 0)
      b.emit(U, rtf::Opcode::Convert,
             {id(bucket.lowGrad), id(bucket.flatGrad)});
  }

  // Parameters held by several pipeline stages (tied embeddings) sum their
  // partial gradients across those stages, and, being outside the buckets,
  // across data-parallel replicas.
  for (const std::string &name : paramOrder) {
    const ParamInfo &p = params[name];
    if (p.tied && parallel.groupIds.count("tied"))
      b.emit(U, rtf::Opcode::AllReduce, {id(p.grad)},
             {parallel.groupIds.at("tied"), 0});
    if (p.bucket < 0 && parallel.dp > 1)
      b.emit(U, rtf::Opcode::AllReduce, {id(p.grad)},
             {parallel.groupIds.at("dp"), 0});
  }

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
  // Every gradient element is owned by exactly one rank of the world.
  if (parallel.worldSize > 1)
    b.emit(U, rtf::Opcode::AllReduce, {sumsq},
           {parallel.groupIds.at("world"), 0});
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
    if (!bucket.scatter || bucket.shardParams)
      continue;
    int64_t shard = bucket.elements / parallel.groupSize(bucket.group);
    int64_t start = parallel.groupRank(bucket.group) * shard;
    uint32_t mine =
        b.addAlias("bucket" + std::to_string(bucket.slot) + ".value_mine",
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

} // namespace strata::emit

namespace strata::emit {

void ProgramEmitter::finishGradientShards() {
  for (int index : shardsInFlight) {
    const Bucket &b = buckets[index];
    keepAlive(b.flatGrad);
    if (b.lowGrad >= 0)
      keepAlive(b.lowGrad);
    emit(rtf::Opcode::Wait, {}, {b.slot});
    emit(rtf::Opcode::Accumulate, {b.gradPartial, b.gradShard});
  }
  shardsInFlight.clear();
}

} // namespace strata::emit

namespace strata::emit {

void ProgramEmitter::useGatheredValues(bool backward) {
  for (const std::string &name : paramOrder) {
    ParamInfo &p = params[name];
    Value v = p.op.getResult();
    if (p.valueForward >= 0 && valueBuffer.count(v))
      valueBuffer[v] = backward ? p.valueBackward : p.valueForward;
  }
}

} // namespace strata::emit

namespace strata::emit {

void ProgramEmitter::gatherParameters(int root) {
  llvm::SaveAndRestore<bool> guard(emittingGather, true);
  auto [shard, group] = lazyGather.at(root);
  auto pre = prefetchSlot.find(root);
  if (pre != prefetchSlot.end()) {
    emit(rtf::Opcode::Wait, {}, {pre->second});
    prefetchSlot.erase(pre);
  } else {
    emit(rtf::Opcode::AllGather, {shard, root}, {group});
  }
  // Prefetch: start the next bucket's gather so it overlaps this bucket's
  // compute (one in flight, in the last request slot).
  auto it = llvm::find(gatherOrder, root);
  if (it == gatherOrder.end() || it + 1 == gatherOrder.end())
    return;
  int next = *(it + 1);
  if (lazyZeroDone.count(next) || prefetchSlot.count(next) ||
      !prefetchSlot.empty())
    return;
  auto [nextShard, nextGroup] = lazyGather.at(next);
  int64_t slot = rtf::kNumRequestSlots - 1;
  emit(rtf::Opcode::AllGatherStart, {nextShard, next}, {nextGroup, slot});
  prefetchSlot[next] = slot;
}

} // namespace strata::emit
