//===- CompileCommand.cpp - `strata compile` ------------------------------===//
//
// Spec -> forward IR -> training step (autodiff + optimizer) -> program ->
// one executable: the prebuilt launcher with the program appended.
//
//===----------------------------------------------------------------------===//

#include "compiler/tools/strata/Commands.h"

#include "compiler/emit/EmitProgram.h"
#include "frontends/import/ImportModel.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "passes/Passes.h"
#include "runtime/format/Bundle.h"
#include "runtime/support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>

using namespace strata;

namespace {

struct CompileOptions {
  std::string model;
  std::string cluster = "local:1";
  std::string output;
  std::string emitIr;
  std::string launcher;
};

/// The launcher is installed beside `strata`; STRATA_LAUNCHER overrides.
std::string findLauncher(const std::string &flag) {
  if (!flag.empty())
    return flag;
  if (const char *env = std::getenv("STRATA_LAUNCHER"))
    return env;
  std::string self = llvm::sys::fs::getMainExecutable(
      nullptr, reinterpret_cast<void *>(&findLauncher));
  llvm::SmallString<256> path(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(path, "strata-launcher");
  return std::string(path);
}

/// Parses `local:N`. Only single-rank programs are emitted for now.
bool parseCluster(const std::string &cluster, int64_t &ranks) {
  llvm::StringRef s(cluster);
  if (!s.consume_front("local:") || s.getAsInteger(10, ranks) || ranks < 1)
    return false;
  return true;
}

int runCompile(const CompileOptions &opts) {
  int64_t ranks = 0;
  if (!parseCluster(opts.cluster, ranks)) {
    llvm::errs() << "error: --cluster " << opts.cluster
                 << ": expected local:N (N CPU ranks on this machine), e.g. "
                    "--cluster local:1\n";
    return 1;
  }
  if (ranks != 1) {
    llvm::errs() << "error: --cluster " << opts.cluster
                 << ": this build emits single-rank programs only; use "
                    "--cluster local:1\n";
    return 1;
  }
  std::string launcher = findLauncher(opts.launcher);
  if (!llvm::sys::fs::can_execute(launcher)) {
    llvm::errs() << "error: the runtime launcher '" << launcher
                 << "' is missing or not executable; build the "
                    "strata-launcher target or pass --launcher PATH\n";
    return 1;
  }

  std::vector<frontend::Diagnostic> diags;
  std::optional<frontend::ModelSpec> spec =
      frontend::loadModelSpec(opts.model, diags);
  if (!spec) {
    for (const frontend::Diagnostic &d : diags)
      llvm::errs() << d.str() << "\n";
    return 1;
  }

  mlir::DialectRegistry registry;
  registerImportDialects(registry);
  mlir::MLIRContext ctx(registry);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);
  mlir::OwningOpRef<mlir::ModuleOp> module = importModel(*spec, ctx);
  if (!module)
    return 1;

  mlir::PassManager pm(&ctx);
  pm.addPass(createStrataAutodiff());
  pm.addPass(createStrataBuildOptimizer());
  if (failed(pm.run(*module)))
    return 1;
  if (!opts.emitIr.empty()) {
    std::string error;
    auto out = mlir::openOutputFile(opts.emitIr, &error);
    if (!out) {
      llvm::errs() << "error: --emit-ir " << opts.emitIr << ": " << error
                   << "\n";
      return 1;
    }
    module->print(out->os());
    out->keep();
  }

  EmitOptions emitOptions;
  emitOptions.planDescription = "single rank (dp=1, tp=1, pp=1)";
  EmitStats stats;
  mlir::FailureOr<rt::Program> program =
      emitProgram(*module, emitOptions, &stats);
  if (failed(program))
    return 1;
  try {
    rt::writeExecutable(launcher, rt::serializeProgram(*program), opts.output);
  } catch (const rt::RuntimeError &e) {
    llvm::errs() << "error: -o " << opts.output << ": " << e.what() << "\n";
    return 1;
  }
  int64_t numParams = 0;
  for (const rt::ParamDesc &p : program->ranks[0].params)
    numParams += program->ranks[0].buffers[p.value].numElements();
  llvm::outs() << llvm::format(
      "compiled %s -> %s\n  plan: %s\n  %lld parameters in %zu tensors; "
      "arena %.1f MiB (%.1f MiB persistent, %.1f MiB without reuse); "
      "%zu instructions per micro-batch, %lld micro-batch(es) per step\n",
      spec->path.c_str(), opts.output.c_str(),
      program->meta.planDescription.c_str(), (long long)numParams,
      program->ranks[0].params.size(), stats.arenaBytes / 1048576.0,
      stats.persistentBytes / 1048576.0, stats.unsharedBytes / 1048576.0,
      stats.numInstructions, (long long)program->meta.numMicrobatches);
  return 0;
}

} // namespace

void strata::addCompileSubcommand(CLI::App &app) {
  auto opts = std::make_shared<CompileOptions>();
  CLI::App *cmd = app.add_subcommand(
      "compile", "Compile a model spec into one executable that trains it");
  cmd->add_option("model", opts->model, "Model spec (YAML)")->required();
  cmd->add_option("--cluster", opts->cluster,
                  "Where it runs: local:N (N CPU ranks on this machine)")
      ->capture_default_str();
  cmd->add_option("-o,--output", opts->output, "The executable to write")
      ->required();
  cmd->add_option("--emit-ir", opts->emitIr,
                  "Also write the training-step IR to this file");
  cmd->add_option("--launcher", opts->launcher,
                  "The runtime launcher to embed the program in (default: "
                  "strata-launcher beside strata, or $STRATA_LAUNCHER)");
  cmd->callback([opts] { throw CLI::RuntimeError(runCompile(*opts)); });
}
