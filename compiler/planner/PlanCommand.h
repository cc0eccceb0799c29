//===- PlanCommand.h - `strata plan` and the shared planning entry -*- C++
//-*-===//
//
// `addPlanSubcommand` registers `strata plan` on the driver's CLI11 app. Its
// callback prints user errors to stderr and throws CLI::RuntimeError(1), the
// driver's single exit path.
// `planFromFiles` is the same search for `strata compile --cluster --pin`.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_PLANCOMMAND_H
#define STRATA_COMPILER_PLANNER_PLANCOMMAND_H

#include "compiler/planner/Cluster.h"
#include "compiler/planner/ModelDesc.h"
#include "compiler/planner/Plan.h"
#include "compiler/planner/Search.h"

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
} // namespace CLI

namespace strata::planner {

/// What a user asks the planner for on the command line.
struct PlanRequest {
  std::string modelPath;
  std::string cluster;     ///< preset ("dgx-a100:4") or cluster YAML path
  int64_t globalBatch = 0; ///< 0: take training.global_batch from the spec
  std::vector<std::string> pins; ///< "key=value"
  int topK = 3;
};

/// Loads the model spec and cluster, parses pins and searches. On any user
/// error returns a result with ok=false and a message in `error` (located
/// diagnostics joined by newlines). `model`/`cluster` receive what was
/// loaded when non-null.
PlanResult planFromFiles(const PlanRequest &request, ModelDesc *model = nullptr,
                         ClusterSpec *cluster = nullptr,
                         SearchOptions *options = nullptr);

/// Writes the model's IR with the chosen plan attached (`--emit-ir`). The
/// driver provides it, which keeps this library free of MLIR. Returns false
/// and sets `error` on failure.
using PlanIrEmitter =
    std::function<bool(const std::string &modelPath, const Plan &plan,
                       const std::string &outPath, std::string &error)>;

/// Registers `plan MODEL.yaml --cluster C [--global-batch N] [--pin k=v]...
/// [--top K] [--json] [--trace FILE] [--html FILE] [--emit-ir FILE]` (the last only when
/// `emitIr` is given).
void addPlanSubcommand(CLI::App &app, PlanIrEmitter emitIr = nullptr);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_PLANCOMMAND_H
