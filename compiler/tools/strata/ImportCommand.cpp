//===- ImportCommand.cpp - `strata import` --------------------------------===//

#include "compiler/tools/strata/Commands.h"
#include "compiler/tools/strata/ToolSupport.h"

#include "frontends/import/ImportModel.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "passes/analysis/SummarizeModel.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>

using namespace strata;

namespace {
struct ImportOptions {
  std::string model;
  std::string output = "-";
  bool summary = false;
};

int runImport(const ImportOptions &opts) {
  std::string error;
  std::optional<frontend::ModelSpec> spec = loadSpec(opts.model, error);
  if (!spec) {
    llvm::errs() << error << "\n";
    return 1;
  }
  ToolContext tool;
  mlir::OwningOpRef<mlir::ModuleOp> module = importModel(*spec, tool.ctx);
  if (!module)
    return 1;
  if (!writeModule(*module, opts.output, error)) {
    llvm::errs() << "error: -o " << opts.output << ": " << error << "\n";
    return 1;
  }
  if (opts.summary) {
    llvm::errs() << "model " << spec->path << " (" << spec->family << ", batch "
                 << spec->batch << ")\n";
    printModelSummary(summarizeModel(*module), llvm::errs());
  }
  return 0;
}
} // namespace

void strata::addImportSubcommand(CLI::App &app) {
  auto opts = std::make_shared<ImportOptions>();
  CLI::App *cmd = app.add_subcommand(
      "import", "Import a YAML model spec and print its strata IR");
  cmd->add_option("model", opts->model, "Model spec (YAML)")->required();
  cmd->add_option("-o,--output", opts->output,
                  "Write the IR here instead of standard output");
  cmd->add_flag("--summary", opts->summary,
                "Also print parameters, ops and forward FLOPs to stderr");
  cmd->callback([opts] { throw CLI::RuntimeError(runImport(*opts)); });
}
