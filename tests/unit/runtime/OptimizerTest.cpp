//===- OptimizerTest.cpp - LR schedule, AdamW, SGD and clipping -----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Device.h"
#include "runtime/core/LrSchedule.h"
#include "runtime/cpu/CpuDevice.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/format/OpSchema.h"
#include "runtime/format/ProgramBuilder.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace strata::rt;

namespace {

TEST(LrScheduleTest, WarmupThenCosineAndLinear) {
  TrainConfig c;
  c.lr = 1.0;
  c.minLr = 0.1;
  c.warmupSteps = 4;
  c.totalSteps = 14;
  c.schedule = LrScheduleKind::Cosine;
  EXPECT_DOUBLE_EQ(learningRate(c, 0), 0.25);
  EXPECT_DOUBLE_EQ(learningRate(c, 3), 1.0);
  EXPECT_DOUBLE_EQ(learningRate(c, 4), 1.0);               // p = 0
  EXPECT_NEAR(learningRate(c, 9), 0.1 + 0.9 * 0.5, 1e-15); // p = 1/2
  EXPECT_DOUBLE_EQ(learningRate(c, 14), 0.1);              // p = 1
  EXPECT_DOUBLE_EQ(learningRate(c, 100), 0.1);             // clamped
  c.schedule = LrScheduleKind::Linear;
  EXPECT_NEAR(learningRate(c, 9), 0.55, 1e-15);
  EXPECT_NEAR(learningRate(c, 6), 1.0 - 0.9 * 0.2, 1e-15);
  c.schedule = LrScheduleKind::Constant;
  EXPECT_DOUBLE_EQ(learningRate(c, 1), 0.5);
  EXPECT_DOUBLE_EQ(learningRate(c, 50), 1.0);
  c.warmupSteps = 0;
  c.schedule = LrScheduleKind::Cosine;
  c.totalSteps = 0; // Degenerate decay: one step at lr, then min_lr.
  EXPECT_DOUBLE_EQ(learningRate(c, 0), 1.0);
  EXPECT_DOUBLE_EQ(learningRate(c, 1), 0.1);
}

TEST(OptimizerTest, AdamWMatchesHandComputedSteps) {
  const double lr = 0.1, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.5;
  std::vector<float> p = {1.0f, -2.0f}, m = {0, 0}, v = {0, 0};
  std::vector<std::vector<float>> grads = {{0.5f, -1.0f}, {0.25f, 2.0f}};
  double hp[2] = {1.0, -2.0}, hm[2] = {0, 0}, hv[2] = {0, 0};
  for (int step = 1; step <= 2; ++step) {
    const auto &g = grads[step - 1];
    cpu::adamwStep(p.data(), g.data(), m.data(), v.data(), 2, lr, b1, b2, eps,
                   wd, step);
    for (int i = 0; i < 2; ++i) {
      hp[i] *= 1 - lr * wd;
      hm[i] = b1 * hm[i] + (1 - b1) * g[i];
      hv[i] = b2 * hv[i] + (1 - b2) * g[i] * g[i];
      double mhat = hm[i] / (1 - std::pow(b1, step));
      double denom = std::sqrt(hv[i]) / std::sqrt(1 - std::pow(b2, step)) + eps;
      hp[i] -= lr * mhat / denom;
      EXPECT_NEAR(p[i], hp[i], 1e-6) << "step " << step;
      EXPECT_NEAR(m[i], hm[i], 1e-7);
      EXPECT_NEAR(v[i], hv[i], 1e-7);
    }
  }
}

TEST(OptimizerTest, SgdMomentumMatchesTorchSemantics) {
  const double lr = 0.1, mom = 0.9, wd = 0.01;
  std::vector<float> p = {1.0f, 2.0f}, buf = {0, 0};
  std::vector<float> g1 = {0.5f, -0.5f}, g2 = {1.0f, 0.0f};
  cpu::sgdStep(p.data(), g1.data(), buf.data(), 2, lr, mom, wd);
  // Step 1: buf = g + wd p (torch clones it); p -= lr buf.
  double b0 = 0.5 + 0.01 * 1.0, p0 = 1.0 - 0.1 * b0;
  EXPECT_NEAR(buf[0], b0, 1e-7);
  EXPECT_NEAR(p[0], p0, 1e-7);
  cpu::sgdStep(p.data(), g2.data(), buf.data(), 2, lr, mom, wd);
  double b1 = 0.9 * b0 + (1.0 + 0.01 * p0), p1 = p0 - 0.1 * b1;
  EXPECT_NEAR(buf[0], b1, 1e-6);
  EXPECT_NEAR(p[0], p1, 1e-6);
}

/// Runs an update-only program: grad_sumsq, clip_grads, sgd_step.
TEST(OptimizerTest, ClipGradsLikeTorch) {
  ModelMeta meta;
  meta.vocab = 4;
  meta.seqLen = 2;
  meta.microBatch = 1;
  meta.globalBatch = 1;
  TrainConfig train;
  train.optimizer = OptimizerKind::Sgd;
  train.gradClip = 1.0;
  train.lr = 1.0;
  for (double maxNorm : {1.0, 10.0}) {
    train.gradClip = maxNorm;
    ProgramBuilder b(meta, train);
    b.addInputs();
    uint32_t w = b.addParam("w", {2}, InitKind::Zeros, 0, false);
    b.emitOptimizerStep();
    Program program = b.finish();
    const RankProgram &rp = program.ranks[0];
    auto device = createCpuDevice();
    device->prepare(rp);
    float grad[2] = {3.0f, 4.0f};
    device->upload(rp.buffers[b.grad(w)].offset, grad, 8);
    device->run(SequenceKind::Update, ExecContext{0, 1.0});
    float p[2];
    double sumsq;
    device->download(rp.buffers[b.value(w)].offset, p, 8);
    device->download(rp.buffers[rp.gradSumSq].offset, &sumsq, 8);
    EXPECT_EQ(sumsq, 25.0);
    double coef = std::min(1.0, maxNorm / (5.0 + 1e-6));
    EXPECT_NEAR(p[0], -3.0 * coef, 1e-6) << maxNorm;
    EXPECT_NEAR(p[1], -4.0 * coef, 1e-6) << maxNorm;
  }
}

TEST(OptimizerTest, EveryOpcodeHasACpuKernel) {
  for (const OpSchema &s : allOpSchemas())
    EXPECT_NE(cpu::lookupCpuKernel(s.opcode), nullptr) << s.name;
}

} // namespace
