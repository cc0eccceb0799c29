//===- TokenData.h - Training tokens and the batch contract ---------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// A sample is a window of S + 1 tokens of the stream t: inputs
// t[a .. a+S-1], targets t[a+1 .. a+S]. Samples are numbered 0, 1, ... over
// the run (the data position); step i with global batch B uses samples
// P_i + j, j = 0..B-1, where P_i is the number of samples consumed before
// it, and micro-batch m takes rows m*mb .. m*mb+mb-1 of that list. Where
// sample k starts depends on the order (docs/runtime.md):
//   random (nanoGPT's get_batch, the default): a = floor(r * (len - S) / 2^64)
//     with r = splitmix64(key + k), any offset of the stream;
//   sequential: a = (k mod n) * S with n = (len - 1) div S.
// Every token is checked against the vocab when the data is loaded, so
// kernels can trust ids.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CORE_TOKENDATA_H
#define STRATA_RUNTIME_CORE_TOKENDATA_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata::rt {

enum class TokenFileDType { U16, U32 };

/// How samples are drawn from the stream.
enum class DataOrder : uint8_t { Random = 0, Sequential = 1 };
const char *dataOrderName(DataOrder order);

/// Which sample stream a key is for: training batches or evaluation
/// batches (the same fixed windows at every evaluation).
enum class SampleStream { Train, Eval };
/// The random order's key of a stream:
/// splitmix64(seed ^ 0x53414D504C45) (train) or ^ 0x4556414C (eval).
uint64_t sampleKey(uint64_t seed, SampleStream stream);

class TokenData {
public:
  TokenData(TokenData &&) noexcept;
  TokenData &operator=(TokenData &&) noexcept;
  ~TokenData();

  /// Maps a raw little-endian token file (nanoGPT's train.bin for uint16).
  /// Throws RuntimeError if it is missing, empty, of a size that is not a
  /// whole number of tokens, shorter than seqLen + 1 tokens, or holds a token
  /// >= vocab (the message names its index and value).
  static TokenData loadFile(const std::string &path, TokenFileDType dtype,
                            int64_t vocab, int64_t seqLen);

  /// The synthetic stream used without --data: 2^20 + seqLen tokens of a
  /// sparse random Markov chain drawn from `seed` (docs/runtime.md).
  static TokenData synthetic(uint64_t seed, int64_t vocab, int64_t seqLen);

  /// Wraps tokens held in memory (tests); validated like a file.
  static TokenData fromTokens(std::vector<uint32_t> tokens, int64_t vocab,
                              int64_t seqLen, const std::string &name);

  int64_t numTokens() const { return count_; }
  int64_t numSamples() const { return (count_ - 1) / seqLen_; }
  uint32_t token(int64_t index) const;
  const std::string &description() const { return description_; }

  /// The first token of sample `index` (see the file comment).
  int64_t sampleStart(int64_t index, DataOrder order, uint64_t key) const;

  /// Fills `rows` rows of inputs/targets ([rows, seqLen], i32) with samples
  /// firstSample, firstSample + 1, ...
  void fillSamples(int64_t firstSample, int64_t rows, DataOrder order,
                   uint64_t key, int32_t *inputs, int32_t *targets) const;

private:
  TokenData() = default;
  void validate(int64_t vocab, const std::string &name) const;

  std::vector<uint32_t> owned_;
  const uint8_t *mapped_ = nullptr;
  size_t mappedBytes_ = 0;
  int width_ = 4;
  int64_t count_ = 0;
  int64_t seqLen_ = 1;
  std::string description_;
};

} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_TOKENDATA_H
