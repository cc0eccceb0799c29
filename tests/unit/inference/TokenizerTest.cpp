//===- TokenizerTest.cpp - GPT-2's byte-level BPE -------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// GPT-2's pre-tokenisation pattern case by case, merges in rank order, both
// file spellings, and byte-exact round trips. The end-to-end tests compare
// the tokenizer with an independent Python implementation on real text.
//
//===----------------------------------------------------------------------===//

#include "runtime/io/Gpt2Tokenizer.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace strata::rt;
namespace fs = std::filesystem;

namespace {

using Pieces = std::vector<std::string>;

TEST(TokenizerTest, PretokenizationFollowsGpt2sPattern) {
  auto p = Gpt2Tokenizer::pretokenize;
  EXPECT_EQ(p("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(p("it's we'll I'd"),
            (Pieces{"it", "'s", " we", "'ll", " I", "'d"}));
  // A run of spaces leaves its last space to the next word.
  EXPECT_EQ(p("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(p("x\n\ny"), (Pieces{"x", "\n", "\n", "y"}));
  EXPECT_EQ(p("end.  "), (Pieces{"end", ".", "  "}));
  EXPECT_EQ(p("123abc 42!?"), (Pieces{"123", "abc", " 42", "!?"}));
  EXPECT_EQ(p("h\xc3\xa9llo w\xc3\xb6rld"),
            (Pieces{"h\xc3\xa9llo", " w\xc3\xb6rld"}));
  EXPECT_EQ(p(" (see \"it\")"), (Pieces{" (", "see", " \"", "it", "\")"}));
  EXPECT_EQ(p("'x"), (Pieces{"'", "x"}));
  EXPECT_EQ(p(""), Pieces{});
}

class TokenizerFilesTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("strata-tok-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    // GPT-2's byte symbols: printable Latin-1 stand for themselves, the
    // rest for U+0100 onwards ("Ġ" is the space byte).
    std::string vocab = "{";
    int next = 0, id = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                       (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + next++);
      std::string sym;
      if (cp < 0x80)
        sym = std::string(1, char(cp));
      else {
        sym += char(0xC0 | (cp >> 6));
        sym += char(0x80 | (cp & 0x3F));
      }
      if (sym == "\"" || sym == "\\")
        sym = "\\" + sym;
      vocab += (b ? "," : "") + ("\"" + sym + "\":" + std::to_string(id++));
    }
    vocab += ",\"or\":256,\"\xc4\xa0w\":257,\"\xc4\xa0wor\":258,"
             "\"ld\":259,\"<|endoftext|>\":260}";
    // Ranks: "o r" first, then "Ġ w", then "Ġw or"; "l d" last.
    std::string merges = "#version: 0.2\no r\n\xc4\xa0 w\n\xc4\xa0w or\nl d\n";
    std::ofstream(dir / "vocab.json") << vocab;
    std::ofstream(dir / "merges.txt") << merges;
    fs::create_directories(dir / "openai");
    std::ofstream(dir / "openai" / "encoder.json") << vocab;
    std::ofstream(dir / "openai" / "vocab.bpe") << merges;
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
};

TEST_F(TokenizerFilesTest, MergesApplyInRankOrder) {
  Gpt2Tokenizer t = Gpt2Tokenizer::load(dir.string());
  EXPECT_EQ(t.vocabSize(), 261);
  // " world" -> Ġ w o r l d -> (o r) -> (Ġ w) -> (Ġw or) -> (l d).
  EXPECT_EQ(t.encode(" world"), (std::vector<int64_t>{258, 259}));
  // "world": no space symbol, so only "or" and "ld" merge.
  EXPECT_EQ(t.encode("world"), (std::vector<int64_t>{'w', 256, 259}));
  EXPECT_EQ(t.decode({258, 259}), " world");
  // OpenAI's spelling of the same files gives the same ids.
  Gpt2Tokenizer openai = Gpt2Tokenizer::load((dir / "openai").string());
  EXPECT_EQ(openai.encode("Hello world!"), t.encode("Hello world!"));
}

TEST_F(TokenizerFilesTest, AnyTextRoundTripsByteForByte) {
  Gpt2Tokenizer t = Gpt2Tokenizer::load(dir.string());
  for (std::string text :
       {std::string("The quick brown fox, it's 42!\n\n  Done.\t"),
        std::string("h\xc3\xa9llo w\xc3\xb6rld \xe2\x80\x94 \xe2\x82\xac"),
        std::string("\x01\x02 \xff\xfe raw bytes")})
    EXPECT_EQ(t.decode(t.encode(text)), text);
  EXPECT_EQ(t.decode({260}), "<|endoftext|>");
}

TEST_F(TokenizerFilesTest, BadFilesAreClearErrors) {
  auto errorOf = [](const std::string &path) -> std::string {
    try {
      Gpt2Tokenizer::load(path);
    } catch (const RuntimeError &e) {
      return e.what();
    }
    return "";
  };
  fs::create_directories(dir / "empty");
  EXPECT_NE(errorOf((dir / "empty").string()).find("vocab.json + merges.txt"),
            std::string::npos);
  std::ofstream(dir / "merges.txt") << "#version: 0.2\nonly-one-symbol\n";
  EXPECT_NE(errorOf(dir.string()).find("merges.txt:2: expected a merge"),
            std::string::npos)
      << errorOf(dir.string());
  std::ofstream(dir / "vocab.json") << "[1, 2]";
  EXPECT_NE(errorOf(dir.string()).find("not a JSON object"), std::string::npos);
  Gpt2Tokenizer t = Gpt2Tokenizer::load((dir / "openai").string());
  EXPECT_THROW(t.decode({9999}), RuntimeError);
}

} // namespace
