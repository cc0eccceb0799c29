//===- SearchTest.cpp - The search is exact over its space ----------------===//
//
// The brute force below enumerates the space documented in
// docs/cost-model.md ("Search space") with its own loops, including every
// composition of layers into stages, and costs each plan with the full
// `estimate`. The search must find the same optimum.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/Search.h"
#include "tests/unit/planner/PlannerTestUtils.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>

using namespace strata::planner;
using namespace strata::planner::test;

namespace {
struct BruteResult {
  double best = std::numeric_limits<double>::infinity();
  Plan plan;
  int64_t feasible = 0;
};
} // namespace

static void compositions(int64_t total, int64_t parts,
                         std::vector<int64_t> &cur,
                         const std::function<void()> &visit) {
  if (parts == 1) {
    cur.push_back(total);
    visit();
    cur.pop_back();
    return;
  }
  for (int64_t k = 1; k <= total - (parts - 1); ++k) {
    cur.push_back(k);
    compositions(total - k, parts - 1, cur, visit);
    cur.pop_back();
  }
}

static BruteResult bruteForce(const ModelDesc &m, const ClusterSpec &c,
                              int64_t G) {
  AnalyticalCostModel cm(m, c);
  BruteResult r;
  int64_t N = c.numDevices(), L = m.layers;
  std::vector<std::array<Axis, 3>> orders = {
      {Axis::TP, Axis::DP, Axis::PP}, {Axis::TP, Axis::PP, Axis::DP},
      {Axis::DP, Axis::TP, Axis::PP}, {Axis::DP, Axis::PP, Axis::TP},
      {Axis::PP, Axis::TP, Axis::DP}, {Axis::PP, Axis::DP, Axis::TP}};
  for (int64_t tp = 1; tp <= N; ++tp)
    for (int64_t pp = 1; pp <= N; ++pp) {
      if (N % (tp * pp) || m.heads % tp || m.ffnHidden % tp || pp > L)
        continue;
      int64_t dp = N / (tp * pp);
      if (G % dp)
        continue;
      for (auto &order : orders)
        for (int64_t mb = 1; mb <= G / dp; ++mb) {
          if ((G / dp) % mb)
            continue;
          int64_t nmb = G / dp / mb;
          for (Schedule s :
               {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved})
            for (int64_t v = 1; v <= L; ++v) {
              if ((s == Schedule::Interleaved) != (v > 1))
                continue;
              if (s != Schedule::OneFOneB && pp == 1)
                continue;
              if (v > 1 && (L % (pp * v) || nmb % pp))
                continue;
              for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero)
                for (Recompute rc :
                     {Recompute::None, Recompute::Selective, Recompute::Full})
                  for (bool sp : {false, true}) {
                    if (sp && tp == 1)
                      continue;
                    Plan p;
                    p.dp = dp, p.tp = tp, p.pp = pp, p.vpp = v;
                    p.axisOrder = order, p.microBatch = mb;
                    p.numMicrobatches = nmb, p.schedule = s, p.zero = zero;
                    p.recompute = rc, p.sp = sp;
                    auto consider = [&](const std::vector<int64_t> &layers) {
                      p.stageLayers = layers;
                      Estimate e = cm.estimate(p);
                      if (!e.fits)
                        return;
                      ++r.feasible;
                      if (e.stepTimeS < r.best) {
                        r.best = e.stepTimeS;
                        r.plan = p;
                      }
                    };
                    if (v > 1) {
                      consider(std::vector<int64_t>(pp * v, L / (pp * v)));
                    } else {
                      std::vector<int64_t> cur;
                      compositions(L, pp, cur, [&] { consider(cur); });
                    }
                  }
            }
        }
    }
  return r;
}

