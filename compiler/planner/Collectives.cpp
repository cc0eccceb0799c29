//===- Collectives.cpp - Collective times as the runtime's library runs them =//
//
// The NCCL constants below are NCCL's (src/graph/tuning.cc, v2.2x:
// baseLat, hwLat, the protocol bandwidth factors); docs/cost-model.md cites
// them. Nothing here is fitted to training runs.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/Collectives.h"

#include <algorithm>
#include <cmath>

namespace strata::planner {

namespace {
enum Proto { LL = 0, LL128 = 1, Simple = 2 };
const char *protoName[3] = {"LL", "LL128", "Simple"};
// Microseconds. [protocol]
constexpr double ringBase[3] = {6.6, 14.0, 8.4};
constexpr double treeBase[3] = {6.8, 14.0, 8.4};
constexpr double ringNvlink[3] = {0.6, 1.9, 3.4};
constexpr double treeNvlink[3] = {0.6, 1.25, 4.0};
constexpr double ringNet[3] = {2.7, 4.0, 14.0};
constexpr double treeNet[3] = {5.0, 8.5, 14.0};
constexpr double nvlsLatency = 25.0; // NVLS, Simple, NVLink
constexpr double us = 1e-6;

double levelBandwidth(const ClusterSpec &c, size_t l) {
  const TopologyLevel &lv = c.levels[l];
  return lv.bandwidth * lv.efficiency / lv.oversubscription;
}

double busFactor(Collective k, double n) {
  return (k == Collective::AllReduce ? 2.0 : 1.0) * (n - 1) / n;
}
} // namespace

bool usesNccl(const ClusterSpec &c) {
  if (c.collectives == "nccl")
    return true;
  if (c.collectives == "alpha-beta")
    return false;
  return c.device.kind != "cpu";
}

double ringBusBandwidth(const ClusterSpec &c, const GroupSpan &s) {
  double bw = 1e300;
  for (size_t l = 0; l < s.members.size() && l < c.levels.size(); ++l) {
    int64_t below = l == 0 ? 1 : s.members[l - 1];
    if (s.members[l] == below)
      continue; // the group does not cross this level's units
    bw = std::min(bw, double(below) * levelBandwidth(c, l));
  }
  return bw;
}

/// NCCL: the fastest of ring, tree (all-reduce) and NVLS (all-reduce inside
/// one NVSwitch domain) over the three protocols, as ncclTopoTuneModel and
/// ncclTopoGetAlgoTime rank them.
static CollectiveCost ncclCost(const ClusterSpec &c, Collective kind,
                               double bytes, const GroupSpan &s) {
  double n = double(s.members.back());
  double local = double(s.members.front()); // ranks per innermost unit
  double nodes = std::max(1.0, n / local);
  bool allReduce = kind == Collective::AllReduce;
  double steps = allReduce ? 2 * (n - 1) : n - 1;
  double interSteps = allReduce ? 2 * (nodes - 1) : nodes - 1;
  double busBw = ringBusBandwidth(c, s);
  double factor = busFactor(kind, n);
  CollectiveCost best;
  best.timeS = 1e300;
  auto consider = [&](const char *algo, int p, double lat, double algBw) {
    double t = lat * us + bytes / algBw;
    if (t < best.timeS) {
      best.timeS = t;
      best.algorithm = algo;
      best.protocol = protoName[p];
    }
  };
  for (int p = 0; p < 3; ++p) {
    // Ring: LL sends 8-byte lines with a 4-byte flag (and half the
    // throughput again multi-node or reducing), LL128 a 120-of-128-byte
    // payload, Simple the raw bandwidth.
    double ringBw = busBw;
    if (p == LL)
      ringBw *= (nodes > 1 || allReduce) ? 1.0 / 4 : 1.0 / 3;
    if (p == LL128)
      ringBw *= local < 2 ? 0.7 : 0.92;
    double ringLat = ringBase[p] + (steps - interSteps) * ringNvlink[p] +
                     interSteps * ringNet[p];
    consider("ring", p, ringLat, ringBw / factor);
    if (!allReduce)
      continue;
    // Tree (double binary tree across nodes, chains inside): every byte
    // goes up and down once, at 90% of the bus bandwidth.
    double treeBw = busBw * 0.9;
    if (p == LL)
      treeBw /= 3.8;
    if (p == LL128)
      treeBw *= nodes == 1 ? 7.0 / 9 : 0.915;
    double treeLat = treeBase[p] + 2 * ((local - 1) * treeNvlink[p] +
                                        std::log2(nodes) * treeNet[p]);
    consider("tree", p, treeLat, treeBw * 0.5);
  }
  // NVLS: the NVSwitch reduces and multicasts (Simple only).
  if (allReduce && nodes == 1 && !c.levels.empty() &&
      c.levels[0].nvlsBusBandwidth > 0 && s.members.size() >= 1 &&
      s.outermostLevel() == 0)
    consider("nvls", Simple, nvlsLatency, c.levels[0].nvlsBusBandwidth / factor);
  best.busBandwidth = bytes * factor / best.timeS;
  return best;
}

/// MPI over shared memory or a plain network: alpha-beta ring, binary tree
/// and hierarchical ring (reduce-scatter inside each level from the
/// innermost out, then all-gather back).
static CollectiveCost alphaBetaCost(const ClusterSpec &c, Collective kind,
                                    double bytes, const GroupSpan &s) {
  bool allReduce = kind == Collective::AllReduce;
  double n = double(s.members.back());
  double passes = allReduce ? 2.0 : 1.0;
  // Flat ring.
  double alpha = 0;
  for (size_t l = 0; l < s.members.size() && l < c.levels.size(); ++l) {
    int64_t below = l == 0 ? 1 : s.members[l - 1];
    if (s.members[l] != below)
      alpha = std::max(alpha, c.levels[l].latencyS);
  }
  double bw = ringBusBandwidth(c, s);
  CollectiveCost best;
  best.algorithm = "ring";
  best.timeS =
      passes * (n - 1) / n * bytes / bw + passes * (n - 1) * alpha;
  // Hierarchical ring.
  double hier = 0;
  for (size_t l = 0; l < s.members.size() && l < c.levels.size(); ++l) {
    int64_t below = l == 0 ? 1 : s.members[l - 1];
    double k = double(s.members[l]) / double(below);
    if (k <= 1)
      continue;
    double chunk = bytes / double(below);
    hier += passes * (k - 1) / k * chunk / levelBandwidth(c, l) +
            passes * (k - 1) * c.levels[l].latencyS;
  }
  if (hier < best.timeS) {
    best.timeS = hier;
    best.algorithm = "hier-ring";
  }
  if (allReduce) {
    // Double binary tree: log-depth latency, twice the data over the
    // slowest crossed level.
    size_t outer = std::min(s.outermostLevel(), c.levels.size() - 1);
    double treeBw = 1e300;
    for (size_t l = 0; l <= outer; ++l)
      treeBw = std::min(treeBw, levelBandwidth(c, l));
    double tree = 2 * std::ceil(std::log2(n)) * c.levels[outer].latencyS +
                  2 * bytes / treeBw;
    if (tree < best.timeS) {
      best.timeS = tree;
      best.algorithm = "tree";
    }
  }
  best.busBandwidth = bytes * busFactor(kind, n) / best.timeS;
  return best;
}

CollectiveCost collectiveCost(const ClusterSpec &c, Collective kind,
                              double bytes, const GroupSpan &span) {
  if (span.members.empty() || span.members.back() <= 1 || bytes <= 0 ||
      c.levels.empty())
    return {};
  return usesNccl(c) ? ncclCost(c, kind, bytes, span)
                     : alphaBetaCost(c, kind, bytes, span);
}

} // namespace strata::planner
