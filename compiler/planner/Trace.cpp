//===- Trace.cpp - Replay of one step's pipeline schedule -----------------===//

#include "compiler/planner/Trace.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace strata::planner {

namespace {
struct Op {
  bool forward;
  int64_t microbatch, chunk;
};
} // namespace

/// The order a pipeline device runs its ops in (Megatron's schedules).
static std::vector<Op> deviceOrder(const Plan &p, int64_t d) {
  int64_t m = p.numMicrobatches, v = p.vpp, P = p.pp;
  std::vector<Op> ops;
  if (p.schedule == Schedule::GPipe) {
    for (int64_t i = 0; i < m; ++i)
      ops.push_back({true, i, 0});
    for (int64_t i = 0; i < m; ++i)
      ops.push_back({false, i, 0});
    return ops;
  }
  int64_t total = m * v;
  auto fwd = [&](int64_t k) {
    return Op{true, (k / (P * v)) * P + k % P, (k / P) % v};
  };
  auto bwd = [&](int64_t k) {
    return Op{false, (k / (P * v)) * P + k % P, v - 1 - (k / P) % v};
  };
  int64_t warm = v == 1 ? std::min(m, P - d - 1)
                        : std::min(total, (P - d - 1) * 2 + (v - 1) * P);
  for (int64_t k = 0; k < warm; ++k)
    ops.push_back(fwd(k));
  for (int64_t j = 0; j < total - warm; ++j) {
    ops.push_back(fwd(warm + j));
    ops.push_back(bwd(j));
  }
  for (int64_t j = total - warm; j < total; ++j)
    ops.push_back(bwd(j));
  return ops;
}

bool simulateStep(const CostModel &cm, const Plan &p, SimulatedStep &out,
                  std::string &error, int64_t maxEvents) {
  int64_t P = p.pp, v = p.vpp, m = p.numMicrobatches, S = P * v;
  if (int64_t(p.stageLayers.size()) != S) {
    error = "plan has no layer assignment to simulate";
    return false;
  }
  if (2 * m * S + 2 * P > maxEvents) {
    error = "the step has " + std::to_string(2 * m * S) +
            " pipeline ops, more than a trace can usefully show (" +
            std::to_string(maxEvents) + "); pin fewer micro-batches";
    return false;
  }
  StageCosts sc = cm.stageCosts(p);
  double layerBwd = sc.layerTime() - sc.layerForward;
  double hop = P > 1 ? sc.p2pPerMicrobatch / (2.0 * double(v)) : 0.0;
  // Forward/backward time of virtual stage s for one micro-batch; the
  // embedding and head split one third forward, two thirds backward.
  auto stageTime = [&](int64_t s, bool forward) {
    double n = double(p.stageLayers[s]);
    double t = n * (forward ? sc.layerForward : layerBwd);
    double share = forward ? 1.0 / 3.0 : 2.0 / 3.0;
    if (s == 0)
      t += share * sc.firstExtra();
    if (s == S - 1)
      t += share * sc.lastExtra();
    return t;
  };
  std::vector<std::vector<Op>> orders(P);
  for (int64_t d = 0; d < P; ++d)
    orders[d] = deviceOrder(p, d);
  // done[s][i]: when forward (0) / backward (1) of micro-batch i on virtual
  // stage s finished; negative while pending.
  std::vector<std::vector<double>> doneF(S, std::vector<double>(m, -1)),
      doneB(S, std::vector<double>(m, -1));
  std::vector<size_t> next(P, 0);
  std::vector<double> freeAt(P, 0);
  size_t remaining = 0;
  for (auto &o : orders)
    remaining += o.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int64_t d = 0; d < P; ++d) {
      while (next[d] < orders[d].size()) {
        const Op &op = orders[d][next[d]];
        int64_t s = op.chunk * P + d, i = op.microbatch;
        double ready;
        if (op.forward) {
          if (s > 0 && doneF[s - 1][i] < 0)
            break;
          ready = s > 0 ? doneF[s - 1][i] + hop : 0.0;
        } else {
          double up = s < S - 1 ? doneB[s + 1][i] : doneF[s][i];
          if (up < 0 || doneF[s][i] < 0)
            break;
          ready = up + (s < S - 1 ? hop : 0.0);
        }
        double start = std::max(ready, freeAt[d]);
        double dur = stageTime(s, op.forward);
        (op.forward ? doneF : doneB)[s][i] = start + dur;
        freeAt[d] = start + dur;
        std::string name = std::string(op.forward ? "F" : "B") +
                           std::to_string(i) +
                           (v > 1 ? "." + std::to_string(op.chunk) : "");
        out.events.push_back(
            {name, op.forward ? "forward" : "backward", d, start, dur});
        ++next[d];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      error = "schedule replay deadlocked (internal error in the schedule)";
      return false;
    }
  }
  out.pipelineEndS = *std::max_element(freeAt.begin(), freeAt.end());
  for (int64_t d = 0; d < P; ++d) {
    double t = out.pipelineEndS;
    if (sc.dpExposed > 0) {
      out.events.push_back(
          {"dp gradient reduction (exposed)", "dp-reduce", d, t, sc.dpExposed});
      t += sc.dpExposed;
    }
    out.events.push_back({"optimizer", "optimizer", d, t, sc.optimizer});
  }
  out.stepEndS = out.pipelineEndS + sc.dpExposed + sc.optimizer;
  return true;
}

std::string chromeTraceJson(const SimulatedStep &step, const Plan &p) {
  using json = nlohmann::json;
  json events = json::array();
  int64_t devices = 0;
  for (const TraceEvent &e : step.events)
    devices = std::max(devices, e.device + 1);
  for (int64_t d = 0; d < devices; ++d)
    events.push_back(
        {{"ph", "M"},
         {"name", "thread_name"},
         {"pid", 0},
         {"tid", d},
         {"args", {{"name", "pipeline stage " + std::to_string(d)}}}});
  events.push_back({{"ph", "M"},
                    {"name", "process_name"},
                    {"pid", 0},
                    {"args", {{"name", "strata plan: " + p.summary()}}}});
  for (const TraceEvent &e : step.events)
    events.push_back({{"name", e.name},
                      {"cat", e.category},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", e.device},
                      {"ts", e.startS * 1e6},
                      {"dur", e.durationS * 1e6}});
  json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

} // namespace strata::planner
