//===- ImportCommand.cpp - `strata import` --------------------------------===//

#include "compiler/tools/strata/Commands.h"
#include "compiler/tools/strata/ToolSupport.h"

#include "frontends/import/ImportModel.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "passes/analysis/SummarizeModel.h"
#include "runtime/io/SafeTensors.h"
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
  std::string weightsOut;
};

/// `--weights-out`: an ONNX model's exported initial values as safetensors
/// under the parameter names, for the compiled executable's `--init`.
int writeOnnxWeights(const ImportOptions &opts) {
  llvm::StringRef model(opts.model);
  if (!model.ends_with(".onnx")) {
    llvm::errs() << "error: --weights-out: " << opts.model
                 << " is not an ONNX model; only an .onnx model carries "
                    "initial weights (a YAML spec's are drawn at run time)\n";
    return 1;
  }
  std::vector<frontend::Diagnostic> diags;
  auto weights = frontend::loadOnnxWeights(opts.model, diags);
  if (!weights) {
    for (const frontend::Diagnostic &d : diags)
      llvm::errs() << d.str() << "\n";
    return 1;
  }
  std::vector<rt::SafeTensorToWrite> tensors;
  std::optional<frontend::ModelSpec> spec;
  std::string error;
  spec = loadSpec(opts.model, error);
  if (!spec) {
    llvm::errs() << error << "\n";
    return 1;
  }
  for (size_t i = 0; i < weights->size(); ++i) {
    const auto &[name, data] = (*weights)[i];
    tensors.push_back(
        rt::SafeTensorToWrite{name, "F32", spec->graph.params[i].shape,
                              data.data(), data.size() * sizeof(float)});
  }
  try {
    rt::writeSafeTensors(opts.weightsOut, tensors, {{"format", "pt"}});
  } catch (const std::exception &e) {
    llvm::errs() << "error: --weights-out " << opts.weightsOut << ": "
                 << e.what() << "\n";
    return 1;
  }
  return 0;
}

int runImport(const ImportOptions &opts) {
  std::string error;
  std::optional<frontend::ModelSpec> spec = loadSpec(opts.model, error);
  if (!spec) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (!opts.weightsOut.empty() && writeOnnxWeights(opts) != 0)
    return 1;
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
  cmd->add_option("--weights-out", opts->weightsOut,
                  "For an ONNX model: write its exported initial weights "
                  "(safetensors, parameter names) for the executable's --init");
  cmd->callback([opts] { throw CLI::RuntimeError(runImport(*opts)); });
}
