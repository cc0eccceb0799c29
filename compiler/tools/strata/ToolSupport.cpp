//===- ToolSupport.cpp - What every strata command needs ------------------===//

#include "compiler/tools/strata/ToolSupport.h"

#include "frontends/import/ImportModel.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace strata;

static mlir::DialectRegistry importRegistry() {
  mlir::DialectRegistry registry;
  registerImportDialects(registry);
  return registry;
}

ToolContext::ToolContext() : ctx(importRegistry()) {
  // Users get the located message, not a dump of the IR.
  ctx.printOpOnDiagnostic(false);
}

std::optional<frontend::ModelSpec>
strata::loadSpec(const std::string &path, std::string &error,
                 const frontend::LoadOptions &options) {
  std::vector<frontend::Diagnostic> diags;
  std::optional<frontend::ModelSpec> spec =
      frontend::loadModelSpec(path, diags, nullptr, options);
  if (!spec)
    for (const frontend::Diagnostic &d : diags)
      error += (error.empty() ? "" : "\n") + d.str();
  return spec;
}

std::string strata::findBesideStrata(const std::string &flag,
                                     const char *envVar, const char *fileName) {
  if (!flag.empty())
    return flag;
  if (const char *env = std::getenv(envVar))
    return env;
  std::string self = llvm::sys::fs::getMainExecutable(
      nullptr, reinterpret_cast<void *>(&findBesideStrata));
  llvm::SmallString<256> path(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(path, fileName);
  return std::string(path);
}

bool strata::writeModule(mlir::ModuleOp module, const std::string &path,
                         std::string &error) {
  auto out = mlir::openOutputFile(path, &error);
  if (!out)
    return false;
  module->print(out->os());
  out->os() << "\n";
  out->keep();
  return true;
}
