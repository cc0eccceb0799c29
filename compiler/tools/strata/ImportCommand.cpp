//===- ImportCommand.cpp - `strata import` --------------------------------===//

#include "compiler/tools/strata/Commands.h"

#include "frontends/import/ImportModel.h"
#include "passes/analysis/SummarizeModel.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
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
  ctx.printOpOnDiagnostic(false);
  // Verifier errors carry the spec's file:line:col; print them plainly.
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);
  mlir::OwningOpRef<mlir::ModuleOp> module = importModel(*spec, ctx);
  if (!module)
    return 1;

  std::string error;
  auto out = mlir::openOutputFile(opts.output, &error);
  if (!out) {
    llvm::errs() << "error: -o " << opts.output << ": " << error << "\n";
    return 1;
  }
  module->print(out->os());
  out->os() << "\n";
  out->keep();
  if (opts.summary) {
    llvm::errs() << "model " << spec->path << " (" << spec->family
                 << ", batch " << spec->batch << ")\n";
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
