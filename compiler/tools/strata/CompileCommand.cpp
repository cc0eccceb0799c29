//===- CompileCommand.cpp - `strata compile` ------------------------------===//
//
// Spec -> forward IR -> training step (autodiff + optimizer) -> program ->
// one executable: the prebuilt launcher with the program appended.
//
//===----------------------------------------------------------------------===//

#include "compiler/tools/strata/Commands.h"
#include "compiler/tools/strata/ToolSupport.h"

#include "compiler/emit/EmitProgram.h"
#include "compiler/planner/Cluster.h"
#include "compiler/planner/PlanAttr.h"
#include "compiler/planner/PlanCommand.h"
#include "frontends/import/ImportModel.h"
#include "frontends/yaml/Presets.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "passes/Passes.h"
#include "runtime/format/Bundle.h"
#include "runtime/format/ProgramBuilder.h"
#include "runtime/support/Error.h"
#include "runtime/support/Format.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>

#include <thread>

using namespace strata;

namespace {

struct CompileOptions {
  std::string model;
  std::string cluster = "local:1";
  std::vector<std::string> pins;
  std::string output;
  std::string emitIr;
  std::string launcher;
  std::string target;       ///< Empty: the cluster's device kind decides.
  std::string memoryReport; ///< Per-rank arena vs prediction, JSON.
};

/// Where rank `r` sits in the plan's (tp, dp, pp) grid.
struct RankCoords {
  int64_t tp = 0, dp = 0, pp = 0;
};
RankCoords coordsOf(const planner::Plan &plan, int64_t r) {
  using planner::Axis;
  RankCoords c;
  c.tp = r / plan.stride(Axis::TP) % plan.tp;
  c.dp = r / plan.stride(Axis::DP) % plan.dp;
  c.pp = r / plan.stride(Axis::PP) % plan.pp;
  return c;
}

/// Runs the partition and training passes for one rank of the plan.
mlir::LogicalResult buildRankModule(mlir::ModuleOp module,
                                    const planner::Plan &plan,
                                    const RankCoords &c, int64_t globalBatch,
                                    bool explicitGraph) {
  std::string pipeline;
  llvm::raw_string_ostream os(pipeline);
  auto stages = [&] {
    if (plan.pp > 1) {
      os << "strata-assign-pipeline-stages{pp=" << plan.pp
         << " vpp=" << plan.vpp;
      if (!plan.stageLayers.empty()) {
        os << " stage-layers=";
        llvm::interleave(plan.stageLayers, os, ",");
      }
      if (explicitGraph)
        os << " graph-units=true";
      os << "},";
    }
  };
  // An explicit graph is split into stages first: its pipeline units are
  // the planner's, before partitioning adds collectives (which take their
  // user's stage).
  if (explicitGraph)
    stages();
  else
    // The presets state Megatron-LM's decisions (frontends/yaml/Presets.cpp);
    // seeds for this tp (under tp 1 the statements are only removed).
    os << "strata-seed-stated-decisions{mesh-size=" << plan.tp
       << " sp=" << (plan.sp ? "true" : "false") << "},";
  if (plan.tp > 1 && explicitGraph)
    // Any graph: decisions on the matmul weights, spread and materialised by
    // the ops' sharding rules.
    os << "strata-propagate-sharding{mesh-size=" << plan.tp
       << " split-matmul-weights=true},strata-partition-sharding{mesh-size="
       << plan.tp << " rank=" << c.tp << "},";
  else if (plan.tp > 1)
    // The presets: the Megatron-LM decisions they state, spread and
    // materialised by the same rules; the rank programs are those
    // the Megatron block rewriting gave (RulePartitionComparisonTest).
    os << "strata-propagate-sharding{mesh-size=" << plan.tp
       << "},strata-partition-sharding{mesh-size=" << plan.tp
       << " rank=" << c.tp << "},";
  if (!explicitGraph)
    stages();
  // Each replica's micro-batch loss is a mean over its rows; the seed makes
  // the sum over micro-batches and replicas the global-batch mean.
  // bfloat16 models: float32 masters, casts to the compute dtype (a no-op
  // for float32 models).
  os << "strata-mixed-precision,";
  os << "strata-autodiff{loss-scale="
     << llvm::format("%.17g", double(plan.microBatch) / double(globalBatch))
     << "},strata-build-optimizer";
  if (plan.recompute != planner::Recompute::None)
    os << ",strata-recompute{mode=" << planner::recomputeName(plan.recompute)
       << "}";
  if (plan.dp > 1)
    os << ",strata-insert-gradient-reduction{zero=" << plan.zero
       << " bucket-bytes=" << plan.bucketBytes << "}";
  mlir::PassManager pm(module->getContext(),
                       mlir::ModuleOp::getOperationName());
  if (failed(mlir::parsePassPipeline(os.str(), pm, llvm::errs())))
    return mlir::failure();
  return pm.run(module);
}

/// The ranks and target to compile for: one rank per device of the cluster
/// (a preset or a cluster YAML), on the target `--target` names or, by
/// default, the one of the cluster's devices (cuda for GPUs, cpu for CPU
/// ranks). A target that contradicts the devices is an error naming the
/// flag. On error, says why in `error`.
bool resolveTarget(const CompileOptions &opts, int64_t &ranks,
                   rt::TargetDesc &target, std::string &error) {
  std::string presetError;
  bool isPreset = false;
  planner::clusterPreset(opts.cluster, presetError, isPreset);
  llvm::StringRef arg(opts.cluster);
  if (isPreset && !presetError.empty()) {
    error = "error: " + presetError +
            " (--cluster takes local:N for N CPU ranks on this machine, "
            "h100:N, a100:N, dgx-h100:NODES, dgx-a100:NODES or a cluster "
            "YAML file)";
    return false;
  }
  if (!isPreset && !arg.ends_with(".yaml") && !arg.ends_with(".yml")) {
    error = "error: --cluster " + opts.cluster +
            ": expected a preset (local:N for N CPU ranks on this machine, "
            "h100:N, a100:N, dgx-h100:NODES, dgx-a100:NODES) or a cluster "
            "YAML file, e.g. --cluster local:2";
    return false;
  }
  std::vector<planner::PlannerDiag> diags;
  std::optional<planner::ClusterSpec> spec =
      planner::resolveCluster(opts.cluster, diags);
  if (!spec) {
    for (const planner::PlannerDiag &d : diags)
      error += (error.empty() ? "" : "\n") + d.str();
    if (error.empty())
      error = "error: --cluster " + opts.cluster +
              ": expected a preset (local:N, h100:N, a100:N, dgx-h100:NODES, "
              "dgx-a100:NODES) or a cluster YAML file, e.g. --cluster local:2";
    return false;
  }
  ranks = spec->numDevices();
  bool gpu = spec->device.kind == "gpu";
  std::string wanted =
      opts.target.empty() ? (gpu ? "cuda" : "cpu") : opts.target;
  if (wanted != "cpu" && wanted != "cuda") {
    error = "error: --target " + wanted + ": expected cpu or cuda";
    return false;
  }
  if (wanted == "cpu" && gpu) {
    error = "error: --target cpu: --cluster " + opts.cluster + " is a " +
            "cluster of GPUs (" + spec->device.name +
            "), so the plan was chosen for GPUs; use --target cuda (the "
            "default for GPU clusters), or --cluster local:N for CPU ranks";
    return false;
  }
  if (wanted == "cuda" && !gpu) {
    error = "error: --target cuda: --cluster " + opts.cluster +
            " is a cluster of CPU ranks (" + spec->device.name +
            "); use a GPU cluster (e.g. --cluster h100:1, dgx-h100:NODES or "
            "a YAML with kind: gpu), or --target cpu";
    return false;
  }
  target.kind = wanted == "cuda" ? rt::TargetKind::Cuda : rt::TargetKind::Cpu;
  target.deviceModel = spec->device.name;
  target.cluster = spec->name.empty() ? opts.cluster : spec->name;
  return true;
}

/// `--memory-report`: per rank, what the compiled program holds (arena,
/// persistent part, liveness peak) beside the planner's prediction for the
/// rank's pipeline device (docs/cost-model.md, "Memory").
bool writeMemoryReport(const std::string &path, const planner::Plan &plan,
                       const planner::Estimate &estimate,
                       const std::vector<EmitStats> &rankStats,
                       std::string &error) {
  llvm::json::Array ranks;
  for (auto [r, st] : llvm::enumerate(rankStats)) {
    RankCoords c = coordsOf(plan, int64_t(r));
    llvm::json::Object o{{"rank", int64_t(r)},
                         {"stage", c.pp},
                         {"arena", int64_t(st.arenaBytes)},
                         {"persistent", int64_t(st.persistentBytes)},
                         {"peak_live", int64_t(st.peakLiveBytes)}};
    llvm::json::Array peak;
    for (const auto &[name, b] : st.peakBuffers)
      peak.push_back(llvm::json::Array{name, int64_t(b)});
    o["peak_buffers"] = std::move(peak);
    if (size_t(c.pp) < estimate.stageMemory.size()) {
      const planner::MemoryBreakdown &m = estimate.stageMemory[c.pp];
      o["predicted"] = m.total() - m.reserved;
      o["predicted_persistent"] = m.weights + m.gradients + m.optimizerState;
      o["predicted_activations"] = m.activations;
      o["predicted_comm_buffers"] = m.commBuffers;
    }
    ranks.push_back(std::move(o));
  }
  llvm::json::Object root{{"plan", plan.summary()},
                          {"ranks", std::move(ranks)}};
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec) {
    error = ec.message();
    return false;
  }
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
  return true;
}

