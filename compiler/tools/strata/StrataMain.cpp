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

#include "llvm/Support/ErrorHandling.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>

static const char *const kOutOfMemory =
    "out of memory: this machine cannot hold what the command was asked to "
    "build; use fewer layers, a smaller global batch or fewer micro-batches "
    "(--pin num_microbatches=N), or a machine with more memory";

int main(int argc, char **argv) {
  // LLVM's own allocations (MLIR) report exhaustion through this handler
  // rather than std::bad_alloc; both end in the same sentence.
  llvm::install_bad_alloc_error_handler(
      [](void *, const char *, bool) {
        std::fputs("strata: error: ", stderr);
        std::fputs(kOutOfMemory, stderr);
        std::fputs("\n", stderr);
        std::_Exit(1);
      },
      nullptr);
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
  } catch (const std::bad_alloc &) {
    // Inputs are bounded where they are read; what still runs out of memory
    // gets a sentence, not a bare "std::bad_alloc".
    std::string command = "strata";
    for (const CLI::App *sub : app.get_subcommands())
      command += " " + sub->get_name();
    std::cerr << command << ": error: " << kOutOfMemory << "\n";
    return 1;
  } catch (const std::exception &e) {
    std::cerr << "strata: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
