//===- HtmlReport.cpp - The data block and skeleton of the HTML report ----===//

#include "compiler/planner/HtmlReport.h"

#include "compiler/planner/ReportData.h"

#include <nlohmann/json.hpp>

#include <set>

namespace strata::planner {

using json = nlohmann::json;

static json memoryJson(const MemoryBreakdown &m) {
  return {{"weights", m.weights},          {"gradients", m.gradients},
          {"optimizer", m.optimizerState}, {"activations", m.activations},
          {"buffers", m.commBuffers},      {"reserved", m.reserved}};
}

/// The events the timeline draws: whole ops and communication, not layers
/// (layers stay in the Chrome trace). Collectives inside ops are kept while
/// the page stays small.
static json timelineJson(const SimulatedStep &step, const Plan &p) {
  json events = json::array();
  size_t inner = 0;
  for (const TraceEvent &e : step.events)
    if (e.category == "tp-comm" || e.category == "zero-gather" ||
        e.category == "zero-reduce-scatter")
      ++inner;
  bool keepInner = inner <= 30000;
  for (const TraceEvent &e : step.events) {
    bool layer = e.category.rfind("layer-", 0) == 0;
    bool innerComm =
        e.category == "tp-comm" || e.category.rfind("zero-", 0) == 0;
    if (layer || (innerComm && !keepInner))
      continue;
    int64_t chunk = 0, mb = -1;
    for (const auto &[k, v] : e.numArgs) {
      if (k == "virtual_stage")
        chunk = int64_t(v) / p.pp;
      if (k == "microbatch")
        mb = int64_t(v);
    }
    events.push_back({e.device, int(e.track), e.startS, e.durationS, e.category,
                      e.name, chunk, mb});
  }
  return {{"pp", p.pp},
          {"vpp", p.vpp},
          {"microbatches", p.numMicrobatches},
          {"pipeline_end_s", step.pipelineEndS},
          {"step_end_s", step.stepEndS},
          {"tp_shown", keepInner},
          {"events", events}};
}

/// The complete events of a measured trace, compacted for the page:
/// [rank, track, ts us, dur us, category, name, step]. At most `limit`.
static bool measuredJson(const std::string &text, json &out, std::string &error,
                         size_t limit = 200000) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("traceEvents") ||
      !doc["traceEvents"].is_array()) {
    error = "not a Chrome trace (a JSON object with traceEvents); pass the "
            "file the compiled executable's --trace wrote";
    return false;
  }
  json events = json::array();
  std::set<int64_t> ranks;
  for (const json &e : doc["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("pid") ||
        !e["pid"].is_number_integer() || !e.contains("tid") ||
        !e["tid"].is_number_integer() || !e.contains("ts") ||
        !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number())
      continue;
    int64_t step = 0;
    if (e.contains("args") && e["args"].is_object())
      step = e["args"].value("step", int64_t(0));
    ranks.insert(e["pid"].get<int64_t>());
    events.push_back({e["pid"], e["tid"], e["ts"], e["dur"], e.value("cat", ""),
                      e.value("name", ""), step});
    if (events.size() >= limit)
      break;
  }
  if (events.empty()) {
    error = "the trace has no complete (X) events";
    return false;
  }
  out = {{"ranks", ranks.size()},
         {"source", doc.value("otherData", json::object())
                        .value("source", std::string("measured"))},
         {"events", events}};
  return true;
}

/// What a group's collectives carry, in words.
static std::string groupCarries(const std::string &name, const Plan &p) {
  if (name == "tp")
    return p.sp ? "all-gather + reduce-scatter of activations"
                : "all-reduce of activations";
  if (name == "pp")
    return "send/recv of activations and their gradients";
  if (name == "dp")
    return p.zero == 0 ? "gradient all-reduce (buckets)"
                       : "gradient reduce-scatter + parameter all-gather";
  if (name == "zero3")
    return "ZeRO-3 parameter all-gathers + gradient reduce-scatters";
  return name;
}

