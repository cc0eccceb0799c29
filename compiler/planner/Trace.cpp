//===- Trace.cpp - Replay of one step's pipeline schedule -----------------===//

#include "compiler/planner/Trace.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>

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

const char *traceTrackName(TraceTrack t) {
  switch (t) {
  case TraceTrack::Compute:
    return "compute";
  case TraceTrack::TpComm:
    return "tp comm";
  case TraceTrack::PpComm:
    return "pp send/recv";
  case TraceTrack::DpComm:
    return "dp comm";
  }
  return "?";
}

namespace {
/// One scheduled forward or backward of a virtual stage.
struct PlacedOp {
  int64_t device, stage, microbatch, chunk;
  bool forward;
  double start, duration;
};

/// Adds the events inside and beside the pipeline ops: layers, their
/// tensor-parallel collectives, pipeline sends and ZeRO-3 gathers.
class StepDetail {
public:
  StepDetail(const CostModel &cm, const Plan &p, const StageCosts &sc,
             SimulatedStep &out)
      : p(p), sc(sc), out(out) {
    const ModelDesc &m = cm.model();
    analytical = dynamic_cast<const AnalyticalCostModel *>(&cm);
    if (analytical)
      mix = layerOpMix(*analytical, p);
    double fwdComms = m.kind == ModelDesc::Kind::Transformer ? 2 : 1;
    double allComms =
        2 * fwdComms + (p.recompute == Recompute::Full ? fwdComms : 0);
    tpFwd = sc.layerTpComm * fwdComms / allComms;
    computeFwd = sc.layerForward - tpFwd;
    computeBwd = sc.layerCompute - computeFwd;
    tpBwd = sc.layerTpComm - tpFwd;
    activationBytes = double(p.microBatch) * double(m.seqLen) *
                      double(m.hidden) * double(m.dtypeBytes);
    opMix = std::to_string(mix.gemms) + " gemm, " +
            std::to_string(mix.pointwise) + " pointwise";
    if (analytical && p.zero >= 3 && p.dp > 1) {
      double params = sc.layerWeights * double(p.dp) / double(m.dtypeBytes);
      zeroBytes = params * double(m.dtypeBytes);
      int64_t stride = p.stride(Axis::DP);
      gatherS = analytical->allGatherTime(zeroBytes, stride, p.dp);
      reduceScatterS = analytical->reduceScatterTime(zeroBytes, stride, p.dp);
    }
  }

  void layers(const PlacedOp &op, int64_t firstLayer, int64_t count) {
    int64_t S = p.pp * p.vpp;
    double share = op.forward ? 1.0 / 3.0 : 2.0 / 3.0;
    double embed = op.stage == 0 ? share * sc.firstExtra() : 0.0;
    double head = op.stage == S - 1 ? share * sc.lastExtra() : 0.0;
    double t = op.start;
    const char *dir = op.forward ? "fwd" : "bwd";
    std::string mb = " (mb " + std::to_string(op.microbatch) + ")";
    auto part = [&](const std::string &name, double dur) {
      if (dur > 0)
        push(op.device, TraceTrack::Compute, name + " " + dir + mb,
             std::string("layer-") + (op.forward ? "forward" : "backward"), t,
             dur, {}, {});
      t += dur;
    };
    if (op.forward)
      part("embedding", embed);
    else
      part("head + loss", head);
    double comp = op.forward ? computeFwd : computeBwd;
    double tp = op.forward ? tpFwd : tpBwd;
    double zero = op.forward ? 0.0 : sc.layerZeroComm;
    for (int64_t k = 0; k < count; ++k) {
      int64_t layer = op.forward ? firstLayer + k : firstLayer + count - 1 - k;
      double dur = comp + tp + zero;
      double flops = op.forward ? mix.fwdFlops : 2 * mix.fwdFlops;
      if (!op.forward && p.recompute == Recompute::Full)
        flops += mix.fwdFlops;
      push(op.device, TraceTrack::Compute,
           "layer " + std::to_string(layer) + " " + dir + mb,
           std::string("layer-") + (op.forward ? "forward" : "backward"), t,
           dur,
           {{"flops", flops},
            {"bytes", op.forward ? mix.fwdBytes : mix.bwdBytes},
            {"layer", double(layer)},
            {"microbatch", double(op.microbatch)}},
           {{"op_mix", opMix}});
      if (tp > 0)
        push(op.device, TraceTrack::TpComm,
             "tp all-reduce, layer " + std::to_string(layer), "tp-comm",
             t + comp, tp,
             {{"bytes", activationBytes}, {"group_size", double(p.tp)}}, {});
      if (gatherS > 0) {
        // Prefetched under the previous layer: it starts one gather earlier.
        // One gather per pass (recomputation runs inside the backward's).
        double gathers = 1;
        push(op.device, TraceTrack::DpComm,
             "zero-3 all-gather, layer " + std::to_string(layer), "zero-gather",
             std::max(0.0, t - gathers * gatherS + zero), gathers * gatherS,
             {{"bytes", gathers * zeroBytes}, {"group_size", double(p.dp)}},
             {});
        if (!op.forward)
          push(op.device, TraceTrack::DpComm,
               "zero-3 reduce-scatter, layer " + std::to_string(layer),
               "zero-reduce-scatter", t + dur, reduceScatterS,
               {{"bytes", zeroBytes}, {"group_size", double(p.dp)}}, {});
      }
      t += dur;
    }
    if (op.forward)
      part("head + loss", head);
    else
      part("embedding", embed);
  }