static void expectSearchMatchesBruteForce(const ModelDesc &m,
                                          const ClusterSpec &c, int64_t G) {
  BruteResult brute = bruteForce(m, c, G);
  SearchOptions o;
  o.globalBatch = G;
  o.topK = 3;
  o.diagnoseInfeasible = false;
  PlanResult r = searchPlans(m, c, o);
  if (brute.feasible == 0) {
    EXPECT_FALSE(r.ok);
    return;
  }
  ASSERT_TRUE(r.ok) << r.error;
  double found = r.plans[0].estimate.stepTimeS;
  EXPECT_NEAR(found / brute.best, 1.0, 1e-9)
      << "search: " << r.plans[0].plan.summary() << " " << found
      << "\nbrute:  " << brute.plan.summary() << " " << brute.best;
  EXPECT_TRUE(r.plans[0].estimate.fits);
  for (size_t i = 1; i < r.plans.size(); ++i)
    EXPECT_GE(r.plans[i].estimate.stepTimeS, found * (1 - 1e-12));
}

/// The memory the best unconstrained plan needs, to set limits that bind.
static double bestPlanMemory(const ModelDesc &m, const ClusterSpec &c,
                             int64_t G) {
  SearchOptions o;
  o.globalBatch = G;
  PlanResult r = searchPlans(m, c, o);
  return r.ok ? r.plans[0].estimate.memory.total() : 0;
}

TEST(Search, ExactAgainstBruteForceWithAmpleMemory) {
  ModelDesc m = gpt(512, 8, 6, 512, 8192);
  expectSearchMatchesBruteForce(m, preset("dgx-a100:1"), 16);
  ModelDesc small = gpt(256, 4, 5, 256, 4096);
  expectSearchMatchesBruteForce(small, ideal(2, 2), 8);
  // An expensive head (large vocabulary) makes uneven stages optimal.
  ModelDesc bigHead = gpt(256, 4, 7, 256, 120000);
  expectSearchMatchesBruteForce(bigHead, ideal(2, 2), 8);
}

TEST(Search, ExactAgainstBruteForceWhenMemoryBinds) {
  ModelDesc m = gpt(1024, 8, 6, 1024, 16384);
  ClusterSpec c = ideal(2, 2, 1e12);
  double need = bestPlanMemory(m, c, 16);
  ASSERT_GT(need, 0);
  // Tighter and tighter: the optimum moves to leaner plans, then to uneven
  // stage assignments, then nothing fits.
  for (double f : {0.9, 0.6, 0.4, 0.25, 0.1, 0.02}) {
    c.device.memoryBytes = need * f;
    SCOPED_TRACE("memory fraction " + std::to_string(f));
    expectSearchMatchesBruteForce(m, c, 16);
  }
}

TEST(Search, UnevenAssignmentBalancesTheHead) {
  // A large vocabulary makes the last stage's head expensive, so the best
  // 1F1B assignment gives that stage fewer layers.
  ModelDesc m = gpt(512, 8, 12, 512, 200000);
  SearchOptions o;
  o.globalBatch = 8;
  Pins pins;
  std::string err;
  ASSERT_TRUE(parsePin("pp=4", pins, err));
  ASSERT_TRUE(parsePin("schedule=1f1b", pins, err));
  o.pins = pins;
  PlanResult r = searchPlans(m, ideal(4, 1), o);
  ASSERT_TRUE(r.ok) << r.error;
  const std::vector<int64_t> &layers = r.plans[0].plan.stageLayers;
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_LT(layers.back(), layers[1]);
  int64_t sum = 0;
  for (int64_t n : layers)
    sum += n;
  EXPECT_EQ(sum, 12);
}

TEST(Search, PinsAreHonouredAndReported) {
  ModelDesc m = gpt(1024, 16, 8, 1024, 32000);
  ClusterSpec c = preset("dgx-a100:2");
  SearchOptions o;
  o.globalBatch = 64;
  std::string err;
  for (const char *pin : {"tp=4", "zero=1", "recompute=selective", "sp=true",
                          "placement=tp,dp,pp"})
    ASSERT_TRUE(parsePin(pin, o.pins, err)) << err;
  PlanResult r = searchPlans(m, c, o);
  ASSERT_TRUE(r.ok) << r.error;
  for (const RankedPlan &rp : r.plans) {
    EXPECT_EQ(rp.plan.tp, 4);
    EXPECT_EQ(rp.plan.zero, 1);
    EXPECT_EQ(rp.plan.recompute, Recompute::Selective);
    EXPECT_TRUE(rp.plan.sp);
  }
  ASSERT_GE(r.plans.size(), 2u);
  EXPECT_EQ(r.plans[1].whySlower.rfind("+", 0), 0u) << r.plans[1].whySlower;
}

