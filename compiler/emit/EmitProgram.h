//===- EmitProgram.h - Training-step IR -> runtime program ------*- C++ -*-===//
//
// Lowers a module holding @train_microbatch (strata-autodiff) and
// @optimizer_step (strata-build-optimizer) to one rank's runtime program:
// every value becomes a buffer at a statically planned arena offset, every op
// one or a few runtime instructions.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_EMIT_EMITPROGRAM_H
#define STRATA_COMPILER_EMIT_EMITPROGRAM_H

#include "mlir/IR/BuiltinOps.h"
#include "runtime/format/Program.h"

#include <string>

namespace strata {

struct EmitOptions {
  /// Free text stored in the program (the plan, for `BIN --help` and logs).
  std::string planDescription;
};

struct EmitStats {
  uint64_t arenaBytes = 0;      ///< What the runtime will allocate.
  uint64_t persistentBytes = 0; ///< Parameters, gradients, optimizer state.
  uint64_t unsharedBytes = 0;   ///< Arena size without lifetime reuse.
  size_t numInstructions = 0;
};

/// Emits the program; on failure diagnostics were emitted on the IR.
mlir::FailureOr<rt::Program> emitProgram(mlir::ModuleOp module,
                                         const EmitOptions &options,
                                         EmitStats *stats = nullptr);

} // namespace strata

#endif // STRATA_COMPILER_EMIT_EMITPROGRAM_H
