//===- YamlFields.cpp - Typed, located access to spec fields --------------===//

#include "frontends/yaml/YamlFields.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace strata::frontend {

size_t editDistance(const std::string &a, const std::string &b) {
  // Optimal string alignment distance: a swapped pair ("gtp") counts once.
  std::vector<std::vector<size_t>> d(a.size() + 1,
                                     std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] =
          std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string didYouMean(const std::string &word,
                       const std::vector<std::string> &candidates) {
  // Long words are compared only on a bounded prefix so a hostile 1 MB key
  // cannot make this quadratic in the file size.
  if (word.size() > 256)
    return "";
  size_t limit = word.size() <= 3 ? 1 : std::max<size_t>(2, word.size() / 3);
  const std::string *best = nullptr;
  size_t bestDistance = limit + 1;
  for (const std::string &c : candidates) {
    size_t dist = editDistance(word, c);
    // "vocabulary" for "vocab": a long extension is still an obvious match.
    bool prefix = std::min(word.size(), c.size()) >= 3 &&
                  (word.rfind(c, 0) == 0 || c.rfind(word, 0) == 0);
    if (prefix)
      dist = std::min(dist, limit);
    if (dist < bestDistance) {
      bestDistance = dist;
      best = &c;
    }
  }
  return best ? "; did you mean '" + *best + "'?" : "";
}

std::string joinChoices(const std::vector<std::string> &words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i)
      out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r) || r > kMaxElements)
    return std::nullopt;
  return r;
}

std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r) || r > kMaxElements)
    return std::nullopt;
  return r;
}

SourceLoc SpecReader::loc(const YamlNode *n) const {
  if (!n)
    return SourceLoc{path, 0, 0};
  return SourceLoc{path, n->line, n->col};
}

void SpecReader::error(const SourceLoc &loc, std::string message) {
  Diagnostic d;
  d.loc = loc;
  if (d.loc.file.empty())
    d.loc.file = path;
  d.message = std::move(message);
  if (errors < kMaxSpecErrors)
    diags.push_back(std::move(d));
  else if (errors == kMaxSpecErrors)
    diags.push_back(
        Diagnostic{SourceLoc{path, 0, 0}, "too many errors; stopping after " +
                                              std::to_string(kMaxSpecErrors) +
                                              " (fix the ones above first)"});
  ++errors;
}

