//===- ProgramBuilder.h - API the compiler uses to emit programs ----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Builds one rank's program: buffers (placed by the builder or at offsets
// from the compiler's memory plan), parameters with their gradient and
// optimizer-state buffers, and instruction sequences. Each emitted
// instruction is checked against its OpSchema at once, so a compiler bug is
// reported at the instruction that has it, with the instruction spelled out.
//
//   ProgramBuilder b(meta, train);
//   b.addInputs();
//   uint32_t w = b.addParam("fc.weight", {H, V}, InitKind::Normal, 0.02, true);
//   b.emit(SequenceKind::Microbatch, Opcode::Matmul, {x, b.value(w), y},
//          {1, M, V, H, 0, 0, 0}, {1.0, 0.0});
//   b.emitZeroGrads();
//   b.emitOptimizerStep();
//   std::vector<uint8_t> bytes = b.serialize();
//
// Several ranks: a MultiRankProgramBuilder owns the process-group table and
// one ProgramBuilder per rank; collectives are checked against the groups as
// they are emitted, so add groups before emitting instructions that use them.
//
//   MultiRankProgramBuilder mb(meta, train);        // meta.worldSize = 2
//   uint32_t dp = mb.addGroup("dp", {0, 1});
//   for (uint32_t r = 0; r < 2; ++r) {
//     ProgramBuilder &b = mb.rank(r);
//     b.setDataRowStart(r * meta.globalBatch / 2);
//     ...
//     b.emit(SequenceKind::LastMicrobatch, Opcode::AllReduceStart,
//            {b.grad(w)}, {dp, 0 /*sum*/, 0 /*slot*/});
//     b.emit(SequenceKind::Update, Opcode::Wait, {}, {0});
//   }
//   mb.setLossRanks({0, 1});
//   std::vector<uint8_t> bytes = mb.serialize();
//
// Or build RankPrograms any way and call combinePrograms().
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_FORMAT_PROGRAMBUILDER_H
#define STRATA_RUNTIME_FORMAT_PROGRAMBUILDER_H

#include "runtime/format/Program.h"

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

namespace strata::rt {

class ProgramBuilder {
public:
  /// Builds the program of `rank`; world size comes from meta.worldSize.
  /// Collectives refer to `groups` (shared with the other ranks' builders);
  /// a standalone builder has its own table (addGroup).
  ProgramBuilder(ModelMeta meta, TrainConfig train, uint32_t rank = 0,
                 std::shared_ptr<std::vector<ProcessGroup>> groups = nullptr);

  /// Adds a process group to the (shared) table; returns its index, the
  /// `group` int of collectives.
  uint32_t addGroup(const std::string &name, std::vector<uint32_t> ranks);
  const std::vector<ProcessGroup> &groups() const { return *groups_; }

  /// A buffer placed after every buffer so far, on a 64-byte boundary.
  uint32_t addBuffer(const std::string &name, std::vector<int64_t> shape,
                     DType dtype = DType::F32);
  /// A buffer at a byte offset chosen by the compiler's memory plan. The
  /// arena grows to cover it.
  uint32_t addBufferAt(const std::string &name, std::vector<int64_t> shape,
                       DType dtype, uint64_t offset);
  /// A view of (part of) another buffer's bytes: reshape, or a slice that
  /// is contiguous. `byteOffset` is relative to the base buffer.
  uint32_t addAlias(const std::string &name, uint32_t base,
                    std::vector<int64_t> shape, uint64_t byteOffset = 0);

  /// Adds a parameter with buffers `name`, `name.grad` and the optimizer's
  /// state (`name.momentum`, or `name.exp_avg` and `name.exp_avg_sq`).
  /// Returns the parameter index.
  uint32_t addParam(const std::string &name, std::vector<int64_t> shape,
                    InitKind init, double initStd, bool weightDecay);
  /// Same, with buffers the caller placed (value, grad, state in order).
  uint32_t addParamWithBuffers(ParamDesc param);
  uint32_t value(uint32_t param) const;
  uint32_t grad(uint32_t param) const;

