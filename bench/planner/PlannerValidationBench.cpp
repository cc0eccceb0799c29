//===- PlannerValidationBench.cpp - Predicted vs published throughput -----===//
//
// Prints docs/validation.md's table: every row of Table 1 of Narayanan et al.
// (SC'21), published tp/pp/dp pinned with full recomputation and no
// sequence parallelism or ZeRO (the paper's system), micro-batch and
// interleaving left to the planner. The four rows in ../shared/validation
// are the test's; the other five are held out here.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/PublishedRuns.h"

#include "compiler/planner/Search.h"
#include <algorithm>
#include <cmath>
#include <map>

#include <cstdlib>

#include <cstdio>
#include <string>

using namespace strata::planner;

namespace {
struct Row {
  double paramsB;
  int64_t heads, hidden, layers, tp, pp, gpus, globalBatch;
  double measured;
  bool inTest;
};
} // namespace

/// docs/validation.md's published-runs table.
static void printPublishedRuns() {
  const char *dir = std::getenv("STRATA_VALIDATION_DIR");
  std::string path =
      std::string(dir ? dir : STRATA_VALIDATION_DIR) + "/published-runs.csv";
  std::vector<std::string> skipped;
  std::vector<PublishedRun> runs = readPublishedRuns(path, skipped);
  std::printf("\npublished runs (%s)\n\n", path.c_str());
  std::printf("| row | model | GPUs | pinned as stated | metric | measured | "
              "predicted | error | fits (GiB) | planner's plan | breakdown "
              "(s) |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  // The summary line: how many rows fit and came within 10%.
  int fit = 0, within = 0;
  std::vector<double> errors;
  for (const PublishedRun &r : runs) {
    PlanResult p = planAsStated(r);
    if (!p.ok) {
      std::printf("| %s | %s | %lld | %s | | %.4g | infeasible: %s |\n",
                  r.id.c_str(), r.model.c_str(),
                  (long long)r.cluster.numDevices(), r.reading.c_str(),
                  r.measured, p.error.c_str());
      continue;
    }
    const Estimate &e = p.plans[0].estimate;
    double pred = predictedMetric(r, e);
    // Error as (predicted speed - measured speed) / measured speed.
    double err = predictedSpeedRatio(r, e) - 1;
    if (e.fits) {
      ++fit;
      errors.push_back(std::fabs(err));
      within += std::fabs(err) <= 0.10;
    }
    const char *metric = r.metric == PublishedMetric::IterationTime ? "s/iter"
                         : r.metric == PublishedMetric::TokensPerGpu
                             ? "tokens/s/GPU"
                             : "TFLOP/s/GPU";
    const TimeBreakdown &t = e.time;
    std::printf("| %s | %s | %lld | %s | %s | %.4g | %.4g | %+.1f%% | "
                "%.1f of %.0f | %s | comp %.3g tp %.3g pp %.3g dp %.3g "
                "zero %.3g bubble %.3g opt %.3g |\n",
                r.id.c_str(), r.model.c_str(),
                (long long)r.cluster.numDevices(), r.reading.c_str(), metric,
                r.measured, pred, 100 * err, e.memory.total() / (1 << 30),
                e.memoryLimitBytes / (1 << 30),
                p.plans[0].plan.summary().c_str(), t.compute, t.tpComm,
                t.ppComm, t.dpComm, t.zeroComm, t.bubble, t.optimizer);
  }
  for (const std::string &s : skipped)
    std::printf("skipped %s\n", s.c_str());
  // One line per file: how many rows were read, fit, and came within 10%,
  // and why the others were skipped.
  int read = int(runs.size());
  std::sort(errors.begin(), errors.end());
  double median = errors.empty() ? 0 : errors[errors.size() / 2];
  std::map<std::string, int> reasons;
  for (const std::string &s : skipped) {
    std::string why = s.substr(s.find(": ") + 2);
    why = why.substr(0, std::min(why.find(" ("), why.find(" '")));
    ++reasons[why];
  }
  std::printf("\nsummary: %d rows read, %d fit, %d within 10%% (median "
              "|error| %.1f%%); %zu skipped",
              read, fit, within, 100 * median, skipped.size());
  for (auto &[why, n] : reasons)
    std::printf("; %d: %s", n, why.c_str());
  std::printf("\n");
}

int main() {
  const Row rows[] = {
      {1.7, 24, 2304, 24, 1, 1, 32, 512, 137, true},
      {3.6, 32, 3072, 30, 2, 1, 64, 512, 138, false},
      {7.5, 32, 4096, 36, 4, 1, 128, 512, 142, true},
      {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, false},
      {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, true},
      {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, false},
      {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, true},
      {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, false},
      {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, false},
      {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, false},
  };
  std::printf("| model | GPUs | tp | pp | dp | set | measured TFLOP/s | "
              "predicted (pinned) | error | planner's micro-batch, schedule | "
              "free search: plan | free predicted |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row &r : rows) {
    ModelDesc m;
    m.vocab = 51200, m.seqLen = 2048, m.hidden = r.hidden, m.heads = r.heads;
    m.layers = r.layers, m.ffnHidden = 4 * r.hidden;
    m.dtype = "bfloat16", m.dtypeBytes = 2;
    m.attention = ModelDesc::Attention::Unfused; // the 2021 system
    std::string err;
    bool isPreset;
    ClusterSpec c =
        *clusterPreset("dgx-a100:" + std::to_string(r.gpus / 8), err, isPreset);
    int64_t dp = r.gpus / (r.tp * r.pp);
    SearchOptions pinned;
    pinned.globalBatch = r.globalBatch;
    for (std::string pin :
         {"tp=" + std::to_string(r.tp), "pp=" + std::to_string(r.pp),
          "dp=" + std::to_string(dp), std::string("recompute=full"),
          std::string("sp=false"), std::string("zero=0")})
      parsePin(pin, pinned.pins, err);
    if (r.pp > 1)
      parsePin("schedule=interleaved", pinned.pins, err);
    PlanResult p = searchPlans(m, c, pinned);
    SearchOptions free;
    free.globalBatch = r.globalBatch;
    PlanResult f = searchPlans(m, c, free);
    if (!p.ok || !f.ok) {
      std::printf("| %.1fB | %lld | no plan: %s |\n", r.paramsB,
                  (long long)r.gpus, (p.ok ? f.error : p.error).c_str());
      continue;
    }
    double B = r.globalBatch, s = 2048, l = r.layers, h = r.hidden, V = 51200;
    double F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    auto tflops = [&](const PlanResult &x) {
      return F / x.plans[0].estimate.stepTimeS / double(r.gpus) / 1e12;
    };
    const Plan &pp = p.plans[0].plan;
    std::string sched = std::to_string(pp.microBatch) + " x " +
                        std::to_string(pp.numMicrobatches) + ", " +
                        scheduleName(pp.schedule) +
                        (pp.vpp > 1 ? " v=" + std::to_string(pp.vpp) : "");
    std::printf("| %.1fB | %lld | %lld | %lld | %lld | %s | %.0f | %.1f | "
                "%+.1f%% | %s | %s | %.1f |\n",
                r.paramsB, (long long)r.gpus, (long long)r.tp, (long long)r.pp,
                (long long)dp, r.inTest ? "test" : "held out", r.measured,
                tflops(p), 100 * (tflops(p) / r.measured - 1), sched.c_str(),
                f.plans[0].plan.summary().c_str(), tflops(f));
  }
  printPublishedRuns();
  return 0;
}
