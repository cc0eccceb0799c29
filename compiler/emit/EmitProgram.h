//===- EmitProgram.h - Training-step IR -> runtime program ------*- C++ -*-===//
//
// Lowers a module holding @train_microbatch (strata-autodiff) and
// @optimizer_step (strata-build-optimizer), possibly partitioned for one rank
// of a parallel plan, to that rank's runtime program: every value becomes a
// buffer at a statically planned arena offset, every op one or a few runtime
// instructions, collectives name the rank's process groups.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_EMIT_EMITPROGRAM_H
#define STRATA_COMPILER_EMIT_EMITPROGRAM_H

#include "mlir/IR/BuiltinOps.h"
#include "runtime/format/Program.h"

#include <map>
#include <string>

namespace strata::rt {
class ProgramBuilder;
}

namespace strata {

/// Where a rank sits in the plan, and the program-level indices of its
/// process groups.
struct ParallelContext {
  int64_t rank = 0, worldSize = 1;
  int64_t dp = 1, dpIndex = 0;
  int64_t tp = 1, tpIndex = 0;
  /// Pipeline: `pp` devices, `vpp` model chunks each; the step runs
  /// `numMicrobatches` micro-batches under `schedule` ("gpipe", "1f1b",
  /// "interleaved").
  int64_t pp = 1, ppIndex = 0, vpp = 1;
  int64_t numMicrobatches = 1;
  std::string schedule = "1f1b";
  /// Global rank of pipeline device d in this rank's (dp, tp) line.
  std::vector<int64_t> ppRanks;
  int zero = 0;
  /// Data-parallel gradient buckets are reduced in bfloat16 (the plan's
  /// grad_reduce_dtype); float32 otherwise.
  bool bf16GradReduce = false;
  /// Group-table index of this rank's group per axis name used in the IR
  /// ("dp", "tp") plus "world".
  std::map<std::string, int64_t> groupIds;
  int64_t groupRank(const std::string &axis) const {
    return axis == "dp"   ? dpIndex
           : axis == "tp" ? tpIndex
           : axis == "pp" ? ppIndex
                          : rank;
  }
  int64_t groupSize(const std::string &axis) const {
    return axis == "dp"   ? dp
           : axis == "tp" ? tp
           : axis == "pp" ? pp
                          : worldSize;
  }
};

struct EmitStats {
  uint64_t arenaBytes = 0;      ///< What the runtime will allocate.
  uint64_t persistentBytes = 0; ///< Parameters, gradients, optimizer state.
  uint64_t unsharedBytes = 0;   ///< Arena size without lifetime reuse.
  /// Most bytes live at one instruction (persistent ones included): the
  /// arena without packing slack.
  uint64_t peakLiveBytes = 0;
  /// The transient buffers live at that peak, largest first (name, bytes);
  /// filled only when collectPeakBuffers is set.
  std::vector<std::pair<std::string, uint64_t>> peakBuffers;
  bool collectPeakBuffers = false;
  size_t numInstructions = 0;
};

/// The program-wide settings read from the module: model metadata (from
/// `strata.model`, the inputs and `strata.training`) and the optimizer (from
/// @optimizer_step). `meta.worldSize` and `planDescription` are the caller's.
mlir::LogicalResult readProgramConfig(mlir::ModuleOp module,
                                      rt::ModelMeta &meta,
                                      rt::TrainConfig &train);

/// Emits one rank's program into `builder` (which knows the rank and the
/// group table). On failure diagnostics were emitted on the IR.
mlir::LogicalResult emitRankProgram(mlir::ModuleOp module,
                                    const ParallelContext &parallel,
                                    rt::ProgramBuilder &builder,
                                    EmitStats *stats = nullptr);

/// Emits the inference program of a module holding @decode_step
/// (strata-decode-step): whole parameters by name, [1, 1] token and
/// position inputs, the logits output, key/value caches in the arena
/// (rt::Program::decode). `meta` is the training program's.
mlir::FailureOr<rt::RankProgram> emitDecodeProgram(mlir::ModuleOp module,
                                                   const rt::ModelMeta &meta);

/// Single-rank convenience: config + one rank + verification.
mlir::FailureOr<rt::Program> emitProgram(mlir::ModuleOp module,
                                         const std::string &planDescription,
                                         EmitStats *stats = nullptr);

} // namespace strata

#endif // STRATA_COMPILER_EMIT_EMITPROGRAM_H
