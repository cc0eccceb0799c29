//===- Search.cpp - Exact joint search over the plan space ----------------===//
//
// The space is the product of the loops in `searchPlans`; the only dimension
// not enumerated is the layer-to-stage assignment, which `assignLayers`
// solves exactly: with identical layers the step time of a GPipe/1F1B
// pipeline is (m-1/v)*max_d T_d + sum_d T_d / v, the sum does not depend on
// the assignment, so the best assignment minimises the slowest device under
// per-device memory capacities, a min-max problem with a closed-form check.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/Search.h"

#include "runtime/support/Format.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <sstream>

namespace strata::planner {

//===----------------------------------------------------------------------===//
// Pins
//===----------------------------------------------------------------------===//

bool parsePin(const std::string &text, Pins &pins, std::string &error,
              const std::string &origin) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    error = "--pin '" + text + "': expected key=value, e.g. --pin tp=8";
    return false;
  }
  std::string key = text.substr(0, eq), val = text.substr(eq + 1);
  // A field pinned twice is a contradiction or a typo, never a preference.
  for (size_t i = 0; i < pins.given.size(); ++i)
    if (pins.given[i].compare(0, eq + 1, text, 0, eq + 1) == 0) {
      error = "--pin " + text + ": " + key + " is already pinned (" +
              pins.describe(i) + "); pin each field once";
      return false;
    }
  auto integer = [&](std::optional<int64_t> &out, int64_t lo, int64_t hi) {
    char *end = nullptr;
    long long v = val.empty() ? 0 : std::strtoll(val.c_str(), &end, 10);
    if (val.empty() || *end != '\0' || v < lo || v > hi) {
      error = "--pin " + text + ": " + key + " must be an integer in [" +
              std::to_string(lo) + ", " + std::to_string(hi) + "]";
      return false;
    }
    out = v;
    return true;
  };
  bool ok = true;
  constexpr int64_t big = int64_t(1) << 40;
  if (key == "dp")
    ok = integer(pins.dp, 1, big);
  else if (key == "tp")
    ok = integer(pins.tp, 1, big);
  else if (key == "pp")
    ok = integer(pins.pp, 1, big);
  else if (key == "vpp")
    ok = integer(pins.vpp, 1, big);
  else if (key == "micro_batch")
    ok = integer(pins.microBatch, 1, big);
  else if (key == "num_microbatches")
    ok = integer(pins.numMicrobatches, 1, big);
  else if (key == "bucket_bytes")
    ok = integer(pins.bucketBytes, 1, big);
  else if (key == "zero") {
    std::optional<int64_t> z;
    ok = integer(z, 0, 3);
    if (ok)
      pins.zero = int(*z);
  } else if (key == "schedule") {
    pins.schedule = parseSchedule(val);
    if (!(ok = pins.schedule.has_value()))
      error = "--pin " + text + ": schedule must be gpipe, 1f1b or interleaved";
  } else if (key == "recompute") {
    pins.recompute = parseRecompute(val);
    if (!(ok = pins.recompute.has_value()))
      error = "--pin " + text + ": recompute must be none, selective or full";
  } else if (key == "sp") {
    if (val == "true" || val == "1")
      pins.sp = true;
    else if (val == "false" || val == "0")
      pins.sp = false;
    else {
      ok = false;
      error = "--pin " + text + ": sp must be true or false";
    }
  } else if (key == "grad_reduce_dtype") {
    if (val == "float32" || val == "bfloat16")
      pins.bf16GradReduce = val == "bfloat16";
    else {
      ok = false;
      error =
          "--pin " + text + ": grad_reduce_dtype must be float32 or bfloat16";
    }
  } else if (key == "placement") {
    std::array<Axis, 3> order{};
    std::stringstream ss(val);
    std::string part;
    int n = 0;
    ok = true;
    while (ok && std::getline(ss, part, ',')) {
      auto a = parseAxis(part);
      ok = a && n < 3;
      if (ok)
        order[n++] = *a;
    }
    ok = ok && n == 3 && order[0] != order[1] && order[1] != order[2] &&
         order[0] != order[2];
    if (ok)
      pins.placement = order;
    else
      error = "--pin " + text +
              ": placement lists tp, dp and pp once each, innermost first, "
              "e.g. placement=tp,dp,pp";
  } else {
    error = "--pin " + text + ": unknown plan field '" + key +
            "'; pinnable: dp, tp, pp, vpp, micro_batch, num_microbatches, "
            "schedule, zero, recompute, sp, placement, bucket_bytes, "
            "grad_reduce_dtype";
    ok = false;
  }
  if (ok) {
    pins.given.push_back(text);
    pins.origins.push_back(origin);
  }
  return ok;
}

