//===- CompiledMemoryTest.cpp - CPU memory terms, computed by hand --------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// On CPU ranks the predicted peak is what the compiled program holds
// (docs/cost-model.md, "What the compiled program holds"); each term here is
// derived by hand from the buffers the emitter keeps. The same shapes are
// compiled and compared with their arena in tests/e2e/memory_prediction.py.
//
//===----------------------------------------------------------------------===//

#include "PlannerTestUtils.h"

#include "compiler/planner/CostModel.h"

#include <gtest/gtest.h>

using namespace strata::planner;
using namespace strata::planner::test;

namespace {

constexpr double b = 2, s = 128, h = 64, f = 256, V = 512, a = 4, L = 4;
constexpr double T = b * s;

/// The e2e test's gpt preset: no dropout, fused attention.
ModelDesc tinyGpt(bool bf16) {
  ModelDesc m = gpt(64, 4, 4, 128, 512);
  m.dropout = false;
  m.attention = ModelDesc::Attention::Fused;
  m.dtype = bf16 ? "bfloat16" : "float32";
  m.dtypeBytes = bf16 ? 2 : 4;
  return m;
}

Plan onePlan(int64_t dp = 1) {
  Plan p;
  p.dp = dp, p.microBatch = int64_t(b), p.numMicrobatches = 4;
  p.stageLayers = {int64_t(L)};
  return p;
}

TEST(CompiledMemory, Float32LayerHeadAndPeak) {
  AnalyticalCostModel cm(tinyGpt(false), preset("local:1"));
  Plan p = onePlan();
  StageCosts sc = cm.stageCosts(p);
  // Per layer: layer input, ln1 output, Q K V, attention output, its
  // [T, h] copy, residual, ln2 output (9 T h e); fc1 and GELU outputs
  // (2 T f e); two layer norms' fp32 mean and reciprocal deviation (16 T);
  // the fp32 log-sum-exp per head and row (4 b a s).
  double layer = T * (9 * h * 4 + 2 * f * 4 + 16) + 4 * b * a * s;
  EXPECT_DOUBLE_EQ(sc.layerActivation, layer);
  EXPECT_DOUBLE_EQ(layer, 1122304);
  // Head: last layer output, final norm output and statistics, the logits
  // turned into their gradient in place, the head's input gradient.
  double head = T * h * 4 + 8 * T + T * h * 4 + T * V * 4 + T * h * 4;
  EXPECT_DOUBLE_EQ(sc.lastActivation, head);
  // A layer's backward: the output gradient and GELU's input gradient.
  EXPECT_DOUBLE_EQ(sc.transientActivation, T * h * 4 + T * f * 4);
  // The peak: every layer saved, then the larger of head and backward
  // (5,212,160 bytes, the arena's transient part, tests/e2e).
  Estimate e = cm.estimate(p);
  EXPECT_DOUBLE_EQ(e.memory.activations, L * layer + head);
  EXPECT_DOUBLE_EQ(e.memory.activations, 5212160);
  EXPECT_DOUBLE_EQ(e.memory.commBuffers, 0);
}

TEST(CompiledMemory, Bfloat16HeadAndWeightCopies) {
  AnalyticalCostModel cm(tinyGpt(true), preset("local:1"));
  StageCosts sc = cm.stageCosts(onePlan());
  // bf16 activations, fp32 statistics and log-sum-exp, and the bf16 copies
  // of the GEMM weights (12 h^2) and of the two norm gains (2 h).
  double layer = T * (9 * h * 2 + 2 * f * 2 + 16) + 4 * b * a * s +
                 2 * (4 * h * h + 2 * h * f + 2 * h);
  EXPECT_DOUBLE_EQ(sc.layerActivation, layer);
  // The head peaks at the fp32 copy of the logits beside their bf16
  // gradient, with the bf16 head weight and final gain.
  double head =
      T * h * 2 + 8 * T + T * h * 2 + T * V * (4 + 2) + 2 * (V * h + h);
  EXPECT_DOUBLE_EQ(sc.lastActivation, head);
}

TEST(CompiledMemory, ZeroOneKeepsAGradientShard) {
  AnalyticalCostModel cm(tinyGpt(false), preset("local:2"));
  Plan z0 = onePlan(2), z1 = onePlan(2);
  z0.zero = 0, z1.zero = 1;
  double params = double(tinyGpt(false).totalParams());
  double g0 = cm.estimate(z0).memory.gradients;
  EXPECT_DOUBLE_EQ(g0, 4 * params);
  EXPECT_DOUBLE_EQ(cm.estimate(z1).memory.gradients, 4 * params + 2 * params);
  // The flat buckets are reduced in place: no extra buffers.
  EXPECT_DOUBLE_EQ(cm.estimate(z0).memory.commBuffers, 0);
}

TEST(CompiledMemory, HeldPipelineBoundaryBuffers) {
  Plan p;
  p.pp = 4, p.numMicrobatches = 8, p.schedule = Schedule::OneFOneB;
  // Every send of the 8 forwards; each finished backward of a stage that
  // received its input sent one gradient back (8 - in flight).
  EXPECT_DOUBLE_EQ(heldBoundaryBuffers(p, 0), 8);
  EXPECT_DOUBLE_EQ(heldBoundaryBuffers(p, 1), 8 + (8 - 3));
  EXPECT_DOUBLE_EQ(heldBoundaryBuffers(p, 3), 8 - 1);
  // Interleaved, 2 chunks: device 0 sends from both chunks and receives
  // into its second; device 1 sends from its first and receives into both.
  // By the last forward, device 0 has done 8 - 5 backwards in Megatron's
  // order (chunk 1 micro-batches 0 and 1, then chunk 0 micro-batch 0), two
  // of which sent a gradient; device 1 has done 8 - 3, all of which did.
  p.pp = 2, p.vpp = 2, p.numMicrobatches = 4;
  p.schedule = Schedule::Interleaved;
  EXPECT_DOUBLE_EQ(inflightMicrobatches(p, 0), 2.5);
  EXPECT_DOUBLE_EQ(heldBoundaryBuffers(p, 0), 2 * 4 + 2);
  EXPECT_DOUBLE_EQ(inflightMicrobatches(p, 1), 1.5);
  EXPECT_DOUBLE_EQ(heldBoundaryBuffers(p, 1), 4 + (2 * 4 - 3));
}

} // namespace
