//===- ReportData.cpp - Numbers behind the plan views ---------------------===//

#include "compiler/planner/ReportData.h"

#include <algorithm>
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

static std::vector<StageMemory> stageMemory(const Plan &p,
                                            const StageCosts &sc) {
  std::vector<StageMemory> out;
  for (int64_t d = 0; d < p.pp; ++d) {
    StageMemory s;
    s.device = d;
    for (size_t k = d; k < p.stageLayers.size(); k += p.pp)
      s.layers += p.stageLayers[k];
    double n = double(s.layers);
    MemoryBreakdown &mem = s.memory;
    mem.weights = n * sc.layerWeights;
    mem.gradients = n * sc.layerGrads;
    mem.optimizerState = n * sc.layerOptState;
    double perMicrobatch = n * sc.layerActivation;
    if (d == 0) {
      mem.weights += sc.firstWeights;
      mem.gradients += sc.firstGrads;
      mem.optimizerState += sc.firstOptState;
      perMicrobatch += sc.firstActivation;
    }
    if (d == p.pp - 1) {
      mem.weights += sc.lastWeights;
      mem.gradients += sc.lastGrads;
      mem.optimizerState += sc.lastOptState;
    }
    mem.activations = inflightMicrobatches(p, d) * perMicrobatch +
                      sc.transientActivation +
                      (d == p.pp - 1 ? sc.lastActivation : 0);
    mem.commBuffers = sc.commBuffers;
    mem.reserved = sc.reserved;
    out.push_back(s);
  }
  return out;
}

ReportData buildReportData(const CostModel &cm, const Plan &p) {
  ReportData r;
  const ModelDesc &m = cm.model();
  const ClusterSpec &c = cm.cluster();
  StageCosts sc = cm.stageCosts(p);
  r.stages = stageMemory(p, sc);

  double e = double(m.dtypeBytes), M = double(p.numMicrobatches);
  double T = double(p.microBatch) * double(m.seqLen);
  double act = T * double(m.hidden) * e;
  double avgLayers = double(m.layers) / double(p.pp);
  auto ring = [](int64_t n) { return 2.0 * double(n - 1) / double(n); };
  // Parameters of one layer on one device (undo ZeRO-3's split of weights).
  double layerParams = sc.layerWeights * (p.zero >= 3 ? double(p.dp) : 1.0) / e;
  double stageParams = avgLayers * layerParams +
                       sc.firstWeights * (p.zero >= 3 ? double(p.dp) : 1.0) / e;
  bool transformer = m.kind == ModelDesc::Kind::Transformer;

  r.levelBytesPerDevice.assign(std::max<size_t>(c.levels.size(), 1), 0.0);
  for (Axis a : {Axis::TP, Axis::DP, Axis::PP}) {
    GroupTraffic g;
    g.axis = a;
    g.size = p.size(a);
    g.stride = p.stride(a);
    g.count = p.devices() / g.size;
    g.level = spanOf(c, g.stride, g.size).outermostLevel();
    if (g.size > 1) {
      switch (a) {
      case Axis::TP: {
        double perLayer = transformer ? 2 : 1;
        double count =
            2 * perLayer + (p.recompute == Recompute::Full ? perLayer : 0);
        g.what = p.sp ? "all-gather + reduce-scatter of activations"
                      : "all-reduce of activations";
        g.bytesPerStep = M * avgLayers * count * act * ring(g.size);
        break;
      }
      case Axis::DP:
        if (p.zero >= 3) {
          double gathers = 2 + (p.recompute == Recompute::Full ? 1 : 0);
          g.what = "ZeRO-3 parameter all-gathers + gradient reduce-scatters";
          g.bytesPerStep = M * avgLayers * (gathers + 1) * layerParams * e *
                           ring(g.size) / 2;
        } else {
          g.what = p.zero == 0 ? "gradient all-reduce (buckets)"
                               : "gradient reduce-scatter + parameter "
                                 "all-gather";
          g.bytesPerStep = stageParams * e * ring(g.size);
        }
        break;
      case Axis::PP:
        g.what = "send/recv of activations and their gradients";
        g.bytesPerStep = 2 * double(p.vpp) * M * act / double(p.tp);
        break;
      }
    }
    if (g.level < r.levelBytesPerDevice.size())
      r.levelBytesPerDevice[g.level] += g.bytesPerStep;
    r.groups.push_back(g);
  }
  if (!simulateStep(cm, p, r.step, r.stepError, 400000))
    r.step = SimulatedStep();
  return r;
}

} // namespace strata::planner
