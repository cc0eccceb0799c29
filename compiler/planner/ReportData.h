//===- ReportData.h - What the plan views show, gathered once ----*- C++
//-*-===//
//
// The HTML report (HtmlReport.h) draws the planner's own description of a
// plan (PlanDetails: memory per stage, traffic per group and topology level,
// warnings) plus what only the drawing needs: layers per pipeline device,
// the topology level each group is coloured by, which ranks form a group,
// and the simulated step.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_REPORTDATA_H
#define STRATA_COMPILER_PLANNER_REPORTDATA_H

#include "compiler/planner/PlanDetails.h"
#include "compiler/planner/Trace.h"

#include <string>
#include <vector>

namespace strata::planner {

struct ReportData {
  /// Layers each pipeline device holds, over all its virtual stages.
  std::vector<int64_t> deviceLayers;
  /// Per PlanDetails::groups entry: the outermost topology level it crosses
  /// (0 when it stays inside one innermost unit), which colours it.
  std::vector<size_t> groupLevel;
  SimulatedStep step;
  std::string stepError; ///< why there is no simulated step (too many ops)
};

/// Gathers the drawing's data for `plan` (stageLayers assigned) and its
/// details.
ReportData buildReportData(const CostModel &cm, const Plan &plan,
                           const PlanDetails &details);

/// Ranks of the `index`-th group of `axis` (members `plan.stride(axis)`
/// apart), in order.
std::vector<int64_t> groupRanks(const Plan &plan, Axis axis, int64_t index);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_REPORTDATA_H
