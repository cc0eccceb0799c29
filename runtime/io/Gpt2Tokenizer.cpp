//===- Gpt2Tokenizer.cpp - GPT-2's byte-level BPE -------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/io/Gpt2Tokenizer.h"

#include "runtime/support/Error.h"
#include "runtime/support/FileIO.h"

#include <nlohmann/json.hpp>

#include <clocale>
#include <filesystem>
#include <limits>
#include <locale.h>
#include <wctype.h>

namespace strata::rt {

namespace {

/// Appends the UTF-8 encoding of code point `cp`.
void appendUtf8(std::string &out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

/// The code point at `text[i]` and its byte length; invalid UTF-8 reads as
/// one code point per byte (U+FFFD class: a symbol).
uint32_t codePointAt(const std::string &text, size_t i, size_t &length) {
  auto byte = [&](size_t k) { return uint8_t(text[k]); };
  uint8_t b = byte(i);
  int n = b < 0x80         ? 1
          : (b >> 5) == 6  ? 2
          : (b >> 4) == 14 ? 3
          : (b >> 3) == 30 ? 4
                           : 0;
  if (n == 0 || i + n > text.size()) {
    length = 1;
    return 0xFFFD;
  }
  uint32_t cp = n == 1 ? b : n == 2 ? b & 0x1F : n == 3 ? b & 0x0F : b & 0x07;
  for (int k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) {
      length = 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  length = n;
  return cp;
}

locale_t utf8Locale() {
  static locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
  return loc;
}

/// Unicode White_Space (what \s matches in GPT-2's `regex` pattern).
bool isSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
bool isNumber(uint32_t cp) { return cp >= '0' && cp <= '9'; }
bool isLetter(uint32_t cp) {
  if (cp < 0x80)
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (isSpace(cp) || cp == 0xFFFD)
    return false;
  locale_t loc = utf8Locale();
  return loc ? iswalpha_l(wint_t(cp), loc) != 0 : true;
}

enum class Class { Space, Letter, Number, Other };
Class classify(uint32_t cp) {
  return isSpace(cp)    ? Class::Space
         : isLetter(cp) ? Class::Letter
         : isNumber(cp) ? Class::Number
                        : Class::Other;
}

std::string readText(const std::string &path, const char *what) {
  std::vector<uint8_t> bytes = readRegularFile(path, what);
  return std::string(bytes.begin(), bytes.end());
}

} // namespace

std::vector<std::string> Gpt2Tokenizer::pretokenize(const std::string &text) {
  // Code points with their classes and byte offsets.
  std::vector<Class> cls;
  std::vector<uint32_t> cps;
  std::vector<size_t> at;
  for (size_t i = 0; i < text.size();) {
    size_t len;
    uint32_t cp = codePointAt(text, i, len);
    cps.push_back(cp);
    cls.push_back(classify(cp));
    at.push_back(i);
    i += len;
  }
  size_t n = cps.size();
  at.push_back(text.size());
  std::vector<std::string> pieces;
  auto run = [&](size_t j, Class c) {
    while (j < n && cls[j] == c)
      ++j;
    return j;
  };
  auto otherRun = [&](size_t j) {
    while (j < n && cls[j] == Class::Other)
      ++j;
    return j;
  };
  for (size_t i = 0; i < n;) {
    size_t end = i;
    // 's|'t|'re|'ve|'m|'ll|'d
    if (cps[i] == '\'') {
      for (const char *c : {"s", "t", "re", "ve", "m", "ll", "d"}) {
        size_t k = 0;
        while (c[k] && i + 1 + k < n && cps[i + 1 + k] == uint32_t(c[k]))
          ++k;
        if (!c[k]) {
          end = i + 1 + k;
          break;
        }
      }
    }
    if (end == i) {
      // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+"
      size_t j = cps[i] == ' ' && i + 1 < n ? i + 1 : i;
      if (cls[j] == Class::Letter)
        end = run(j, Class::Letter);
      else if (cls[j] == Class::Number)
        end = run(j, Class::Number);
      else if (cls[j] == Class::Other)
        end = otherRun(j);
      if (end == j)
        end = i; // the optional space alone matches nothing here
    }
    if (end == i && cls[i] == Class::Space) {
      // "\s+(?!\S)": a run, less its last character when a non-space
      // follows; else "\s+".
      size_t j = run(i, Class::Space);
      end = (j < n && j - i > 1) ? j - 1 : j;
    }
    if (end == i)
      end = i + 1; // unreachable for valid classes; never loop forever
    pieces.push_back(text.substr(at[i], at[end] - at[i]));
    i = end;
  }
  return pieces;
}

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string &dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path root(dir);
  if (!fs::is_directory(root, ec))
    fail(dir, ": not a directory; expected one holding GPT-2's tokenizer "
              "files (vocab.json and merges.txt, or encoder.json and "
              "vocab.bpe)");
  if (fs::exists(root / "vocab.json", ec) &&
      fs::exists(root / "merges.txt", ec))
    return fromFiles((root / "vocab.json").string(),
                     (root / "merges.txt").string());
  if (fs::exists(root / "encoder.json", ec) &&
      fs::exists(root / "vocab.bpe", ec))
    return fromFiles((root / "encoder.json").string(),
                     (root / "vocab.bpe").string());
  fail(dir, ": holds neither vocab.json + merges.txt (Hugging Face) nor "
            "encoder.json + vocab.bpe (OpenAI): GPT-2's tokenizer files");
}

Gpt2Tokenizer Gpt2Tokenizer::fromFiles(const std::string &vocabPath,
                                       const std::string &mergesPath) {
  Gpt2Tokenizer t;
  // bytes_to_unicode: printable Latin-1 bytes stand for themselves, the
  // others for 256, 257, ... in byte order.
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                     (b >= 0xAE && b <= 0xFF);
    std::string symbol;
    appendUtf8(symbol, printable ? uint32_t(b) : uint32_t(256 + next++));
    t.byteToSymbol_[b] = symbol;
    t.symbolToByte_[symbol] = uint8_t(b);
  }

