//===- DataTest.cpp - Token data contract and errors ----------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/TokenData.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

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

TEST_F(DataTest, SamplesFollowTheContract) {
  // tokens[i] = i, S = 4: 23 tokens -> n = 22 div 4 = 5 samples.
  std::vector<uint16_t> tokens(23);
  for (int i = 0; i < 23; ++i)
    tokens[i] = uint16_t(i);
  TokenData data =
      TokenData::loadFile(write(tokens), TokenFileDType::U16, 100, 4);
  EXPECT_EQ(data.numSamples(), 5);
  const int64_t B = 3;
  // Step 2, rows 1..2 of the step's list: samples (6+1)%5=2 and (6+2)%5=3.
  std::vector<int32_t> in(8), out(8);
  data.fillRows(2, B, 1, 2, in.data(), out.data());
  EXPECT_EQ(in, (std::vector<int32_t>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(out, (std::vector<int32_t>{9, 10, 11, 12, 13, 14, 15, 16}));
  // Step 1 row 2: sample 5 % 5 = 0 wraps around.
  data.fillRows(1, B, 2, 1, in.data(), out.data());
  EXPECT_EQ(in[0], 0);
  EXPECT_EQ(out[3], 4);
}

TEST_F(DataTest, Uint32Tokens) {
  std::vector<uint32_t> tokens = {70000, 1, 2, 3, 4};
  TokenData data =
      TokenData::loadFile(write(tokens), TokenFileDType::U32, 70001, 4);
  std::vector<int32_t> in(4), out(4);
  data.fillRows(0, 1, 0, 1, in.data(), out.data());
  EXPECT_EQ(in[0], 70000);
  EXPECT_EQ(out[3], 4);
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
