//===- YamlDocument.h - A located, bounded YAML tree ------------*- C++ -*-===//
//
// Model specs are read into this small tree instead of YAML::Node so that
// every node keeps its 1-based line:col, duplicate keys stay visible, and
// hostile input is bounded: aliases are rejected (no billion-laughs expansion),
// nesting and node counts are capped, and the text is checked for NUL bytes,
// invalid UTF-8 and runaway flow nesting *before* yaml-cpp sees it.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_FRONTENDS_YAML_YAMLDOCUMENT_H
#define STRATA_FRONTENDS_YAML_YAMLDOCUMENT_H

#include "frontends/yaml/ModelSpec.h"

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace strata::frontend {

/// One YAML node with its position. Children are owned by the document.
struct YamlNode {
  enum class Kind { Null, Scalar, Sequence, Map };
  Kind kind = Kind::Null;
  int line = 0, col = 0; // 1-based
  std::string value;     // scalars
  bool quoted = false;   // a quoted or !!str scalar: always a string
  std::vector<const YamlNode *> items; // sequences
  std::vector<std::pair<const YamlNode *, const YamlNode *>> entries; // maps

  bool isNull() const { return kind == Kind::Null; }
  bool isScalar() const { return kind == Kind::Scalar; }
  bool isSequence() const { return kind == Kind::Sequence; }
  bool isMap() const { return kind == Kind::Map; }
  /// "a mapping", "a list", "a string", "nothing": for "expected X, got Y".
  const char *kindDescription() const;
};

/// A parsed document. Nodes live in a deque (stable addresses, and no
/// recursive destruction however deep the tree is).
struct YamlDocument {
  std::deque<YamlNode> nodes;
  const YamlNode *root = nullptr; // null for an empty document
};

/// Limits on what a spec may contain; beyond them the input is rejected
/// with a located error instead of exhausting the stack or memory.
constexpr size_t kMaxSpecBytes = size_t(64) << 20;
constexpr int kMaxNestingDepth = 64;
constexpr size_t kMaxYamlNodes = 1000000;

/// Checks `text` (encoding, NULs, nesting) and parses it into a tree.
/// Returns null after appending a located diagnostic on any problem; a file
/// with no document yields a document whose root is null.
std::unique_ptr<YamlDocument> parseYamlDocument(const std::string &path,
                                                const std::string &text,
                                                std::vector<Diagnostic> &diags);

} // namespace strata::frontend

#endif // STRATA_FRONTENDS_YAML_YAMLDOCUMENT_H