  void send(const PlacedOp &op, double hop) {
    int64_t S = p.pp * p.vpp;
    bool sends = op.forward ? op.stage < S - 1 : op.stage > 0;
    if (!sends || hop <= 0)
      return;
    int64_t to = op.forward ? op.stage + 1 : op.stage - 1;
    push(op.device, TraceTrack::PpComm,
         std::string(op.forward ? "send activation" : "send gradient") +
             " mb " + std::to_string(op.microbatch) + " -> stage " +
             std::to_string(to),
         "pp-send", op.start + op.duration, hop,
         {{"bytes", activationBytes / double(p.tp)},
          {"to_virtual_stage", double(to)}},
         {});
  }

  void push(int64_t device, TraceTrack track, std::string name,
            std::string category, double start, double dur,
            std::vector<std::pair<std::string, double>> nums,
            std::vector<std::pair<std::string, std::string>> texts) {
    TraceEvent e;
    e.name = std::move(name);
    e.category = std::move(category);
    e.device = device;
    e.track = track;
    e.startS = start;
    e.durationS = dur;
    e.numArgs = std::move(nums);
    e.textArgs = std::move(texts);
    out.events.push_back(std::move(e));
  }

private:
  const Plan &p;
  const StageCosts &sc;
  SimulatedStep &out;
  const AnalyticalCostModel *analytical = nullptr;
  LayerOpMix mix;
  std::string opMix;
  double tpFwd = 0, tpBwd = 0, computeFwd = 0, computeBwd = 0;
  double activationBytes = 0, zeroBytes = 0, gatherS = 0, reduceScatterS = 0;
};
} // namespace

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
  std::vector<PlacedOp> placed;
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
        placed.push_back({d, s, i, op.chunk, op.forward, start, dur});
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

  // Layer events (and their collectives) only when they fit the budget:
  // about two events per layer per op.
  int64_t layerEvents =
      2 * m * cm.model().layers * (p.tp > 1 ? 2 : 1) * (p.zero >= 3 ? 2 : 1);
  out.perLayer = int64_t(placed.size()) * 2 + layerEvents + 4 * P <= maxEvents;
  StepDetail detail(cm, p, sc, out);
  std::vector<int64_t> firstLayer(S, 0);
  for (int64_t s = 1; s < S; ++s)
    firstLayer[s] = firstLayer[s - 1] + p.stageLayers[s - 1];
  for (const PlacedOp &op : placed) {
    std::string name = std::string(op.forward ? "F" : "B") +
                       std::to_string(op.microbatch) +
                       (v > 1 ? "." + std::to_string(op.chunk) : "");
    detail.push(op.device, TraceTrack::Compute, name,
                op.forward ? "forward" : "backward", op.start, op.duration,
                {{"microbatch", double(op.microbatch)},
                 {"virtual_stage", double(op.stage)},
                 {"layers", double(p.stageLayers[op.stage])}},
                {});
    if (out.perLayer)
      detail.layers(op, firstLayer[op.stage], p.stageLayers[op.stage]);
    detail.send(op, hop);
  }

  // Gradient reduction: bucketed all-reduces (or reduce-scatters under
  // ZeRO-1/2) that overlap the last backward and end `dpExposed` after it.
  const auto *analytical = dynamic_cast<const AnalyticalCostModel *>(&cm);
  for (int64_t d = 0; d < P; ++d) {
    double t = out.pipelineEndS;
    if (sc.dpExposed > 0) {
      detail.push(d, TraceTrack::DpComm, "dp gradient reduction (exposed)",
                  "dp-reduce", t, sc.dpExposed, {}, {});
      if (analytical && p.zero < 3 && p.dp > 1) {
        double grads = 0;
        for (size_t k = d; k < p.stageLayers.size(); k += P)
          grads += double(p.stageLayers[k]) * sc.layerGrads;
        if (d == 0)
          grads += sc.firstGrads;
        if (d == P - 1)
          grads += sc.lastGrads;
        grads *= p.zero >= 2 ? double(p.dp) : 1.0;
        int64_t buckets = std::max<int64_t>(
            1, int64_t(std::ceil(grads / double(p.bucketBytes))));
        buckets = std::min<int64_t>(buckets, 256);
        double bytes = grads / double(buckets);
        int64_t stride = p.stride(Axis::DP);
        double each = p.zero == 0
                          ? analytical->allReduceTime(bytes, stride, p.dp)
                          : analytical->reduceScatterTime(bytes, stride, p.dp);
        double end = t + sc.dpExposed;
        for (int64_t b = buckets - 1; b >= 0; --b, end -= each)
          detail.push(
              d, TraceTrack::DpComm,
              std::string(p.zero == 0 ? "all-reduce" : "reduce-scatter") +
                  " bucket " + std::to_string(b),
              "dp-bucket", std::max(0.0, end - each), each,
              {{"bytes", bytes}, {"group_size", double(p.dp)}}, {});
      }
      t += sc.dpExposed;
    }
    detail.push(d, TraceTrack::Compute, "optimizer", "optimizer", t,
                sc.optimizer, {}, {});
  }
  out.stepEndS = out.pipelineEndS + sc.dpExposed + sc.optimizer;
  return true;
}