namespace {

std::string clip(const std::string &s) {
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

/// "a list", "nothing", "the string \"12\"": what a node that should be a
/// scalar of some type actually is.
std::string describeNode(const YamlNode *n) {
  if (n->isNull())
    return "empty";
  if (n->isScalar())
    return n->quoted ? "the quoted string \"" + clip(n->value) + "\""
                     : "'" + clip(n->value) + "'";
  return n->kindDescription();
}

bool isDecimalInteger(const std::string &s) {
  size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (i == s.size())
    return false;
  for (; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9')
      return false;
  return true;
}

/// Parses a whole plain scalar as a double; false if it is not a number.
bool parseDouble(const std::string &s, double &out) {
  if (s.empty() || std::isspace((unsigned char)s[0]))
    return false;
  // YAML spellings of infinity and NaN parse (so they can be reported as
  // not finite); C spellings like "nan" and hex floats are not YAML numbers.
  std::string lower = s;
  for (char &c : lower)
    c = (char)std::tolower((unsigned char)c);
  if (lower == ".inf" || lower == "+.inf" || lower == "-.inf") {
    out = lower[0] == '-' ? -HUGE_VAL : HUGE_VAL;
    return true;
  }
  if (lower == ".nan") {
    out = NAN;
    return true;
  }
  if (lower.find_first_not_of("0123456789+-.e") != std::string::npos)
    return false;
  errno = 0;
  char *end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && end != s.c_str();
}

std::string formatDouble(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string describeFloatRange(double min, double max, bool minExclusive) {
  bool hasMax = max < HUGE_VAL;
  if (min == 0 && minExclusive && !hasMax)
    return "a positive number";
  if (min == 0 && !minExclusive && !hasMax)
    return "a number >= 0";
  if (!hasMax)
    return std::string("a number ") + (minExclusive ? "> " : ">= ") +
           formatDouble(min);
  return std::string("a number in ") + (minExclusive ? "(" : "[") +
         formatDouble(min) + ", " + formatDouble(max) + "]";
}

} // namespace

std::string describeIntRange(int64_t min, int64_t max) {
  if (min == 1 && max == kInt64Max)
    return "a positive integer";
  if (min == 0 && max == kInt64Max)
    return "an integer >= 0";
  if (max == kInt64Max)
    return "an integer >= " + std::to_string(min);
  return "an integer between " + std::to_string(min) + " and " +
         std::to_string(max);
}

std::optional<int64_t> SpecReader::readInt(const YamlNode *n,
                                           const std::string &what, int64_t min,
                                           int64_t max) {
  std::string expected = "expected " + describeIntRange(min, max);
  if (!n->isScalar() || n->quoted) {
    std::string hint = n->quoted && isDecimalInteger(n->value)
                           ? " (write the number without quotes)"
                           : "";
    error(n, what + " is " + describeNode(n) + "; " + expected + hint);
    return std::nullopt;
  }
  const std::string &s = n->value;
  int64_t value = 0;
  if (isDecimalInteger(s)) {
    errno = 0;
    long long v = std::strtoll(s.c_str(), nullptr, 10);
    if (errno == ERANGE) {
      error(n,
            what + " is " + clip(s) + ", which is out of range; " + expected);
      return std::nullopt;
    }
    value = v;
  } else {
    double d;
    if (!parseDouble(s, d)) {
      error(n, what + " is '" + clip(s) + "', not a number; " + expected);
      return std::nullopt;
    }
    // 1e30 and .inf are numbers, just far too large ones.
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) {
      error(n,
            what + " is " + clip(s) + ", which is out of range; " + expected);
      return std::nullopt;
    }
    if (d != std::floor(d)) {
      error(n, what + " is " + clip(s) + ", not an integer; " + expected);
      return std::nullopt;
    }
    value = (int64_t)d;
  }
  if (value < min) {
    // "expected a positive integer" says more than the full range would.
    error(n, what + " is " + clip(s) + "; expected " +
                 describeIntRange(min, kInt64Max));
    return std::nullopt;
  }
  if (value > max) {
    error(n, what + " is " + clip(s) + ", which is too large; " + expected);
    return std::nullopt;
  }
  return value;
}

std::optional<double> SpecReader::readFloat(const YamlNode *n,
                                            const std::string &what, double min,
                                            double max, bool minExclusive) {
  std::string expected =
      "expected " + describeFloatRange(min, max, minExclusive);
  if (!n->isScalar() || n->quoted) {
    error(n, what + " is " + describeNode(n) + "; " + expected);
    return std::nullopt;
  }
  double d;
  if (!parseDouble(n->value, d)) {
    error(n, what + " is '" + clip(n->value) + "', not a number; " + expected);
    return std::nullopt;
  }
  if (!std::isfinite(d)) {
    error(n, what + " is " + clip(n->value) +
                 ", which is not a finite number; " + expected);
    return std::nullopt;
  }
  if (d < min || (minExclusive && d == min) || d > max) {
    error(n, what + " is " + clip(n->value) + "; " + expected);
    return std::nullopt;
  }
  return d;
}

std::optional<bool> SpecReader::readBool(const YamlNode *n,
                                         const std::string &what) {
  if (n->isScalar() && !n->quoted) {
    const std::string &s = n->value;
    if (s == "true" || s == "True" || s == "TRUE")
      return true;
    if (s == "false" || s == "False" || s == "FALSE")
      return false;
  }
  error(n, what + " is " + describeNode(n) + "; expected true or false");
  return std::nullopt;
}

std::optional<std::string> SpecReader::readString(const YamlNode *n,
                                                  const std::string &what) {
  if (!n->isScalar() || n->value.empty()) {
    error(n, what + " is " + describeNode(n) + "; expected a name");
    return std::nullopt;
  }
  return n->value;
}

std::optional<std::string>
SpecReader::readChoice(const YamlNode *n, const std::string &what,
                       const std::vector<std::string> &choices) {
  if (!n->isScalar() || n->value.empty()) {
    error(n, what + " is " + describeNode(n) + "; expected " +
                 joinChoices(choices));
    return std::nullopt;
  }
  if (std::find(choices.begin(), choices.end(), n->value) != choices.end())
    return n->value;
  std::string suggestion = didYouMean(n->value, choices);
  error(n, what + " is '" + clip(n->value) + "'" +
               (suggestion.empty() ? ";" : suggestion) + " expected " +
               joinChoices(choices));
  return std::nullopt;
}

bool SpecReader::expectList(const YamlNode *n, const std::string &what,
                            const std::string &expected) {
  if (n->isSequence())
    return true;
  error(n,
        what + " is " + describeNode(n) + "; expected a list of " + expected);
  return false;
}

MapReader::MapReader(SpecReader &r, const YamlNode *n, std::string whatIn,
                     std::vector<std::string> known)
    : r(r), what(std::move(whatIn)) {
  if (!n->isMap() && !n->isNull()) {
    r.error(n, what + " is " + describeNode(n) +
                   "; expected a mapping of key: value pairs");
    return;
  }
  node = n;
  std::vector<const YamlNode *> seen;
  for (const auto &[key, value] : n->entries) {
    if (!key->isScalar() || key->value.empty()) {
      r.error(key, "a key in " + what + " is " + describeNode(key) +
                       "; expected a key name" +
                       (known.empty() ? std::string()
                                      : " such as '" + known.front() + "'"));
      continue;
    }
    auto dup = std::find_if(seen.begin(), seen.end(), [&](const YamlNode *k) {
      return k->value == key->value;
    });
    if (dup != seen.end()) {
      r.error(key, "duplicate key '" + clip(key->value) + "' in " + what +
                       ", first given at " + std::to_string((*dup)->line) +
                       ":" + std::to_string((*dup)->col) +
                       "; expected each key once");
      continue;
    }
    seen.push_back(key);
    if (std::find(known.begin(), known.end(), key->value) == known.end()) {
      std::string suggestion = didYouMean(key->value, known);
      r.error(key, "unknown key '" + clip(key->value) + "' in " + what +
                       (suggestion.empty() ? ";" : suggestion) +
                       " expected one of: " + joinChoices(known));
    }
  }
}

const YamlNode *MapReader::keyNode(const std::string &key) const {
  if (!node)
    return nullptr;
  for (const auto &[k, v] : node->entries)
    if (k->isScalar() && k->value == key)
      return k;
  return nullptr;
}

const YamlNode *MapReader::find(const std::string &key) const {
  if (!node)
    return nullptr;
  for (const auto &[k, v] : node->entries)
    if (k->isScalar() && k->value == key)
      return v;
  return nullptr;
}

SourceLoc MapReader::keyLoc(const std::string &key) const {
  const YamlNode *k = keyNode(key);
  return r.loc(k ? k : node);
}

const YamlNode *MapReader::require(const std::string &key,
                                   const std::string &hint) {
  const YamlNode *v = find(key);
  if (!v && node)
    r.error(node, what + " is missing the required key '" + key + "'" +
                      (hint.empty() ? "" : "; expected " + hint));
  return v;
}

std::optional<int64_t> MapReader::getInt(const std::string &key, int64_t min,
                                         int64_t max,
                                         std::optional<int64_t> dflt,
                                         const std::string &hint) {
  const YamlNode *v =
      dflt ? find(key)
           : require(key, hint.empty() ? describeIntRange(min, max) : hint);
  if (!v)
    return dflt;
  return r.readInt(v, "'" + key + "'", min, max);
}

std::optional<double> MapReader::getFloat(const std::string &key, double min,
                                          double max,
                                          std::optional<double> dflt,
                                          bool minExclusive) {
  const YamlNode *v = dflt ? find(key) : require(key, "a number");
  if (!v)
    return dflt;
  return r.readFloat(v, "'" + key + "'", min, max, minExclusive);
}

std::optional<bool> MapReader::getBool(const std::string &key, bool dflt) {
  const YamlNode *v = find(key);
  if (!v)
    return dflt;
  return r.readBool(v, "'" + key + "'");
}

std::optional<std::string>
MapReader::getChoice(const std::string &key,
                     const std::vector<std::string> &choices,
                     std::optional<std::string> dflt) {
  const YamlNode *v = dflt ? find(key) : require(key, joinChoices(choices));
  if (!v)
    return dflt;
  return r.readChoice(v, "'" + key + "'", choices);
}

} // namespace strata::frontend
