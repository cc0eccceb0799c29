//===- CostModelTest.cpp - The analytical cost model against known formulas
//===//
//
// The formulas come from the literature the validation data cites: Megatron's
// tensor-parallel volume and bubble, Korthikanti et al.'s activation memory.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/CostModel.h"
#include "compiler/planner/AttentionKernels.h"
#include "compiler/planner/Search.h"
#include "compiler/planner/Trace.h"
#include "tests/unit/planner/PlannerTestUtils.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace strata::planner;
using namespace strata::planner::test;

static Plan plan(int64_t dp, int64_t tp, int64_t pp, int64_t mb, int64_t nmb) {
  Plan p;
  p.dp = dp, p.tp = tp, p.pp = pp, p.microBatch = mb, p.numMicrobatches = nmb;
  return p;
}

TEST(CostModel, RingAllReduceIsAlphaBeta) {
  AnalyticalCostModel cm(gpt(1024, 16, 4), ideal(8, 4));
  // Inside a node: 2 (n-1)/n bytes over 100 GB/s.
  EXPECT_NEAR(cm.allReduceTime(1e9, 1, 8), 2.0 * 7 / 8 * 1e9 / 100e9, 1e-12);
  // One member per node: the network level bounds the ring.
  EXPECT_NEAR(cm.allReduceTime(1e9, 8, 4), 2.0 * 3 / 4 * 1e9 / 10e9, 1e-12);
  // Eight members per node across 4 nodes: each node's 8 links carry the
  // ring, or a hierarchical ring; never slower than one member per node.
  double full = cm.allReduceTime(1e9, 1, 32);
  EXPECT_LT(full, cm.allReduceTime(1e9, 8, 4) * 1.01);
  EXPECT_NEAR(cm.reduceScatterTime(1e9, 1, 8), 7.0 / 8 * 1e9 / 100e9, 1e-12);
}

TEST(CostModel, TensorParallelVolumeMatchesMegatron) {
  // Megatron §3: 4 all-reduces of b*s*h per layer per micro-batch (forward
  // and backward), i.e. 8 b s h (t-1)/t elements moved; full recomputation
  // repeats the two forward ones.
  ModelDesc m = gpt(4096, 32, 4);
  AnalyticalCostModel cm(m, ideal(8, 1));
  Plan p = plan(1, 8, 1, 2, 1);
  double bytes = 2.0 * 2048 * 4096 * 2;
  double one = cm.allReduceTime(bytes, 1, 8);
  EXPECT_NEAR(one, 2.0 * 7 / 8 * bytes / 100e9, one * 1e-9);
  EXPECT_NEAR(cm.stageCosts(p).layerTpComm, 4 * one, one * 1e-9);
  p.recompute = Recompute::Full;
  EXPECT_NEAR(cm.stageCosts(p).layerTpComm, 6 * one, one * 1e-9);
  p.sp = true; // reduce-scatter + all-gather: the same volume
  EXPECT_NEAR(cm.stageCosts(p).layerTpComm, 6 * one, one * 1e-9);
}

TEST(CostModel, ActivationMemoryMatchesKorthikanti) {
  // Korthikanti et al.'s sbh(34 + 5as/h) per layer, plus the fp32 mean and
  // reciprocal deviation each of the two layer norms keeps per row (16 sb),
  // which the compiled program holds too.
  const double s = 2048, h = 4096, a = 32, b = 2, t = 8;
  ModelDesc m = gpt(4096, 32, 4);
  AnalyticalCostModel cm(m, ideal(8, 1));
  Plan p = plan(1, 1, 1, 2, 1);
  EXPECT_NEAR(cm.stageCosts(p).layerActivation,
              s * b * h * (34 + 5 * a * s / h) + 16 * s * b, 1);
  p = plan(1, 8, 1, 2, 1);
  double tpSaved = s * b * h * (10 + 24 / t + 5 * a * s / (h * t)) + 16 * s * b;
  EXPECT_NEAR(cm.stageCosts(p).layerActivation, tpSaved, 1);
  // Sequence parallelism on GPUs (Megatron-LM gathers the GEMM inputs
  // again in the backward): everything split by t.
  p.sp = true;
  EXPECT_NEAR(cm.stageCosts(p).layerActivation,
              s * b * h / t * (34 + 5 * a * s / h) + 16 * s * b / t, 1);
  p.recompute = Recompute::Selective;
  EXPECT_NEAR(cm.stageCosts(p).layerActivation,
              s * b * h / t * 34 + 16 * s * b / t, 1);
  // Strata's CPU programs keep the all-gathered inputs of the qkv and fc1
  // GEMMs (2 sbh e each) from the forward, and the bf16 copies of the
  // layer's GEMM weights (12 h^2 / t) and norm gains (2h).
  AnalyticalCostModel cpu(m, preset("local:8"));
  EXPECT_NEAR(cpu.stageCosts(p).layerActivation,
              s * b * h / t * 30 + 4 * s * b * h + 16 * s * b / t +
                  2 * (12 * h * h / t + 2 * h),
              1);
  p.sp = false;
  p.recompute = Recompute::Full;
  EXPECT_NEAR(cm.stageCosts(p).layerActivation, 2 * s * b * h, 1);
  // The rebuilt layer is live during its own backward, beside the
  // backward's gradient buffers: the layer output's gradient (2 sbh) and
  // the MLP activation's ([sb, 4h/t] in 16 bits).
  EXPECT_NEAR(cm.stageCosts(p).transientActivation,
              tpSaved - 2 * s * b * h + 2 * s * b * h + 8 * s * b * h / t, 1);
}

TEST(CostModel, FusedAttentionSavesNoScores) {
  // FlashAttention keeps Q, K, V, the output (2 s b h / t more bytes in
  // 16-bit than the unfused graph's V alone) and an fp32 log-sum-exp per
  // row (4 a s b / t), and none of the softmax output, dropout mask and
  // dropped probabilities (5 a s^2 b / t).
  const double s = 2048, h = 4096, a = 32, b = 2;
  ModelDesc m = gpt(4096, 32, 4);
  AnalyticalCostModel unfused(m, ideal(8, 1));
  m.attention = ModelDesc::Attention::Fused;
  AnalyticalCostModel fused(m, ideal(8, 1));
  for (double t : {1.0, 8.0}) {
    Plan p = plan(1, int64_t(t), 1, 2, 1);
    EXPECT_NEAR(fused.stageCosts(p).layerActivation,
                unfused.stageCosts(p).layerActivation - 5 * a * s * s * b / t +
                    2 * s * b * h / t + 4 * a * s * b / t,
                1)
        << "tp " << t;
    // Same model FLOPs; less time forward (the causal half of the tiles),
    // and a backward that pays for recomputing Q K^T.
    EXPECT_EQ(fused.layerForwardFlops(2, int64_t(t)),
              unfused.layerForwardFlops(2, int64_t(t)));
    EXPECT_LT(fused.stageCosts(p).layerForward,
              unfused.stageCosts(p).layerForward);
  }
  // Nothing for selective recomputation to rebuild.
  Plan p = plan(1, 8, 1, 2, 1);
  double none = fused.stageCosts(p).layerActivation;
  p.recompute = Recompute::Selective;
  EXPECT_NEAR(fused.stageCosts(p).layerActivation, none, 1);
}

