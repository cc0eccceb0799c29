//===- PlanIr.cpp - `strata plan --emit-ir` -------------------------------===//
//
// Imports the model and attaches the chosen plan as `strata.plan`, the form
// in which the partition passes read it.
//
//===----------------------------------------------------------------------===//

#include "compiler/tools/strata/Commands.h"
#include "compiler/tools/strata/ToolSupport.h"

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
  std::optional<frontend::ModelSpec> spec = loadSpec(modelPath, error);
  if (!spec)
    return false;
  ToolContext tool;
  mlir::OwningOpRef<mlir::ModuleOp> module = importModel(*spec, tool.ctx);
  if (!module) {
    error = "the model does not import";
    return false;
  }
  planner::attachPlan(*module, plan);
  return writeModule(*module, outPath, error);
}
