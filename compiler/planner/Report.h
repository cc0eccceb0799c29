//===- Report.h - Human-readable plan reports -------------------*- C++ -*-===//

#ifndef STRATA_COMPILER_PLANNER_REPORT_H
#define STRATA_COMPILER_PLANNER_REPORT_H

#include "compiler/planner/Cluster.h"
#include "compiler/planner/ModelDesc.h"
#include "compiler/planner/Plan.h"

#include <string>

namespace strata::planner {

/// The text `strata plan` prints: the plan, step time and its breakdown,
/// throughput, memory by category, search time and the runners-up.
std::string formatPlanReport(const PlanResult &result, const ModelDesc &model,
                             const ClusterSpec &cluster);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_REPORT_H