TEST(CostModel, LlamaParameterCountsAreMetas) {
  // Meta-Llama-3-8B, -70B and Llama-3.1-405B as Hugging Face reports them.
  EXPECT_EQ(llama(4096, 32, 8, 32, 14336).totalParams(), 8030261248);
  EXPECT_EQ(llama(8192, 64, 8, 80, 28672).totalParams(), 70553706496);
  EXPECT_EQ(llama(16384, 128, 8, 126, 53248).totalParams(), 405853388800);
  ModelDesc tied = llama(4096, 32, 8, 32, 14336);
  tied.tiedEmbedding = true;
  EXPECT_EQ(tied.totalParams(), 8030261248 - 128256 * 4096);
}

TEST(CostModel, LlamaForwardFlopsCountGroupedQueryAttentionAndSwiGlu) {
  // Per sequence: q and o (h x h), k and v (h x kv), gate, up and down
  // (h x f), and Q K^T and P V (s x s x h each).
  const double s = 512, h = 1024, kv = 2 * 64, f = 2816;
  AnalyticalCostModel cm(llama(1024, 16, 2, 4, 2816, 512), ideal(8, 1));
  double want =
      2 * s * (2 * h * h + 2 * h * kv + 3 * h * f) + 2 * 2 * s * s * h;
  EXPECT_NEAR(cm.layerForwardFlops(1, 1), want, want * 1e-12);
  EXPECT_NEAR(cm.layerForwardFlops(1, 2), want / 2, want * 1e-12);
  // tp = 4 > 2 kv heads: each rank computes a whole kv head (64 features)
  // of k and v, not a quarter of 128.
  double replicated = want / 4 + 2 * s * h * 2 * (64 - kv / 4);
  EXPECT_NEAR(cm.layerForwardFlops(1, 4), replicated, want * 1e-12);
}

TEST(CostModel, LlamaActivationMemory) {
  // What the backward pass keeps per layer in 16-bit (e = 2), without
  // dropout masks: the norm, qkv and gate/up inputs (4 s b h e), Q and the
  // kv heads repeated to every query head (the unfused graph's
  // repeat_interleave), and the projection input (4 s b h e / t), the
  // probabilities (a s^2 b e / t), gate and up and the down input
  // (3 s b f e / t), and one fp32 reciprocal RMS per row per norm (8 s b):
  // s b h (8 + 8/t + 6 f/(h t) + 2 a s/(h t)) + 8 s b.
  const double s = 2048, h = 4096, a = 32, f = 14336, b = 2, t = 8;
  AnalyticalCostModel cm(llama(4096, 32, 8, 4, 14336, 2048), ideal(8, 1));
  Plan p = plan(1, 1, 1, 2, 1);
  EXPECT_NEAR(cm.stageCosts(p).layerActivation,
              s * b * h * (16 + 6 * f / h + 2 * a * s / h) + 8 * s * b, 1);
  p = plan(1, 8, 1, 2, 1);
  EXPECT_NEAR(cm.stageCosts(p).layerActivation,
              s * b * h * (8 + 8 / t + 6 * f / (h * t) + 2 * a * s / (h * t)) +
                  8 * s * b,
              1);
  // Sequence parallelism (Megatron-LM's) splits everything by t.
  p.sp = true;
  EXPECT_NEAR(cm.stageCosts(p).layerActivation,
              s * b * h / t * (16 + 6 * f / h + 2 * a * s / h) + 8 * s * b / t,
              1);
  // Selective recomputation rebuilds the probabilities; Q and the repeated
  // K and V stay saved.
  p.recompute = Recompute::Selective;
  EXPECT_NEAR(cm.stageCosts(p).layerActivation,
              s * b * h / t * (16 + 6 * f / h) + 8 * s * b / t, 1);
}

TEST(CostModel, LlamaKvHeadsSplitOrReplicated) {
  ModelDesc m = llama(4096, 32, 8, 32, 14336);
  std::string why;
  EXPECT_TRUE(m.tpFits(8));
  EXPECT_TRUE(m.tpFits(16)); // 2 ranks per kv head
  EXPECT_FALSE(llama(4096, 32, 8, 32, 12288).tpFits(3, &why));
  EXPECT_NE(why.find("32 attention heads"), std::string::npos) << why;
  ModelDesc odd = llama(768, 12, 3, 2, 3072);
  EXPECT_FALSE(odd.tpFits(2, &why));
  EXPECT_NE(why.find("3 kv heads can be neither split evenly nor replicated"),
            std::string::npos)
      << why;
  EXPECT_TRUE(odd.tpFits(6));
  // Replicated kv heads: every rank of tp=16 holds the whole k and v
  // projections (2 h kv) besides its share of the rest; the norms (2 h) are
  // replicated too. One layer's weights in bytes (e = 2):
  AnalyticalCostModel cm(m, ideal(8, 2));
  const double h = 4096, kv = 8 * 128;
  double layer = double(m.layerParams());
  Plan p = plan(1, 16, 1, 1, 1);
  double replicated = 2 * h + 2 * h * kv;
  EXPECT_NEAR(cm.stageCosts(p).layerWeights,
              2 * ((layer - replicated) / 16 + replicated), 1);
  p = plan(1, 8, 1, 1, 1);
  EXPECT_NEAR(cm.stageCosts(p).layerWeights, 2 * ((layer - 2 * h) / 8 + 2 * h),
              1);
}

TEST(CostModel, LlamaUntiedHeadLivesOnTheLastStage) {
  ModelDesc m = llama(4096, 32, 8, 32, 14336);
  AnalyticalCostModel cm(m, ideal(8, 1));
  const double V = 128256, h = 4096;
  Plan p = plan(1, 4, 2, 1, 4);
  // The last stage holds its vocabulary shard of lm_head and the final norm;
  // the first the embedding's shard.
  EXPECT_NEAR(cm.stageCosts(p).lastWeights, 2 * (V * h / 4 + h), 1);
  EXPECT_NEAR(cm.stageCosts(p).firstWeights, 2 * (V * h / 4), 1);
  p = plan(1, 4, 1, 1, 4);
  EXPECT_NEAR(cm.stageCosts(p).firstWeights + cm.stageCosts(p).lastWeights,
              2 * (2 * V * h / 4 + h), 1);
}