int runCompile(const CompileOptions &opts) {
  int64_t ranks = 0;
  rt::TargetDesc target;
  std::string clusterError;
  if (!resolveTarget(opts, ranks, target, clusterError)) {
    llvm::errs() << clusterError << "\n";
    return 1;
  }
  // Every rank's program is built and held at once (hundreds of KB each,
  // more for larger models), so the rank count is bounded.
  constexpr int64_t kMaxCompileRanks = 4096;
  if (ranks > kMaxCompileRanks) {
    llvm::errs() << "error: --cluster " << opts.cluster << ": " << ranks
                 << " ranks; strata compile builds one program per rank and "
                    "holds them all, at most "
                 << kMaxCompileRanks << " ranks\n";
    return 1;
  }
  std::string launcher =
      findBesideStrata(opts.launcher, "STRATA_LAUNCHER", "strata-launcher");
  if (!llvm::sys::fs::can_execute(launcher)) {
    llvm::errs() << "error: the runtime launcher '" << launcher
                 << "' is missing or not executable; build the "
                    "strata-launcher target or pass --launcher PATH\n";
    return 1;
  }
  // A binary that is not a launcher would be bundled and then exit without
  // training anything (--launcher /bin/true exits 0).
  try {
    if (!rt::isStrataLauncher(launcher)) {
      llvm::errs() << "error: --launcher " << launcher
                   << ": not a strata-launcher (it lacks the launcher's "
                      "marker); a training binary built from it would not "
                      "train. Pass the strata-launcher built with this "
                      "strata\n";
      return 1;
    }
  } catch (const rt::RuntimeError &e) {
    llvm::errs() << "error: --launcher " << e.what() << "\n";
    return 1;
  }

  // The plan: searched (and printed) like `strata plan`, pins honoured.
  planner::PlanRequest request;
  request.modelPath = opts.model;
  request.cluster = opts.cluster;
  request.pins = opts.pins;
  request.topK = 1;
  request.costGraph = costExplicitGraph;
  planner::PlanResult planned = planner::planFromFiles(request);
  if (!planned.ok) {
    // Located spec errors already say "error:"; planner errors name the pin.
    if (planned.error.find("error:") == std::string::npos)
      llvm::errs() << "error: ";
    llvm::errs() << planned.error << "\n";
    return 1;
  }
  planner::Plan plan = planned.plans[0].plan;

  llvm::outs() << "plan: " << plan.summary() << "\n"
               << "target: " << rt::targetName(target.kind) << " on "
               << target.deviceModel << "\n";

  frontend::LoadOptions load;
  load.batch = plan.microBatch;
  std::string error;
  std::optional<frontend::ModelSpec> spec = loadSpec(opts.model, error, load);
  if (!spec) {
    llvm::errs() << error << "\n";
    return 1;
  }
  int64_t globalBatch = plan.globalBatch();

  ToolContext tool;
  mlir::MLIRContext &ctx = tool.ctx;

  // One module per rank: ranks differ in their tensor-parallel shard and
  // data-parallel replica.
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> modules;
  for (int64_t r = 0; r < ranks; ++r) {
    mlir::OwningOpRef<mlir::ModuleOp> module = importModel(*spec, ctx);
    if (!module)
      return 1;
    planner::attachPlan(*module, plan);
    bool explicitGraph = !spec->gpt && !spec->llama && !spec->mlp;
    if (failed(buildRankModule(*module, plan, coordsOf(plan, r), globalBatch,
                               explicitGraph)))
      return 1;
    modules.push_back(std::move(module));
  }
  if (!opts.emitIr.empty() && !writeModule(*modules[0], opts.emitIr, error)) {
    llvm::errs() << "error: --emit-ir " << opts.emitIr << ": " << error << "\n";
    return 1;
  }

  rt::ModelMeta meta;
  rt::TrainConfig train;
  if (failed(readProgramConfig(*modules[0], meta, train)))
    return 1;
  meta.globalBatch = globalBatch;
  meta.numMicrobatches = plan.numMicrobatches;
  meta.worldSize = ranks;
  meta.planDescription = plan.summary();
  // For the runtime's MFU: the planner's model FLOPs and its device peak.
  const planner::Estimate &estimate = planned.plans[0].estimate;
  meta.flopsPerStep = estimate.modelFlopsPerStep;
  if (estimate.mfu > 0)
    meta.peakFlops = estimate.tflopsPerDevice * 1e12 / estimate.mfu;
  meta.hfConfig = frontend::hfConfigJson(*spec);

  // Generation: the forward of one new position, with key/value caches.
  std::optional<rt::RankProgram> decode;
  if (spec->family == "gpt" || spec->family == "llama" ||
      spec->family == "mlp") {
    frontend::LoadOptions decodeLoad;
    decodeLoad.batch = 1;
    decodeLoad.decode = true;
    std::optional<frontend::ModelSpec> decodeSpec =
        loadSpec(opts.model, error, decodeLoad);
    if (!decodeSpec) {
      llvm::errs() << error << "\n";
      return 1;
    }
    // Generation computes in float32 from the float32 master weights,
    // whatever the training dtype.
    frontend::Graph &g = decodeSpec->graph;
    auto toF32 = [](frontend::DType &t) {
      if (frontend::isFloatDType(t))
        t = frontend::DType::F32;
    };
    for (frontend::GraphParam &p : g.params)
      toF32(p.dtype);
    for (frontend::GraphTensor &in : g.inputs)
      toF32(in.dtype);
    for (frontend::GraphOp &op : g.ops)
      for (frontend::TensorType &t : op.outputTypes)
        toF32(t.dtype);
    for (auto &[name, t] : g.values)
      toF32(t.dtype);
    mlir::OwningOpRef<mlir::ModuleOp> decodeModule =
        importModel(*decodeSpec, ctx);
    if (!decodeModule)
      return 1;
    mlir::PassManager pm(&ctx, mlir::ModuleOp::getOperationName());
    if (failed(
            mlir::parsePassPipeline("strata-decode-step", pm, llvm::errs())) ||
        failed(pm.run(*decodeModule)))
      return 1;
    mlir::FailureOr<rt::RankProgram> emitted =
        emitDecodeProgram(*decodeModule, meta);
    if (failed(emitted))
      return 1;
    decode = std::move(*emitted);
  }

  EmitStats stats;
  std::vector<EmitStats> rankStats(ranks);
  for (EmitStats &st : rankStats)
    st.collectPeakBuffers = !opts.memoryReport.empty();
  std::vector<uint8_t> bytes;
  try {
    rt::MultiRankProgramBuilder builder(meta, train);
    std::vector<uint32_t> all(ranks);
    for (int64_t r = 0; r < ranks; ++r)
      all[r] = r;
    int64_t world = builder.addGroup("world", all);
    // Groups along each axis: the ranks that differ only in that coordinate.
    std::map<std::pair<std::string, int64_t>, int64_t> groupOf;
    auto addAxisGroups = [&](const char *axis, planner::Axis a) {
      if (plan.size(a) == 1)
        return;
      std::map<std::vector<int64_t>, std::vector<uint32_t>> members;
      for (int64_t r = 0; r < ranks; ++r) {
        RankCoords c = coordsOf(plan, r);
        std::vector<int64_t> key{c.tp, c.dp, c.pp};
        key[a == planner::Axis::TP ? 0 : a == planner::Axis::DP ? 1 : 2] = -1;
        members[key].push_back(r);
      }
      int k = 0;
      for (auto &[key, list] : members) {
        int64_t id = builder.addGroup(axis + std::to_string(k++), list);
        for (uint32_t r : list)
          groupOf[{axis, r}] = id;
      }
    };
    addAxisGroups("dp", planner::Axis::DP);
    addAxisGroups("tp", planner::Axis::TP);
    // The first and last pipeline devices both hold the tied embedding.
    if (plan.pp > 1) {
      std::map<std::pair<int64_t, int64_t>, std::vector<uint32_t>> ends;
      for (int64_t r = 0; r < ranks; ++r) {
        RankCoords c = coordsOf(plan, r);
        if (c.pp == 0 || c.pp == plan.pp - 1)
          ends[{c.tp, c.dp}].push_back(r);
      }
      int k = 0;
      for (auto &[key, list] : ends) {
        int64_t id = builder.addGroup("tied" + std::to_string(k++), list);
        for (uint32_t r : list)
          groupOf[{"tied", r}] = id;
      }
    }

    std::vector<uint32_t> lossRanks;
    for (int64_t r = 0; r < ranks; ++r) {
      RankCoords c = coordsOf(plan, r);
      ParallelContext pc;
      pc.rank = r;
      pc.worldSize = ranks;
      pc.dp = plan.dp, pc.dpIndex = c.dp;
      pc.tp = plan.tp, pc.tpIndex = c.tp;
      pc.pp = plan.pp, pc.ppIndex = c.pp, pc.vpp = plan.vpp;
      pc.numMicrobatches = plan.numMicrobatches;
      pc.schedule = planner::scheduleName(plan.schedule);
      for (int64_t d = 0; d < plan.pp; ++d)
        pc.ppRanks.push_back(c.tp * plan.stride(planner::Axis::TP) +
                             c.dp * plan.stride(planner::Axis::DP) +
                             d * plan.stride(planner::Axis::PP));
      pc.zero = plan.zero;
      pc.bf16GradReduce = plan.bf16GradReduce;
      pc.groupIds["world"] = world;
      for (const char *axis : {"dp", "tp", "tied"})
        if (groupOf.count({axis, r}))
          pc.groupIds[axis] = groupOf[{axis, r}];
      if (failed(
              emitRankProgram(*modules[r], pc, builder.rank(r), &rankStats[r])))
        return 1;
      if (c.tp == 0 && c.pp == plan.pp - 1)
        lossRanks.push_back(r);
    }
    builder.setLossRanks(lossRanks);
    rt::Program program = builder.finish();
    program.decode = std::move(decode);
    program.target = target;
    rt::verifyProgram(program, "strata compile");
    bytes = rt::serializeProgram(program);
    rt::writeExecutable(launcher, bytes, opts.output);
  } catch (const rt::RuntimeError &e) {
    llvm::errs() << "error: " << e.what() << "\n";
    return 1;
  }
  stats = rankStats[0];
  if (!opts.memoryReport.empty() &&
      !writeMemoryReport(opts.memoryReport, plan, estimate, rankStats, error)) {
    llvm::errs() << "error: --memory-report " << opts.memoryReport << ": "
                 << error << "\n";
    return 1;
  }
  // How to run it, spelled with the path the user gave.
  std::string run = opts.output;
  if (run.find('/') == std::string::npos)
    run = "./" + run;
  if (ranks > 1) {
    unsigned cores = std::thread::hardware_concurrency();
    bool over = cores > 0 && uint64_t(ranks) > cores;
    run = std::string("mpirun ") + (over ? "--oversubscribe " : "") + "-np " +
          std::to_string(ranks) + " " + run +
          (over ? "   (more ranks than this machine's " +
                      std::to_string(cores) + " cores)"
                : "");
  }
  llvm::outs() << "compiled " << spec->path << " -> " << opts.output << " ("
               << plural(ranks, "rank") << ")\n"
               << "  rank 0: arena " << formatBytes(double(stats.arenaBytes))
               << " (" << formatBytes(double(stats.persistentBytes))
               << " persistent, " << formatBytes(double(stats.unsharedBytes))
               << " without reuse); " << stats.numInstructions
               << " instructions per micro-batch, "
               << plural(meta.numMicrobatches, "micro-batch") << " per step\n"
               << "run it: " << run << "\n";
  return 0;
}

} // namespace

