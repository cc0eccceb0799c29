//===- PlanCommand.cpp - `strata plan` ------------------------------------===//

#include "compiler/planner/PlanCommand.h"

#include "compiler/planner/HtmlReport.h"
#include "compiler/planner/PlanDetails.h"
#include "compiler/planner/Report.h"
#include "compiler/planner/Search.h"
#include "compiler/planner/Trace.h"
#include "frontends/yaml/ModelSpec.h"

#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

namespace strata::planner {

PlanResult planFromFiles(const PlanRequest &req, ModelDesc *modelOut,
                         ClusterSpec *clusterOut, SearchOptions *optionsOut) {
  PlanResult r;
  std::vector<frontend::Diagnostic> modelDiags;
  std::optional<frontend::ModelSpec> spec =
      frontend::loadModelSpec(req.modelPath, modelDiags);
  if (!spec) {
    for (const frontend::Diagnostic &d : modelDiags)
      r.error += (r.error.empty() ? "" : "\n") + d.str();
    if (r.error.empty())
      r.error = req.modelPath + ": error: cannot load the model spec";
    return r;
  }
  std::string error;
  std::optional<ModelDesc> model = modelDescFromSpec(*spec, error);
  if (!model) {
    r.error = error;
    return r;
  }
  std::vector<PlannerDiag> clusterDiags;
  std::optional<ClusterSpec> cluster =
      resolveCluster(req.cluster, clusterDiags);
  if (!cluster) {
    for (const PlannerDiag &d : clusterDiags)
      r.error += (r.error.empty() ? "" : "\n") + d.str();
    return r;
  }
  SearchOptions opts;
  opts.globalBatch = req.globalBatch > 0 ? req.globalBatch : model->globalBatch;
  opts.topK = req.topK;
  for (const std::string &pin : req.pins)
    if (!parsePin(pin, opts.pins, error)) {
      r.error = error;
      return r;
    }
  // The spec's micro_batch is part of what the user asked for: plan and
  // compile both hold it, so the plan `strata plan` reports is the one
  // `strata compile` builds. A --pin of either batch split overrides it.
  if (spec->training.microBatch && !opts.pins.microBatch &&
      !opts.pins.numMicrobatches &&
      !parsePin("micro_batch=" + std::to_string(*spec->training.microBatch),
                opts.pins, error,
                "training.micro_batch: " +
                    std::to_string(*spec->training.microBatch) +
                    " in the spec")) {
    r.error = error;
    return r;
  }
  if (modelOut)
    *modelOut = *model;
  if (clusterOut)
    *clusterOut = *cluster;
  if (optionsOut)
    *optionsOut = opts;
  return searchPlans(*model, *cluster, opts);
}

namespace {
struct PlanCliOptions {
  PlanRequest request;
  bool json = false;
  std::string tracePath;
  std::string htmlPath;
  std::string measuredPath;
  std::string irPath;
  PlanIrEmitter emitIr;
};
} // namespace

/// Prints a user error and leaves through the driver's single exit path.
[[noreturn]] static void fail(const std::string &message) {
  std::string msg = message;
  if (msg.find("error:") == std::string::npos)
    msg = "strata plan: error: " + msg;
  std::cerr << msg << "\n";
  throw CLI::RuntimeError(1);
}

static void runPlan(const PlanCliOptions &o) {
  if (o.request.cluster.empty())
    fail("strata plan: error: --cluster is required: where the model trains, "
         "e.g. --cluster dgx-a100:4 (4 DGX A100 nodes), --cluster local:2 (2 "
         "CPU ranks on this machine) or --cluster my-cluster.yaml "
         "(docs/cluster-spec.md)");
  ModelDesc model;
  ClusterSpec cluster;
  SearchOptions options;
  PlanResult r = planFromFiles(o.request, &model, &cluster, &options);
  if (!r.ok)
    fail(r.error);
  AnalyticalCostModel costModel(model, cluster);
  PlanDetails details =
      describePlan(costModel, r.plans[0].plan, r.plans[0].estimate);
  reviewPlan(model, cluster, options, r, details);
  if (!o.tracePath.empty()) {
    AnalyticalCostModel cm(model, cluster);
    SimulatedStep step;
    std::string error;
    if (!simulateStep(cm, r.plans[0].plan, step, error))
      fail("--trace: " + error);
    std::ofstream out(o.tracePath);
    if (out)
      out << chromeTraceJson(step, r.plans[0].plan) << "\n";
    if (!out)
      fail("--trace " + o.tracePath + ": cannot write the file");
  }
  if (!o.measuredPath.empty() && o.htmlPath.empty())
    fail("--measured needs --html FILE (the report that shows it)");
  if (!o.htmlPath.empty()) {
    std::string measured;
    if (!o.measuredPath.empty()) {
      std::ifstream in(o.measuredPath);
      std::stringstream text;
      text << in.rdbuf();
      if (!in)
        fail("--measured " + o.measuredPath +
             ": cannot read the file (a trace written by the compiled "
             "executable's --trace)");
      measured = text.str();
    }
    std::string error;
    std::string page = renderHtmlReport(r, costModel, details,
                                        o.request.modelPath, measured, error);
    if (!error.empty())
      fail("--measured " + o.measuredPath + ": " + error);
    std::ofstream out(o.htmlPath);
    if (out)
      out << page;
    if (!out)
      fail("--html " + o.htmlPath +
           ": cannot write the file (does its directory exist?)");
  }
  // With the IR on standard output, the report goes to standard error, so
  // the IR stays parseable and the report is still seen.
  std::ostream &report = o.irPath == "-" ? std::cerr : std::cout;
  if (!o.irPath.empty()) {
    std::string error;
    if (!o.emitIr(o.request.modelPath, r.plans[0].plan, o.irPath, error))
      fail("--emit-ir " + o.irPath + ": " + error);
  }
  if (o.json)
    report << planResultToJson(r, o.request.modelPath, cluster.name,
                               cluster.numDevices(), planDetailsJson(details))
           << "\n";
  else
    report << formatPlanReport(r, model, cluster) << formatPlanDetails(details);
}

void addPlanSubcommand(CLI::App &app, PlanIrEmitter emitIr) {
  auto opts = std::make_shared<PlanCliOptions>();
  opts->emitIr = std::move(emitIr);
  CLI::App *plan = app.add_subcommand(
      "plan", "Choose how to parallelise training of MODEL.yaml on a cluster");
  plan->add_option("model", opts->request.modelPath, "model spec (YAML)")
      ->required();
  plan->add_option("--cluster", opts->request.cluster,
                   "dgx-a100:NODES, dgx-h100:NODES, a100:GPUS, h100:GPUS, "
                   "local:RANKS or a cluster "
                   "YAML file (docs/cluster-spec.md); required");
  plan->add_option("--global-batch", opts->request.globalBatch,
                   "sequences per step (default: training.global_batch)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--pin", opts->request.pins,
                   "fix a plan field: dp, tp, pp, vpp, micro_batch, "
                   "num_microbatches, schedule, zero, recompute, sp, "
                   "placement, bucket_bytes (repeatable)")
      ->allow_extra_args(false);
  plan->add_option("--top", opts->request.topK,
                   "plans to show: the best and K-1 runners-up")
      ->check(CLI::Range(1, 100));
  plan->add_flag("--json", opts->json,
                 "print the plan as JSON "
                 "(docs/plan-json.md)");
  plan->add_option("--trace", opts->tracePath,
                   "write the simulated step as Chrome trace JSON "
                   "(docs/report.md)");
  plan->add_option("--html", opts->htmlPath,
                   "write a self-contained HTML report of the plan: step "
                   "breakdown, pipeline timeline, device map, memory per "
                   "stage, runners-up (docs/report.md)");
  plan->add_option("--measured", opts->measuredPath,
                   "with --html: also show a run's measured trace (the "
                   "compiled executable's --trace) beside the prediction");
  if (opts->emitIr)
    plan->add_option("--emit-ir", opts->irPath,
                     "write the model's IR with the plan attached as "
                     "`strata.plan` (- for standard output; the report then "
                     "goes to standard error)");
  plan->callback([opts] { runPlan(*opts); });
}

} // namespace strata::planner
