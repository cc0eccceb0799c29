//===- Report.cpp - Human-readable plan reports ---------------------------===//

#include "compiler/planner/Report.h"

#include "runtime/support/Format.h"

#include <cstdio>
#include <sstream>

namespace strata::planner {

static std::string fmt(const char *f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

static std::string gib(double b) { return formatBytes(b); }

static std::string secs(double s) {
  return s >= 1 ? fmt("%.3f s", s) : fmt("%.2f ms", s * 1e3);
}

std::string formatPlanReport(const PlanResult &r, const ModelDesc &m,
                             const ClusterSpec &c) {
  std::ostringstream os;
  const RankedPlan &best = r.plans.at(0);
  const Plan &p = best.plan;
  const Estimate &e = best.estimate;
  bool graph = m.kind == ModelDesc::Kind::Graph;
  os << "model:   " << m.name << " (" << formatCount(double(m.totalParams()))
     << " parameters, "
     << (graph ? "explicit graph of " + plural(m.layers, "pipeline unit") +
                     (m.repeatedUnits > 0
                          ? " (" + std::to_string(m.repeatedUnits) +
                                " repeating an earlier unit)"
                          : std::string())
               : plural(m.layers, "layer"))
     << ", " << m.dtype << ")\n";
  os << "cluster: " << c.name << " (" << c.numDevices() << " x "
     << c.device.name << ", " << gib(c.device.memoryBytes) << " each)\n\n";
  os << "plan: " << p.summary() << "\n";
  os << "  data parallel " << p.dp << ", tensor parallel " << p.tp
     << (p.sp ? " with sequence parallelism" : "") << ", pipeline " << p.pp
     << (p.pp == 1 ? " stage" : " stages");
  if (p.schedule == Schedule::Interleaved)
    os << " x " << p.vpp << " virtual";
  os << "\n  " << plural(p.numMicrobatches, "micro-batch") << " of "
     << p.microBatch << " per replica (global batch " << p.globalBatch()
     << "), schedule " << scheduleName(p.schedule) << ", ZeRO-" << p.zero
     << ", recompute " << recomputeName(p.recompute) << "\n";
  os << "  placement (innermost first): " << axisName(p.axisOrder[0]) << ", "
     << axisName(p.axisOrder[1]) << ", " << axisName(p.axisOrder[2]) << "\n";
  if (p.pp > 1) {
    os << (graph ? "  pipeline units per stage (balanced by cost):"
                 : "  layers per stage:");
    for (int64_t n : p.stageLayers)
      os << " " << n;
    os << "\n";
  }
  os << "\npredicted step time: " << secs(e.stepTimeS) << "\n";
  auto line = [&](const char *name, double t) {
    os << "  " << name << secs(t) << fmt("  (%4.1f%%)", 100 * t / e.stepTimeS)
       << "\n";
  };
  line("compute                 ", e.time.compute);
  line("exposed TP comm         ", e.time.tpComm);
  line("exposed PP send/recv    ", e.time.ppComm);
  line("exposed DP reduction    ", e.time.dpComm);
  line("exposed ZeRO-3 gathers  ", e.time.zeroComm);
  line("pipeline bubble         ", e.time.bubble);
  line("optimizer               ", e.time.optimizer);
  os << "throughput: " << fmt("%.0f", e.tokensPerS) << " tokens/s, "
     << formatFlops(e.tflopsPerDevice * 1e12) << " (model) per device, MFU "
     << fmt("%.1f%%", 100 * e.mfu) << "\n\n";
  os << "peak memory per device: " << gib(e.memory.total()) << " of "
     << gib(e.memoryLimitBytes) << "\n";
  os << "  weights " << gib(e.memory.weights) << ", gradients "
     << gib(e.memory.gradients) << ", optimizer state "
     << gib(e.memory.optimizerState) << "\n  activations "
     << gib(e.memory.activations) << ", communication buffers "
     << gib(e.memory.commBuffers) << ", reserved " << gib(e.memory.reserved)
     << "\n\n";
  if (!r.pins.empty()) {
    os << "pinned:";
    for (size_t i = 0; i < r.pins.size(); ++i)
      os << (i ? ", " : " ") << r.pins[i];
    os << "\n";
  }
  os << "search: " << secs(r.searchTimeS) << ", " << r.spaceSize
     << " candidates, " << r.candidatesEvaluated << " costed after pruning\n";
  if (r.plans.size() > 1) {
    os << "runners-up:\n";
    for (size_t i = 1; i < r.plans.size(); ++i)
      os << "  " << i + 1 << ". " << r.plans[i].plan.summary() << "\n     "
         << secs(r.plans[i].estimate.stepTimeS) << ", " << r.plans[i].whySlower
         << "\n";
  }
  return os.str();
}

} // namespace strata::planner
