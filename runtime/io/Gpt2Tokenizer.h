//===- Gpt2Tokenizer.h - GPT-2's byte-level BPE ---------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// GPT-2's tokenizer (Radford et al. 2019, OpenAI's encoder.py): text is
// split by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// each piece's UTF-8 bytes are mapped to printable characters
// (bytes_to_unicode), and byte-pair merges are applied in rank order; the
// resulting symbols are looked up in the vocabulary. Reads the files GPT-2
// ships in either spelling: Hugging Face's vocab.json + merges.txt, or
// OpenAI's encoder.json + vocab.bpe (the same contents).
//
// Letters and numbers outside ASCII are classified with the C library's
// C.UTF-8 tables (iswalpha_l); non-ASCII numerals such as '²' count as
// symbols rather than \p{N}.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_IO_GPT2TOKENIZER_H
#define STRATA_RUNTIME_IO_GPT2TOKENIZER_H

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace strata::rt {

class Gpt2Tokenizer {
public:
  /// Loads `dir`/vocab.json + merges.txt, or encoder.json + vocab.bpe.
  /// Throws RuntimeError naming the file and what is wrong.
  static Gpt2Tokenizer load(const std::string &dir);
  /// From the two files' paths (vocabulary JSON, merges text).
  static Gpt2Tokenizer fromFiles(const std::string &vocabPath,
                                 const std::string &mergesPath);

  std::vector<int64_t> encode(const std::string &text) const;
  /// Concatenated bytes of the tokens (ids outside the vocabulary throw).
  std::string decode(const std::vector<int64_t> &ids) const;
  /// One more than the largest id.
  int64_t vocabSize() const { return int64_t(idToToken_.size()); }

  /// GPT-2's pattern applied to `text`: the pieces BPE works on.
  static std::vector<std::string> pretokenize(const std::string &text);

private:
  std::vector<std::string> bpe(const std::string &symbols) const;

  std::unordered_map<std::string, int64_t> tokenToId_;
  std::vector<std::string> idToToken_;
  std::map<std::pair<std::string, std::string>, int64_t> mergeRank_;
  std::string byteToSymbol_[256];
  std::unordered_map<std::string, uint8_t> symbolToByte_;
};

} // namespace strata::rt

#endif // STRATA_RUNTIME_IO_GPT2TOKENIZER_H
