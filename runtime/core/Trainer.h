//===- Trainer.h - Runs training steps of one rank's program --------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// One optimizer step i: step_begin once; for each micro-batch m, load rows
// dataRowStart + m*mb .. +mb-1 of the step's samples into the tokens/targets
// buffers and run `microbatch` (`last_microbatch` for the final one when the
// program has it); then `update` with lr = learningRate(config, i). A
// program with a `schedule` sequence runs it once instead of the micro-batch
// loop and loads its inputs itself (load_batch). A loss rank's step loss is
// the mean of its loss buffer over the micro-batches (read once after
// `schedule`); the step ends with a world all-reduce so that every rank
// reports the mean over the loss ranks, the global grad norm and the
// slowest rank's step time.
//
// Everything a step reads besides the arena is a function of (seed, step,
// data position, data order), so a checkpoint only needs parameters,
// optimizer state and those to continue the exact trajectory.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CORE_TRAINER_H
#define STRATA_RUNTIME_CORE_TRAINER_H

#include "runtime/core/Device.h"
#include "runtime/core/TokenData.h"
#include "runtime/format/Program.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace strata::rt {

struct StepStats {
  int64_t step = 0;  ///< 0-based index of the step just run.
  double loss = 0.0; ///< Mean over the loss ranks (the same on every rank).
  double lr = 0.0;
  std::optional<double> gradNorm; ///< Before clipping; absent without one.
  double seconds = 0.0;           ///< The slowest rank's step time.
  int64_t tokens = 0;             ///< Tokens of the step over all ranks.
  /// Some rank was asked to stop (SIGTERM/SIGINT) before the step ended;
  /// every rank sees the same value, so all stop after the same step.
  bool stopRequested = false;
  /// The largest resident set size of the ranks' processes, in bytes.
  double memoryBytes = 0.0;
};

/// An evaluation: the mean loss over `batches` batches of the eval stream.
struct EvalStats {
  double loss = 0.0; ///< Mean over the batches (each a mean over its tokens).
  int64_t batches = 0;
  int64_t tokens = 0; ///< Over all ranks.
  double seconds = 0.0;
};

/// The checkpoint-name suffixes of a parameter's optimizer state, in the
/// order of ParamDesc::state: ".exp_avg", ".exp_avg_sq" or ".momentum".
std::vector<std::string> stateSuffixes(OptimizerKind kind);

/// Whether `dir` is empty or holds a checkpoint (trainer.json or
/// index.json), i.e. whether --save may replace it.
bool isCheckpointDirectory(const std::string &dir);

class Trainer {
public:
  /// `comms` is the job's communicator backend; rank must be its world rank
  /// and its world size the program's. Without one, a single-rank
  /// in-process backend is used (one-rank programs only). Creates one
  /// communicator per process group (collective over the world: every rank
  /// constructs its Trainer at the same point).
  Trainer(Program program, uint32_t rank, std::unique_ptr<Device> device,
          uint64_t seed, std::shared_ptr<CommBackend> comms = nullptr);
  Trainer(Trainer &&) noexcept;
  Trainer &operator=(Trainer &&) noexcept;
  ~Trainer();

  const Program &program() const { return program_; }
  const RankProgram &rankProgram() const { return program_.ranks[rank_]; }
  /// Times every instruction into `tracer` (null: off); `--trace`.
  void setTracer(InstructionTracer *tracer) { device_->setTracer(tracer); }
  uint32_t rank() const { return rank_; }
  uint32_t worldSize() const { return program_.meta.worldSize; }
  bool isLossRank() const { return isLossRank_; }
  uint64_t seed() const { return seed_; }
  int64_t step() const { return step_; }
  /// Samples consumed so far (the next step starts at this sample).
  int64_t dataPosition() const { return dataPosition_; }
  DataOrder dataOrder() const { return dataOrder_; }
  void setDataOrder(DataOrder order) { dataOrder_ = order; }
  /// Whether the last --resume checkpoint named its data order.
  bool checkpointHadDataOrder() const { return checkpointHadDataOrder_; }

  /// Initialises every parameter from its init spec and the seed (values
  /// independent of sharding), zeroes optimizer state, sets step 0.
  void initParameters();
  /// Loads initial weights by parameter name from a safetensors file (also
  /// in Hugging Face's spellings: a `transformer.` prefix, attention mask
  /// buffers, a tied `lm_head.weight`) or from any checkpoint directory,
  /// whatever plan wrote it; shapes checked, missing and extra tensors
  /// named. Sets step 0 with zero optimizer state.
  void loadInitialWeights(const std::string &path);

