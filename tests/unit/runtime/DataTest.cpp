//===- DataTest.cpp - Token data contract and errors ----------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Random.h"
#include "runtime/core/TokenData.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

#include <set>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>

using namespace strata::rt;
namespace fs = std::filesystem;

namespace {

class DataTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("strata-data-" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  template <typename T> std::string write(const std::vector<T> &tokens) {
    std::string path = (dir / "tokens.bin").string();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char *>(tokens.data()),
               tokens.size() * sizeof(T));
    return path;
  }
  std::string loadError(const std::string &path, int64_t vocab, int64_t seq,
                        TokenFileDType dtype = TokenFileDType::U16) {
    try {
      TokenData::loadFile(path, dtype, vocab, seq);
    } catch (const RuntimeError &e) {
      return e.what();
    }
    return "";
  }
  fs::path dir;
};

TEST_F(DataTest, SequentialSamplesFollowTheContract) {
  // tokens[i] = i, S = 4: 23 tokens -> n = 22 div 4 = 5 samples.
  std::vector<uint16_t> tokens(23);
  for (int i = 0; i < 23; ++i)
    tokens[i] = uint16_t(i);
  TokenData data =
      TokenData::loadFile(write(tokens), TokenFileDType::U16, 100, 4);
  EXPECT_EQ(data.numSamples(), 5);
  // Samples 7 and 8 of the run are windows 7 % 5 = 2 and 8 % 5 = 3.
  std::vector<int32_t> in(8), out(8);
  data.fillSamples(7, 2, DataOrder::Sequential, 0, in.data(), out.data());
  EXPECT_EQ(in, (std::vector<int32_t>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(out, (std::vector<int32_t>{9, 10, 11, 12, 13, 14, 15, 16}));
  // Sample 5 wraps around to window 0.
  data.fillSamples(5, 1, DataOrder::Sequential, 0, in.data(), out.data());
  EXPECT_EQ(in[0], 0);
  EXPECT_EQ(out[3], 4);
}

TEST_F(DataTest, RandomSamplesAreSeededWindowsAtAnyOffset) {
  // tokens[i] = i: a window's first token is its offset.
  const int64_t S = 8, len = 1000;
  std::vector<uint16_t> tokens(len);
  for (int i = 0; i < len; ++i)
    tokens[i] = uint16_t(i);
  TokenData data =
      TokenData::loadFile(write(tokens), TokenFileDType::U16, 1000, S);
  uint64_t key = sampleKey(42, SampleStream::Train);
  EXPECT_NE(key, sampleKey(42, SampleStream::Eval));
  EXPECT_NE(key, sampleKey(43, SampleStream::Train));
  std::set<int64_t> starts;
  bool unaligned = false;
  std::vector<int32_t> in(S), out(S);
  for (int64_t k = 0; k < 400; ++k) {
    int64_t a = data.sampleStart(k, DataOrder::Random, key);
    // The documented formula: floor(splitmix64(key + k) * (len - S) / 2^64).
    uint64_t r = splitmix64(key + uint64_t(k));
    EXPECT_EQ(a,
              int64_t((static_cast<unsigned __int128>(r) * (len - S)) >> 64));
    ASSERT_GE(a, 0);
    ASSERT_LE(a + S, len - 1);
    data.fillSamples(k, 1, DataOrder::Random, key, in.data(), out.data());
    EXPECT_EQ(in[0], a);
    EXPECT_EQ(out[S - 1], a + S);
    starts.insert(a);
    unaligned = unaligned || a % S != 0;
  }
  // Reproducible, spread over the file, not tied to multiples of S.
  EXPECT_EQ(data.sampleStart(17, DataOrder::Random, key),
            data.sampleStart(17, DataOrder::Random, key));
  EXPECT_GT(starts.size(), 300u);
  EXPECT_TRUE(unaligned);
}

TEST_F(DataTest, Uint32Tokens) {
  std::vector<uint32_t> tokens = {70000, 1, 2, 3, 4};
  TokenData data =
      TokenData::loadFile(write(tokens), TokenFileDType::U32, 70001, 4);
  std::vector<int32_t> in(4), out(4);
  data.fillSamples(0, 1, DataOrder::Sequential, 0, in.data(), out.data());
  EXPECT_EQ(in[0], 70000);
  EXPECT_EQ(out[3], 4);
}

TEST_F(DataTest, TokenWidthMismatchesAreDetected) {
  // GPT-2 ids written as uint32 and read as uint16: t, 0, u, 0, ...
  std::vector<uint32_t> wide(200);
  for (int i = 0; i < 200; ++i)
    wide[i] = uint32_t(100 + i * 7);
  std::string path = write(wide);
  std::string e = loadError(path, 50257, 8, TokenFileDType::U16);
  EXPECT_NE(e.find("every second uint16 token is 0"), std::string::npos) << e;
  EXPECT_NE(e.find("--data-dtype uint32"), std::string::npos) << e;
  EXPECT_EQ(loadError(path, 50257, 8, TokenFileDType::U32), "");
  // uint16 ids read as uint32: pairs of ids make values past the vocab.
  std::vector<uint16_t> narrow(200);
  for (int i = 0; i < 200; ++i)
    narrow[i] = uint16_t(1 + i);
  path = write(narrow);
  e = loadError(path, 50257, 8, TokenFileDType::U32);
  EXPECT_NE(e.find("looks like uint16 tokens: drop --data-dtype uint32"),
            std::string::npos)
      << e;
  EXPECT_EQ(loadError(path, 50257, 8, TokenFileDType::U16), "");
  // Real uint16 data with some zero ids is not mistaken for uint32.
  for (int i = 0; i < 200; i += 4)
    narrow[i + 1] = 0;
  EXPECT_EQ(loadError(write(narrow), 50257, 8, TokenFileDType::U16), "");
}

TEST_F(DataTest, BadFilesAreClearErrors) {
  std::string e = loadError((dir / "absent.bin").string(), 10, 4);
  EXPECT_NE(e.find("--data"), std::string::npos) << e;
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
  e = loadError(write(std::vector<uint8_t>{}), 10, 4);
  EXPECT_NE(e.find("empty"), std::string::npos) << e;
  e = loadError(write(std::vector<uint8_t>{1, 0, 2}), 10, 1);
  EXPECT_NE(e.find("whole number"), std::string::npos) << e;
  e = loadError(write(std::vector<uint16_t>{1, 2, 3}), 10, 4);
  EXPECT_NE(e.find("at least 5"), std::string::npos) << e;
  e = loadError(write(std::vector<uint16_t>{1, 2, 3, 12, 4, 5}), 10, 2);
  EXPECT_NE(e.find("token 3 has value 12"), std::string::npos) << e;
}

TEST_F(DataTest, SyntheticStreamIsDeterministicAndLearnable) {
  TokenData a = TokenData::synthetic(42, 50, 8);
  TokenData b = TokenData::synthetic(42, 50, 8);
  TokenData c = TokenData::synthetic(43, 50, 8);
  EXPECT_EQ(a.numTokens(), (1 << 20) + 8);
  bool differs = false;
  for (int64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(a.token(i), b.token(i));
    ASSERT_LT(a.token(i), 50u);
    differs |= a.token(i) != c.token(i);
  }
  EXPECT_TRUE(differs);
  // Successors concentrate: the most common successor of a token takes far
  // more than the 1/50 a uniform stream would give it.
  std::map<uint32_t, std::map<uint32_t, int>> next;
  for (int64_t i = 0; i + 1 < 200000; ++i)
    next[a.token(i)][a.token(i + 1)]++;
  double topShare = 0;
  for (auto &[tok, counts] : next) {
    int total = 0, top = 0;
    for (auto &[succ, n] : counts) {
      total += n;
      top = std::max(top, n);
    }
    topShare += double(top) / total / next.size();
  }
  EXPECT_GT(topShare, 0.2);
}

} // namespace
