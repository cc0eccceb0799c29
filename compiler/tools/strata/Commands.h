//===- Commands.h - strata subcommands --------------------------*- C++ -*-===//

#ifndef STRATA_COMPILER_TOOLS_STRATA_COMMANDS_H
#define STRATA_COMPILER_TOOLS_STRATA_COMMANDS_H

namespace CLI {
class App;
}

namespace strata {
/// `strata import MODEL.yaml [-o FILE] [--summary]`.
void addImportSubcommand(CLI::App &app);
/// `strata compile MODEL.yaml --cluster local:N -o BIN`.
void addCompileSubcommand(CLI::App &app);
} // namespace strata

#endif // STRATA_COMPILER_TOOLS_STRATA_COMMANDS_H
