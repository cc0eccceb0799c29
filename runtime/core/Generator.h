//===- Generator.h - Sampling from a model with its inference program -----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Runs a program's inference program (Program::decode): one forward of one
// new position per call, with the key/value caches in the device's arena,
// so a new token costs one position of every op but attention, which reads
// the cached positions. Sampling is temperature, top-k and a counter-based
// random stream from the seed, so a seed reproduces a sample.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CORE_GENERATOR_H
#define STRATA_RUNTIME_CORE_GENERATOR_H

#include "runtime/core/Device.h"
#include "runtime/format/Program.h"

#include <memory>
#include <string>
#include <vector>

namespace strata::rt {

struct SamplingOptions {
  double temperature = 1.0; ///< 0: always the most likely token (greedy).
  int64_t topK = 0;         ///< Keep the k most likely tokens; 0: all.
  uint64_t seed = 0;
};

class Generator {
public:
  /// Throws RuntimeError when the program has no inference program.
  Generator(const Program &program, std::unique_ptr<Device> device);

  const RankProgram &decodeProgram() const { return decode_; }
  /// Initialises the weights from the parameters' init specs and `seed`
  /// (the values training starts from).
  void initWeights(uint64_t seed);
  /// Loads whole weights by name: a safetensors file (Hugging Face's
  /// spellings too) or a checkpoint directory of any plan.
  void loadWeights(const std::string &path);
  /// Sets one parameter's values (tests).
  void setWeights(const std::string &name, const std::vector<float> &values);

  /// Forgets the cached positions; the next token is position 0.
  void reset() { position_ = 0; }
  int64_t position() const { return position_; }
  int64_t maxPositions() const { return maxPositions_; }
  /// Feeds `token` at the next position; returns the logits for the token
  /// after it ([vocab]).
  std::vector<float> feed(int64_t token);

  /// Samples `count` tokens after `prompt` (non-empty). When the context
  /// reaches the model's seq_len, generation continues from the last half
  /// of it, recomputed (learned absolute positions cannot slide).
  std::vector<int64_t> generate(const std::vector<int64_t> &prompt,
                                int64_t count, const SamplingOptions &options);

  /// The token `options` picks from `logits` with the random draw `u` in
  /// (0, 1).
  static int64_t sample(const std::vector<float> &logits,
                        const SamplingOptions &options, double u);

private:
  RankProgram decode_;
  ModelMeta meta_;
  std::unique_ptr<Device> device_;
  int64_t position_ = 0, maxPositions_ = 0;
};

} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_GENERATOR_H
