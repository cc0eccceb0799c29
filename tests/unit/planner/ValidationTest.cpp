//===- ValidationTest.cpp - Against Megatron-LM's published throughput
//-----===//
//
// Rows of Table 1 of Narayanan et al. (SC'21) from ../shared/validation. For
// each: with the published tp, pp, dp pinned, full recomputation and the
// paper's system (no sequence parallelism or ZeRO, which came later), the
// predicted TFLOP/s per GPU (the paper's FLOP formula over the predicted
// step time) must be within 10% of the measured value; left free, the
// planner must find a plan it predicts to be at least as fast.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/PublishedRuns.h"
#include "compiler/planner/Search.h"
#include "tests/unit/planner/PlannerTestUtils.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

using namespace strata::planner;
using namespace strata::planner::test;

namespace {
struct Row {
  double paramsB;
  int64_t heads, hidden, layers, tp, pp, gpus, globalBatch;
  double measuredTflops;
};
} // namespace

static std::vector<Row> readRows(const std::string &path) {
  std::vector<Row> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line); // header
  while (std::getline(in, line)) {
    if (line.empty())
      continue;
    std::stringstream ss(line);
    std::vector<double> f;
    std::string cell;
    while (std::getline(ss, cell, ','))
      f.push_back(std::stod(cell));
    if (f.size() < 9)
      continue;
    rows.push_back({f[0], int64_t(f[1]), int64_t(f[2]), int64_t(f[3]),
                    int64_t(f[4]), int64_t(f[5]), int64_t(f[6]), int64_t(f[7]),
                    f[8]});
  }
  return rows;
}

/// ../shared/validation beside the clone, or $STRATA_VALIDATION_DIR.
static std::string validationDir() {
  const char *dir = std::getenv("STRATA_VALIDATION_DIR");
  return dir ? dir : STRATA_VALIDATION_DIR;
}