std::string renderHtmlReport(const PlanResult &r, const CostModel &cm,
                             const PlanDetails &details,
                             const std::string &modelPath,
                             const std::string &measuredTrace,
                             std::string &error) {
  const ModelDesc &m = cm.model();
  const ClusterSpec &c = cm.cluster();
  json data =
      json::parse(planResultToJson(r, modelPath, c.name, c.numDevices()));
  data["model_info"] = {
      {"name", m.name},      {"params", double(m.totalParams())},
      {"layers", m.layers},  {"hidden", m.hidden},
      {"seq_len", m.seqLen}, {"dtype", m.dtype}};
  json levels = json::array();
  for (size_t l = 0; l < c.levels.size(); ++l)
    levels.push_back({{"name", c.levels[l].name},
                      {"size", c.levels[l].size},
                      {"bandwidth", c.levels[l].bandwidth},
                      {"unit_devices", c.unitDevices(l)}});
  data["cluster_info"] = {{"name", c.name},
                          {"devices", c.numDevices()},
                          {"device", c.device.name},
                          {"memory_bytes", c.device.memoryBytes},
                          {"levels", levels}};
  data["summaries"] = json::array();
  for (const RankedPlan &rp : r.plans)
    data["summaries"].push_back(rp.plan.summary());

  const Plan &best = r.plans.at(0).plan;
  ReportData rd = buildReportData(cm, best, details);
  json stages = json::array();
  for (size_t d = 0; d < details.stageMemory.size(); ++d)
    stages.push_back(
        {{"device", d},
         {"layers", d < rd.deviceLayers.size() ? rd.deviceLayers[d] : 0},
         {"memory", memoryJson(details.stageMemory[d])}});
  data["stages"] = stages;
  json groups = json::array();
  for (size_t i = 0; i < details.groups.size(); ++i) {
    const GroupTraffic &g = details.groups[i];
    groups.push_back({{"name", g.name},
                      {"axis", g.name == "zero3" ? "dp" : g.name},
                      {"size", g.size},
                      {"stride", g.stride},
                      {"count", best.devices() / std::max<int64_t>(1, g.size)},
                      {"level", rd.groupLevel[i]},
                      {"crosses", g.crosses},
                      {"what", groupCarries(g.name, best)},
                      {"algorithm", g.algorithm},
                      {"protocol", g.protocol},
                      {"bytes_per_step", g.bytesPerStep},
                      {"comm_time_s", g.commTimeS},
                      {"hidden_time_s", g.hiddenTimeS}});
  }
  data["groups"] = groups;
  json levelBytes = json::array();
  for (const LevelTraffic &l : details.levels)
    levelBytes.push_back(l.bytesPerStep);
  data["level_bytes"] = levelBytes;
  data["warnings"] = details.warnings;
  data["hidden_comm_s"] = details.hiddenCommS;
  if (rd.stepError.empty())
    data["timeline"] = timelineJson(rd.step, best);
  else
    data["timeline_error"] = rd.stepError;

  if (!measuredTrace.empty()) {
    json measured;
    if (!measuredJson(measuredTrace, measured, error))
      return "";
    data["measured"] = measured;
  }

  // Inside <script>, "</" could end the element early.
  std::string blob = data.dump();
  std::string safe;
  safe.reserve(blob.size());
  for (size_t i = 0; i < blob.size(); ++i) {
    if (blob[i] == '<' && i + 1 < blob.size() && blob[i + 1] == '/') {
      safe += "<\\/";
      ++i;
      continue;
    }
    safe += blob[i];
  }
  std::string modelName = m.name.substr(m.name.find_last_of('/') + 1);
  std::string title = "strata plan: " + modelName + " on " + c.name;
  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
          "charset=\"utf-8\">\n<title>";
  for (char ch : title)
    html += ch == '<' ? std::string("&lt;") : std::string(1, ch);
  html += "</title>\n<style>\n";
  html += kHtmlReportStyle;
  html += "</style>\n</head>\n<body>\n<div id=\"report\" "
          "data-status=\"loading\"><noscript>This report draws its views "
          "with JavaScript.</noscript></div>\n<pre id=\"errors\"></pre>\n"
          "<script id=\"plan-data\" type=\"application/json\">";
  html += safe;
  html += "</script>\n<script>\n";
  html += kHtmlReportScript;
  html += "</script>\n</body>\n</html>\n";
  return html;
}

} // namespace strata::planner