void strata::addCompileSubcommand(CLI::App &app) {
  auto opts = std::make_shared<CompileOptions>();
  CLI::App *cmd = app.add_subcommand(
      "compile", "Compile a model spec into one executable that trains it");
  cmd->add_option("model", opts->model, "Model spec (YAML)")->required();
  cmd->add_option("--cluster", opts->cluster,
                  "Where it runs: local:N (N CPU ranks on this machine), "
                  "h100:N / a100:N (N GPUs of one NVLink domain), "
                  "dgx-h100:NODES / dgx-a100:NODES, or a cluster YAML (e.g. "
                  "from strata calibrate); one rank per device")
      ->capture_default_str();
  cmd->add_option("--target", opts->target,
                  "cpu or cuda: the backend the executable runs on (default: "
                  "cuda for GPU clusters, cpu for local:N); must match the "
                  "cluster's devices");
  cmd->add_option("--pin", opts->pins,
                  "Fix a plan field (dp, tp, pp, micro_batch, zero, sp, ...; "
                  "repeatable); the planner chooses the rest");

  cmd->add_option("-o,--output", opts->output, "The executable to write")
      ->required();
  cmd->add_option("--emit-ir", opts->emitIr,
                  "Also write the training-step IR to this file");
  cmd->add_option("--memory-report", opts->memoryReport,
                  "Also write, per rank, the compiled arena (persistent "
                  "part, liveness peak) and the planner's predicted memory "
                  "of its stage to this JSON file");
  cmd->add_option("--launcher", opts->launcher,
                  "The runtime launcher to embed the program in (default: "
                  "strata-launcher beside strata, or $STRATA_LAUNCHER)");
  cmd->callback([opts] { throw CLI::RuntimeError(runCompile(*opts)); });
}
