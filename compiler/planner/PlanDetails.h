//===- PlanDetails.h - What a plan does to the cluster, for reports -*- C++ -*-===//
//
// A reusable description of one costed plan, for `strata plan` (text and
// `--json`, docs/plan-json.md) and for any other report (the HTML report):
//
//   - memory per pipeline stage (not only the most loaded device);
//   - for each process group (tp, pp, dp, zero3): its size, stride, the
//     topology levels it crosses, the collective NCCL would run, the bytes
//     each member moves per step, and how much of its time compute hides;
//   - bytes per device per step over each topology level;
//   - warnings: a cluster too large for the job (with a device count that
//     keeps most of the throughput), and a best plan whose advantage rests
//     on overlap the model has not validated (with the nearest plan that
//     does not need it).
//
// Everything is computed from the cost model's own terms; nothing is
// re-estimated differently from the search.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_PLANDETAILS_H
#define STRATA_COMPILER_PLANNER_PLANDETAILS_H

#include "compiler/planner/CostModel.h"
#include "compiler/planner/Search.h"

#include <optional>
#include <string>
#include <vector>

namespace strata::planner {

/// One process group kind of the plan.
struct GroupTraffic {
  std::string name; ///< "tp", "pp", "dp", "zero3"
  int64_t size = 1, stride = 1;
  /// Members per unit of each topology level (GroupSpan::members).
  std::vector<int64_t> membersPerLevel;
  /// Names of the topology levels whose units the group spans across.
  std::vector<std::string> crosses;
  /// What the library runs for the group's typical collective.
  std::string algorithm, protocol;
  /// Bytes each member sends per step (bus bytes: what the links carry).
  double bytesPerStep = 0;
  /// Seconds of the group's communication per step, and the part of it
  /// compute hides (overlap the cost model assumes).
  double commTimeS = 0, hiddenTimeS = 0;
};

/// Bytes one device sends per step over one topology level.
struct LevelTraffic {
  std::string level;
  double bytesPerStep = 0;
};

struct PlanDetails {
  std::vector<MemoryBreakdown> stageMemory; ///< per pipeline device
  std::vector<GroupTraffic> groups;
  std::vector<LevelTraffic> levels;
  /// Overlap the step time relies on, in seconds (sum of hiddenTimeS).
  double hiddenCommS = 0;
  std::vector<std::string> warnings;
  /// A smaller device count that keeps >= 80% of the throughput, if the
  /// cluster is too large for the job.
  std::optional<int64_t> betterDeviceCount;
  double betterTokensPerS = 0;
};

/// Traffic and memory of `plan` (estimated as `estimate`) under `cm`.
PlanDetails describePlan(const AnalyticalCostModel &cm, const Plan &plan,
                         const Estimate &estimate);

/// Adds the cluster-size and overlap warnings to `details`, searching the
/// job again on smaller clusters and without ZeRO-3's overlap. `result` is
/// the search that produced the plan; a plan found without the overlap is
/// appended to its runners-up.
void reviewPlan(const ModelDesc &model, const ClusterSpec &cluster,
                const SearchOptions &options, PlanResult &result,
                PlanDetails &details);

/// `cluster` with 1/`factor` of its devices (outermost levels shrink
/// first); nullopt if it cannot be divided so.
std::optional<ClusterSpec> shrinkCluster(const ClusterSpec &cluster,
                                         int64_t factor);

/// The "details" object of docs/plan-json.md.
std::string planDetailsJson(const PlanDetails &details);
/// The report's text section.
std::string formatPlanDetails(const PlanDetails &details);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_PLANDETAILS_H
