//===- TokenData.cpp - Training tokens and the batch contract -------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/TokenData.h"

#include "runtime/core/Random.h"
#include "runtime/support/Error.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace strata::rt {

TokenData::TokenData(TokenData &&other) noexcept { *this = std::move(other); }

TokenData &TokenData::operator=(TokenData &&other) noexcept {
  if (this == &other)
    return *this;
  if (mapped_)
    ::munmap(const_cast<uint8_t *>(mapped_), mappedBytes_);
  owned_ = std::move(other.owned_);
  mapped_ = other.mapped_;
  mappedBytes_ = other.mappedBytes_;
  width_ = other.width_;
  count_ = other.count_;
  seqLen_ = other.seqLen_;
  description_ = std::move(other.description_);
  other.mapped_ = nullptr;
  other.mappedBytes_ = 0;
  return *this;
}

TokenData::~TokenData() {
  if (mapped_)
    ::munmap(const_cast<uint8_t *>(mapped_), mappedBytes_);
}

uint32_t TokenData::token(int64_t index) const {
  if (!mapped_)
    return owned_[index];
  if (width_ == 2) {
    uint16_t v;
    std::memcpy(&v, mapped_ + index * 2, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, mapped_ + index * 4, 4);
  return v;
}

void TokenData::validate(int64_t vocab, const std::string &name) const {
  if (count_ < seqLen_ + 1)
    fail(name, ": holds ", count_, " tokens, but one sample of seq_len ",
         seqLen_, " needs at least ", seqLen_ + 1);
  for (int64_t i = 0; i < count_; ++i) {
    uint32_t t = token(i);
    if (t >= uint64_t(vocab))
      fail(name, ": token ", i, " has value ", t,
           ", which is not below the model's vocab size ", vocab,
           "; tokenize with the model's tokenizer or raise the vocab");
  }
}

TokenData TokenData::loadFile(const std::string &path, TokenFileDType dtype,
                              int64_t vocab, int64_t seqLen) {
  TokenData data;
  data.seqLen_ = seqLen;
  data.width_ = dtype == TokenFileDType::U16 ? 2 : 4;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    fail("--data ", path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("--data ", path, ": not a regular file");
  }
  size_t bytes = st.st_size;
  if (bytes == 0) {
    ::close(fd);
    fail("--data ", path, ": the file is empty");
  }
  if (bytes % data.width_ != 0) {
    ::close(fd);
    fail("--data ", path, ": ", bytes, " bytes is not a whole number of ",
         data.width_ == 2 ? "uint16" : "uint32",
         " tokens; the file is truncated or --data-dtype is wrong");
  }
  void *p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED)
    fail("--data ", path, ": cannot map: ", std::strerror(errno));
  data.mapped_ = static_cast<const uint8_t *>(p);
  data.mappedBytes_ = bytes;
  data.count_ = int64_t(bytes / data.width_);
  data.description_ = path;
  data.validate(vocab, "--data " + path);
  return data;
}

TokenData TokenData::fromTokens(std::vector<uint32_t> tokens, int64_t vocab,
                                int64_t seqLen, const std::string &name) {
  TokenData data;
  data.seqLen_ = seqLen;
  data.owned_ = std::move(tokens);
  data.count_ = int64_t(data.owned_.size());
  data.description_ = name;
  data.validate(vocab, name);
  return data;
}

TokenData TokenData::synthetic(uint64_t seed, int64_t vocab, int64_t seqLen) {
  // Each token has four likely successors (7/8 of the mass, evenly split);
  // the remaining 1/8 is a uniformly random token. A bigram model can learn
  // it, so losses fall visibly from ln(vocab).
  uint64_t key = splitmix64(seed ^ 0x53594E5448ULL);
  int64_t length = (int64_t(1) << 20) + seqLen;
  std::vector<uint32_t> tokens(length);
  uint64_t v = uint64_t(vocab);
  tokens[0] = uint32_t(splitmix64(key) % v);
  for (int64_t i = 1; i < length; ++i) {
    uint64_t r = splitmix64(key + uint64_t(i));
    double u = uniformOpen01(r);
    if (u < 0.875) {
      uint64_t k = std::min<uint64_t>(3, uint64_t(u / 0.875 * 4.0));
      uint64_t prev = tokens[i - 1];
      tokens[i] = uint32_t(splitmix64(key + 0x100000000ULL + prev * 4 + k) % v);
    } else {
      tokens[i] = uint32_t(splitmix64(r) % v);
    }
  }
  TokenData data =
      fromTokens(std::move(tokens), vocab, seqLen, "synthetic stream");
  data.description_ =
      "synthetic Markov stream (seed " + std::to_string(seed) + ")";
  return data;
}

void TokenData::fillRows(int64_t step, int64_t globalBatch, int64_t firstRow,
                         int64_t rows, int32_t *inputs,
                         int32_t *targets) const {
  int64_t n = numSamples();
  for (int64_t r = 0; r < rows; ++r) {
    // (step * B + j) mod n without overflow for long runs.
    int64_t j = firstRow + r;
    int64_t sample =
        int64_t((static_cast<unsigned __int128>(step) * uint64_t(globalBatch) +
                 uint64_t(j)) %
                uint64_t(n));
    int64_t start = sample * seqLen_;
    for (int64_t s = 0; s < seqLen_; ++s) {
      inputs[r * seqLen_ + s] = int32_t(token(start + s));
      targets[r * seqLen_ + s] = int32_t(token(start + s + 1));
    }
  }
}

} // namespace strata::rt