TEST(CostModel, SixteenBytesPerParameterUnderZero0) {
  ModelDesc m = gpt(1024, 16, 8, 512, 32000);
  AnalyticalCostModel cm(m, ideal(8, 1, 1e12));
  Plan p = plan(1, 1, 1, 1, 1);
  p.stageLayers = {8};
  Estimate e = cm.estimate(p);
  double params = double(m.totalParams());
  EXPECT_NEAR(e.memory.weights + e.memory.gradients + e.memory.optimizerState,
              16 * params, 1);
  // ZeRO-1 shards the 12 optimizer bytes, ZeRO-2 also the 2 gradient
  // bytes, ZeRO-3 also the 2 weight bytes.
  Plan z = plan(4, 1, 1, 1, 1);
  z.stageLayers = {8};
  z.zero = 1;
  Estimate e1 = cm.estimate(z);
  EXPECT_NEAR(e1.memory.optimizerState, 12 * params / 4, 1);
  EXPECT_NEAR(e1.memory.gradients, 2 * params, 1);
  z.zero = 3;
  Estimate e3 = cm.estimate(z);
  EXPECT_NEAR(e3.memory.weights + e3.memory.gradients +
                  e3.memory.optimizerState,
              16 * params / 4, 1);
}

// On Strata's CPU runtime mixed precision keeps fp32 masters and fp32 main
// gradients (4 + 4 + 8 bytes), the bf16 working copies of the weights as
// activations, and a bf16 copy of the gradient buckets only when the plan
// reduces in bf16.
TEST(CostModel, CpuRuntimeKeepsFp32MastersAndMainGradients) {
  ModelDesc m = gpt(256, 4, 4, 128, 1000); // bfloat16 (PlannerTestUtils)
  ClusterSpec c = ideal(8, 1, 1e12);
  c.device.kind = "cpu";
  AnalyticalCostModel cm(m, c);
  Plan p = plan(1, 1, 1, 1, 1);
  p.stageLayers = {4};
  Estimate e = cm.estimate(p);
  double params = double(m.totalParams());
  EXPECT_NEAR(e.memory.weights, 4 * params, 1);
  EXPECT_NEAR(e.memory.gradients, 4 * params, 1);
  EXPECT_NEAR(e.memory.optimizerState, 8 * params, 1);
  // The layer's activations include the bf16 copies of its GEMM weights
  // and norm gains (the biases and norm shifts need none in the backward).
  ClusterSpec gpu = ideal(8, 1, 1e12);
  StageCosts cpuCosts = cm.stageCosts(p);
  StageCosts gpuCosts = AnalyticalCostModel(m, gpu).stageCosts(p);
  double hd = double(m.hidden), f = double(m.ffnHidden);
  double copied = 4 * hd * hd + 2 * hd * f + 2 * hd;
  EXPECT_NEAR(cpuCosts.layerActivation - gpuCosts.layerActivation, 2 * copied,
              1);
  Plan d = plan(2, 1, 1, 1, 1);
  d.stageLayers = {4};
  double fp32Reduce = cm.estimate(d).memory.gradients;
  d.bf16GradReduce = true;
  EXPECT_NEAR(cm.estimate(d).memory.gradients - fp32Reduce, 2 * params, 1);
}

TEST(CostModel, BubbleAndInflightFollowTheSchedules) {
  EXPECT_DOUBLE_EQ(pipelineMakespan({1, 1, 1, 1}, 8, 1), (8 + 3) * 1.0);
  EXPECT_DOUBLE_EQ(pipelineMakespan({2, 2, 2, 2}, 8, 2), (8 + 3.0 / 2) * 2);
  Plan p = plan(1, 1, 4, 1, 8);
  EXPECT_DOUBLE_EQ(inflightMicrobatches(p, 0), 4);
  EXPECT_DOUBLE_EQ(inflightMicrobatches(p, 3), 1);
  p.schedule = Schedule::GPipe;
  EXPECT_DOUBLE_EQ(inflightMicrobatches(p, 3), 8);
  p.schedule = Schedule::Interleaved;
  p.vpp = 2;
  // Megatron: (p-1)*2 + (v-1)*p warm-up chunks + 1, each half a device.
  EXPECT_DOUBLE_EQ(inflightMicrobatches(p, 0), (6 + 4 + 1) / 2.0);
}

TEST(CostModel, GemmRooflineAndShapeEffects) {
  ClusterSpec c = preset("dgx-a100:1");
  AnalyticalCostModel cm(gpt(4096, 32, 4), c);
  double big = cm.gemmTime(8192, 8192, 8192, 1);
  double flops = 2.0 * 8192 * 8192 * 8192;
  double achieved = flops / big;
  EXPECT_LT(achieved, 312e12 * c.device.gemmEfficiency);
  EXPECT_GT(achieved, 312e12 * c.device.gemmEfficiency * 0.9);
  // A thin-K GEMM (attention scores, K = head dim) runs well below that.
  double thin = cm.gemmTime(2048, 2048, 64, 64);
  EXPECT_LT(2.0 * 2048 * 2048 * 64 * 64 / thin, 0.5 * achieved);
}

// The H100 presets' GEMM rate never exceeds what the hardware measurably
// does in isolation. Measured bf16 rates on sm_90 from OpenXLA's matmul
// performance table (tensorflow/tensorflow @372d578b,
// third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h,
// "bf16xbf16->bf16", TFLOP/s; 808 at 4096^3 x 2 exceeds the PCIe part's
// 756 peak, so an SXM Hopper). The model's sustained rate sits 20-45% below
// these short isolated runs, most at small K (docs/validation.md, A1).
TEST(CostModel, H100GemmRatesStayBelowMeasuredIsolatedRates) {
  AnalyticalCostModel cm(gpt(2048, 16, 2), preset("dgx-h100:1"));
  struct Measured {
    double b, m, n, k, tflops;
  };
  const Measured table[] = {
      {1, 4096, 4096, 4096, 783.3}, {2, 4096, 4096, 4096, 807.7},
      {1, 4096, 4096, 2048, 738.7}, {2, 4096, 4096, 2048, 763.0},
      {1, 4096, 4096, 1024, 677.4}, {1, 4096, 4096, 512, 543.1},
      {1, 4096, 4096, 256, 392.2},  {1, 2048, 2048, 2048, 632.0},
      {4, 2048, 2048, 2048, 725.7}, {1, 2048, 4096, 2048, 715.4},
      {1, 4096, 1024, 4096, 738.5}, {1, 4096, 512, 4096, 650.0},
      {1, 1024, 2048, 2048, 524.3}, {1, 512, 4096, 4096, 644.1},
  };
  for (const Measured &x : table) {
    double model =
        2 * x.b * x.m * x.n * x.k / cm.gemmTime(x.m, x.n, x.k, x.b) / 1e12;
    SCOPED_TRACE(testing::Message() << x.b << "x" << x.m << "x" << x.n << "x"
                                    << x.k << ": model " << model);
    EXPECT_LT(model, x.tflops * 0.85);
    EXPECT_GT(model, x.tflops * 0.5);
  }
}