/// The paper's per-iteration FLOPs (with forward recomputation).
static double megatronFlops(const Row &r) {
  double B = r.globalBatch, s = 2048, l = r.layers, h = r.hidden, V = 51200;
  return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

TEST(Validation, MegatronWeakScalingRows) {
  std::string path = validationDir() + "/megatron-sc21-weak-scaling.csv";
  if (!std::ifstream(path))
    GTEST_SKIP() << "validation data not found at " << path
                 << " (CI places ../shared beside the clone)";
  std::vector<Row> rows = readRows(path);
  ASSERT_FALSE(rows.empty()) << "no rows parsed from " << path;
  for (const Row &r : rows) {
    SCOPED_TRACE(std::to_string(r.paramsB) + "B on " + std::to_string(r.gpus));
    ModelDesc m = gpt(r.hidden, r.heads, r.layers); // unfused, as in 2021
    ClusterSpec c = preset("dgx-a100:" + std::to_string(r.gpus / 8));
    SearchOptions pinned;
    pinned.globalBatch = r.globalBatch;
    std::string err;
    for (std::string pin :
         {"tp=" + std::to_string(r.tp), "pp=" + std::to_string(r.pp),
          "dp=" + std::to_string(r.gpus / (r.tp * r.pp)),
          std::string("recompute=full"), std::string("sp=false"),
          std::string("zero=0")})
      ASSERT_TRUE(parsePin(pin, pinned.pins, err)) << err;
    if (r.pp > 1)
      ASSERT_TRUE(parsePin("schedule=interleaved", pinned.pins, err)) << err;
    PlanResult p = searchPlans(m, c, pinned);
    ASSERT_TRUE(p.ok) << p.error;
    double step = p.plans[0].estimate.stepTimeS;
    double tflops = megatronFlops(r) / step / double(r.gpus) / 1e12;
    EXPECT_NEAR(tflops / r.measuredTflops, 1.0, 0.10)
        << "predicted " << tflops << " TFLOP/s/GPU, measured "
        << r.measuredTflops << " with " << p.plans[0].plan.summary();

    SearchOptions free;
    free.globalBatch = r.globalBatch;
    PlanResult f = searchPlans(m, c, free);
    ASSERT_TRUE(f.ok) << f.error;
    EXPECT_LE(f.plans[0].estimate.stepTimeS, step * (1 + 1e-12))
        << "free search found " << f.plans[0].plan.summary();
  }
}

// Rows of published-runs.csv (docs/validation.md, "Published runs"): every
// published configuration, pinned as its source states it, must fit; the
// rows the model predicts within 10% must stay there. The rows outside are
// listed with the term the model lacks (docs/validation.md); a change that
// brings one inside should move it to the checked set.
TEST(Validation, PublishedRunsFitAndStayWithinTenPercent) {
  std::string path = validationDir() + "/published-runs.csv";
  if (!std::ifstream(path))
    GTEST_SKIP() << "validation data not found at " << path;
  std::vector<std::string> skipped;
  std::vector<PublishedRun> runs = readPublishedRuns(path, skipped);
  ASSERT_FALSE(runs.empty()) << "no rows parsed from " << path;
  EXPECT_TRUE(skipped.empty()) << skipped.front();
  const std::set<std::string> knownOutside = {"A1", "D6"};
  for (const PublishedRun &r : runs) {
    SCOPED_TRACE(r.id + " " + r.model + " (" + r.reading + ")");
    // BLOOM's partition (type:transformer|embedding): 70 layers and two
    // embedding slots over 12 stages, 6 slots each.
    if (r.id == "E1") {
      std::vector<int64_t> bloom(12, 6);
      bloom.front() = bloom.back() = 5;
      EXPECT_EQ(r.stageLayers, bloom);
    }
    PlanResult p = planAsStated(r);
    ASSERT_TRUE(p.ok) << p.error;
    EXPECT_TRUE(p.plans[0].estimate.fits);
    double pred = predictedMetric(r, p.plans[0].estimate);
    double speed = r.metric == PublishedMetric::IterationTime
                       ? r.measured / pred
                       : pred / r.measured;
    if (!knownOutside.count(r.id))
      EXPECT_NEAR(speed, 1.0, 0.10)
          << "predicted " << pred << ", measured " << r.measured << " with "
          << p.plans[0].plan.summary();
  }
}

// llm-foundry's H100 rows ran Composer's FSDP mixed precision 'DEFAULT'
// (amp_bf16): bf16 parameters, gradients reduced in float32. The reader
// reduces them in fp32, one transformer block per reduction; 'PURE' (the
// precision column "bf16") keeps the bf16 reduction.
TEST(Validation, ComposerDefaultMixedPrecisionReducesInFp32) {
  std::string header =
      "row_id,source_key,source,table_or_section,url_or_repo_path,model,"
      "params_b,layers,hidden,heads,kv_heads,ffn_hidden,vocab,seq_len,gpu,"
      "gpu_mem_gb,gpus_per_node,intra_node_link,inter_node_bw,total_gpus,tp,"
      "pp,vpp,dp,cp,zero_fsdp,micro_batch,global_batch_seqs,grad_accum,"
      "recompute,seq_parallel,precision,framework,reported_tflops_per_gpu,"
      "reported_tokens_per_s_per_gpu,reported_iter_time_s,reported_mfu_pct,"
      "reported_other,flop_counting,derived_tokens_per_s_per_gpu,derivation,"
      "confidence,notes";
  auto row = [](const std::string &id, const std::string &precision) {
    return id +
           ",MPT,s,t,u,MPT-3B,2.65,32,2560,20,= heads (MHA),10240,50368,"
           "2048,H100,80,8?,?,?,512,1,1,1,512,1,FSDP SHARD_GRAD_OP "
           "(ZeRO-2),8,4096,1,none,n/a," +
           precision +
           ",\"Composer/llm-foundry (PyTorch FSDP, flash attn)\",388,21664,,"
           "39.24,,x,,,HIGH,n";
  };
  std::string path = ::testing::TempDir() + "/composer-precision.csv";
  {
    std::ofstream out(path);
    out << header << "\n"
        << row("D6", "amp_bf16") << "\n"
        << row("P1", "bf16") << "\n";
  }
  std::vector<std::string> skipped;
  std::vector<PublishedRun> runs = readPublishedRuns(path, skipped);
  ASSERT_EQ(runs.size(), 2u);
  // One MPT block: q, k, v, out (4 h^2), FC1 and FC2 (2 h f), two layer
  // norms' weight and bias (4 h), no biases elsewhere.
  int64_t h = 2560, f = 10240;
  int64_t block = 4 * h * h + 2 * h * f + 4 * h;
  EXPECT_EQ(runs[0].desc.gradientBytes, 4);
  ASSERT_TRUE(runs[0].options.pins.bucketBytes.has_value());
  EXPECT_EQ(*runs[0].options.pins.bucketBytes, block * 4); // 314,613,760
  EXPECT_EQ(runs[1].desc.gradientBytes, 0); // the activation dtype, bf16
  ASSERT_TRUE(runs[1].options.pins.bucketBytes.has_value());
  EXPECT_EQ(*runs[1].options.pins.bucketBytes, block * 2);
}

// More of llm-foundry's H100 BF16 rows (bench/planner/llm-foundry-h100,
// docs/validation.md), read and pinned like D2-D6: every one fits, and the
// runs with activation checkpointing ("K" rows) stay within 10%. The runs
// without it ("N" rows) are predicted 17-33% fast (docs/validation.md
// says what that points at); a change that brings them inside should
// check them here too.
TEST(Validation, LlmFoundryCheckpointedRowsStayWithinTenPercent) {
  std::vector<std::string> skipped;
  std::vector<PublishedRun> runs =
      readPublishedRuns(STRATA_LLM_FOUNDRY_ROWS, skipped);
  ASSERT_EQ(runs.size(), 20u);
  EXPECT_TRUE(skipped.empty()) << skipped.front();
  for (const PublishedRun &r : runs) {
    SCOPED_TRACE(r.id + " " + r.model + " (" + r.reading + ")");
    PlanResult p = planAsStated(r);
    ASSERT_TRUE(p.ok) << p.error;
    EXPECT_TRUE(p.plans[0].estimate.fits);
    if (r.id.front() != 'K')
      continue;
    double pred = predictedMetric(r, p.plans[0].estimate);
    EXPECT_NEAR(pred / r.measured, 1.0, 0.10)
        << "predicted " << pred << ", measured " << r.measured << " with "
        << p.plans[0].plan.summary();
  }
}
