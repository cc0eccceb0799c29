//===- ToolSupport.h - What every strata command needs ----------*- C++ -*-===//
//
// One MLIR context set up the way the commands want it (the dialects imported
// IR uses; located, IR-free diagnostics), spec loading that reports the
// frontend's diagnostics, and writing a module to a file or stdout.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_TOOLS_STRATA_TOOLSUPPORT_H
#define STRATA_COMPILER_TOOLS_STRATA_TOOLSUPPORT_H

#include "frontends/yaml/ModelSpec.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"

#include <optional>
#include <string>

namespace strata {

/// An MLIRContext whose diagnostics print as "file:line:col: error: ..."
/// without dumping the IR.
struct ToolContext {
  ToolContext();
  mlir::MLIRContext ctx;
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler{sourceMgr, &ctx};
};

/// Loads the spec; on failure returns nullopt with the located diagnostics
/// joined by newlines in `error`.
std::optional<frontend::ModelSpec>
loadSpec(const std::string &path, std::string &error,
         const frontend::LoadOptions &options = {});

/// A companion program installed beside `strata` (the launcher, the
/// calibration probe): `flag` if given, else `$envVar`, else `fileName` in
/// strata's own directory.
std::string findBesideStrata(const std::string &flag, const char *envVar,
                             const char *fileName);

/// Prints `module` to `path` ("-" for stdout); on failure sets `error`.
bool writeModule(mlir::ModuleOp module, const std::string &path,
                 std::string &error);

} // namespace strata

#endif // STRATA_COMPILER_TOOLS_STRATA_TOOLSUPPORT_H