TEST(CostModel, NarrowGemmsPayTheCalibratedRowsTerm) {
  ClusterSpec c = preset("local:1");
  c.device.gemmRowsHalf = 0;
  AnalyticalCostModel off(gpt(768, 12, 2), c);
  c.device.gemmRowsHalf = 64;
  AnalyticalCostModel on(gpt(768, 12, 2), c);
  // Wide GEMMs are barely affected; a 64-row GEMM runs at half the rate.
  EXPECT_NEAR(on.gemmTime(4096, 4096, 1024, 1) /
                  off.gemmTime(4096, 4096, 1024, 1),
              1.0, 0.02);
  EXPECT_NEAR(on.gemmTime(64, 4096, 1024, 1) / off.gemmTime(64, 4096, 1024, 1),
              2.0, 0.05);
}

TEST(CostModel, SimulatedScheduleAgreesWithTheFormula) {
  ModelDesc m = gpt(2048, 16, 8);
  AnalyticalCostModel cm(m, preset("dgx-a100:1"));
  for (Schedule s :
       {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved}) {
    Plan p = plan(1, 2, 4, 1, 8);
    p.schedule = s;
    p.vpp = s == Schedule::Interleaved ? 2 : 1;
    p.stageLayers.assign(p.pp * p.vpp, 8 / (p.pp * p.vpp));
    Estimate e = cm.estimate(p);
    SimulatedStep step;
    std::string err;
    ASSERT_TRUE(simulateStep(cm, p, step, err)) << err;
    double analytic = e.stepTimeS;
    EXPECT_NEAR(step.stepEndS / analytic, 1.0, 0.05)
        << scheduleName(s) << ": simulated " << step.stepEndS << " vs "
        << analytic;
    auto count = [&](const std::string &category) {
      return std::count_if(
          step.events.begin(), step.events.end(),
          [&](const TraceEvent &e) { return e.category == category; });
    };
    EXPECT_EQ(count("forward") + count("backward"), 2 * 8 * p.pp * p.vpp);
    EXPECT_EQ(count("optimizer"), p.pp);
    // Every layer runs forward and backward once per micro-batch, each
    // pipeline hop sends once per direction, every layer all-reduces over tp.
    ASSERT_TRUE(step.perLayer);
    // (plus the embedding and the head + loss of each micro-batch)
    EXPECT_EQ(count("layer-forward"), 8 * 8 + 2 * 8);
    EXPECT_EQ(count("pp-send"), 2 * 8 * (p.pp * p.vpp - 1));
    EXPECT_EQ(count("tp-comm"), 2 * 8 * 8);
  }
}

TEST(CostModel, OverlappedCollectivesTakeComputeUnits) {
  // DGX A100: NCCL's 16 thread blocks of 108 SMs slow the compute they
  // overlap by 16/108 per second of overlap; the excess of a longer
  // collective is exposed.
  AnalyticalCostModel cm(gpt(1024, 16, 4), preset("dgx-a100:1"));
  double f = 16.0 / 108;
  EXPECT_NEAR(cm.overlappedCommTime(1e-3, 3e-3), f * 1e-3, 1e-12);
  EXPECT_NEAR(cm.overlappedCommTime(5e-3, 3e-3), 2e-3, 1e-12);
  // CPU ranks overlap nothing.
  AnalyticalCostModel cpu(gpt(1024, 16, 4), preset("local:2"));
  EXPECT_NEAR(cpu.overlappedCommTime(1e-3, 3e-3), 1e-3, 1e-15);
}

TEST(CostModel, ZeroThreeGathersPerPassWithPrefetchDepthOne) {
  // Ideal cluster (no compute units taken by collectives): per layer the
  // forward gather shows beyond the layer's forward, gather + reduce-scatter
  // beyond its backward; the first gather of each micro-batch is exposed;
  // memory holds two gathered layers and one unsharded layer gradient.
  ModelDesc m = gpt(4096, 32, 4);
  ClusterSpec c = ideal(8, 4);
  AnalyticalCostModel cm(m, c);
  Plan p = plan(32, 1, 1, 1, 1);
  p.zero = 3;
  StageCosts sc = cm.stageCosts(p);
  double layerParams = double(m.layerParams());
  double ag = cm.allGatherTime(layerParams * 2, 1, 32);
  double rs = cm.reduceScatterTime(layerParams * 2, 1, 32);
  // 32 ranks over 4 nodes: the ring is bound by 8 x 10 GB/s per node.
  EXPECT_NEAR(ag, 31.0 / 32 * layerParams * 2 / 80e9, ag * 1e-9);
  Plan none = p;
  none.zero = 1;
  StageCosts ref = cm.stageCosts(none);
  double fwd = ref.layerForward, bwd = ref.layerCompute - fwd;
  EXPECT_NEAR(sc.layerZeroComm,
              std::max(0.0, ag - fwd) + std::max(0.0, ag + rs - bwd),
              ag * 1e-9);
  EXPECT_NEAR(sc.zeroFirstGather, ag, ag * 1e-12);
  EXPECT_NEAR(sc.commBuffers, 3 * layerParams * 2, 1);
  // The embedding: two gathers and a reduce-scatter per micro-batch.
  double emb = (51200.0 + 2048) * 4096 + 2 * 4096;
  EXPECT_NEAR(sc.firstZeroComm,
              2 * cm.allGatherTime(emb * 2, 1, 32) +
                  cm.reduceScatterTime(emb * 2, 1, 32),
              1e-12);
}

