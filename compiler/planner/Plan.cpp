//===- Plan.cpp - Plan names, placement strides and JSON ------------------===//

#include "compiler/planner/Plan.h"

#include <nlohmann/json.hpp>

#include <sstream>

namespace strata::planner {

using json = nlohmann::ordered_json;

const char *scheduleName(Schedule s) {
  switch (s) {
  case Schedule::GPipe:
    return "gpipe";
  case Schedule::OneFOneB:
    return "1f1b";
  case Schedule::Interleaved:
    return "interleaved";
  }
  return "?";
}

const char *recomputeName(Recompute r) {
  switch (r) {
  case Recompute::None:
    return "none";
  case Recompute::Selective:
    return "selective";
  case Recompute::Full:
    return "full";
  }
  return "?";
}

const char *axisName(Axis a) {
  switch (a) {
  case Axis::TP:
    return "tp";
  case Axis::DP:
    return "dp";
  case Axis::PP:
    return "pp";
  }
  return "?";
}

std::optional<Schedule> parseSchedule(const std::string &s) {
  for (Schedule k :
       {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved})
    if (s == scheduleName(k))
      return k;
  return std::nullopt;
}

std::optional<Recompute> parseRecompute(const std::string &s) {
  for (Recompute k : {Recompute::None, Recompute::Selective, Recompute::Full})
    if (s == recomputeName(k))
      return k;
  return std::nullopt;
}

std::optional<Axis> parseAxis(const std::string &s) {
  for (Axis k : {Axis::TP, Axis::DP, Axis::PP})
    if (s == axisName(k))
      return k;
  return std::nullopt;
}

int64_t Plan::size(Axis a) const {
  return a == Axis::TP ? tp : a == Axis::DP ? dp : pp;
}

int64_t Plan::stride(Axis a) const {
  int64_t s = 1;
  for (Axis x : axisOrder) {
    if (x == a)
      return s;
    s *= size(x);
  }
  return s;
}

bool Plan::operator==(const Plan &o) const {
  return dp == o.dp && tp == o.tp && pp == o.pp && vpp == o.vpp &&
         microBatch == o.microBatch && numMicrobatches == o.numMicrobatches &&
         schedule == o.schedule && zero == o.zero && recompute == o.recompute &&
         sp == o.sp && axisOrder == o.axisOrder &&
         stageLayers == o.stageLayers && bucketBytes == o.bucketBytes &&
         bf16GradReduce == o.bf16GradReduce;
}

std::string Plan::summary() const {
  std::ostringstream os;
  os << "dp=" << dp << " tp=" << tp << " pp=" << pp;
  if (schedule == Schedule::Interleaved)
    os << " vpp=" << vpp;
  os << " micro_batch=" << microBatch << "x" << numMicrobatches << " "
     << scheduleName(schedule) << " zero=" << zero
     << " recompute=" << recomputeName(recompute) << (sp ? " sp" : "")
     << " order=" << axisName(axisOrder[0]) << "," << axisName(axisOrder[1])
     << "," << axisName(axisOrder[2]);
  if (bf16GradReduce)
    os << " grad_reduce_dtype=bfloat16";
  return os.str();
}

static json planJson(const Plan &p) {
  json j;
  j["dp"] = p.dp;
  j["tp"] = p.tp;
  j["pp"] = p.pp;
  j["vpp"] = p.vpp;
  j["micro_batch"] = p.microBatch;
  j["num_microbatches"] = p.numMicrobatches;
  j["schedule"] = scheduleName(p.schedule);
  j["zero"] = p.zero;
  j["recompute"] = recomputeName(p.recompute);
  j["sp"] = p.sp;
  j["bucket_bytes"] = p.bucketBytes;
  j["grad_reduce_dtype"] = p.bf16GradReduce ? "bfloat16" : "float32";
  j["placement"] = {axisName(p.axisOrder[0]), axisName(p.axisOrder[1]),
                    axisName(p.axisOrder[2])};
  j["stage_layers"] = p.stageLayers;
  return j;
}

std::string Plan::toJson(int indent) const {
  return planJson(*this).dump(indent);
}

std::optional<Plan> Plan::fromJson(const std::string &text,
                                   std::string &error) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    error = "plan JSON does not parse";
    return std::nullopt;
  }
  if (doc.is_object() && doc.contains("plan"))
    doc = doc["plan"];
  if (!doc.is_object()) {
    error = "plan JSON must be an object";
    return std::nullopt;
  }
  Plan p;
  auto intField = [&](const char *k, int64_t &out, int64_t lo) {
    if (!doc.contains(k))
      return true;
    if (!doc[k].is_number_integer() || doc[k].get<int64_t>() < lo) {
      error = std::string("plan field '") + k +
              "' must be an integer >= " + std::to_string(lo);
      return false;
    }
    out = doc[k].get<int64_t>();
    return true;
  };
  int64_t zero = 0;
  if (!intField("dp", p.dp, 1) || !intField("tp", p.tp, 1) ||
      !intField("pp", p.pp, 1) || !intField("vpp", p.vpp, 1) ||
      !intField("micro_batch", p.microBatch, 1) ||
      !intField("num_microbatches", p.numMicrobatches, 1) ||
      !intField("zero", zero, 0) || !intField("bucket_bytes", p.bucketBytes, 1))
    return std::nullopt;
  if (zero > 3) {
    error = "plan field 'zero' must be 0, 1, 2 or 3";
    return std::nullopt;
  }
  p.zero = int(zero);
  auto enumField = [&](const char *k, auto parse, auto &out, const char *ok) {
    if (!doc.contains(k))
      return true;
    auto v = doc[k].is_string() ? parse(doc[k].template get<std::string>())
                                : std::nullopt;
    if (!v) {
      error = std::string("plan field '") + k + "' must be one of " + ok;
      return false;
    }
    out = *v;
    return true;
  };
  if (!enumField("schedule", parseSchedule, p.schedule,
                 "gpipe, 1f1b, interleaved") ||
      !enumField("recompute", parseRecompute, p.recompute,
                 "none, selective, full"))
    return std::nullopt;
  if (doc.contains("grad_reduce_dtype")) {
    const json &g = doc["grad_reduce_dtype"];
    if (!g.is_string() || (g.get<std::string>() != "float32" &&
                           g.get<std::string>() != "bfloat16")) {
      error = "plan field 'grad_reduce_dtype' must be float32 or bfloat16";
      return std::nullopt;
    }
    p.bf16GradReduce = g.get<std::string>() == "bfloat16";
  }
  if (doc.contains("sp")) {
    if (!doc["sp"].is_boolean()) {
      error = "plan field 'sp' must be true or false";
      return std::nullopt;
    }
    p.sp = doc["sp"].get<bool>();
  }
  if (doc.contains("placement")) {
    const json &pl = doc["placement"];
    bool ok = pl.is_array() && pl.size() == 3;
    std::array<Axis, 3> order{};
    for (size_t i = 0; ok && i < 3; ++i) {
      auto a = pl[i].is_string() ? parseAxis(pl[i].get<std::string>())
                                 : std::nullopt;
      ok = a.has_value();
      if (ok)
        order[i] = *a;
    }
    ok = ok && order[0] != order[1] && order[1] != order[2] &&
         order[0] != order[2];
    if (!ok) {
      error = "plan field 'placement' must list tp, dp and pp once each, "
              "innermost first";
      return std::nullopt;
    }
    p.axisOrder = order;
  }
  if (doc.contains("stage_layers")) {
    const json &sl = doc["stage_layers"];
    if (!sl.is_array()) {
      error = "plan field 'stage_layers' must be an array of layer counts";
      return std::nullopt;
    }
    for (const json &v : sl) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) {
        error = "plan field 'stage_layers' must hold non-negative integers";
        return std::nullopt;
      }
      p.stageLayers.push_back(v.get<int64_t>());
    }
    if (!p.stageLayers.empty() &&
        int64_t(p.stageLayers.size()) != p.pp * p.vpp) {
      error = "plan field 'stage_layers' must have pp*vpp entries";
      return std::nullopt;
    }
  }
  return p;
}

