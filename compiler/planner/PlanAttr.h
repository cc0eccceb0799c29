//===- PlanAttr.h - Plan <-> IR attribute -----------------------*- C++ -*-===//
//
// The plan is a value: besides JSON (Plan::toJson) it round-trips to a
// dictionary attribute, `strata.plan` on the module, so that the partition
// passes read the decision from the IR and `strata-opt` carries it along.
// The keys are those of the `plan` object of docs/plan-json.md.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_PLANATTR_H
#define STRATA_COMPILER_PLANNER_PLANATTR_H

#include "compiler/planner/Plan.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <string>

namespace strata::planner {

constexpr const char *kPlanAttrName = "strata.plan";

mlir::DictionaryAttr planToAttr(const Plan &plan, mlir::MLIRContext *ctx);

/// Reads a plan back; on failure returns nullopt and says which key is
/// missing or malformed.
std::optional<Plan> planFromAttr(mlir::DictionaryAttr attr, std::string &error);

/// Sets `strata.plan` on the module.
void attachPlan(mlir::ModuleOp module, const Plan &plan);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_PLANATTR_H