TEST(CostModel, FusedAttentionKeepsNoScores) {
  // A fused kernel saves Q, K, V, its output (Strata's runtime copies it to
  // [T, h] for the projection, which saves that copy) and a 4-byte
  // log-sum-exp per query row: Korthikanti's sbh(34 + 5as/h) becomes
  // 36 sbh + 4 abs, plus the layer norms' fp32 statistics (16 sb).
  const double s = 2048, h = 4096, a = 32, b = 2;
  ModelDesc m = gpt(4096, 32, 4);
  m.attention = ModelDesc::Attention::Fused;
  AnalyticalCostModel cm(m, ideal(8, 1));
  EXPECT_TRUE(cm.fusedAttention());
  Plan p = plan(1, 1, 1, 2, 1);
  EXPECT_NEAR(cm.stageCosts(p).layerActivation,
              36 * s * b * h + 4 * a * b * s + 16 * s * b, 1);
  // CPU ranks run strata.causal_attention too.
  AnalyticalCostModel cpu(m, preset("local:2"));
  EXPECT_TRUE(cpu.fusedAttention());
}

TEST(CostModel, FusedAttentionPaysTensorCoresAndExponentials) {
  // H100, 32 heads of s = 4096, d = 128, causal: forward = 2 GEMMs of
  // 2 s^2 d over half the blocks at H100's 0.672 of 989 TFLOP/s, with 32 x 32
  // query blocks over 132 SMs (8 waves) and a K loop of 2048 (2048/2380), plus
  // s^2/2 exponentials per head at 132 x 16 x 1.83 GHz.
  // (The preset's measured cuDNN rates are cleared: this is the derived
  // model a device without them gets.)
  ModelDesc m = gpt(4096, 32, 4, 4096);
  m.attention = ModelDesc::Attention::Fused;
  ClusterSpec h100 = preset("dgx-h100:1");
  h100.device.attentionEfficiency = h100.device.attentionBackwardEfficiency = 0;
  AnalyticalCostModel cm(m, h100);
  double s = 4096, d = 128, heads = 32;
  double tile = 1024.0 / (8 * 132);
  double depth = 2048.0 / (2048 + h100GemmDepthHalf()); // K 1/2 = 332
  double eff = 0.72 * (792.1 / 989) / (267.9 / 312); // 0.6716
  double mm = 2 * 2 * s * s * d * heads * 0.5 / (989e12 * eff * tile * depth);
  double ex = s * s * heads * 0.5 / (132 * 16 * 1.83e9 * tile);
  EXPECT_NEAR(cm.fusedAttentionTime(heads, s, d, false), mm + ex + 5e-6, 1e-9);
  // Backward: 5 GEMMs and the exponentials again.
  EXPECT_NEAR(cm.fusedAttentionTime(heads, s, d, true), 2.5 * mm + ex + 5e-6,
              1e-9);
}

TEST(CostModel, MeasuredAttentionEfficiencyReplacesTensorCoresAndExponentials) {
  // The H100 presets carry cuDNN's measured rates (518 and 499 of 989
  // TFLOP/s): the same causal FLOPs and tile waves as above at those
  // fractions, no K-loop factor and no separate exponential term (the
  // measured rate includes both).
  ModelDesc m = gpt(4096, 32, 4, 4096);
  m.attention = ModelDesc::Attention::Fused;
  ClusterSpec c = preset("dgx-h100:1");
  EXPECT_DOUBLE_EQ(c.device.attentionEfficiency, 518.0 / 989);
  EXPECT_DOUBLE_EQ(c.device.attentionBackwardEfficiency, 499.0 / 989);
  AnalyticalCostModel cm(m, c);
  double s = 4096, d = 128, heads = 32;
  double tile = 1024.0 / (8 * 132);
  double flops = 2 * 2 * s * s * d * heads * 0.5;
  EXPECT_NEAR(cm.fusedAttentionTime(heads, s, d, false),
              flops / (518e12 * tile) + 5e-6, 1e-9);
  EXPECT_NEAR(cm.fusedAttentionTime(heads, s, d, true),
              2.5 * flops / (499e12 * tile) + 5e-6, 1e-9);
  // A forward rate alone serves both passes (FlashAttention-2 at 0.35).
  c.device.attentionEfficiency = 0.35;
  c.device.attentionBackwardEfficiency = 0;
  AnalyticalCostModel fa2(m, c);
  double fwd = flops / (989e12 * 0.35 * tile);
  EXPECT_NEAR(fa2.fusedAttentionTime(heads, s, d, false), fwd + 5e-6, 1e-9);
  EXPECT_NEAR(fa2.fusedAttentionTime(heads, s, d, true), 2.5 * fwd + 5e-6,
              1e-9);
}

TEST(CostModel, EagerRmsNormAndRotaryPayTheirOpByOpTraffic) {
  // Llama 3 8B shapes, micro-batch 1 of 8192 tokens on one A100: the
  // reference RMSNorm run op by op moves 36 bytes per element forward and 72
  // backward (bf16) instead of the fused kernel's 4 and 6, twice per layer
  // over T x h; eager rotary moves 20 each way instead of 4 over
  // T x (h + kv). Kernel counts are the same, so the layer's time grows by
  // exactly those bytes at 0.8 of 2039 GB/s.
  ModelDesc m = llama(4096, 32, 8, 32, 14336, 8192);
  ModelDesc eager = m;
  eager.eagerNorms = true;
  EXPECT_DOUBLE_EQ(AnalyticalCostModel::eagerRmsNormForwardBytes(2), 36);
  EXPECT_DOUBLE_EQ(AnalyticalCostModel::eagerRmsNormBackwardBytes(2), 72);
  EXPECT_DOUBLE_EQ(AnalyticalCostModel::eagerRotaryBytes(2), 20);
  Plan p = plan(1, 1, 1, 1, 1);
  p.recompute = Recompute::None;
  double base =
      AnalyticalCostModel(m, preset("dgx-a100:1")).stageCosts(p).layerCompute;
  double slow = AnalyticalCostModel(eager, preset("dgx-a100:1"))
                    .stageCosts(p)
                    .layerCompute;
  double T = 8192, h = 4096, kv = 1024;
  double extra =
      2 * T * h * ((36 - 4) + (72 - 6)) + T * (h + kv) * 2 * (20 - 4);
  EXPECT_NEAR(slow - base, extra / (2039e9 * 0.8), 1e-9);
}

