//===- Trainer.h - Runs training steps of one rank's program --------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// One optimizer step i: step_begin once; for each micro-batch m, load rows
// m*mb .. m*mb+mb-1 of the step's samples into the tokens/targets buffers and
// run `microbatch`; then `update` with lr = learningRate(config, i). The
// reported loss is the mean of the loss buffer over the micro-batches.
//
// Everything a step reads besides the arena is a function of (seed, step),
// so a checkpoint only needs parameters, optimizer state and the step count
// to continue the exact trajectory.
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
  int64_t step = 0; ///< 0-based index of the step just run.
  double loss = 0.0;
  double lr = 0.0;
  std::optional<double> gradNorm; ///< Before clipping; absent without one.
  double seconds = 0.0;
  int64_t tokens = 0; ///< Tokens this rank processed in the step.
};

class Trainer {
public:
  Trainer(Program program, uint32_t rank, std::unique_ptr<Device> device,
          uint64_t seed);

  const Program &program() const { return program_; }
  const RankProgram &rankProgram() const { return program_.ranks[rank_]; }
  uint64_t seed() const { return seed_; }
  int64_t step() const { return step_; }

  /// Initialises every parameter from its init spec and the seed (values
  /// independent of sharding), zeroes optimizer state, sets step 0.
  void initParameters();
  /// Loads initial weights by parameter name; shapes checked, missing and
  /// extra tensors named. Sets step 0 with zero optimizer state.
  void loadInitialWeights(const std::string &path);

  /// Runs the next step on `data`.
  StepStats runStep(const TokenData &data);

  /// Writes DIR/model.safetensors, DIR/optimizer.safetensors and
  /// DIR/trainer.json into a temporary sibling, then renames it into place;
  /// an existing DIR is replaced only once the new one is complete.
  void saveCheckpoint(const std::string &dir) const;
  /// Restores parameters, optimizer state, step and seed.
  void loadCheckpoint(const std::string &dir);

  std::vector<float> readF32(uint32_t buffer) const;
  void writeF32(uint32_t buffer, const std::vector<float> &values);

private:
  void checkWeightsFile(const class SafeTensorsFile &file,
                        const std::vector<std::string> &expected) const;
  void loadParamValue(const ParamDesc &param, std::vector<float> global,
                      const std::vector<int64_t> &fileShape,
                      const std::string &source);

  Program program_;
  uint32_t rank_;
  std::unique_ptr<Device> device_;
  uint64_t seed_;
  int64_t step_ = 0;
  std::vector<int32_t> tokenRows_, targetRows_;
};

} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_TRAINER_H