  std::string vocabText = readText(vocabPath, "GPT-2's vocabulary JSON");
  nlohmann::json vocab =
      nlohmann::json::parse(vocabText, nullptr, /*allow_exceptions=*/false);
  if (vocab.is_discarded() || !vocab.is_object() || vocab.empty())
    fail(vocabPath, ": not a JSON object of token -> id (GPT-2's "
                    "vocab.json / encoder.json)");
  int64_t maxId = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > (int64_t(1) << 31))
      fail(vocabPath, ": token '", it.key(), "' has no valid id");
    maxId = std::max(maxId, it.value().get<int64_t>());
  }
  t.idToToken_.assign(maxId + 1, std::string());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    t.tokenToId_[it.key()] = it.value().get<int64_t>();
    t.idToToken_[it.value().get<int64_t>()] = it.key();
  }

  std::string merges = readText(mergesPath, "GPT-2's merges (merges.txt / "
                                            "vocab.bpe)");
  int64_t rank = 0, lineNo = 0;
  for (size_t pos = 0; pos < merges.size();) {
    size_t eol = merges.find('\n', pos);
    std::string line = merges.substr(
        pos, eol == std::string::npos ? std::string::npos : eol - pos);
    pos = eol == std::string::npos ? merges.size() : eol + 1;
    ++lineNo;
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0)
      continue;
    size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 >= line.size() ||
        line.find(' ', space + 1) != std::string::npos)
      fail(mergesPath, ":", lineNo, ": expected a merge 'A B', got '", line,
           "'");
    t.mergeRank_.emplace(
        std::make_pair(line.substr(0, space), line.substr(space + 1)), rank++);
  }
  return t;
}

std::vector<std::string> Gpt2Tokenizer::bpe(const std::string &symbols) const {
  std::vector<std::string> word;
  for (size_t i = 0; i < symbols.size();) {
    size_t len;
    codePointAt(symbols, i, len);
    word.push_back(symbols.substr(i, len));
    i += len;
  }
  while (word.size() > 1) {
    int64_t best = std::numeric_limits<int64_t>::max();
    std::pair<std::string, std::string> bestPair;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = mergeRank_.find({word[i], word[i + 1]});
      if (it != mergeRank_.end() && it->second < best) {
        best = it->second;
        bestPair = it->first;
      }
    }
    if (best == std::numeric_limits<int64_t>::max())
      break;
    std::vector<std::string> merged;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == bestPair.first &&
          word[i + 1] == bestPair.second) {
        merged.push_back(word[i] + word[i + 1]);
        i += 2;
      } else {
        merged.push_back(word[i++]);
      }
    }
    word = std::move(merged);
  }
  return word;
}

std::vector<int64_t> Gpt2Tokenizer::encode(const std::string &text) const {
  std::vector<int64_t> ids;
  for (const std::string &piece : pretokenize(text)) {
    std::string symbols;
    for (unsigned char c : piece)
      symbols += byteToSymbol_[c];
    for (const std::string &token : bpe(symbols)) {
      auto it = tokenToId_.find(token);
      if (it == tokenToId_.end())
        fail("the tokenizer's vocabulary has no token for '", token,
             "' (from the text '", piece,
             "'); the vocabulary and merges "
             "files do not belong together");
      ids.push_back(it->second);
    }
  }
  return ids;
}

std::string Gpt2Tokenizer::decode(const std::vector<int64_t> &ids) const {
  std::string out;
  for (int64_t id : ids) {
    if (id < 0 || id >= int64_t(idToToken_.size()) || idToToken_[id].empty())
      fail("token id ", id, " is not in the tokenizer's vocabulary (",
           idToToken_.size(), " ids)");
    const std::string &token = idToToken_[id];
    for (size_t i = 0; i < token.size();) {
      size_t len;
      codePointAt(token, i, len);
      auto it = symbolToByte_.find(token.substr(i, len));
      // A token outside the byte alphabet (e.g. <|endoftext|>) is shown as
      // written.
      if (it == symbolToByte_.end()) {
        out += token.substr(i, len);
      } else {
        out += char(it->second);
      }
      i += len;
    }
  }
  return out;
}

} // namespace strata::rt