TEST(CostModel, OpLevelSelectiveRecomputesEveryOtherMatmulAndPointwise) {
  // torchtitan's op-level policy on a Llama layer (fused attention, one
  // A100, micro-batch 1 of 8192 tokens): the backward re-runs wk
  // [T,h]x[h,kv], wo [T,h]x[h,h], w3 [T,h]x[h,f] and the seven elementwise
  // kernels' forwards (two norms 2e, rotary 2e over T(h+kv), the heads copy
  // 2e, two residual adds 3e, silu(gate)*up 3e over T f).
  ModelDesc m = llama(4096, 32, 8, 32, 14336, 8192);
  m.attention = ModelDesc::Attention::Fused;
  m.opLevelSelective = true;
  AnalyticalCostModel cm(m, preset("dgx-a100:1"));
  Plan none = plan(1, 1, 1, 1, 1), sel = none;
  none.recompute = Recompute::None;
  sel.recompute = Recompute::Selective;
  double T = 8192, h = 4096, kv = 1024, f = 14336, e = 2;
  double expected =
      cm.gemmTime(T, kv, h, 1) + cm.gemmTime(T, h, h, 1) +
      cm.gemmTime(T, f, h, 1) + 2 * cm.memoryBoundTime(T * h * 2 * e) +
      cm.memoryBoundTime(T * (h + kv) * 2 * e) +
      cm.memoryBoundTime(T * h * 2 * e) +
      2 * cm.memoryBoundTime(T * h * 3 * e) +
      cm.memoryBoundTime(T * f * 3 * e);
  EXPECT_NEAR(cm.stageCosts(sel).layerCompute -
                  cm.stageCosts(none).layerCompute,
              expected, 1e-9);
  // Without the policy, selective has nothing to rebuild under a fused
  // kernel.
  m.opLevelSelective = false;
  AnalyticalCostModel plain(m, preset("dgx-a100:1"));
  EXPECT_DOUBLE_EQ(plain.stageCosts(sel).layerCompute,
                   plain.stageCosts(none).layerCompute);
}

TEST(CostModel, Fp32GradAccumulationPassReadsAndWritesEachGradient) {
  // DeepSpeed's bf16 optimizer: per micro-batch, each of the layer's
  // parameters on the rank (12 h^2 + 13 h over tp = 4) moves its bf16
  // gradient (2 bytes) and its fp32 accumulator (read and write, 8) once,
  // one memory-bound kernel at 0.8 of 2039 GB/s plus 5 us.
  ModelDesc m = gpt(14336, 112, 4, 2048, 250880);
  ModelDesc ds = m;
  ds.fp32GradAccumulationPass = true;
  Plan p = plan(1, 4, 1, 2, 1);
  double base =
      AnalyticalCostModel(m, preset("dgx-a100:1")).stageCosts(p).layerCompute;
  double slow =
      AnalyticalCostModel(ds, preset("dgx-a100:1")).stageCosts(p).layerCompute;
  double h = 14336, params = 12 * h * h + 13 * h;
  EXPECT_EQ(m.layerParams(), int64_t(params));
  EXPECT_NEAR(slow - base, params / 4 * 10 / (2039e9 * 0.8) + 5e-6, 1e-9);
}

TEST(CostModel, DataParallelReductionPaysLatencyPerBucket) {
  // CPU-kind ranks (nothing overlaps) with 100 us per ring step: ZeRO-0's
  // reduction is one all-reduce per 25 MiB bucket.
  ModelDesc m = gpt(1024, 16, 4, 128, 8192);
  ClusterSpec c = ideal(8, 1);
  c.device.kind = "cpu";
  c.levels[0].latencyS = 1e-4;
  AnalyticalCostModel cm(m, c);
  Plan p = plan(8, 1, 1, 1, 1);
  // bf16 model on CPU ranks: the runtime reduces fp32 main gradients.
  double bytes = double(m.totalParams()) * 4;
  double buckets = std::ceil(bytes / double(25 << 20));
  // Each bucket: the double binary tree, 2 log2(8) steps of 100 us and
  // twice the bucket over 100 GB/s (cheaper than the ring's 14 steps).
  double one = 2 * 3 * 1e-4 + 2 * bytes / buckets / 100e9;
  EXPECT_NEAR(cm.allReduceTime(bytes / buckets, 1, 8), one, 1e-12);
  EXPECT_NEAR(cm.stageCosts(p).dpExposed, buckets * one, 1e-12);
}

TEST(CostModel, CpuRanksShareTheHostsMemoryBandwidth) {
  // Two ranks of one host whose DRAM streams 10 GB/s with both ranks
  // reading, 32 MiB of last-level cache: a 1 MiB kernel runs at the rank's
  // own (cache) bandwidth, a 100 MB one at half the host's.
  ClusterSpec c = preset("local:2");
  c.device.kernelOverheadS = 0;
  c.hostMemoryBandwidth = 10e9;
  c.hostCacheBytes = 32 << 20;
  AnalyticalCostModel cm(gpt(256, 4, 2, 128, 1024), c);
  double own = c.device.memoryBandwidth * c.device.memoryEfficiency;
  EXPECT_NEAR(cm.memoryBoundTime(1 << 20), double(1 << 20) / own, 1e-15);
  EXPECT_NEAR(cm.memoryBoundTime(100e6), 100e6 / 5e9, 1e-12);
  // Without a measured host bandwidth the rank's own number holds.
  c.hostMemoryBandwidth = 0;
  AnalyticalCostModel alone(gpt(256, 4, 2, 128, 1024), c);
  EXPECT_NEAR(alone.memoryBoundTime(100e6), 100e6 / own, 1e-12);
}

TEST(CostModel, HeadPaysUnfusedFp32CrossEntropyTraffic) {
  // GPT h = 1024, V = 50304, s = 1024, micro-batch 2 on one A100 (tp 1):
  // the head is the final norm (2e and 3e bytes per element), the logits
  // GEMM forward and its two backward GEMMs, and the fp32 cross entropy at
  // 38 bytes per logit forward and 14 backward (bf16 logits: 52 in all).
  ModelDesc m = gpt(1024, 16, 4, 1024, 50304);
  AnalyticalCostModel cm(m, preset("dgx-a100:1"));
  EXPECT_DOUBLE_EQ(AnalyticalCostModel::crossEntropyForwardBytes(2), 38);
  EXPECT_DOUBLE_EQ(AnalyticalCostModel::crossEntropyBackwardBytes(2), 14);
  double T = 2 * 1024, h = 1024, V = 50304, e = 2;
  double expected =
      cm.memoryBoundTime(T * h * 2 * e) + cm.memoryBoundTime(T * h * 3 * e) +
      cm.gemmTime(T, V, h, 1) + cm.gemmTime(T, h, V, 1) +
      cm.gemmTime(h, V, T, 1) + T * V * 52 / (2039e9 * 0.8) + 2 * 5e-6;
  EXPECT_NEAR(cm.stageCosts(plan(1, 1, 1, 2, 1)).lastCompute, expected, 1e-9);
}