static json estimateJson(const Estimate &e) {
  json j;
  j["step_time_s"] = e.stepTimeS;
  j["tokens_per_s"] = e.tokensPerS;
  j["tflops_per_device"] = e.tflopsPerDevice;
  j["mfu"] = e.mfu;
  j["peak_memory_bytes"] = e.memory.total();
  j["memory_limit_bytes"] = e.memoryLimitBytes;
  j["breakdown"] = {
      {"compute_s", e.time.compute},    {"tp_comm_s", e.time.tpComm},
      {"pp_comm_s", e.time.ppComm},     {"dp_comm_s", e.time.dpComm},
      {"zero_comm_s", e.time.zeroComm}, {"bubble_s", e.time.bubble},
      {"optimizer_s", e.time.optimizer}};
  j["memory"] = {{"weights_bytes", e.memory.weights},
                 {"gradients_bytes", e.memory.gradients},
                 {"optimizer_state_bytes", e.memory.optimizerState},
                 {"activations_bytes", e.memory.activations},
                 {"comm_buffers_bytes", e.memory.commBuffers},
                 {"reserved_bytes", e.memory.reserved}};
  return j;
}

std::string planResultToJson(const PlanResult &r, const std::string &model,
                             const std::string &cluster, int64_t devices,
                             const std::string &detailsJson) {
  json j;
  j["schema"] = "strata.plan/1";
  j["model"] = model;
  j["cluster"] = {{"name", cluster}, {"devices", devices}};
  if (const RankedPlan *b = r.best()) {
    j["plan"] = planJson(b->plan);
    j["predicted"] = estimateJson(b->estimate);
  }
  j["pins"] = r.pins;
  j["search"] = {{"time_s", r.searchTimeS},
                 {"candidates_evaluated", r.candidatesEvaluated},
                 {"space_size", r.spaceSize}};
  json alts = json::array();
  for (size_t i = 1; i < r.plans.size(); ++i) {
    const RankedPlan &rp = r.plans[i];
    double slower = rp.estimate.stepTimeS / r.plans[0].estimate.stepTimeS - 1;
    alts.push_back({{"plan", planJson(rp.plan)},
                    {"predicted", estimateJson(rp.estimate)},
                    {"slower_fraction", slower},
                    {"why", rp.whySlower}});
  }
  j["runners_up"] = alts;
  if (!detailsJson.empty())
    j["details"] = json::parse(detailsJson);
  return j.dump(2);
}

} // namespace strata::planner
