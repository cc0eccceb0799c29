//===- PlanDetails.cpp - What a plan does to the cluster, for reports -----===//
//
// Group traffic restates the cost model's communication terms in bytes:
// a ring moves (p-1)/p of the buffer per member for a reduce-scatter or
// all-gather and twice that for an all-reduce (nccl-tests' bus bytes); a
// level l carries, per device, a group's bus bytes divided by the members
// that share one unit of the level below (each drives its own link/NIC).
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/PlanDetails.h"

#include "compiler/planner/Collectives.h"
#include "runtime/support/Format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

namespace strata::planner {

namespace {
std::string fmt(const char *f, double v) {
  char buf[96];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

GroupTraffic makeGroup(const ClusterSpec &c, const std::string &name,
                       int64_t size, int64_t stride, Collective kind,
                       double typicalBytes) {
  GroupTraffic g;
  g.name = name, g.size = size, g.stride = stride;
  GroupSpan s = spanOf(c, stride, size);
  g.membersPerLevel = s.members;
  for (size_t l = 0; l < s.members.size() && l < c.levels.size(); ++l) {
    int64_t below = l == 0 ? 1 : s.members[l - 1];
    if (s.members[l] > below)
      g.crosses.push_back(c.levels[l].name);
  }
  CollectiveCost cc = collectiveCost(c, kind, typicalBytes, s);
  g.algorithm = name == "pp" ? "send/recv" : cc.algorithm;
  g.protocol = name == "pp" ? "" : cc.protocol;
  return g;
}
} // namespace

PlanDetails describePlan(const AnalyticalCostModel &cm, const Plan &p,
                         const Estimate &e) {
  PlanDetails d;
  d.stageMemory = e.stageMemory;
  const ModelDesc &m = cm.model();
  const ClusterSpec &c = cm.cluster();
  StageCosts sc = cm.stageCosts(p);
  double E = double(m.dtypeBytes), t = double(p.tp), dp = double(p.dp);
  double T = double(p.microBatch) * double(m.seqLen), h = double(m.hidden);
  double M = double(p.numMicrobatches);
  double layers = double(m.layers) / double(p.pp); // average stage
  auto ringShare = [](double n) { return (n - 1) / n; };

  if (p.tp > 1) {
    double perLayer = m.kind == ModelDesc::Kind::Transformer ? 2 : 1;
    double count =
        2 * perLayer + (p.recompute == Recompute::Full ? perLayer : 0);
    double bytes = T * h * E;
    GroupTraffic g = makeGroup(c, "tp", p.tp, p.stride(Axis::TP),
                               Collective::AllReduce, bytes);
    g.bytesPerStep = M * (count * layers + 2) * 2 * ringShare(t) * bytes;
    g.commTimeS = e.time.tpComm;
    d.groups.push_back(g);
  }
  if (p.pp > 1) {
    double bytes = T * h * E / t;
    GroupTraffic g =
        makeGroup(c, "pp", 2, p.stride(Axis::PP), Collective::AllGather, bytes);
    g.size = p.pp;
    g.bytesPerStep = M * 2 * double(p.vpp) * bytes;
    g.commTimeS = e.time.ppComm;
    d.groups.push_back(g);
  }
  // Bytes per parameter as the cost model counts them: the persistent
  // weight (the fp32 master on CPU ranks under mixed precision), what a
  // ZeRO gather moves and what a gradient reduction moves.
  bool stratas = cm.stratasLayout();
  ParamBytes pb = paramBytes(m, &p, stratas);
  bool mixed = m.mixedPrecision() && stratas;
  double weightWire = mixed ? 4 : E;
  double gradWire = !mixed ? pb.grad : p.bf16GradReduce ? 2 : 4;
  // Parameters of one layer on a device, and of the average stage.
  double layerParams =
      sc.layerWeights * (p.zero >= 3 ? dp : 1.0) / std::max(1.0, pb.weight);
  double stageParams = layers * layerParams + sc.firstWeights *
                                                  (p.zero >= 3 ? dp : 1.0) /
                                                  std::max(1.0, pb.weight);
  int64_t dpStride = p.stride(Axis::DP);
  if (p.dp > 1 && p.zero < 3) {
    double grads = stageParams * gradWire;
    double buckets = std::max(
        1.0, std::ceil(grads / double(std::max<int64_t>(1, p.bucketBytes))));
    GroupTraffic g = makeGroup(c, "dp", p.dp, dpStride,
                               p.zero == 0 ? Collective::AllReduce
                                           : Collective::ReduceScatter,
                               grads / buckets);
    g.bytesPerStep = 2 * ringShare(dp) * grads;
    g.commTimeS =
        p.zero == 0
            ? buckets * cm.allReduceTime(grads / buckets, dpStride, p.dp)
            : buckets * (cm.reduceScatterTime(grads / buckets, dpStride, p.dp) +
                         cm.allGatherTime(grads / buckets, dpStride, p.dp));
    g.hiddenTimeS = std::max(0.0, g.commTimeS - e.time.dpComm);
    d.groups.push_back(g);
  }
  if (p.dp > 1 && p.zero >= 3) {
    double bytes = layerParams * weightWire;
    double gradBytes = layerParams * gradWire;
    GroupTraffic g =
        makeGroup(c, "zero3", p.dp, dpStride, Collective::AllGather, bytes);
    double ag = cm.allGatherTime(bytes, dpStride, p.dp);
    double rs = cm.reduceScatterTime(gradBytes, dpStride, p.dp);
    // Two gathers and one reduce-scatter per layer and micro-batch; the
    // embedding and head likewise (their weights are sharded `dp` ways).
    double endParams =
        (sc.firstWeights + sc.lastWeights) * dp / std::max(1.0, pb.weight);
    g.bytesPerStep = M * ringShare(dp) *
                     (layers * (2 * bytes + gradBytes) +
                      endParams * (2 * weightWire + gradWire));
    g.commTimeS =
        M * (layers * (2 * ag + rs) + sc.firstZeroComm + sc.lastZeroComm);
    g.hiddenTimeS = std::max(0.0, g.commTimeS - e.time.zeroComm);
    d.groups.push_back(g);
  }
  d.levels.resize(c.levels.size());
  for (size_t l = 0; l < c.levels.size(); ++l)
    d.levels[l].level = c.levels[l].name;
  for (const GroupTraffic &g : d.groups) {
    d.hiddenCommS += g.hiddenTimeS;
    for (size_t l = 0; l < g.membersPerLevel.size() && l < d.levels.size();
         ++l) {
      int64_t below = l == 0 ? 1 : g.membersPerLevel[l - 1];
      if (g.membersPerLevel[l] > below)
        d.levels[l].bytesPerStep += g.bytesPerStep / double(below);
    }
  }
  return d;
}

std::optional<ClusterSpec> shrinkCluster(const ClusterSpec &c, int64_t factor) {
  ClusterSpec s = c;
  for (size_t l = s.levels.size(); l-- > 0 && factor > 1;) {
    int64_t g = std::gcd(s.levels[l].size, factor);
    s.levels[l].size /= g;
    factor /= g;
  }
  if (factor != 1)
    return std::nullopt;
  s.name = c.name + " (" + std::to_string(s.numDevices()) + " devices)";
  return s;
}

void reviewPlan(const ModelDesc &model, const ClusterSpec &cluster,
                const SearchOptions &options, PlanResult &r, PlanDetails &d) {
  if (!r.ok || r.plans.empty())
    return;
  const Estimate best = r.plans[0].estimate;
  const Plan bestPlan = r.plans[0].plan;
  SearchOptions quiet = options;
  quiet.topK = 1;
  quiet.diagnoseInfeasible = false;
  const Pins &pins = options.pins;
  // Too many devices: below 35% MFU, look (halving the cluster) for the
  // count with the most tokens/s per device that keeps at least half the
  // tokens/s; warn if it is 1.25x as efficient per device.
  if (best.mfu < 0.35 && !pins.dp && !pins.tp && !pins.pp) {
    int64_t devices = cluster.numDevices();
    double perDevice = best.tokensPerS / double(devices), bestPer = perDevice;
    for (int64_t f = 2; f <= 64 && devices / f >= 1; f *= 2) {
      auto smaller = shrinkCluster(cluster, f);
      if (!smaller)
        break;
      PlanResult s = searchPlans(model, *smaller, quiet);
      if (!s.ok || s.plans[0].estimate.tokensPerS < 0.5 * best.tokensPerS)
        break;
      double per = s.plans[0].estimate.tokensPerS / double(devices / f);
      if (per >= 1.25 * perDevice && per > bestPer) {
        bestPer = per;
        d.betterDeviceCount = smaller->numDevices();
        d.betterTokensPerS = s.plans[0].estimate.tokensPerS;
      }
    }
    if (d.betterDeviceCount) {
      std::ostringstream os;
      os << "cluster too large for this job: " << cluster.numDevices()
         << " devices reach " << fmt("%.1f%%", 100 * best.mfu) << " MFU"
         << (best.time.bubble > 0
                 ? " (pipeline bubble " +
                       fmt("%.0f%%", 100 * best.time.bubble / best.stepTimeS) +
                       ")"
                 : "")
         << "; " << *d.betterDeviceCount << " devices would keep "
         << fmt("%.0f%%", 100 * d.betterTokensPerS / best.tokensPerS)
         << " of the throughput at " << fmt("%.1fx", bestPer / perDevice)
         << " the tokens/s per device";
      d.warnings.push_back(os.str());
    }
  }
  // ZeRO-3's advantage resting on prefetch overlap (hidden gathers) that no
  // measured run in docs/validation.md checks at this scale: compare with
  // the best plan without ZeRO-3.
  if (bestPlan.zero == 3 && !pins.zero) {
    double hidden = 0;
    for (const GroupTraffic &g : d.groups)
      if (g.name == "zero3")
        hidden = g.hiddenTimeS;
    for (int zero : {2, 1, 0}) {
      SearchOptions alt = quiet;
      std::string err;
      parsePin("zero=" + std::to_string(zero), alt.pins, err);
      PlanResult a = searchPlans(model, cluster, alt);
      if (!a.ok)
        continue;
      const RankedPlan &ap = a.plans[0];
      if (best.stepTimeS + hidden > ap.estimate.stepTimeS) {
        std::ostringstream os;
        os << "the best plan's lead over ZeRO-" << zero << " ("
           << fmt("%.1f%%", 100 * (ap.estimate.stepTimeS / best.stepTimeS - 1))
           << ") rests on hiding " << fmt("%.3g s", hidden)
           << " of ZeRO-3 gathers under compute (prefetch overlap, not "
              "validated at this scale); the nearest plan without it is "
              "listed among the runners-up";
        d.warnings.push_back(os.str());
        const char *tag = " [nearest plan without ZeRO-3 overlap]";
        auto same = std::find_if(
            r.plans.begin() + 1, r.plans.end(),
            [&](const RankedPlan &x) { return x.plan == ap.plan; });
        if (same != r.plans.end()) {
          same->whySlower += tag;
        } else {
          RankedPlan extra = ap;
          extra.whySlower = explainSlower(best, ap.estimate) + tag;
          r.plans.push_back(extra);
        }
      }
      break;
    }
  }
}

std::string planDetailsJson(const PlanDetails &d) {
  using nlohmann::json;
  json j;
  json stages = json::array();
  for (size_t i = 0; i < d.stageMemory.size(); ++i) {
    const MemoryBreakdown &m = d.stageMemory[i];
    stages.push_back({{"stage", i},
                      {"total_bytes", m.total()},
                      {"weights_bytes", m.weights},
                      {"gradients_bytes", m.gradients},
                      {"optimizer_state_bytes", m.optimizerState},
                      {"activations_bytes", m.activations},
                      {"comm_buffers_bytes", m.commBuffers},
                      {"reserved_bytes", m.reserved}});
  }
  j["stage_memory"] = stages;
  json groups = json::array();
  for (const GroupTraffic &g : d.groups)
    groups.push_back({{"group", g.name},
                      {"size", g.size},
                      {"stride", g.stride},
                      {"members_per_level", g.membersPerLevel},
                      {"crosses", g.crosses},
                      {"algorithm", g.algorithm},
                      {"protocol", g.protocol},
                      {"bytes_per_step", g.bytesPerStep},
                      {"comm_time_s", g.commTimeS},
                      {"hidden_time_s", g.hiddenTimeS}});
  j["groups"] = groups;
  json levels = json::array();
  for (const LevelTraffic &l : d.levels)
    levels.push_back(
        {{"level", l.level}, {"bytes_per_device_per_step", l.bytesPerStep}});
  j["levels"] = levels;
  j["hidden_comm_s"] = d.hiddenCommS;
  j["warnings"] = d.warnings;
  if (d.betterDeviceCount)
    j["better_device_count"] = *d.betterDeviceCount;
  return j.dump(2);
}

std::string formatPlanDetails(const PlanDetails &d) {
  std::ostringstream os;
  if (d.stageMemory.size() > 1) {
    os << "memory per pipeline stage:";
    for (size_t i = 0; i < d.stageMemory.size(); ++i)
      os << (i % 8 == 0 ? "\n " : "") << " " << i << ": "
         << formatBytes(d.stageMemory[i].total());
    os << "\n";
  }
  if (!d.groups.empty()) {
    os << "traffic per step (bytes each member sends):\n";
    for (const GroupTraffic &g : d.groups) {
      os << "  " << g.name << " (" << g.size << " ranks, stride " << g.stride
         << "): " << formatBytes(g.bytesPerStep) << ", "
         << (g.crosses.empty() ? std::string("inside one device")
                               : "crosses " +
                                     [&] {
                                       std::string s;
                                       for (const std::string &c : g.crosses)
                                         s += (s.empty() ? "" : "+") + c;
                                       return s;
                                     }())
         << ", " << g.algorithm << (g.protocol.empty() ? "" : "/" + g.protocol);
      if (g.hiddenTimeS > 0)
        os << ", " << fmt("%.3g s", g.hiddenTimeS) << " of "
           << fmt("%.3g s", g.commTimeS) << " hidden under compute";
      os << "\n";
    }
    os << "per device per step by level:";
    for (const LevelTraffic &l : d.levels)
      os << " " << l.level << " " << formatBytes(l.bytesPerStep);
    os << "\n";
  }
  for (const std::string &w : d.warnings)
    os << "warning: " << w << "\n";
  return os.str();
}

} // namespace strata::planner
