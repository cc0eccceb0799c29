//===- TokenData.h - Training tokens and the batch contract ---------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Sample k of a token stream t with sequence length S is inputs
// t[k*S .. k*S+S-1] and targets t[k*S+1 .. k*S+S]; there are
// n = (len - 1) div S samples. Step i uses samples (i*B + j) mod n for
// j = 0..B-1 (B = global batch), and micro-batch m takes rows
// m*mb .. m*mb+mb-1 of that list. Every token is checked against the vocab
// when the data is loaded, so kernels can trust ids.
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

  /// Fills `rows` rows of inputs/targets ([rows, seqLen], i32) for step
  /// `step`, starting at row `firstRow` of the step's sample list.
  void fillRows(int64_t step, int64_t globalBatch, int64_t firstRow,
                int64_t rows, int32_t *inputs, int32_t *targets) const;

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
