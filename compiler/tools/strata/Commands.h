//===- Commands.h - strata subcommands --------------------------*- C++ -*-===//

#ifndef STRATA_COMPILER_TOOLS_STRATA_COMMANDS_H
#define STRATA_COMPILER_TOOLS_STRATA_COMMANDS_H

#include <string>

namespace CLI {
class App;
}

namespace strata::planner {
struct Plan;
struct ModelDesc;
} // namespace strata::planner

namespace strata::frontend {
struct ModelSpec;
} // namespace strata::frontend

namespace strata {
/// `strata import MODEL.yaml [-o FILE] [--summary]`.
void addImportSubcommand(CLI::App &app);
/// `strata compile MODEL.yaml --cluster local:N -o BIN`.
void addCompileSubcommand(CLI::App &app);
/// `strata checkpoint consolidate DIR -o model.safetensors`.
void addCheckpointSubcommand(CLI::App &app);
/// `strata calibrate --ranks N -o cluster.yaml [--quick]`.
void addCalibrateSubcommand(CLI::App &app);
/// `strata plan --emit-ir`: the model's IR with `plan` attached.
bool emitPlannedIr(const std::string &modelPath, const planner::Plan &plan,
                   const std::string &outPath, std::string &error);
/// The planner's view of an explicit graph: its pipeline units, costed op
/// by op through the dialect (planner::GraphCoster).
bool costExplicitGraph(const frontend::ModelSpec &spec, planner::ModelDesc &d,
                       std::string &error);
} // namespace strata

#endif // STRATA_COMPILER_TOOLS_STRATA_COMMANDS_H
