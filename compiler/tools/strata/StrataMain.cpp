//===- StrataMain.cpp - The strata driver ---------------------------------===//
//
// `strata COMMAND ...`: import, plan, compile, calibrate, checkpoint. Each
// command registers itself with CLI11 and reports its exit status through
// CLI::RuntimeError, so every path leaves through one place.
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
  strata::addCheckpointSubcommand(app);
  strata::planner::addPlanSubcommand(app, strata::emitPlannedIr,
                                     strata::costExplicitGraph);
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const CLI::App *sub : app.get_subcommands({})) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::cerr << "strata: error: unknown command '" << argv[1]
                << "'; the commands are " << names
                << " (see `strata --help`)\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError &e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError &e) {
    // --help and friends print and succeed; a malformed command line gets
    // one line naming the command and where to read more.
    if (e.get_exit_code() == 0)
      return app.exit(e);
    std::string command = "strata";
    for (const CLI::App *sub : app.get_subcommands())
      command += " " + sub->get_name();
    std::cerr << command << ": error: " << e.what() << "; see `" << command
              << " --help`\n";
    return 2;
  } catch (const std::exception &e) {
    std::cerr << "strata: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
