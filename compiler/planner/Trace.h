//===- Trace.h - Simulated schedule of one step as a Chrome trace -*- C++
//-*-===//
//
// Replays one training step of a plan op by op (forward and backward of
// every micro-batch on every pipeline device, in the schedule's order, with
// send/recv dependencies) and writes it as Chrome trace JSON for Perfetto.
// The replay doubles as a check of the analytical pipeline formula.
//
// Each pipeline device has four tracks (docs/report.md, "Trace
// conventions"): compute (ops, and the layers inside them), the
// tensor-parallel collectives, the pipeline send/recv, and the
// data-parallel traffic (gradient buckets, ZeRO gathers). Measured traces of
// the compiled executable (runtime/core/StepTrace.h) use the same tracks.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_TRACE_H
#define STRATA_COMPILER_PLANNER_TRACE_H

#include "compiler/planner/CostModel.h"

#include <string>
#include <utility>
#include <vector>

namespace strata::planner {

/// The tracks of one pipeline device, in display order.
enum class TraceTrack { Compute = 0, TpComm = 1, PpComm = 2, DpComm = 3 };
constexpr int kTraceTracks = 4;
const char *traceTrackName(TraceTrack t); ///< "compute", "tp comm", ...

struct TraceEvent {
  std::string name;
  /// forward, backward (whole ops); layer-forward, layer-backward; tp-comm,
  /// pp-send, dp-bucket, zero-gather, zero-reduce-scatter; dp-reduce,
  /// optimizer.
  std::string category;
  int64_t device = 0; ///< pipeline device
  double startS = 0, durationS = 0;
  TraceTrack track = TraceTrack::Compute;
  /// Numeric and text `args` of the Chrome event (FLOPs, bytes, op mix).
  std::vector<std::pair<std::string, double>> numArgs;
  std::vector<std::pair<std::string, std::string>> textArgs;
};

struct SimulatedStep {
  std::vector<TraceEvent> events;
  double pipelineEndS = 0; ///< last backward finishes
  double stepEndS = 0;     ///< after gradient reduction and optimizer
  bool perLayer = false;   ///< whether layer events were emitted
};

/// Replays `plan` (stageLayers assigned). Returns false with `error` if the
/// step has too many ops to trace (more than `maxEvents`). Per-layer events
/// are added when they keep the total under `maxEvents`.
bool simulateStep(const CostModel &cm, const Plan &plan, SimulatedStep &out,
                  std::string &error, int64_t maxEvents = 2000000);

/// Chrome trace JSON ("traceEvents", microseconds) of a simulated step.
std::string chromeTraceJson(const SimulatedStep &step, const Plan &plan);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_TRACE_H
