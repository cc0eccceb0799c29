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
  // A uint32 file read as uint16 is `t, 0, u, 0, ...` (GPT-2 ids fit in
  // 16 bits), which trains at chance level without any error; a uint16
  // file read as uint32 pairs two ids into one large value.
  int64_t zeroOdd = 0, zeroEven = 0;
  for (int64_t i = 0; i < count_; ++i) {
    uint32_t t = token(i);
    (i % 2 ? zeroOdd : zeroEven) += t == 0;
    if (t >= uint64_t(vocab)) {
      std::string hint =
          "; tokenize with the model's tokenizer or raise the vocab";
      if (mapped_ && width_ == 4 && (t & 0xFFFF) < uint64_t(vocab) &&
          (t >> 16) < uint64_t(vocab))
        hint = "; its two 16-bit halves (" + std::to_string(t & 0xFFFF) + ", " +
               std::to_string(t >> 16) +
               ") are valid ids, so the file looks like uint16 tokens: "
               "drop --data-dtype uint32";
      fail(name, ": token ", i, " has value ", t,
           ", which is not below the model's vocab size ", vocab, hint);
    }
  }
  int64_t odd = count_ / 2, even = count_ - odd;
  if (mapped_ && width_ == 2 && odd >= 16 && zeroOdd == odd &&
      zeroEven < even / 2)
    fail(name, ": every second uint16 token is 0 (", zeroOdd, " of ", odd,
         ") and the others are not; this is the layout of a uint32 token "
         "file read as uint16. Pass --data-dtype uint32");
}

TokenData TokenData::loadFile(const std::string &path, TokenFileDType dtype,
                              int64_t vocab, int64_t seqLen) {
  TokenData data;
  data.seqLen_ = seqLen;
  data.width_ = dtype == TokenFileDType::U16 ? 2 : 4;
  // O_NONBLOCK: a FIFO must not block the open; it is refused below.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    fail("--data ", path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("--data ", path,
         ": not a regular file (a FIFO, device or directory); expected a "
         "token file");
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
  // Every rank maps the same file: the pages are the page cache's, shared
  // by the ranks of a node, never copied into each rank's heap.
  ::madvise(p, bytes, MADV_RANDOM);
  data.validate(vocab, "--data " + path);
  // Validation touched every page; let them go from this rank's resident
  // set (they stay in the page cache): only the windows sampled come back.
  ::madvise(p, bytes, MADV_DONTNEED);
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

const char *dataOrderName(DataOrder order) {
  return order == DataOrder::Random ? "random" : "sequential";
}

uint64_t sampleKey(uint64_t seed, SampleStream stream) {
  return splitmix64(seed ^ (stream == SampleStream::Train ? 0x53414D504C45ULL
                                                          : 0x4556414CULL));
}

int64_t TokenData::sampleStart(int64_t index, DataOrder order,
                               uint64_t key) const {
  if (order == DataOrder::Sequential)
    return int64_t(uint64_t(index) % uint64_t(numSamples())) * seqLen_;
  // Every window of seqLen + 1 tokens is equally likely (up to 2^-64):
  // multiply-shift maps the 64-bit draw onto [0, len - seqLen).
  uint64_t windows = uint64_t(count_ - seqLen_);
  uint64_t r = splitmix64(key + uint64_t(index));
  return int64_t((static_cast<unsigned __int128>(r) * windows) >> 64);
}

void TokenData::fillSamples(int64_t firstSample, int64_t rows, DataOrder order,
                            uint64_t key, int32_t *inputs,
                            int32_t *targets) const {
  for (int64_t r = 0; r < rows; ++r) {
    int64_t start = sampleStart(firstSample + r, order, key);
    for (int64_t s = 0; s < seqLen_; ++s) {
      inputs[r * seqLen_ + s] = int32_t(token(start + s));
      targets[r * seqLen_ + s] = int32_t(token(start + s + 1));
    }
  }
}

} // namespace strata::rt
