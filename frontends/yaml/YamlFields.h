//===- YamlFields.h - Typed, located access to spec fields ------*- C++ -*-===//
//
// Every field read from a spec goes through here, so every wrong type, range
// or unknown key produces the same kind of message:
//   FILE:LINE:COL: error: 'heads' is 0; expected a positive integer
// Readers record diagnostics and return nullopt; callers carry on to find
// further errors in the same section and check SpecReader::failed() before
// using the result.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_FRONTENDS_YAML_YAMLFIELDS_H
#define STRATA_FRONTENDS_YAML_YAMLFIELDS_H

#include "frontends/yaml/ModelSpec.h"
#include "frontends/yaml/YamlDocument.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace strata::frontend {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
/// Largest element count of any tensor (and of all parameters together).
constexpr int64_t kMaxElements = int64_t(1) << 62;

/// Diagnostics beyond this many per spec are summarised in one line.
constexpr int kMaxSpecErrors = 20;

/// Levenshtein distance, for did-you-mean suggestions.
size_t editDistance(const std::string &a, const std::string &b);
/// "; did you mean 'x'?" for the closest candidate within a sensible
/// distance, else "".
std::string didYouMean(const std::string &word,
                       const std::vector<std::string> &candidates);
/// "a, b or c".
std::string joinChoices(const std::vector<std::string> &words);

/// a * b, or nullopt if it exceeds kMaxElements (inputs must be >= 0).
std::optional<int64_t> checkedMul(int64_t a, int64_t b);
std::optional<int64_t> checkedAdd(int64_t a, int64_t b);

/// Collects located diagnostics for one spec file.
class SpecReader {
public:
  SpecReader(std::string path, std::vector<Diagnostic> &diags)
      : path(std::move(path)), diags(diags) {}

  SourceLoc loc(const YamlNode *n) const;
  void error(const SourceLoc &loc, std::string message);
  void error(const YamlNode *n, std::string message) {
    error(loc(n), std::move(message));
  }
  bool failed() const { return errors != 0; }

  /// Scalar readers. `what` names the field in messages ("'vocab'",
  /// "shape[1]"). Ranges are inclusive.
  std::optional<int64_t> readInt(const YamlNode *n, const std::string &what,
                                 int64_t min, int64_t max);
  std::optional<double> readFloat(const YamlNode *n, const std::string &what,
                                  double min, double max,
                                  bool minExclusive = false);
  std::optional<bool> readBool(const YamlNode *n, const std::string &what);
  /// A non-empty string (plain or quoted).
  std::optional<std::string> readString(const YamlNode *n,
                                        const std::string &what);
  /// One of `choices`, with did-you-mean.
  std::optional<std::string>
  readChoice(const YamlNode *n, const std::string &what,
             const std::vector<std::string> &choices);
  /// A list node (or an error naming what the list should hold).
  bool expectList(const YamlNode *n, const std::string &what,
                  const std::string &expected);

  const std::string path;

private:
  std::vector<Diagnostic> &diags;
  int errors = 0;
};

/// "expected a positive integer", "expected an integer between 1 and 8"...
std::string describeIntRange(int64_t min, int64_t max);

/// A mapping whose keys are validated against the accepted ones on
/// construction: duplicate keys, non-scalar keys and unknown keys (with
/// did-you-mean) are reported there.
class MapReader {
public:
  /// `what` names the mapping in messages: "'model'", "the top level".
  MapReader(SpecReader &r, const YamlNode *node, std::string what,
            std::vector<std::string> known);

  /// Whether the node was a mapping at all (if not, an error was reported).
  bool valid() const { return node != nullptr; }
  const YamlNode *mapNode() const { return node; }
  /// The value for `key`, or null if absent (a `key:` with no value is a
  /// Null node, not absent).
  const YamlNode *find(const std::string &key) const;
  /// The key node for `key` (for locations), or null.
  const YamlNode *keyNode(const std::string &key) const;
  SourceLoc keyLoc(const std::string &key) const;
  bool has(const std::string &key) const { return find(key) != nullptr; }

  /// Reports "missing required key" at the mapping and returns null when
  /// absent.
  const YamlNode *require(const std::string &key, const std::string &hint);

  std::optional<int64_t> getInt(const std::string &key, int64_t min,
                                int64_t max, std::optional<int64_t> dflt,
                                const std::string &hint = "");
  std::optional<double> getFloat(const std::string &key, double min, double max,
                                 std::optional<double> dflt,
                                 bool minExclusive = false);
  std::optional<bool> getBool(const std::string &key, bool dflt);
  std::optional<std::string> getChoice(const std::string &key,
                                       const std::vector<std::string> &choices,
                                       std::optional<std::string> dflt);

  SpecReader &r;

private:
  const YamlNode *node = nullptr;
  std::string what;
};

} // namespace strata::frontend

#endif // STRATA_FRONTENDS_YAML_YAMLFIELDS_H
