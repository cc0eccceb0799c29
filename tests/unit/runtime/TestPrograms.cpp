//===- TestPrograms.cpp - Hand-built programs for runtime tests -----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "TestPrograms.h"

#include "runtime/format/ProgramBuilder.h"

#include <algorithm>

namespace strata::rt::testprograms {

namespace {

ModelMeta mlpMeta(const MlpConfig &c, uint32_t replicas) {
  ModelMeta meta;
  meta.family = "mlp";
  meta.vocab = c.vocab;
  meta.seqLen = c.seqLen;
  meta.microBatch = c.microBatch;
  meta.numMicrobatches = c.numMicrobatches;
  meta.globalBatch = c.microBatch * c.numMicrobatches * replicas;
  meta.seed = 1234;
  meta.worldSize = replicas;
  meta.planDescription = replicas == 1 ? "hand-built MLP test program, 1 rank"
                                       : "hand-built data-parallel MLP, dp=" +
                                             std::to_string(replicas);
  return meta;
}

TrainConfig mlpTrain(const MlpConfig &c) {
  TrainConfig train;
  train.optimizer = c.optimizer;
  train.lr = c.lr;
  train.momentum = 0.9;
  train.weightDecay = 0.01;
  train.schedule = LrScheduleKind::Cosine;
  train.warmupSteps = 3;
  train.totalSteps = 30;
  train.minLr = c.lr / 10;
  train.gradClip = c.gradClip;
  train.defaultSteps = 30;
  return train;
}

/// Emits one replica's MLP. With dpGroup >= 0 the gradients are summed over
/// that group of `replicas` ranks.
void emitMlp(ProgramBuilder &b, const MlpConfig &c, int64_t dpGroup,
             const DataParallelConfig &dp) {
  const uint32_t replicas = dpGroup >= 0 ? dp.replicas : 1;
  const uint32_t rank = b.rankProgram().rank;
  b.addInputs();
  b.setDataRowStart(int64_t(rank) * c.microBatch * c.numMicrobatches);
  const int64_t N = c.microBatch * c.seqLen, H = c.hidden, F = c.ffn,
                V = c.vocab;
  const bool zero = dp.zero && dpGroup >= 0, zero3 = zero && dp.zero3;
  // The buffer the step reads each parameter from: its value, or under
  // ZeRO-3 the gathered copy.
  std::vector<uint32_t> whole;
  auto addParam = [&](const std::string &name, std::vector<int64_t> shape,
                      InitKind init, double std, bool wd) {
    if (!zero) {
      uint32_t index = b.addParam(name, shape, init, std, wd);
      whole.push_back(b.value(index));
      return index;
    }
    ParamDesc p;
    p.name = name;
    int64_t slice = shapeElements(shape) / replicas;
    p.value = b.addBuffer(name, zero3 ? std::vector<int64_t>{slice} : shape);
    whole.push_back(zero3 ? b.addBuffer(name + ".full", shape) : p.value);
    p.grad = b.addBuffer(name + ".grad", shape);
    for (const char *suffix : {".exp_avg", ".exp_avg_sq"})
      p.state.push_back(b.addBuffer(name + suffix, {slice}));
    p.stateOffset = int64_t(rank) * slice;
    p.valueSharded = zero3;
    if (zero3)
      p.boxShape = shape;
    p.init = init;
    p.initStd = std;
    p.weightDecay = wd;
    return b.addParamWithBuffers(p);
  };
  uint32_t wte =
      addParam("wte.weight", {V, H}, InitKind::Normal, c.initStd, true);
  uint32_t w1 =
      addParam("fc1.weight", {H, F}, InitKind::Normal, c.initStd, true);
  uint32_t b1 = addParam("fc1.bias", {F}, InitKind::Zeros, 0, false);
  uint32_t w2 =
      addParam("fc2.weight", {F, V}, InitKind::Normal, c.initStd, true);
  uint32_t b2 = addParam("fc2.bias", {V}, InitKind::Zeros, 0, false);
  uint32_t x = b.addBuffer("x", {N, H});
  uint32_t h = b.addBuffer("h", {N, F});
  uint32_t g = b.addBuffer("g", {N, F});
  uint32_t logits = b.addBuffer("logits", {N, V});
  uint32_t lse = b.addBuffer("lse", {N});
  uint32_t dlogits = b.addBuffer("dlogits", {N, V});
  uint32_t dg = b.addBuffer("dg", {N, F});
  uint32_t dh = b.addBuffer("dh", {N, F});
  uint32_t dx = b.addBuffer("dx", {N, H});

  // The gradient all-reduce starts overlap the rest of the last backward.
  std::vector<SequenceKind> kinds = {SequenceKind::Microbatch};
  if (dpGroup >= 0 && dp.overlap)
    kinds.push_back(SequenceKind::LastMicrobatch);
  for (SequenceKind mb : kinds) {
    bool last = mb == SequenceKind::LastMicrobatch;
    auto gradDone = [&](uint32_t param) {
      if (last)
        b.emit(mb, Opcode::AllReduceStart, {b.grad(param)},
               {dpGroup, 0, int64_t(param)});
    };
    auto linear = [&](uint32_t in, uint32_t w, uint32_t bias, uint32_t out,
                      int64_t k, int64_t n) {
      b.emit(mb, Opcode::Matmul, {in, whole[w], out}, {1, N, n, k, 0, 0, 0},
             {1.0, 0.0});
      b.emit(mb, Opcode::BiasAdd, {out, whole[bias], out}, {n});
    };
    b.emit(mb, Opcode::EmbeddingFwd, {b.tokens(), whole[wte], x}, {V, H, 0});
    linear(x, w1, b1, h, H, F);
    b.emit(mb, Opcode::GeluFwd, {h, g});
    linear(g, w2, b2, logits, F, V);
    b.emit(mb, Opcode::CrossEntropyFwd, {logits, b.targets(), b.loss(), lse},
           {V});
    // The step's loss is the mean over all tokens of the global batch.
    double scale = 1.0 / double(N * c.numMicrobatches * replicas);
    b.emit(mb, Opcode::CrossEntropyBwd, {logits, b.targets(), lse, dlogits},
           {V}, {scale});
    b.emit(mb, Opcode::BiasGrad, {dlogits, b.grad(b2)}, {V});
    gradDone(b2);
    b.emit(mb, Opcode::Matmul, {g, dlogits, b.grad(w2)}, {1, F, V, N, 1, 0, 0},
           {1.0, 1.0});
    gradDone(w2);
    b.emit(mb, Opcode::Matmul, {dlogits, whole[w2], dg}, {1, N, F, V, 0, 1, 0},
           {1.0, 0.0});
    b.emit(mb, Opcode::GeluBwd, {h, dg, dh});
    b.emit(mb, Opcode::BiasGrad, {dh, b.grad(b1)}, {F});
    gradDone(b1);
    b.emit(mb, Opcode::Matmul, {x, dh, b.grad(w1)}, {1, H, F, N, 1, 0, 0},
           {1.0, 1.0});
    gradDone(w1);
    b.emit(mb, Opcode::Matmul, {dh, whole[w1], dx}, {1, N, H, F, 0, 1, 0},
           {1.0, 0.0});
    b.emit(mb, Opcode::EmbeddingBwd, {b.tokens(), dx, b.grad(wte)}, {V, H, 0});
    gradDone(wte);
  }
  b.emitZeroGrads();
  const RankProgram &rp = b.rankProgram();
  if (zero3)
    for (uint32_t p = 0; p < rp.params.size(); ++p)
      b.emit(SequenceKind::StepBegin, Opcode::AllGather,
             {rp.params[p].value, whole[p]}, {dpGroup});
  if (dpGroup >= 0)
    for (uint32_t p = 0; p < rp.params.size(); ++p) {
      if (dp.overlap)
        b.emit(SequenceKind::Update, Opcode::Wait, {}, {int64_t(p)});
      else
        b.emit(SequenceKind::Update, Opcode::AllReduce, {b.grad(p)},
               {dpGroup, 0});
    }
  if (!zero) {
    b.emitOptimizerStep();
    return;
  }
  // ZeRO-1: the grads are whole and global, so the norm and clipping are as
  // in one rank; each replica then updates and gathers its slice (ZeRO-3:
  // updates its slice, gathered at the next step's start).
  const TrainConfig train = mlpTrain(c);
  uint32_t sumsq = b.addBuffer("grad_sumsq", {1}, DType::F64);
  b.rankProgram().gradSumSq = sumsq;
  std::vector<uint32_t> operands = {sumsq};
  for (const ParamDesc &p : rp.params)
    operands.push_back(p.grad);
  b.emit(SequenceKind::Update, Opcode::GradSumSq, operands);
  b.emit(SequenceKind::Update, Opcode::ClipGrads, operands, {},
         {train.gradClip});
  for (uint32_t i = 0; i < rp.params.size(); ++i) {
    ParamDesc p = rp.params[i];
    int64_t slice = rp.buffers[p.state[0]].numElements();
    uint64_t byteOffset = uint64_t(p.stateOffset) * 4;
    uint32_t value =
        zero3 ? p.value
              : b.addAlias(p.name + ".slice", p.value, {slice}, byteOffset);
    uint32_t grad =
        b.addAlias(p.name + ".grad.slice", p.grad, {slice}, byteOffset);
    b.emit(SequenceKind::Update, Opcode::AdamWStep,
           {value, grad, p.state[0], p.state[1]}, {},
           {train.beta1, train.beta2, train.eps,
            p.weightDecay ? train.weightDecay : 0.0});
    if (!zero3)
      b.emit(SequenceKind::Update, Opcode::AllGather, {value, p.value},
             {dpGroup});
  }
}

} // namespace

Program buildMlpProgram(const MlpConfig &c) {
  ProgramBuilder b(mlpMeta(c, 1), mlpTrain(c));
  emitMlp(b, c, -1, {});
  return b.finish();
}

Program buildDataParallelMlp(const MlpConfig &c, const DataParallelConfig &dp) {
  MultiRankProgramBuilder mb(mlpMeta(c, dp.replicas), mlpTrain(c));
  std::vector<uint32_t> all;
  for (uint32_t r = 0; r < dp.replicas; ++r)
    all.push_back(r);
  uint32_t group = mb.addGroup("dp", all);
  for (uint32_t r = 0; r < dp.replicas; ++r)
    emitMlp(mb.rank(r), c, group, dp);
  mb.setLossRanks(all);
  return mb.finish();
}

namespace {

ModelMeta shardedMeta(uint32_t world) {
  ModelMeta meta;
  meta.family = "zero3";
  meta.vocab = 8;
  meta.seqLen = 1;
  meta.microBatch = 1;
  meta.numMicrobatches = 1;
  meta.globalBatch = world;
  meta.seed = 77;
  meta.worldSize = world;
  meta.planDescription =
      "value-sharded layouts, " + std::to_string(world) + " ranks";
  return meta;
}

/// Row boxes of rows.weight: one per pair of ranks (per rank if odd).
uint32_t rowBoxes(uint32_t world) { return world % 2 == 0 ? world / 2 : world; }

void addLoss(ProgramBuilder &b) {
  b.setLoss(b.addBuffer("loss", {1}));
  b.emit(SequenceKind::Microbatch, Opcode::Fill, {b.loss()}, {}, {0.0});
}

} // namespace

Program buildValueShardedProgram(uint32_t world) {
  MultiRankProgramBuilder mb(shardedMeta(world), TrainConfig{});
  const uint32_t boxes = rowBoxes(world), perBox = world / boxes;
  const int64_t vocab = 3 * int64_t(boxes) - 1;
  for (uint32_t r = 0; r < world; ++r) {
    ProgramBuilder &b = mb.rank(r);
    addLoss(b);
    // Member `index` of `members` holds the index-th of equal ceil-sized
    // chunks of the box's n elements (the last ones may be short or empty).
    auto add = [&](const std::string &name, std::vector<int64_t> box,
                   int64_t index, int64_t members, InitKind init) {
      int64_t n = shapeElements(box);
      int64_t chunk = (n + members - 1) / members;
      int64_t begin = std::min(n, index * chunk),
              end = std::min(n, begin + chunk);
      ParamDesc p;
      p.name = name;
      p.value = b.addBuffer(name, {end - begin});
      p.grad = b.addBuffer(name + ".grad", {end - begin});
      for (const char *suffix : {".exp_avg", ".exp_avg_sq"})
        p.state.push_back(b.addBuffer(name + suffix, {end - begin}));
      p.stateOffset = begin;
      p.valueSharded = true;
      p.boxShape = box;
      p.init = init;
      p.initStd = 1.0;
      ParamDesc &added = b.rankProgram().params[b.addParamWithBuffers(p)];
      return &added;
    };
    ParamDesc *dense = add("dense.weight", {6, 3}, r, world, InitKind::Normal);
    dense->globalShape = {5, 3};
    dense->shardStart = {0, 0};
    ParamDesc *rows =
        add("rows.weight", {3, 2}, r % perBox, perBox, InitKind::Normal);
    rows->globalShape = {vocab, 2};
    rows->shardStart = {3 * int64_t(r / perBox), 0};
    // Rank 0 holds all of it: one chunk of three, the others' start past it.
    ParamDesc *tiny = add("tiny.bias", {3}, r == 0 ? 0 : 1, 1, InitKind::Ones);
    tiny->boxShape.clear(); // The default box: the whole tensor.
    tiny->globalShape = {3};
    tiny->shardStart = {0};
    ParamDesc *view = add("view.weight", {2, 3, 2}, r, world, InitKind::Normal);
    view->boxShape.clear();
    view->globalShape = {2, 3, 2};
    view->shardStart = {0, 0, 0};
    view->checkpointShape = {2, 6};
    b.addParam("plain.weight", {2, 2}, InitKind::Normal, 1.0, false);
  }
  return mb.finish();
}

Program buildValueShardedReference(uint32_t world) {
  ModelMeta meta = shardedMeta(1);
  meta.planDescription = "value-sharded layouts, unsharded reference";
  ProgramBuilder b(meta, TrainConfig{});
  addLoss(b);
  const int64_t vocab = 3 * int64_t(rowBoxes(world)) - 1;
  b.addParam("dense.weight", {5, 3}, InitKind::Normal, 1.0, false);
  b.addParam("rows.weight", {vocab, 2}, InitKind::Normal, 1.0, false);
  b.addParam("tiny.bias", {3}, InitKind::Ones, 1.0, false);
  uint32_t view =
      b.addParam("view.weight", {2, 3, 2}, InitKind::Normal, 1.0, false);
  b.rankProgram().params[view].checkpointShape = {2, 6};
  b.addParam("plain.weight", {2, 2}, InitKind::Normal, 1.0, false);
  return b.finish();
}

} // namespace strata::rt::testprograms