//===----------------------------------------------------------------------===//
// Layer assignment
//===----------------------------------------------------------------------===//

namespace {
/// Per-device inputs of the min-max assignment, in units of one layer's time.
struct DeviceSlots {
  std::vector<double> extra; ///< fixed time of device d / layer time
  std::vector<int64_t> cap;  ///< most layers device d can hold in memory
};
} // namespace

/// Memory of pipeline device d holding n layers: fixed + n * perLayer.
struct DeviceMemory {
  double fixed = 0, perLayer = 0;
};

static DeviceMemory deviceMemory(const Plan &p, const StageCosts &sc,
                                 int64_t d) {
  double inflight = inflightMicrobatches(p, d);
  DeviceMemory m;
  m.fixed = sc.commBuffers + sc.reserved + sc.transientActivation;
  if (d == 0)
    m.fixed += sc.firstWeights + sc.firstGrads + sc.firstOptState +
               inflight * sc.firstActivation;
  if (d == p.pp - 1)
    m.fixed +=
        sc.lastWeights + sc.lastGrads + sc.lastOptState + sc.lastActivation;
  m.perLayer = sc.layerStatic() + inflight * sc.layerActivation;
  return m;
}

static bool deviceSlots(const Plan &p, const StageCosts &sc, int64_t layers,
                        DeviceSlots &out) {
  int64_t P = p.pp;
  double lt = sc.layerTime();
  out.extra.assign(P, 0);
  out.cap.assign(P, 0);
  for (int64_t d = 0; d < P; ++d) {
    double extra = sc.perMicrobatchComm();
    if (d == 0)
      extra += sc.firstExtra();
    if (d == P - 1)
      extra += sc.lastExtra();
    DeviceMemory m = deviceMemory(p, sc, d);
    double room = (sc.memoryLimit - m.fixed) / m.perLayer;
    if (!(room >= 1))
      return false;
    out.cap[d] = int64_t(std::min(std::floor(room), double(layers)));
    out.extra[d] = extra / lt;
  }
  return true;
}

/// The least memory the most loaded device of `p` can get away with, over
/// every split of the layers into stages (at least one layer each; uniform
/// chunks when interleaved), whether or not it fits.
static double leanestPeak(const Plan &p, const StageCosts &sc, int64_t layers) {
  int64_t P = p.pp;
  std::vector<DeviceMemory> mem(P);
  for (int64_t d = 0; d < P; ++d)
    mem[d] = deviceMemory(p, sc, d);
  if (p.schedule == Schedule::Interleaved || P == 1) {
    double per = double(layers) / double(P), peak = 0;
    for (const DeviceMemory &m : mem)
      peak = std::max(peak, m.fixed + per * m.perLayer);
    return peak;
  }
  // Binary search on the peak M: device d takes floor((M - fixed) /
  // perLayer) layers; M is enough when that covers every layer.
  double lo = 0, hi = 0;
  for (const DeviceMemory &m : mem) {
    lo = std::max(lo, m.fixed + m.perLayer);
    hi = std::max(hi, m.fixed + double(layers) * m.perLayer);
  }
  auto enough = [&](double M) {
    double sum = 0;
    for (const DeviceMemory &m : mem)
      sum += std::floor((M - m.fixed) / m.perLayer + 1e-9);
    return sum >= double(layers);
  };
  if (enough(lo))
    return lo;
  for (int i = 0; i < 64 && hi - lo > 1e-6 * hi; ++i) {
    double mid = 0.5 * (lo + hi);
    (enough(mid) ? hi : lo) = mid;
  }
  return hi;
}

/// Layers device d may take if no device may exceed X layer-times.
static int64_t slotsBelow(const DeviceSlots &s, size_t d, double X) {
  return int64_t(std::floor(X - s.extra[d] + 1e-9));
}

