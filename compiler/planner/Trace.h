//===- Trace.h - Simulated schedule of one step as a Chrome trace -*- C++
//-*-===//
//
// Replays one training step of a plan op by op (forward and backward of
// every micro-batch on every pipeline device, in the schedule's order, with
// send/recv dependencies) and writes it as Chrome trace JSON for Perfetto.
// The replay doubles as a check of the analytical pipeline formula.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_TRACE_H
#define STRATA_COMPILER_PLANNER_TRACE_H

#include "compiler/planner/CostModel.h"

#include <string>
#include <vector>

namespace strata::planner {

struct TraceEvent {
  std::string name;
  std::string category; ///< forward, backward, dp-reduce, optimizer
  int64_t device = 0;   ///< pipeline device
  double startS = 0, durationS = 0;
};

struct SimulatedStep {
  std::vector<TraceEvent> events;
  double pipelineEndS = 0; ///< last backward finishes
  double stepEndS = 0;     ///< after gradient reduction and optimizer
};

/// Replays `plan` (stageLayers assigned). Returns false with `error` if the
/// step has too many ops to trace (more than `maxEvents`).
bool simulateStep(const CostModel &cm, const Plan &plan, SimulatedStep &out,
                  std::string &error, int64_t maxEvents = 2000000);

/// Chrome trace JSON ("traceEvents", microseconds) of a simulated step.
std::string chromeTraceJson(const SimulatedStep &step, const Plan &plan);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_TRACE_H