TEST(Search, BadPinsAreClearErrors) {
  ModelDesc m = gpt(1024, 16, 8, 1024, 32000);
  ClusterSpec c = preset("dgx-a100:1");
  auto run = [&](std::vector<std::string> pins, int64_t G = 64) {
    SearchOptions o;
    o.globalBatch = G;
    std::string err;
    for (auto &p : pins)
      if (!parsePin(p, o.pins, err))
        return err;
    return searchPlans(m, c, o).error;
  };
  EXPECT_NE(run({"tp=3"}).find("does not divide the cluster's 8 devices"),
            std::string::npos);
  EXPECT_NE(run({"dp=2", "tp=2", "pp=4"}).find("dp*tp*pp = 16"),
            std::string::npos);
  EXPECT_NE(run({"pp=16"}).find("does not divide"), std::string::npos);
  EXPECT_NE(run({"dp=8"}, 12).find("global batch 12"), std::string::npos);
  EXPECT_NE(run({"vpp=2", "schedule=1f1b"}).find("interleaved"),
            std::string::npos);
  EXPECT_NE(run({"colour=blue"}).find("unknown plan field 'colour'"),
            std::string::npos);
  EXPECT_NE(run({"zero=4"}).find("zero must be an integer in [0, 3]"),
            std::string::npos);
  EXPECT_NE(run({"schedule=zigzag"}).find("gpipe, 1f1b or interleaved"),
            std::string::npos);
}

TEST(Search, InfeasibleJobSaysWhyAndWhatFits) {
  ModelDesc m = gpt(12288, 96, 16);
  ClusterSpec c = preset("dgx-a100:1");
  c.device.memoryBytes = 40.0 * (1 << 30);
  SearchOptions o;
  o.globalBatch = 8;
  PlanResult r = searchPlans(m, c, o);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("on its most loaded device, which has 40.0 GiB"),
            std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("smallest change that fits: use 16 devices"),
            std::string::npos)
      << r.error;

  // A pinned plan that cannot fit names the pin to drop.
  std::string err;
  ASSERT_TRUE(parsePin("dp=16", o.pins, err));
  ASSERT_TRUE(parsePin("zero=0", o.pins, err));
  c.device.memoryBytes = 80.0 * (1 << 30);
  c.levels.back().size = 2; // 16 devices
  o.globalBatch = 16;
  r = searchPlans(m, c, o);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("smallest change that fits: drop --pin "),
            std::string::npos)
      << r.error;
}

/// The two numbers of "needs X GiB on its most loaded device, which has Y GiB".
static std::pair<double, double> neededAndHad(const std::string &error) {
  double need = 0, has = 0;
  char unitNeed[8] = {}, unitHas[8] = {};
  size_t at = error.find("the leanest plan needs ");
  if (at == std::string::npos ||
      std::sscanf(error.c_str() + at,
                  "the leanest plan needs %lf %3s on its most loaded device, "
                  "which has %lf %3s",
                  &need, unitNeed, &has, unitHas) != 4)
    return {-1, -1};
  auto scale = [](const char *u) {
    return std::string(u) == "GiB"   ? 1024.0
           : std::string(u) == "MiB" ? 1.0
                                     : 0.0;
  };
  return {need * scale(unitNeed), has * scale(unitHas)};
}

TEST(Search, PinnedPlanThatDoesNotFitReportsItsOwnPeak) {
  // GPT-2 small on 8 ranks of 1.2 GiB with pp=4 and micro-batch 8: the
  // layer-uniform bound says less, but the first stage (embedding, most
  // micro-batches in flight) needs more than the device has.
  ModelDesc m = gpt(768, 12, 12);
  m.vocab = 50257, m.seqLen = 1024, m.dtype = "float32", m.dtypeBytes = 4;
  ClusterSpec c = preset("local:8");
  c.sharedHostMemoryBytes = 8 * 1.2 * (1 << 30);
  c.device.memoryBytes = 1.2 * (1 << 30);
  SearchOptions o;
  o.globalBatch = 64;
  std::string err;
  ASSERT_TRUE(parsePin("pp=4", o.pins, err));
  ASSERT_TRUE(parsePin("micro_batch=8", o.pins, err));
  PlanResult r = searchPlans(m, c, o);
  ASSERT_FALSE(r.ok);
  auto [need, has] = neededAndHad(r.error);
  EXPECT_GT(need, has) << r.error;
  EXPECT_NE(r.error.find("drop --pin pp=4"), std::string::npos) << r.error;
}