static bool feasibleMax(const DeviceSlots &s, double X, int64_t layers) {
  int64_t sum = 0;
  for (size_t d = 0; d < s.cap.size(); ++d) {
    int64_t k = slotsBelow(s, d, X);
    if (k < 1)
      return false;
    sum += std::min(s.cap[d], k);
  }
  return sum >= layers;
}

/// The smallest achievable max_d (n_d + extra_d); NaN if nothing fits.
static double minMaxLoad(const DeviceSlots &s, int64_t layers) {
  int64_t P = int64_t(s.cap.size());
  if (layers < P)
    return std::nan("");
  int64_t capSum = 0;
  for (int64_t c : s.cap)
    capSum += c;
  if (capSum < layers)
    return std::nan("");
  // The optimum equals n_d + extra_d of its slowest device, so it is an
  // integer plus one of the distinct extras; binary-search each family.
  std::vector<double> offsets(s.extra.begin(), s.extra.end());
  std::sort(offsets.begin(), offsets.end());
  offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
  double maxExtra = offsets.back();
  double best = std::numeric_limits<double>::infinity();
  for (double off : offsets) {
    int64_t lo = 1, hi = layers + int64_t(std::ceil(maxExtra)) + 2;
    if (!feasibleMax(s, double(hi) + off, layers))
      continue;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (feasibleMax(s, double(mid) + off, layers))
        hi = mid;
      else
        lo = mid + 1;
    }
    best = std::min(best, double(lo) + off);
  }
  return std::isinf(best) ? std::nan("") : best;
}

std::vector<int64_t> assignLayers(const Plan &p, const StageCosts &sc,
                                  int64_t layers) {
  DeviceSlots s;
  if (!deviceSlots(p, sc, layers, s))
    return {};
  double X = minMaxLoad(s, layers);
  if (std::isnan(X))
    return {};
  int64_t P = p.pp;
  std::vector<int64_t> n(P);
  int64_t surplus = -layers;
  for (int64_t d = 0; d < P; ++d) {
    n[d] = std::min(s.cap[d], slotsBelow(s, d, X));
    surplus += n[d];
  }
  // Give back the surplus one layer at a time from the most loaded devices;
  // the maximum never grows and stays X by minimality.
  std::vector<int64_t> order(P);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return double(n[a]) + s.extra[a] > double(n[b]) + s.extra[b];
  });
  while (surplus > 0) {
    bool progressed = false;
    for (int64_t d : order) {
      if (surplus == 0)
        break;
      if (n[d] > 1) {
        --n[d];
        --surplus;
        progressed = true;
      }
    }
    if (!progressed)
      return {};
  }
  return n;
}

