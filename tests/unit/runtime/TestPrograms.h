//===- TestPrograms.h - Hand-built programs for runtime tests -------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TESTS_UNIT_RUNTIME_TESTPROGRAMS_H
#define STRATA_TESTS_UNIT_RUNTIME_TESTPROGRAMS_H

#include "runtime/format/Program.h"

namespace strata::rt::testprograms {

struct MlpConfig {
  int64_t vocab = 64, seqLen = 16, microBatch = 4, numMicrobatches = 2;
  int64_t hidden = 32, ffn = 64;
  OptimizerKind optimizer = OptimizerKind::AdamW;
  double lr = 3e-2;
  double gradClip = 1.0;
  double initStd = 0.02;
};

/// A 2-layer MLP language model written with ProgramBuilder:
/// embedding -> linear(H->F) -> gelu -> linear(F->V) -> cross-entropy, with
/// backward, gradient accumulation over micro-batches and the optimizer.
Program buildMlpProgram(const MlpConfig &config = {});

/// How the data-parallel MLP reduces its gradients.
struct DataParallelConfig {
  uint32_t replicas = 2;
  /// Start each gradient's all-reduce in last_microbatch as soon as it is
  /// final and wait in update (otherwise blocking all-reduces in update).
  bool overlap = true;
  /// ZeRO-1: each replica keeps AdamW state for a 1/replicas slice of each
  /// parameter, updates that slice and all-gathers the parameter in place.
  bool zero = false;
  /// ZeRO-3 (with zero): each replica also keeps only that slice of each
  /// parameter's value (ParamDesc::valueSharded); step_begin all-gathers the
  /// whole parameter into a transient `NAME.full` buffer the step reads.
  bool zero3 = false;
};

/// The same model and training step on `replicas` ranks: each replica runs
/// config.numMicrobatches micro-batches of config.microBatch rows (global
/// batch = replicas x that) and the gradients are summed over group "dp".
Program buildDataParallelMlp(const MlpConfig &config,
                             const DataParallelConfig &dp);

/// A program of `world` ranks whose parameters hold ZeRO-3 flat ranges
/// (ParamDesc::valueSharded) of every kind of box:
///   dense.weight [5, 3]: one box [6, 3] (a padding row) split over all ranks;
///   rows.weight [V, 2]: row boxes of 3 rows (the last has a padding row),
///     one per pair of ranks (per rank when world is odd), each split over
///     its pair;
///   tiny.bias [3] (ones): all on rank 0, no elements on the others;
///   view.weight [2, 3, 2], saved as [2, 6]: split over all ranks;
///   plain.weight [2, 2]: replicated, not value-sharded.
/// It has no training step (tests use it for init, --init and checkpoints).
Program buildValueShardedProgram(uint32_t world);
/// The same parameters, whole and unsharded, on one rank.
Program buildValueShardedReference(uint32_t world);

} // namespace strata::rt::testprograms

#endif // STRATA_TESTS_UNIT_RUNTIME_TESTPROGRAMS_H