TEST(CostModel, Fp32GradientsDoubleGradientMemoryAndReduction) {
  // GPT h = 1024, 4 layers, bf16: a layer has 12h^2 + 13h parameters; with
  // Megatron's fp32 gradient accumulation (gradientBytes = 4) each takes 4
  // gradient bytes instead of 2, and the dp = 8 all-reduce moves twice the
  // bytes.
  ModelDesc bf16 = gpt(1024, 16, 4, 1024, 50304);
  ModelDesc fp32 = bf16;
  fp32.gradientBytes = 4;
  ClusterSpec c = preset("dgx-a100:1");
  AnalyticalCostModel a(bf16, c), b(fp32, c);
  Plan p = plan(8, 1, 1, 1, 1);
  p.zero = 0;
  double h = 1024, layerParams = 12 * h * h + 13 * h;
  EXPECT_DOUBLE_EQ(a.stageCosts(p).layerGrads, 2 * layerParams);
  EXPECT_DOUBLE_EQ(b.stageCosts(p).layerGrads, 4 * layerParams);
  // Weights and optimizer state do not change.
  EXPECT_DOUBLE_EQ(a.stageCosts(p).layerWeights, b.stageCosts(p).layerWeights);
  EXPECT_DOUBLE_EQ(a.stageCosts(p).layerOptState,
                   b.stageCosts(p).layerOptState);
  // The gradient all-reduce moves twice the bytes: more of it is exposed.
  EXPECT_GT(b.stageCosts(p).dpExposed, a.stageCosts(p).dpExposed);
}

TEST(CostModel, ZeroThreeReducesGradientsInTheirDtype) {
  // GPU clusters keep Megatron's/FSDP's layout: with fp32 gradients (FSDP's
  // reduce_dtype = float32) the gathers stay bf16, the reduce-scatter moves
  // 4 bytes per parameter and the unsharded layer gradient is fp32.
  double h = 256, layerParams = 12 * h * h + 13 * h;
  ModelDesc m = gpt(256, 4, 2, 128, 1024);
  m.gradientBytes = 4;
  AnalyticalCostModel cm(m, preset("dgx-a100:1"));
  ModelDesc bf = gpt(256, 4, 2, 128, 1024);
  AnalyticalCostModel cmBf(bf, preset("dgx-a100:1"));
  Plan p = plan(8, 1, 1, 1, 1);
  p.zero = 3;
  StageCosts sc = cm.stageCosts(p), scBf = cmBf.stageCosts(p);
  EXPECT_GT(sc.layerZeroComm, scBf.layerZeroComm);
  // Two gathered bf16 layers and one unsharded fp32 gradient.
  EXPECT_DOUBLE_EQ(sc.commBuffers - scBf.commBuffers, layerParams * 2);

  // CPU ranks run Strata's recipe whatever gradientBytes says (no overlap:
  // everything is paid in full): fp32 masters are gathered and fp32 main
  // gradients reduce-scattered, 4 bytes per parameter each way.
  AnalyticalCostModel cpu(m, preset("local:2"));
  Plan q = plan(2, 1, 1, 1, 1);
  q.zero = 3;
  double ag = cpu.allGatherTime(layerParams * 4, 1, 2);
  double rs = cpu.reduceScatterTime(layerParams * 4, 1, 2);
  EXPECT_NEAR(cpu.stageCosts(q).layerZeroComm, 2 * ag + rs, 1e-12);
}

TEST(CostModel, MeasuredAttentionCurvesInterpolateBySequence) {
  // FlashAttention-2's release figures, causal, fwd + bwd: A100 head dim
  // 128 at 2k/4k/16k = 155/173/189 TFLOP/s of 312, head dim 64 at 4k = 156,
  // the Triton kernel at 4k = 74; H100 head dim 128 at 4k = 294 of 989.
  auto eff = [](const char *k, const char *gpu, double d, bool causal,
                double s) {
    return measuredAttentionEfficiency(k, gpu, d, causal, s);
  };
  EXPECT_DOUBLE_EQ(eff("flash-attn-2", "A100-SXM4-80GB", 128, true, 4096),
                   173.0 / 312);
  EXPECT_DOUBLE_EQ(eff("flash-attn-2", "A100-SXM4-40GB", 64, true, 4096),
                   156.0 / 312);
  EXPECT_DOUBLE_EQ(eff("flash-attn-triton", "A100-SXM4-80GB", 128, true, 4096),
                   74.0 / 312);
  EXPECT_DOUBLE_EQ(eff("flash-attn-2", "H100-SXM5-80GB", 128, true, 4096),
                   294.0 / 989);
  // Log-linear between measured lengths, clamped outside them.
  double t = std::log2(3000.0 / 2048);
  EXPECT_NEAR(eff("flash-attn-2", "A100-SXM4-80GB", 128, true, 3000),
              (155 + t * (173 - 155)) / 312, 1e-12);
  EXPECT_DOUBLE_EQ(eff("flash-attn-2", "A100-SXM4-80GB", 128, true, 65536),
                   189.0 / 312);
  EXPECT_DOUBLE_EQ(eff("flash-attn-2", "A100-SXM4-80GB", 128, true, 256),
                   99.0 / 312);
  // No measurement: another kernel, device or mask.
  EXPECT_EQ(eff("cudnn", "A100-SXM4-80GB", 128, true, 4096), 0);
  EXPECT_EQ(eff("flash-attn-triton", "H100-SXM5-80GB", 128, true, 4096), 0);
  EXPECT_EQ(eff("flash-attn-2", "A100-SXM4-80GB", 128, false, 4096), 0);

  // The A100 presets run FlashAttention-2: 27 heads of s = 4096 fill 8
  // waves of 108 SMs (32 query blocks each), so forward + backward is the
  // causal FLOPs (2 + 5 GEMMs of 2 s^2 d, half masked) at 173 TFLOP/s.
  ModelDesc m = gpt(3456, 27, 4, 4096);
  m.attention = ModelDesc::Attention::Fused;
  ClusterSpec a100 = preset("dgx-a100:1");
  EXPECT_EQ(a100.device.attentionKernel, "flash-attn-2");
  AnalyticalCostModel cm(m, a100);
  double s = 4096, d = 128, heads = 27;
  double flops = 7 * 2 * s * s * d * heads * 0.5;
  EXPECT_NEAR(cm.fusedAttentionTime(heads, s, d, false) +
                  cm.fusedAttentionTime(heads, s, d, true),
              flops / 173e12 + 2 * 5e-6, 1e-9);
}

