//===- ReportData.cpp - Numbers behind the plan views ---------------------===//

#include "compiler/planner/ReportData.h"

#include <array>

namespace strata::planner {

std::vector<int64_t> groupRanks(const Plan &p, Axis axis, int64_t index) {
  // Ranks are mixed-radix numbers over p.axisOrder (innermost first); a
  // group varies one digit and fixes the others to the digits of `index`.
  std::array<int64_t, 3> digit{};
  int64_t rest = index;
  for (Axis a : p.axisOrder) {
    if (a == axis)
      continue;
    digit[int(a)] = rest % p.size(a);
    rest /= p.size(a);
  }
  std::vector<int64_t> ranks;
  for (int64_t k = 0; k < p.size(axis); ++k) {
    digit[int(axis)] = k;
    int64_t r = 0;
    for (Axis a : p.axisOrder)
      r += digit[int(a)] * p.stride(a);
    ranks.push_back(r);
  }
  return ranks;
}

ReportData buildReportData(const CostModel &cm, const Plan &p,
                           const PlanDetails &details) {
  ReportData r;
  r.deviceLayers.assign(p.pp, 0);
  for (size_t k = 0; k < p.stageLayers.size(); ++k)
    r.deviceLayers[k % p.pp] += p.stageLayers[k];
  const ClusterSpec &c = cm.cluster();
  for (const GroupTraffic &g : details.groups) {
    size_t level = 0;
    for (size_t l = 0; l < c.levels.size(); ++l)
      for (const std::string &name : g.crosses)
        if (c.levels[l].name == name)
          level = l;
    r.groupLevel.push_back(level);
  }
  if (!simulateStep(cm, p, r.step, r.stepError, 400000))
    r.step = SimulatedStep();
  return r;
}

} // namespace strata::planner