  /// Runs the next step on `data`. `stopRequested` is this rank's wish to
  /// stop after the step; StepStats::stopRequested is every rank's.
  StepStats runStep(const TokenData &data, bool stopRequested = false);

  /// Evaluates the loss on `batches` global batches of the eval stream of
  /// `data` (the same windows every time), with the program's forward-only
  /// `eval` sequence: no gradient, no update, the training forward's
  /// numerics. Collective; every rank returns the same numbers.
  EvalStats evaluate(const TokenData &data, int64_t batches);

  /// One rank: writes DIR/model.safetensors (whole tensors in checkpoint
  /// shape), DIR/optimizer.safetensors and DIR/trainer.json. Several ranks
  /// (collective): DIR/rank-XXXXX.safetensors per rank plus DIR/index.json
  /// (docs/runtime.md). Either way into a temporary sibling that is renamed
  /// into place; an existing DIR is replaced only once the new one is
  /// complete on every rank.
  void saveCheckpoint(const std::string &dir) const;
  /// Restores parameters, optimizer state, step, seed and data position
  /// from a checkpoint directory (or a run directory's `latest`). A
  /// checkpoint of another plan or rank count is resharded: whole tensors
  /// are reassembled and each rank takes its part, optimizer state too.
  void loadCheckpoint(const std::string &path);

  std::vector<float> readF32(uint32_t buffer) const;
  void writeF32(uint32_t buffer, const std::vector<float> &values);

  /// Reads or writes any f32/f64/i32 buffer's bytes (tests).
  void download(uint32_t buffer, void *dst) const;
  void upload(uint32_t buffer, const void *src);

  /// Which saved piece holds `rank`'s values of a parameter: among the
  /// ranks holding the same box, the one with the widest flat range of it
  /// that contains `rank`'s range (lowest rank on ties), and that range.
  /// Each such piece is saved once, by its owner; under ZeRO-3 the widest
  /// ranges tile the box (verifyProgram), so every element is saved once.
  struct ValueSource {
    uint32_t rank = 0;
    int64_t begin = 0, end = 0;
  };
  ValueSource valueSource(uint32_t rank, const ParamDesc &param) const;
  /// The checkpoint owner of a parameter's values (valueSource) or, for
  /// stateOwner, of its optimizer-state range on `rank`: the lowest rank
  /// holding the same.
  uint32_t valueOwner(uint32_t rank, const ParamDesc &param) const {
    return valueSource(rank, param).rank;
  }
  uint32_t stateOwner(uint32_t rank, const ParamDesc &param) const;

private:
  class Services;
  /// Runs one batch's forward (and backward) sequences: `schedule` once when
  /// the rank has it, else `microbatch` per micro-batch (`last` for the last
  /// one when non-empty) with the rows loaded. Returns the rank's loss, the
  /// mean over micro-batches (0 off the loss ranks).
  double runBatch(SequenceKind microbatch, SequenceKind last,
                  SequenceKind schedule, const ExecContext &ctx);
  /// Fails unless `file` holds exactly the `expected` tensors.
  void checkWeightsFile(const class SafeTensorsFile &file,
                        const std::vector<std::string> &expected) const;
  void loadParamValue(const ParamDesc &param, const std::vector<float> &global,
                      const std::vector<int64_t> &fileShape,
                      const std::string &source);
  void saveSingleRank(const std::string &dir) const;
  void saveMultiRank(const std::string &dir) const;
  void loadSingleRank(const std::string &dir);
  void loadMultiRank(const std::string &dir);
  /// Whether the per-rank checkpoint in `dir` was written by this plan.
  bool sameLayout(const std::string &dir) const;
  /// Parameters and optimizer state from a checkpoint of another plan or
  /// rank count (the run state is read by loadCheckpoint).
  void loadResharded(const class CheckpointReader &checkpoint);
  /// A hash of every rank's parameter layout, to match checkpoints to plans.
  std::string layoutFingerprint() const;

  Program program_;
  uint32_t rank_;
  std::unique_ptr<Device> device_;
  uint64_t seed_;
  int64_t step_ = 0;
  int64_t dataPosition_ = 0;
  DataOrder dataOrder_ = DataOrder::Random;
  bool checkpointHadDataOrder_ = false;
  bool isLossRank_ = false;
  std::shared_ptr<CommBackend> comms_;
  std::unique_ptr<Services> services_;
  std::vector<int32_t> tokenRows_, targetRows_, positionRows_;
};

} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_TRAINER_H
