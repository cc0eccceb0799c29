//===- TestPrograms.cpp - Hand-built programs for runtime tests -----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "TestPrograms.h"

#include "runtime/format/ProgramBuilder.h"

namespace strata::rt::testprograms {

Program buildMlpProgram(const MlpConfig &c) {
  ModelMeta meta;
  meta.family = "mlp";
  meta.vocab = c.vocab;
  meta.seqLen = c.seqLen;
  meta.microBatch = c.microBatch;
  meta.numMicrobatches = c.numMicrobatches;
  meta.globalBatch = c.microBatch * c.numMicrobatches;
  meta.seed = 1234;
  meta.planDescription = "hand-built MLP test program, 1 rank";
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

  ProgramBuilder b(meta, train);
  b.addInputs();
  const int64_t N = c.microBatch * c.seqLen, H = c.hidden, F = c.ffn,
                V = c.vocab;
  uint32_t wte =
      b.addParam("wte.weight", {V, H}, InitKind::Normal, c.initStd, true);
  uint32_t w1 =
      b.addParam("fc1.weight", {H, F}, InitKind::Normal, c.initStd, true);
  uint32_t b1 = b.addParam("fc1.bias", {F}, InitKind::Zeros, 0, false);
  uint32_t w2 =
      b.addParam("fc2.weight", {F, V}, InitKind::Normal, c.initStd, true);
  uint32_t b2 = b.addParam("fc2.bias", {V}, InitKind::Zeros, 0, false);
  uint32_t x = b.addBuffer("x", {N, H});
  uint32_t h = b.addBuffer("h", {N, F});
  uint32_t g = b.addBuffer("g", {N, F});
  uint32_t logits = b.addBuffer("logits", {N, V});
  uint32_t lse = b.addBuffer("lse", {N});
  uint32_t dlogits = b.addBuffer("dlogits", {N, V});
  uint32_t dg = b.addBuffer("dg", {N, F});
  uint32_t dh = b.addBuffer("dh", {N, F});
  uint32_t dx = b.addBuffer("dx", {N, H});

  const auto mb = SequenceKind::Microbatch;
  auto linear = [&](uint32_t in, uint32_t w, uint32_t bias, uint32_t out,
                    int64_t k, int64_t n) {
    b.emit(mb, Opcode::Matmul, {in, b.value(w), out}, {1, N, n, k, 0, 0, 0},
           {1.0, 0.0});
    b.emit(mb, Opcode::BiasAdd, {out, b.value(bias), out}, {n});
  };
  b.emit(mb, Opcode::EmbeddingFwd, {b.tokens(), b.value(wte), x}, {V, H, 0});
  linear(x, w1, b1, h, H, F);
  b.emit(mb, Opcode::GeluFwd, {h, g});
  linear(g, w2, b2, logits, F, V);
  b.emit(mb, Opcode::CrossEntropyFwd, {logits, b.targets(), b.loss(), lse},
         {V});
  // The step's loss is the mean over all tokens of all micro-batches.
  double scale = 1.0 / double(N * c.numMicrobatches);
  b.emit(mb, Opcode::CrossEntropyBwd, {logits, b.targets(), lse, dlogits}, {V},
         {scale});
  b.emit(mb, Opcode::BiasGrad, {dlogits, b.grad(b2)}, {V});
  b.emit(mb, Opcode::Matmul, {g, dlogits, b.grad(w2)}, {1, F, V, N, 1, 0, 0},
         {1.0, 1.0});
  b.emit(mb, Opcode::Matmul, {dlogits, b.value(w2), dg}, {1, N, F, V, 0, 1, 0},
         {1.0, 0.0});
  b.emit(mb, Opcode::GeluBwd, {h, dg, dh});
  b.emit(mb, Opcode::BiasGrad, {dh, b.grad(b1)}, {F});
  b.emit(mb, Opcode::Matmul, {x, dh, b.grad(w1)}, {1, H, F, N, 1, 0, 0},
         {1.0, 1.0});
  b.emit(mb, Opcode::Matmul, {dh, b.value(w1), dx}, {1, N, H, F, 0, 1, 0},
         {1.0, 0.0});
  b.emit(mb, Opcode::EmbeddingBwd, {b.tokens(), dx, b.grad(wte)}, {V, H, 0});
  b.emitZeroGrads();
  b.emitOptimizerStep();
  return b.finish();
}

} // namespace strata::rt::testprograms