TEST(CostModel, FrameworkOptimizerStateLayout) {
  // NeMo's distributed_fused_adam beside bf16 weights keeps fp32 moments and
  // the masters' low 16 bits (10 bytes per parameter), or bf16 moments and
  // no master (4); the update reads the gradient and the state and writes
  // the state and the 16-bit weight. Adam's default: 8 + the 4-byte master.
  ModelDesc m = gpt(1024, 16, 4, 1024);
  m.dtype = "bfloat16", m.dtypeBytes = 2, m.gradientBytes = 2;
  EXPECT_DOUBLE_EQ(paramBytes(m).optimizer, 12);
  m.optimizerStateBytes = 10;
  ParamBytes b = paramBytes(m);
  EXPECT_DOUBLE_EQ(b.optimizer, 10);
  EXPECT_DOUBLE_EQ(b.update, 2 + 2 * 10 + 2 * 2);
  m.optimizerStateBytes = 4;
  EXPECT_DOUBLE_EQ(paramBytes(m).optimizer, 4);
  // Strata's CPU runtime keeps its own layout regardless.
  EXPECT_DOUBLE_EQ(paramBytes(m, nullptr, true).optimizer, 8);
}

TEST(CostModel, OpLevelSelectiveKeepsMatmulOutputs) {
  // torchtitan's op-level policy keeps, per layer and micro-batch, the
  // block's input, the outputs of wq [T,h], wv [T,kv], the attention kernel
  // [T,h] with its fp32 log-sum-exp per head and query, w1 [T,f] and w2
  // [T,h] (bf16); everything else is rebuilt in the backward.
  ModelDesc m = llama(4096, 32, 8, 32, 14336, 8192);
  m.attention = ModelDesc::Attention::Fused;
  m.opLevelSelective = true;
  AnalyticalCostModel cm(m, preset("dgx-a100:1"));
  Plan none = plan(1, 1, 1, 1, 1), sel = none;
  none.recompute = Recompute::None;
  sel.recompute = Recompute::Selective;
  double T = 8192, h = 4096, kv = 1024, f = 14336, e = 2;
  double kept = T * h * e + T * e * (h + kv + h + f) + T * h * e +
                32 * 8192 * 4.0;
  EXPECT_NEAR(cm.stageCosts(sel).layerActivation, kept, 1);
  EXPECT_LT(kept, cm.stageCosts(none).layerActivation);
}

TEST(CostModel, GradientReductionAfterTheFlushIsExposed) {
  // DeepSpeed's pipeline engine all-reduces after the last backward: the
  // whole reduction (one bucket here) shows, where an overlapped one hides
  // under the backward except its last bucket.
  ModelDesc m = gpt(2048, 16, 8, 2048);
  m.dtype = "bfloat16", m.dtypeBytes = 2;
  Plan p = plan(8, 1, 1, 4, 1);
  p.zero = 0;
  p.bucketBytes = int64_t(1) << 40;
  ClusterSpec c = preset("dgx-a100:1");
  // Overlapped, in 25 MB buckets: all but the last hide.
  Plan q = p;
  q.bucketBytes = 25000000;
  double overlapped = AnalyticalCostModel(m, c).stageCosts(q).dpExposed;
  m.gradientReductionAfterBackward = true;
  AnalyticalCostModel after(m, c);
  double all = after.allReduceTime(double(m.totalParams()) * 2, 1, 8);
  EXPECT_NEAR(after.stageCosts(p).dpExposed, all, 1e-12);
  EXPECT_LT(overlapped, all);
}

TEST(CostModel, ReductionEndsWithTheEmbeddingsBucket) {
  // Gradients are ready in reverse parameter order, so the bucket a
  // data-parallel reduction ends with, and the gather the next forward
  // starts with, holds the embedding (Megatron-LM buckets in reverse
  // parameter order). GPT 1.7B's shape with a 131072-token vocabulary:
  // layers of 12h^2 + 13h = 50,358,272 parameters; the first stage's
  // embedding, positions and final norm 131072h + 4096h + 2h = 276,828,160;
  // the untied head 131072h = 268,435,456; one stage reduces all of it,
  // 24 layers + embedding + head = 1,753,862,144. With compute that hides
  // everything else (no SMs taken by the collectives), what shows is the
  // embedding bucket's share of the reduce-scatter and of the all-gather:
  // 15.8%, not a layer's 1/25.
  ModelDesc m = gpt(2048, 16, 24, 4096, 131072);
  m.tiedEmbedding = false;
  m.gradientBytes = 4;
  ASSERT_EQ(m.layerParams(), 50358272);
  ClusterSpec c = preset("dgx-a100:1");
  c.device.collectiveUnits = 0;
  AnalyticalCostModel cm(m, c);
  Plan p = plan(8, 1, 1, 8, 1);
  p.zero = 1;
  p.bucketBytes = 4 * 40000000; // Megatron-LM's 40M parameters, fp32
  double stage = 1753862144.0, last = 276828160.0 / stage;
  double buckets = std::ceil(stage * 4 / double(p.bucketBytes)); // 44
  double rs = buckets * cm.reduceScatterTime(stage * 4 / buckets, 1, 8);
  double ag = buckets * cm.allGatherTime(stage * 2 / buckets, 1, 8);
  EXPECT_NEAR(cm.stageCosts(p).dpExposed, last * (rs + ag), 1e-12);
  // A bucket larger than the embedding is what shows instead.
  p.bucketBytes = 4 * 400000000;
  buckets = std::ceil(stage * 4 / double(p.bucketBytes)); // 5
  rs = buckets * cm.reduceScatterTime(stage * 4 / buckets, 1, 8);
  ag = buckets * cm.allGatherTime(stage * 2 / buckets, 1, 8);
  EXPECT_NEAR(cm.stageCosts(p).dpExposed, 400000000.0 / stage * (rs + ag),
              1e-12);
}

TEST(CostModel, MegatronGradientBucketsAreViewsOfTheGradientBuffer) {
  // PyTorch DDP and DeepSpeed copy gradients into two communication buckets
  // of their own; Megatron-LM's buckets are views into its contiguous
  // gradient buffer and add nothing.
  ModelDesc m = gpt(2048, 16, 8, 2048);
  m.dtype = "bfloat16", m.dtypeBytes = 2;
  Plan p = plan(8, 1, 1, 4, 1);
  p.zero = 1;
  p.bucketBytes = 192000000;
  ClusterSpec c = preset("dgx-a100:1");
  double copies = AnalyticalCostModel(m, c).stageCosts(p).commBuffers;
  m.gradientBucketsAreViews = true;
  double views = AnalyticalCostModel(m, c).stageCosts(p).commBuffers;
  EXPECT_DOUBLE_EQ(copies - views, 2.0 * 192000000);
}