std::string chromeTraceJson(const SimulatedStep &step, const Plan &p) {
  using json = nlohmann::json;
  json events = json::array();
  int64_t devices = 0;
  std::vector<std::array<bool, kTraceTracks>> used;
  for (const TraceEvent &e : step.events) {
    devices = std::max(devices, e.device + 1);
    if (int64_t(used.size()) < devices)
      used.resize(devices, {false, false, false, false});
    used[e.device][int(e.track)] = true;
  }
  // One process per pipeline stage (every rank of a stage runs the same
  // schedule), one thread per track: the measured trace's conventions.
  for (int64_t d = 0; d < devices; ++d) {
    events.push_back(
        {{"ph", "M"},
         {"name", "process_name"},
         {"pid", d},
         {"args",
          {{"name", "pipeline stage " + std::to_string(d) + " (" +
                        std::to_string(p.tp * p.dp) + " ranks)"}}}});
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", d},
                      {"args", {{"sort_index", d}}}});
    for (int k = 0; k < kTraceTracks; ++k) {
      if (!used[d][k])
        continue;
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", d},
                        {"tid", k},
                        {"args", {{"name", traceTrackName(TraceTrack(k))}}}});
      events.push_back({{"ph", "M"},
                        {"name", "thread_sort_index"},
                        {"pid", d},
                        {"tid", k},
                        {"args", {{"sort_index", k}}}});
    }
  }
  for (const TraceEvent &e : step.events) {
    json ev = {{"name", e.name},
               {"cat", e.category},
               {"ph", "X"},
               {"pid", e.device},
               {"tid", int(e.track)},
               {"ts", e.startS * 1e6},
               {"dur", e.durationS * 1e6}};
    if (!e.numArgs.empty() || !e.textArgs.empty()) {
      json args = json::object();
      for (const auto &[k, v] : e.numArgs)
        args[k] = v;
      for (const auto &[k, v] : e.textArgs)
        args[k] = v;
      ev["args"] = args;
    }
    events.push_back(ev);
  }
  json doc = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"source", "strata plan (simulated)"},
                {"plan", "strata plan: " + p.summary()},
                {"step_end_us", step.stepEndS * 1e6}}}};
  return doc.dump();
}

} // namespace strata::planner
