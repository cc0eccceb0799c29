//===- ReportData.h - What the plan views show, computed once ----*- C++
//-*-===//
//
// The HTML report (HtmlReport.h) draws the numbers gathered here: the memory
// of every pipeline device, the process groups with the topology level each
// crosses and the bytes it moves per step, and the simulated step. Keeping
// them in one place lets the planner's own per-stage and per-level terms
// replace these derivations without touching the drawing code.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_REPORTDATA_H
#define STRATA_COMPILER_PLANNER_REPORTDATA_H

#include "compiler/planner/CostModel.h"
#include "compiler/planner/Trace.h"

#include <string>
#include <vector>

namespace strata::planner {

/// Peak memory of one pipeline device (the ranks of one stage hold the same).
struct StageMemory {
  int64_t device = 0;
  int64_t layers = 0; ///< layers over all its virtual stages
  MemoryBreakdown memory;
};

/// One kind of process group (all tp groups, all dp groups, ...).
struct GroupTraffic {
  Axis axis = Axis::TP;
  int64_t size = 1, stride = 1;
  int64_t count = 1; ///< groups of this kind
  size_t level = 0;  ///< innermost topology level the group fits in
  std::string what;  ///< the collectives it carries
  /// Bytes one member sends per step over this group (ring collectives move
  /// 2(n-1)/n of an all-reduced buffer).
  double bytesPerStep = 0;
};

struct ReportData {
  std::vector<StageMemory> stages;
  std::vector<GroupTraffic> groups;
  /// Bytes per step one device sends over links of each topology level (the
  /// level its groups cross), indexed like ClusterSpec::levels.
  std::vector<double> levelBytesPerDevice;
  SimulatedStep step;
  std::string stepError; ///< why there is no simulated step (too many ops)
};

/// Derives the report's numbers for `plan` (stageLayers assigned).
ReportData buildReportData(const CostModel &cm, const Plan &plan);

/// Ranks of the `index`-th group of `axis` (members `plan.stride(axis)`
/// apart), in order.
std::vector<int64_t> groupRanks(const Plan &plan, Axis axis, int64_t index);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_REPORTDATA_H