std::vector<int64_t> balanceUnits(const std::vector<double> &times,
                                  int64_t stages) {
  int64_t n = int64_t(times.size());
  if (stages < 1 || n < stages)
    return {};
  std::vector<double> prefix(n + 1, 0.0);
  for (int64_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + times[i];
  // best[s][i]: the least max stage time of the first i units on s stages;
  // cut[s][i] where the last of those stages starts.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1,
                                        std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> cut(stages + 1,
                                        std::vector<int64_t>(n + 1, 0));
  best[0][0] = 0;
  for (int64_t s = 1; s <= stages; ++s)
    for (int64_t i = s; i <= n; ++i)
      for (int64_t j = s - 1; j < i; ++j) {
        double v = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (v < best[s][i]) {
          best[s][i] = v;
          cut[s][i] = j;
        }
      }
  std::vector<int64_t> counts(stages);
  for (int64_t s = stages, i = n; s >= 1; --s) {
    counts[s - 1] = i - cut[s][i];
    i = cut[s][i];
  }
  return counts;
}

/// Interleaved chunks are uniform; devices 0 (most in flight, embedding) and
/// pp-1 (logits) bound memory, and peak memory falls with d in between.
static bool interleavedFits(const Plan &p, const StageCosts &sc,
                            int64_t layers) {
  double perDevice = double(layers) / double(p.pp);
  for (int64_t d : {int64_t(0), p.pp - 1}) {
    double inflight = inflightMicrobatches(p, d);
    double mem = sc.commBuffers + sc.reserved + sc.transientActivation +
                 perDevice * (sc.layerStatic() + inflight * sc.layerActivation);
    if (d == 0)
      mem += sc.firstWeights + sc.firstGrads + sc.firstOptState +
             inflight * sc.firstActivation;
    if (d == p.pp - 1)
      mem +=
          sc.lastWeights + sc.lastGrads + sc.lastOptState + sc.lastActivation;
    if (mem > sc.memoryLimit)
      return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Explaining runners-up
//===----------------------------------------------------------------------===//

static std::string seconds(double s) {
  char buf[32];
  if (std::fabs(s) >= 1)
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  else
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  return buf;
}

std::string explainSlower(const Estimate &best, const Estimate &other) {
  struct Term {
    const char *name;
    double delta;
  };
  const TimeBreakdown &a = best.time, &b = other.time;
  std::vector<Term> terms = {
      {"compute", b.compute - a.compute},
      {"exposed TP communication", b.tpComm - a.tpComm},
      {"pipeline send/recv", b.ppComm - a.ppComm},
      {"exposed DP gradient reduction", b.dpComm - a.dpComm},
      {"exposed ZeRO-3 gathers", b.zeroComm - a.zeroComm},
      {"pipeline bubble", b.bubble - a.bubble},
      {"optimizer step", b.optimizer - a.optimizer}};
  std::sort(terms.begin(), terms.end(), [](const Term &x, const Term &y) {
    return std::fabs(x.delta) > std::fabs(y.delta);
  });
  char head[48];
  std::snprintf(head, sizeof head,
                "+%.1f%%: ", 100.0 * (other.stepTimeS / best.stepTimeS - 1.0));
  std::string out = head;
  int shown = 0;
  for (const Term &t : terms) {
    if (shown == 2 || std::fabs(t.delta) < 1e-4 * best.stepTimeS)
      break;
    out += std::string(shown ? ", " : "") + (t.delta > 0 ? "more " : "less ") +
           t.name + " (" + (t.delta > 0 ? "+" : "-") +
           seconds(std::fabs(t.delta)) + ")";
    ++shown;
  }
  if (!shown)
    out += "same predicted time (tie broken by enumeration order)";
  return out;
}

//===----------------------------------------------------------------------===//
// The search
//===----------------------------------------------------------------------===//

static std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> small, large;
  for (int64_t i = 1; i <= n / i; ++i) // i * i would overflow near 2^63
    if (n % i == 0) {
      small.push_back(i);
      if (i != n / i)
        large.push_back(n / i);
    }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

static std::string gib(double bytes) { return formatBytes(bytes); }

/// Checks pins against the model and cluster before searching, so a pin that
/// cannot divide gets a message naming it rather than "nothing fits".
static bool checkPins(const ModelDesc &m, int64_t N, const SearchOptions &o,
                      std::string &error) {
  const Pins &p = o.pins;
  auto fail = [&](const std::string &msg) {
    error = msg;
    return false;
  };
  std::string n = std::to_string(N);
  for (auto [name, v] : {std::pair{"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}})
    if (v && N % *v)
      return fail(std::string("--pin ") + name + "=" + std::to_string(*v) +
                  ": does not divide the cluster's " + n + " devices");
  if (p.dp && p.tp && p.pp && *p.dp * *p.tp * *p.pp != N)
    return fail("--pin dp*tp*pp = " + std::to_string(*p.dp * *p.tp * *p.pp) +
                " but the cluster has " + n + " devices");
  std::string why;
  if (p.tp && !m.tpFits(*p.tp, &why))
    return fail("--pin tp=" + std::to_string(*p.tp) + ": " + why);
  if (p.pp && *p.pp > m.layers)
    return fail("--pin pp=" + std::to_string(*p.pp) + ": the model has only " +
                std::to_string(m.layers) + " layers to split into stages");
  if (p.dp && o.globalBatch % *p.dp)
    return fail("--pin dp=" + std::to_string(*p.dp) + ": global batch " +
                std::to_string(o.globalBatch) +
                " is not divisible by it; change --global-batch or dp");
  if (p.vpp && *p.vpp > 1) {
    if (p.schedule && *p.schedule != Schedule::Interleaved)
      return fail("--pin vpp=" + std::to_string(*p.vpp) +
                  " needs schedule=interleaved");
    if (p.pp && *p.pp == 1)
      return fail("--pin vpp=" + std::to_string(*p.vpp) +
                  " needs pp > 1 (virtual stages interleave a pipeline)");
    if (p.pp && m.layers % (*p.pp * *p.vpp))
      return fail("--pin vpp=" + std::to_string(*p.vpp) + ": " +
                  std::to_string(m.layers) +
                  " layers do not split into pp*vpp=" +
                  std::to_string(*p.pp * *p.vpp) + " equal chunks");
  }
  if (p.schedule && *p.schedule == Schedule::Interleaved && p.pp && *p.pp == 1)
    return fail("--pin schedule=interleaved needs pp > 1");
  if (p.microBatch) {
    int64_t perReplica = p.dp ? o.globalBatch / *p.dp : o.globalBatch;
    std::string pin = "--pin micro_batch=" + std::to_string(*p.microBatch);
    for (size_t i = 0; i < p.given.size(); ++i)
      if (p.given[i].rfind("micro_batch=", 0) == 0)
        pin = p.describe(i);
    if (perReplica % *p.microBatch)
      return fail(pin + ": does not divide the " +
                  plural(perReplica, "sequence") +
                  " per replica (global batch / dp)");
  }
  if (m.kind == ModelDesc::Kind::Graph) {
    if (p.vpp && *p.vpp > 1)
      return fail("--pin vpp=" + std::to_string(*p.vpp) +
                  ": an explicit graph's pipeline units differ, so they are "
                  "balanced over pp stages without interleaving; drop vpp");
    if (p.sp && *p.sp)
      return fail("--pin sp=true: sequence parallelism of an explicit graph "
                  "needs a decision on an activation, which the planner does "
                  "not make; strata-opt's strata-propagate-sharding takes one");
    if (p.recompute && *p.recompute != Recompute::None)
      return fail(std::string("--pin recompute=") +
                  recomputeName(*p.recompute) +
                  ": recomputation needs the repeated layers of a preset; an "
                  "explicit graph trains with recompute=none");
  }
  if (p.recompute && *p.recompute == Recompute::Selective &&
      m.kind != ModelDesc::Kind::Transformer)
    return fail("--pin recompute=selective: selective recomputation applies "
                "to attention; this model has none (use none or full)");
  return true;
}

namespace {
struct Candidate {
  double step;
  Plan plan;
};
} // namespace

static PlanResult runSearch(const ModelDesc &m, const ClusterSpec &c,
                            const SearchOptions &o, const CostModel &cm,
                            double &minPeak, int64_t &nonFiniteTimes,
                            int64_t &tooManyMicrobatches) {
  PlanResult r;
  const Pins &pins = o.pins;
  int64_t N = c.numDevices(), L = m.layers, G = o.globalBatch;
  int topK = std::max(1, o.topK);
  std::vector<Candidate> top; // sorted ascending by step
  auto kthBest = [&] {
    return int(top.size()) < topK ? std::numeric_limits<double>::infinity()
                                  : top.back().step;
  };
  static const std::array<std::array<Axis, 3>, 6> orders = {
      {{Axis::TP, Axis::DP, Axis::PP},
       {Axis::TP, Axis::PP, Axis::DP},
       {Axis::DP, Axis::TP, Axis::PP},
       {Axis::DP, Axis::PP, Axis::TP},
       {Axis::PP, Axis::TP, Axis::DP},
       {Axis::PP, Axis::DP, Axis::TP}}};
  minPeak = std::numeric_limits<double>::infinity();
  nonFiniteTimes = 0;
  tooManyMicrobatches = 0;

  for (int64_t tp : divisors(N)) {
    if (pins.tp && *pins.tp != tp)
      continue;
    if (!m.tpFits(tp))
      continue;
    for (int64_t pp : divisors(N / tp)) {
      if ((pins.pp && *pins.pp != pp) || pp > L)
        continue;
      int64_t dp = N / tp / pp;
      if ((pins.dp && *pins.dp != dp) || G % dp)
        continue;
      int64_t perReplica = G / dp;
      // Placements that give every axis of size > 1 the same strides are
      // the same placement.
      std::vector<std::array<int64_t, 3>> seen;
      for (const auto &order : orders) {
        if (pins.placement && *pins.placement != order)
          continue;
        Plan base;
        base.dp = dp, base.tp = tp, base.pp = pp, base.axisOrder = order;
        std::array<int64_t, 3> key = {tp > 1 ? base.stride(Axis::TP) : 0,
                                      dp > 1 ? base.stride(Axis::DP) : 0,
                                      pp > 1 ? base.stride(Axis::PP) : 0};
        if (!pins.placement &&
            std::find(seen.begin(), seen.end(), key) != seen.end())
          continue;
        seen.push_back(key);
        for (int64_t mb : divisors(perReplica)) {
          int64_t nmb = perReplica / mb;
          if ((pins.microBatch && *pins.microBatch != mb) ||
              (pins.numMicrobatches && *pins.numMicrobatches != nmb))
            continue;
          // A pipelined program holds every micro-batch's pass through its
          // layers; beyond the bound it would not fit the compiler's memory.
          if (pp > 1 && nmb > kMaxUnrolledLayers / ((L + pp - 1) / pp)) {
            ++tooManyMicrobatches;
            continue;
          }
          for (Schedule sched :
               {Schedule::OneFOneB, Schedule::GPipe, Schedule::Interleaved}) {
            if (pins.schedule ? *pins.schedule != sched
                              : (pp == 1 && sched != Schedule::OneFOneB))
              continue;
            std::vector<int64_t> vpps = {1};
            if (sched == Schedule::Interleaved) {
              vpps.clear();
              if (pp > 1 && nmb % pp == 0 && m.kind != ModelDesc::Kind::Graph)
                for (int64_t v : divisors(L / pp))
                  if (v >= 2 && L % (pp * v) == 0)
                    vpps.push_back(v);
            }
            for (int64_t vpp : vpps) {
              if (pins.vpp && *pins.vpp != vpp)
                continue;
              for (int zero = 0; zero <= 3; ++zero) {
                if (pins.zero ? *pins.zero != zero : (dp == 1 && zero > 0))
                  continue;
                for (Recompute rc :
                     {Recompute::None, Recompute::Selective, Recompute::Full}) {
                  // Selective rebuilds the s^2 tensors of an unfused
                  // attention; with a fused one it is `none` (pins only).
                  if ((pins.recompute && *pins.recompute != rc) ||
                      (rc == Recompute::Selective &&
                       (m.kind != ModelDesc::Kind::Transformer ||
                        (m.attention == ModelDesc::Attention::Fused &&
                         !pins.recompute))) ||
                      (rc != Recompute::None &&
                       m.kind == ModelDesc::Kind::Graph))
                    continue;
                  for (bool sp : {false, true}) {
                    if (pins.sp ? *pins.sp != sp : (tp == 1 && sp))
                      continue;
                    if (sp && m.kind == ModelDesc::Kind::Graph)
                      continue;
                    Plan p = base;
                    p.microBatch = mb, p.numMicrobatches = nmb;
                    p.schedule = sched, p.vpp = vpp, p.zero = zero;
                    p.recompute = rc, p.sp = sp;
                    if (pins.bucketBytes)
                      p.bucketBytes = *pins.bucketBytes;
                    if (pins.bf16GradReduce)
                      p.bf16GradReduce = *pins.bf16GradReduce;
                    ++r.spaceSize;
                    StageCosts sc = cm.stageCosts(p);
                    double lt = sc.layerTime();
                    double steady = double(nmb) * double(L) / double(pp) * lt +
                                    sc.dpExposed + sc.optimizer;
                    // A cheap lower bound on memory for the diagnosis, and on
                    // time for pruning.
                    double uniformMem = double(L) / double(pp) *
                                            (sc.layerStatic() +
                                             inflightMicrobatches(p, pp - 1) *
                                                 sc.layerActivation) +
                                        sc.commBuffers + sc.reserved +
                                        sc.transientActivation;
                    // The exact figure only where the bound could beat it.
                    if (uniformMem < minPeak)
                      minPeak = std::min(minPeak, leanestPeak(p, sc, L));
                    // An overflowed prediction ranks nothing; it is reported
                    // as such, not as a memory problem.
                    if (!std::isfinite(steady)) {
                      ++nonFiniteTimes;
                      continue;
                    }
                    if (steady >= kthBest())
                      continue;
                    ++r.candidatesEvaluated;
                    double maxLoad, sumLoad;
                    double step;
                    if (m.kind == ModelDesc::Kind::Graph) {
                      // Units differ: balance them by time, then cost the
                      // exact stages.
                      p.stageLayers = balanceUnits(cm.unitTimes(p), pp);
                      if (p.stageLayers.empty())
                        continue;
                      Estimate est = cm.estimate(p);
                      if (!est.fits)
                        continue;
                      step = est.stepTimeS;
                    } else if (sched == Schedule::Interleaved) {
                      if (!interleavedFits(p, sc, L))
                        continue;
                      double per = double(L) / double(pp);
                      double first = sc.firstExtra();
                      double last = sc.lastExtra();
                      maxLoad = per * lt + sc.perMicrobatchComm() +
                                std::max(first, last);
                      sumLoad = double(L) * lt + first + last +
                                double(pp) * sc.perMicrobatchComm();
                    } else {
                      DeviceSlots s;
                      if (!deviceSlots(p, sc, L, s))
                        continue;
                      double X = minMaxLoad(s, L);
                      if (std::isnan(X))
                        continue;
                      maxLoad = X * lt;
                      sumLoad = double(L) * lt;
                      for (double e : s.extra)
                        sumLoad += e * lt;
                    }
                    if (m.kind != ModelDesc::Kind::Graph)
                      step = (double(nmb) - 1.0 / double(vpp)) * maxLoad +
                             sumLoad / double(vpp) + sc.dpExposed +
                             sc.optimizer;
                    if (!std::isfinite(step)) {
                      ++nonFiniteTimes;
                      continue;
                    }
                    if (step >= kthBest())
                      continue;
                    auto at =
                        std::upper_bound(top.begin(), top.end(), step,
                                         [](double s, const Candidate &c) {
                                           return s < c.step;
                                         });
                    top.insert(at, Candidate{step, p});
                    if (int(top.size()) > topK)
                      top.pop_back();
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  for (Candidate &cand : top) {
    Plan &p = cand.plan;
    StageCosts sc = cm.stageCosts(p);
    if (m.kind != ModelDesc::Kind::Graph) { // graphs: balanced above
      if (p.schedule == Schedule::Interleaved)
        p.stageLayers.assign(p.pp * p.vpp, L / (p.pp * p.vpp));
      else
        p.stageLayers = assignLayers(p, sc, L);
    }
    RankedPlan rp{p, cm.estimate(p), ""};
    r.plans.push_back(rp);
  }
  for (size_t i = 1; i < r.plans.size(); ++i)
    r.plans[i].whySlower =
        explainSlower(r.plans[0].estimate, r.plans[i].estimate);
  r.ok = !r.plans.empty();
  return r;
}

PlanResult searchPlans(const ModelDesc &model, const ClusterSpec &cluster,
                       const SearchOptions &options,
                       const CostModel *costModel) {
  auto start = std::chrono::steady_clock::now();
  PlanResult r;
  std::string error;
  if (!model.validate(error)) {
    r.error = error;
    return r;
  }
  if (options.globalBatch <= 0) {
    r.error = "no global batch: give --global-batch N or training.global_batch "
              "in the model spec";
    return r;
  }
  if (options.globalBatch > kMaxGlobalBatch) {
    r.error = "global batch " + std::to_string(options.globalBatch) +
              " is more than the planner handles (" +
              std::to_string(kMaxGlobalBatch) + " sequences per step)";
    return r;
  }
  int64_t N = cluster.numDevices();
  if (!checkPins(model, N, options, r.error))
    return r;
  std::unique_ptr<AnalyticalCostModel> owned;
  if (!costModel) {
    owned = std::make_unique<AnalyticalCostModel>(model, cluster);
    costModel = owned.get();
  }
  double minPeak = 0;
  int64_t nonFiniteTimes = 0, tooManyMicrobatches = 0;
  r = runSearch(model, cluster, options, *costModel, minPeak, nonFiniteTimes,
                tooManyMicrobatches);
  for (size_t i = 0; i < options.pins.given.size(); ++i)
    r.pins.push_back(options.pins.describe(i));
  r.searchTimeS =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (r.ok)
    return r;
  if (r.spaceSize == 0) {
    std::string pinned;
    for (size_t i = 0; i < options.pins.given.size(); ++i)
      pinned += " " + options.pins.describe(i);
    r.error = "no plan of " + std::to_string(N) + " devices satisfies" +
              (pinned.empty() ? std::string(" the model's shape") : pinned) +
              " with global batch " + std::to_string(options.globalBatch) +
              " (the batch must split into dp replicas of whole micro-batches"
              "; interleaving needs micro-batches divisible by pp)";
    if (tooManyMicrobatches > 0)
      r.error += "; " + plural(tooManyMicrobatches, "pipelined split") +
                 " of it had too many micro-batches: a pipelined program "
                 "unrolls micro-batches x layers per stage, at most " +
                 std::to_string(kMaxUnrolledLayers) +
                 " (use a global batch with more divisors, a larger "
                 "micro_batch, or --pin pp=1)";
    return r;
  }
  double limit = cluster.device.memoryBytes;
  if (nonFiniteTimes > 0 && minPeak <= limit) {
    r.error = "no plan has a finite predicted step time: the cost model "
              "overflows for " +
              plural(nonFiniteTimes, "candidate plan") +
              " (memory is not the problem: the leanest plan needs " +
              gib(minPeak) + " of " + gib(limit) +
              "); check the cluster's peak_flops, memory_bandwidth and link "
              "bandwidths, which must be realistic positive rates";
    return r;
  }
  r.error = "no plan fits in device memory: the leanest plan needs " +
            gib(minPeak) + " on its most loaded device, which has " +
            gib(limit);
  if (!options.diagnoseInfeasible)
    return r;
  // Smallest change that fits: drop one pin, else change the device count.
  std::vector<std::string> fixes;
  for (size_t i = 0; i < options.pins.given.size(); ++i) {
    SearchOptions relaxed = options;
    relaxed.diagnoseInfeasible = false;
    relaxed.topK = 1;
    relaxed.pins = Pins();
    std::string ignored;
    for (size_t j = 0; j < options.pins.given.size(); ++j)
      if (j != i)
        parsePin(options.pins.given[j], relaxed.pins, ignored,
                 options.pins.origins[j]);
    PlanResult alt = searchPlans(model, cluster, relaxed);
    if (alt.ok)
      fixes.push_back("drop " + options.pins.describe(i) + " (then " +
                      alt.plans[0].plan.summary() + " fits)");
  }
  auto tryCluster = [&](const ClusterSpec &other) {
    SearchOptions relaxed = options;
    relaxed.diagnoseInfeasible = false;
    relaxed.topK = 1;
    PlanResult alt = searchPlans(model, other, relaxed);
    return alt.ok ? alt.plans[0].plan.summary() : std::string();
  };
  if (fixes.empty() && cluster.sharedHostMemoryBytes > 0 &&
      cluster.levels.size() == 1) {
    // Ranks of one host split its memory: fewer ranks get more each.
    for (int64_t n = N / 2; n >= 1 && fixes.empty(); n /= 2) {
      ClusterSpec fewer = cluster;
      fewer.levels[0].size = n;
      fewer.device.memoryBytes = cluster.sharedHostMemoryBytes / double(n);
      std::string plan = tryCluster(fewer);
      if (!plan.empty())
        fixes.push_back("use " + plural(n, "rank") +
                        " (--cluster local:" + std::to_string(n) + ", " +
                        gib(fewer.device.memoryBytes) + " each; then " + plan +
                        " fits)");
    }
    if (fixes.empty())
      fixes.push_back(
          "none on this machine: its ranks share " +
          gib(cluster.sharedHostMemoryBytes) +
          ", and more ranks do not add memory; use a smaller model, a "
          "smaller micro-batch, or a machine with more memory");
  }
  if (fixes.empty() && !cluster.levels.empty()) {
    for (int64_t factor : {2, 4, 8, 16}) {
      ClusterSpec bigger = cluster;
      bigger.levels.back().size *= factor;
      std::string plan = tryCluster(bigger);
      if (!plan.empty()) {
        fixes.push_back("use " + std::to_string(bigger.numDevices()) +
                        " devices (" +
                        std::to_string(bigger.levels.back().size) + " " +
                        bigger.levels.back().name + " units), e.g. " + plan);
        break;
      }
    }
  }
  r.error += "; smallest change that fits: " +
             (fixes.empty() ? std::string("none found up to 16x the devices; "
                                          "use devices with more memory or a "
                                          "smaller model")
                            : fixes[0]);
  return r;
}

} // namespace strata::planner