TEST(Search, LocalRanksShareMemorySoTheAdviceIsFewerRanks) {
  // Ranks of one host split its memory: "use more devices" would only make
  // each rank smaller. The advice is fewer ranks, or none on this machine.
  // One head and one layer: neither tensor nor pipeline parallelism can
  // split the 8192x8192 attention scores, so only a bigger share of the
  // host's memory helps.
  ModelDesc m = gpt(512, 1, 1, 8192, 50257);
  m.dtype = "float32", m.dtypeBytes = 4;
  ClusterSpec c = preset("local:16");
  c.sharedHostMemoryBytes = 24.0 * (1 << 30);
  c.device.memoryBytes = c.sharedHostMemoryBytes / 16;
  SearchOptions o;
  o.globalBatch = 16;
  PlanResult r = searchPlans(m, c, o);
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("smallest change that fits: use 8 ranks (--cluster "
                         "local:8, 3.00 GiB each; then dp=8"),
            std::string::npos)
      << r.error;
  EXPECT_EQ(r.error.find("devices ("), std::string::npos) << r.error;

  // A model no rank count of this machine holds.
  ModelDesc huge = gpt(8192, 64, 48);
  huge.vocab = 50257, huge.seqLen = 1024, huge.dtype = "float32";
  huge.dtypeBytes = 4;
  o.pins = Pins();
  r = searchPlans(huge, c, o);
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("none on this machine: its ranks share 24.0 GiB, "
                         "and more ranks do not add memory"),
            std::string::npos)
      << r.error;
}

TEST(Search, PinsFromTheSpecAreNamedByTheirOrigin) {
  ModelDesc m = gpt(768, 12, 12);
  ClusterSpec c = preset("dgx-a100:1");
  SearchOptions o;
  o.globalBatch = 8;
  std::string err;
  ASSERT_TRUE(parsePin("micro_batch=3", o.pins, err,
                       "training.micro_batch: 3 "
                       "in the spec"));
  PlanResult r = searchPlans(m, c, o);
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error.rfind("training.micro_batch: 3 in the spec: does not "
                          "divide the 8 sequences per replica",
                          0),
            0u)
      << r.error;
  o.pins = Pins();
  ASSERT_TRUE(parsePin("micro_batch=4", o.pins, err,
                       "training.micro_batch: 4 "
                       "in the spec"));
  ASSERT_TRUE(parsePin("tp=2", o.pins, err));
  r = searchPlans(m, c, o);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.pins, (std::vector<std::string>{
                        "training.micro_batch: 4 in the spec", "--pin tp=2"}));
  EXPECT_EQ(r.plans[0].plan.microBatch, 4);
}

TEST(Search, SmallModelsDoNotNeedZeroThree) {
  // GPT-2 small (124M) on 32 A100s: every rank holds the whole model with
  // room to spare; ZeRO-3's per-layer gathers only add traffic.
  ModelDesc gpt2 = gpt(768, 12, 12, 1024, 50257);
  gpt2.attention = ModelDesc::Attention::Fused;
  SearchOptions o;
  o.globalBatch = 512;
  PlanResult r = searchPlans(gpt2, preset("dgx-a100:4"), o);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_LT(r.plans[0].plan.zero, 3) << r.plans[0].plan.summary();
  // A ~5M-parameter model on 2 CPU ranks: nothing overlaps, so gathering
  // every layer (and the embedding) each micro-batch costs more than one
  // reduction per step.
  ModelDesc tiny = gpt(256, 4, 4, 128, 8192);
  tiny.dtype = "float32", tiny.dtypeBytes = 4;
  o.globalBatch = 32;
  r = searchPlans(tiny, preset("local:2"), o);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_LT(r.plans[0].plan.zero, 3) << r.plans[0].plan.summary();
}

