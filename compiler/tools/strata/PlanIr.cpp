//===- PlanIr.cpp - `strata plan --emit-ir` -------------------------------===//
//
// Imports the model and attaches the chosen plan as `strata.plan`, the form
// in which the partition passes read it.
//
//===----------------------------------------------------------------------===//

#include "compiler/tools/strata/Commands.h"

#include "compiler/planner/PlanAttr.h"
#include "frontends/import/ImportModel.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace strata;

bool strata::emitPlannedIr(const std::string &modelPath,
                           const planner::Plan &plan,
                           const std::string &outPath, std::string &error) {
  std::vector<frontend::Diagnostic> diags;
  std::optional<frontend::ModelSpec> spec =
      frontend::loadModelSpec(modelPath, diags);
  if (!spec) {
    for (const frontend::Diagnostic &d : diags)
      error += (error.empty() ? "" : "\n") + d.str();
    return false;
  }
  mlir::DialectRegistry registry;
  registerImportDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);
  mlir::OwningOpRef<mlir::ModuleOp> module = importModel(*spec, ctx);
  if (!module) {
    error = "the model does not import";
    return false;
  }
  planner::attachPlan(*module, plan);
  auto out = mlir::openOutputFile(outPath, &error);
  if (!out)
    return false;
  module->print(out->os());
  out->os() << "\n";
  out->keep();
  return true;
}
