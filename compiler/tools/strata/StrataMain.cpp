//===- StrataMain.cpp - The strata driver ---------------------------------===//
//
// `strata COMMAND ...`: import, plan, compile. Each command registers itself
// with CLI11 and reports its exit status through CLI::RuntimeError, so every
// path leaves through one place.
//
//===----------------------------------------------------------------------===//

#include "compiler/tools/strata/Commands.h"

#include "compiler/planner/PlanCommand.h"
#include "passes/Passes.h"

#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>

int main(int argc, char **argv) {
  CLI::App app{"Strata: a compiler for auto-parallel hybrid training.\n"
               "Describe a model and a cluster; Strata plans data, tensor and\n"
               "pipeline parallelism and emits one launchable executable.",
               "strata"};
  strata::registerStrataPasses();
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");
  strata::addImportSubcommand(app);
  strata::addCompileSubcommand(app);
  strata::addCalibrateSubcommand(app);
  strata::planner::addPlanSubcommand(app, strata::emitPlannedIr);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError &e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  } catch (const std::exception &e) {
    std::cerr << "strata: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