//===----------------------------------------------------------------------===//
// Explicit graphs
//===----------------------------------------------------------------------===//

TEST(Search, BalanceUnitsMinimisesTheSlowestContiguousRun) {
  // Brute force over every split into contiguous runs.
  std::vector<double> times = {1, 3, 1, 1, 4, 2, 2};
  for (int64_t stages = 1; stages <= int64_t(times.size()); ++stages) {
    double best = std::numeric_limits<double>::infinity();
    std::vector<int64_t> cur;
    compositions(int64_t(times.size()), stages, cur, [&] {
      double worst = 0;
      size_t next = 0;
      for (int64_t n : cur) {
        double sum = 0;
        for (int64_t k = 0; k < n; ++k)
          sum += times[next++];
        worst = std::max(worst, sum);
      }
      best = std::min(best, worst);
    });
    std::vector<int64_t> counts = balanceUnits(times, stages);
    ASSERT_EQ(int64_t(counts.size()), stages);
    double worst = 0;
    size_t next = 0;
    for (int64_t n : counts) {
      EXPECT_GE(n, 1);
      double sum = 0;
      for (int64_t k = 0; k < n; ++k)
        sum += times[next++];
      worst = std::max(worst, sum);
    }
    EXPECT_EQ(next, times.size());
    EXPECT_DOUBLE_EQ(worst, best) << stages << " stages";
  }
  EXPECT_TRUE(balanceUnits(times, 8).empty());
}

/// A graph of units with one heavy unit: the search's pipeline puts it on a
/// stage of its own, and the estimate's stages cover every unit.
TEST(Search, GraphUnitsArePlannedAndBalancedByCost) {
  ModelDesc m;
  m.kind = ModelDesc::Kind::Graph;
  m.name = "graph-test";
  m.seqLen = 16;
  m.globalBatch = 8;
  for (int64_t k = 0; k < 5; ++k) {
    GraphUnit u;
    u.name = "op " + std::to_string(k);
    GraphOpCost op;
    op.flopsPerSample = k == 2 ? 4e12 : 1e12;
    op.bytesPerSample = 1e6;
    op.savedPerSample = 1e6;
    op.contraction = true;
    u.ops.push_back(op);
    u.params = 1e6;
    u.boundaryPerSample = 1e3;
    m.units.push_back(u);
  }
  m.layers = 5;
  SearchOptions o;
  o.globalBatch = 8;
  std::string error;
  ASSERT_TRUE(parsePin("pp=2", o.pins, error)) << error;
  PlanResult r = searchPlans(m, ideal(2, 1), o);
  ASSERT_TRUE(r.ok) << r.error;
  const Plan &p = r.plans[0].plan;
  EXPECT_EQ(p.pp, 2);
  EXPECT_EQ(p.tp, 1);
  // Units 1, 1, 4, 1, 1: the best split is [1 1 | 4 1 1] or [1 1 4 | 1 1]
  // (6 against 2), never one that leaves the heavy unit with more.
  ASSERT_EQ(p.stageLayers.size(), 2u);
  EXPECT_EQ(p.stageLayers[0] + p.stageLayers[1], 5);
  EXPECT_TRUE(p.stageLayers[0] == 2 || p.stageLayers[0] == 3)
      << p.stageLayers[0];
  EXPECT_GT(r.plans[0].estimate.stepTimeS, 0);
  // Tensor parallelism splits the contractions: faster per micro-batch.
  SearchOptions tp;
  tp.globalBatch = 8;
  ASSERT_TRUE(parsePin("tp=2", tp.pins, error)) << error;
  PlanResult split = searchPlans(m, ideal(2, 1), tp);
  ASSERT_TRUE(split.ok) << split.error;
  EXPECT_EQ(split.plans[0].plan.tp, 2);
  // Sequence parallelism needs a decision the planner does not make.
  SearchOptions sp = tp;
  ASSERT_TRUE(parsePin("sp=true", sp.pins, error)) << error;
  PlanResult refused = searchPlans(m, ideal(2, 1), sp);
  EXPECT_FALSE(refused.ok);
  EXPECT_NE(refused.error.find("explicit graph"), std::string::npos)
      << refused.error;
}