  /// Creates `tokens`, `targets` (i32 [microBatch, seqLen]) and `loss`.
  void addInputs();
  void setInputs(uint32_t tokens, uint32_t targets, uint32_t loss);
  /// Marks an i32 [microBatch, seqLen] buffer the executor fills with
  /// positions 0 .. seqLen-1 of every row.
  void setPositions(uint32_t positions) { rank_.positions = positions; }
  /// First row of this rank's data in each step's global-batch row list.
  void setDataRowStart(int64_t row) { rank_.dataRowStart = row; }
  /// Marks `bytes` as the loss buffer without tokens/targets (a last
  /// pipeline stage that loads its targets with load_batch).
  void setLoss(uint32_t loss) { rank_.loss = loss; }
  uint32_t tokens() const { return rank_.tokens; }
  uint32_t targets() const { return rank_.targets; }
  uint32_t loss() const { return rank_.loss; }

  /// Appends an instruction; throws RuntimeError if it does not verify.
  void emit(SequenceKind kind, Opcode opcode, std::vector<uint32_t> operands,
            std::vector<int64_t> ints = {}, std::vector<double> floats = {});

  /// step_begin: fill every gradient buffer with zeros.
  void emitZeroGrads();
  /// update: grad_sumsq into a `grad_sumsq` buffer, clip_grads when the
  /// config clips, then one sgd_step/adamw_step per parameter, with weight
  /// decay where the parameter table says so.
  void emitOptimizerStep();

  /// Overrides the arena size (it must cover every buffer).
  void setArenaBytes(uint64_t bytes) { rank_.arenaBytes = bytes; }

  const RankProgram &rankProgram() const { return rank_; }
  RankProgram &rankProgram() { return rank_; }

  /// The verified single-rank program (meta.worldSize must be 1).
  Program finish() const;
  std::vector<uint8_t> serialize() const;

private:
  uint32_t pushBuffer(BufferDesc desc);

  ModelMeta meta_;
  TrainConfig train_;
  RankProgram rank_;
  std::shared_ptr<std::vector<ProcessGroup>> groups_;
  /// Names of rank_.buffers[0, namesIndexed_), so that adding a buffer does
  /// not scan every earlier one (compile time stays linear in buffers).
  std::unordered_set<std::string> bufferNames_;
  size_t namesIndexed_ = 0;
};

/// Builds a program of meta.worldSize ranks that share one group table.
class MultiRankProgramBuilder {
public:
  MultiRankProgramBuilder(ModelMeta meta, TrainConfig train);

  uint32_t addGroup(const std::string &name, std::vector<uint32_t> ranks);
  ProgramBuilder &rank(uint32_t r) { return *ranks_.at(r); }
  uint32_t worldSize() const { return uint32_t(ranks_.size()); }
  /// Ranks whose loss buffer carries the step loss; by default every rank
  /// that has a loss buffer.
  void setLossRanks(std::vector<uint32_t> ranks) {
    lossRanks_ = std::move(ranks);
  }

  /// The verified program; throws RuntimeError naming what is wrong.
  Program finish() const;
  std::vector<uint8_t> serialize() const;

private:
  ModelMeta meta_;
  TrainConfig train_;
  std::shared_ptr<std::vector<ProcessGroup>> groups_;
  std::vector<std::unique_ptr<ProgramBuilder>> ranks_;
  std::vector<uint32_t> lossRanks_;
};

/// Assembles and verifies a program from per-rank programs (ranks[r].rank
/// must be r; meta.worldSize is set to ranks.size()).
Program combinePrograms(ModelMeta meta, TrainConfig train,
                        std::vector<ProcessGroup> groups,
                        std::vector<RankProgram> ranks,
                        std::vector<uint32_t> lossRanks = {});

} // namespace strata::rt

#endif // STRATA_RUNTIME_FORMAT_PROGRAMBUILDER_H
