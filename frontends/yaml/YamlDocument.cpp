//===- YamlDocument.cpp - A located, bounded YAML tree --------------------===//
//
// yaml-cpp drives a YAML::EventHandler that builds YamlNodes with an explicit
// stack, so nothing here recurses on input depth. The handler stops the parse
// (by throwing StopParse through yaml-cpp, which is exception-safe) at the
// first alias, at excessive depth, or at too many nodes.
//
//===----------------------------------------------------------------------===//

#include "frontends/yaml/YamlDocument.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace strata::frontend {

const char *YamlNode::kindDescription() const {
  switch (kind) {
  case Kind::Null:
    return "empty";
  case Kind::Scalar:
    return quoted ? "a quoted string" : "a scalar";
  case Kind::Sequence:
    return "a list";
  case Kind::Map:
    return "a mapping";
  }
  return "unknown";
}

namespace {

Diagnostic located(const std::string &path, int line, int col,
                   std::string message) {
  Diagnostic d;
  d.loc = SourceLoc{path, line, col};
  d.message = std::move(message);
  return d;
}

std::string hexByte(unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%02X", c);
  return buf;
}

/// Length of the UTF-8 sequence starting at text[i], or 0 if it is invalid
/// (overlong forms, surrogates and values past U+10FFFF included).
size_t utf8SequenceLength(const std::string &text, size_t i) {
  auto byte = [&](size_t k) -> unsigned { return (unsigned char)text[k]; };
  unsigned c = byte(i);
  if (c < 0x80)
    return 1;
  size_t len;
  unsigned cp;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > text.size())
    return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  return len;
}

/// Rejects text that is not UTF-8 YAML, and flow nesting ([ / {) deeper than
/// kMaxNestingDepth. Quote and comment tracking is a heuristic (it only
/// needs to avoid false alarms on brackets inside strings); the event
/// handler's depth check is the exact bound.
bool prescanText(const std::string &path, const std::string &text,
                 std::vector<Diagnostic> &diags) {
  if (text.size() >= 2 &&
      (((unsigned char)text[0] == 0xFF && (unsigned char)text[1] == 0xFE) ||
       ((unsigned char)text[0] == 0xFE && (unsigned char)text[1] == 0xFF))) {
    diags.push_back(located(path, 1, 1,
                            "the file is UTF-16 encoded; expected a UTF-8 "
                            "YAML model spec (re-save it as UTF-8)"));
    return false;
  }
  int line = 1, col = 1; // yaml-cpp counts columns in bytes; so do we
  int depth = 0;
  bool inComment = false, inSingle = false, inDouble = false;
  char prevSignificant = '\n'; // last non-blank character outside strings
  char prev = '\n';
  for (size_t i = 0; i < text.size();) {
    unsigned char c = text[i];
    if (c == 0) {
      diags.push_back(located(path, line, col,
                              "NUL byte: this is not a text file; expected a "
                              "UTF-8 YAML model spec"));
      return false;
    }
    size_t len = utf8SequenceLength(text, i);
    if (len == 0) {
      diags.push_back(located(path, line, col,
                              "invalid UTF-8 (byte " + hexByte(c) +
                                  "); expected a UTF-8 YAML model spec "
                                  "(is this a binary file?)"));
      return false;
    }
    if (c == '\n') {
      ++line;
      col = 1;
      inComment = false;
      prev = '\n';
      if (!inSingle && !inDouble)
        prevSignificant = '\n';
      ++i;
      continue;
    }
    if (inComment) {
      // skip
    } else if (inDouble) {
      if (c == '\\' && i + 1 < text.size() && text[i + 1] != '\n') {
        i += 2;
        col += 2;
        continue;
      }
      if (c == '"')
        inDouble = false;
    } else if (inSingle) {
      if (c == '\'') {
        if (i + 1 < text.size() && text[i + 1] == '\'') {
          i += 2;
          col += 2;
          continue;
        }
        inSingle = false;
      }
    } else if (c == '#' && (prev == ' ' || prev == '\t' || prev == '\n')) {
      inComment = true;
    } else if ((c == '"' || c == '\'') &&
               std::string("\n:-[{,?").find(prevSignificant) !=
                   std::string::npos) {
      // A quote only opens a quoted scalar where a scalar can start; in
      // `name: don't` it is part of a plain scalar.
      (c == '"' ? inDouble : inSingle) = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNestingDepth) {
        diags.push_back(located(
            path, line, col,
            "collections nested more than " + std::to_string(kMaxNestingDepth) +
                " levels deep; a model spec needs only a few levels"));
        return false;
      }
    } else if (c == ']' || c == '}') {
      if (depth > 0)
        --depth;
    }
    if (!inComment && c != ' ' && c != '\t')
      prevSignificant = (char)c;
    prev = (char)c;
    i += len;
    col += (int)len;
  }
  return true;
}

/// Thrown from the event handler to abandon the parse; the diagnostic has
/// already been recorded.
struct StopParse {};

/// Builds YamlNodes from parser events with an explicit stack.
class TreeBuilder : public YAML::EventHandler {
public:
  TreeBuilder(const std::string &path, YamlDocument &doc,
              std::vector<Diagnostic> &diags)
      : path(path), doc(doc), diags(diags) {}

  YAML::Mark documentStart;

  void OnDocumentStart(const YAML::Mark &mark) override {
    documentStart = mark;
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark &mark, YAML::anchor_t) override {
    attach(newNode(YamlNode::Kind::Null, mark));
  }

  void OnAlias(const YAML::Mark &mark, YAML::anchor_t) override {
    fail(mark, "YAML aliases (*name) are not supported in model specs; "
               "write the value out in full");
  }

  void OnScalar(const YAML::Mark &mark, const std::string &tag, YAML::anchor_t,
                const std::string &value) override {
    // Tags are honoured where they agree with the value and rejected where
    // they do not, the same way for every node (`!!null 512` is an error,
    // not 512).
    std::string core = coreTag(mark, tag);
    if (core == "null") {
      if (!(value.empty() || value == "~" || value == "null" ||
            value == "Null" || value == "NULL"))
        badTag(mark, tag, value);
      attach(newNode(YamlNode::Kind::Null, mark));
      return;
    }
    if ((core == "int" && !isInteger(value)) ||
        (core == "float" && !isFloat(value)) ||
        (core == "bool" && !isBool(value)) || core == "seq" || core == "map")
      badTag(mark, tag, value);
    YamlNode *n = newNode(YamlNode::Kind::Scalar, mark);
    n->value = value;
    n->quoted = tag == "!" || core == "str";
    attach(n);
  }

  void OnSequenceStart(const YAML::Mark &mark, const std::string &tag,
                       YAML::anchor_t, YAML::EmitterStyle::value) override {
    std::string core = coreTag(mark, tag);
    if (!core.empty() && core != "seq")
      badTag(mark, tag, "a list");
    open(newNode(YamlNode::Kind::Sequence, mark), mark);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark &mark, const std::string &tag,
                  YAML::anchor_t, YAML::EmitterStyle::value) override {
    std::string core = coreTag(mark, tag);
    if (!core.empty() && core != "map")
      badTag(mark, tag, "a mapping");
    open(newNode(YamlNode::Kind::Map, mark), mark);
  }
  void OnMapEnd() override { close(); }

private:
  struct Frame {
    YamlNode *node;
    const YamlNode *pendingKey = nullptr;
    bool haveKey = false;
  };

  [[noreturn]] void fail(const YAML::Mark &mark, std::string message) {
    diags.push_back(
        located(path, mark.line + 1, mark.column + 1, std::move(message)));
    throw StopParse{};
  }

  /// The core-schema name of `tag` ("str", "int", "float", "bool",
  /// "null", "seq", "map"), or "" for no tag / the non-specific ones;
  /// anything else is rejected.
  std::string coreTag(const YAML::Mark &mark, const std::string &tag) {
    if (tag.empty() || tag == "?" || tag == "!")
      return "";
    static const char *prefix = "tag:yaml.org,2002:";
    if (tag.rfind(prefix, 0) == 0) {
      std::string name = tag.substr(std::strlen(prefix));
      for (const char *known :
           {"str", "int", "float", "bool", "null", "seq", "map"})
        if (name == known)
          return name;
    }
    fail(mark, "unsupported YAML tag '" + tag +
                   "'; model specs use plain values (the core tags !!str, "
                   "!!int, !!float, !!bool, !!null, !!seq and !!map are "
                   "accepted where they match the value)");
  }

  [[noreturn]] void badTag(const YAML::Mark &mark, const std::string &tag,
                           const std::string &value) {
    std::string shown =
        tag.rfind("tag:yaml.org,2002:", 0) == 0 ? "!!" + tag.substr(18) : tag;
    fail(mark, "the tag " + shown + " does not match the value '" + value +
                   "'; remove the tag or change the value");
  }

  static bool isInteger(const std::string &v) {
    size_t i = v.size() && (v[0] == '-' || v[0] == '+') ? 1 : 0;
    if (i == v.size())
      return false;
    for (; i < v.size(); ++i)
      if (!std::isdigit((unsigned char)v[i]))
        return false;
    return true;
  }
  static bool isFloat(const std::string &v) {
    static const char *special[] = {".inf",  "-.inf", "+.inf", ".Inf",
                                    "-.Inf", "+.Inf", ".INF",  "-.INF",
                                    "+.INF", ".nan",  ".NaN",  ".NAN"};
    for (const char *sp : special)
      if (v == sp)
        return true;
    if (v.empty() || std::isspace((unsigned char)v[0]))
      return false;
    char *end = nullptr;
    std::strtod(v.c_str(), &end);
    return end && *end == '\0' && end != v.c_str();
  }
  static bool isBool(const std::string &v) {
    for (const char *b : {"true", "True", "TRUE", "false", "False", "FALSE"})
      if (v == b)
        return true;
    return false;
  }

  YamlNode *newNode(YamlNode::Kind kind, const YAML::Mark &mark) {
    if (doc.nodes.size() >= kMaxYamlNodes)
      fail(mark, "the file has more than " + std::to_string(kMaxYamlNodes) +
                     " YAML nodes; a model spec is far smaller");
    doc.nodes.emplace_back();
    YamlNode *n = &doc.nodes.back();
    n->kind = kind;
    n->line = mark.line + 1;
    n->col = mark.column + 1;
    return n;
  }

  void open(YamlNode *n, const YAML::Mark &mark) {
    if ((int)stack.size() >= kMaxNestingDepth)
      fail(mark, "collections nested more than " +
                     std::to_string(kMaxNestingDepth) +
                     " levels deep; a model spec needs only a few levels");
    stack.push_back(Frame{n});
  }

  void close() {
    YamlNode *n = stack.back().node;
    stack.pop_back();
    attach(n);
  }

  void attach(const YamlNode *n) {
    if (stack.empty()) {
      doc.root = n;
      return;
    }
    Frame &top = stack.back();
    if (top.node->kind == YamlNode::Kind::Sequence) {
      top.node->items.push_back(n);
    } else if (!top.haveKey) {
      top.pendingKey = n;
      top.haveKey = true;
    } else {
      top.node->entries.emplace_back(top.pendingKey, n);
      top.haveKey = false;
      top.pendingKey = nullptr;
    }
  }

  const std::string &path;
  YamlDocument &doc;
  std::vector<Diagnostic> &diags;
  std::vector<Frame> stack;
};

/// A second document gets its own handler; only its start position matters.
class DocumentStartProbe : public YAML::EventHandler {
public:
  YAML::Mark start;
  bool seen = false;
  void OnDocumentStart(const YAML::Mark &mark) override {
    if (!seen)
      start = mark;
    seen = true;
    throw StopParse{};
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark &, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark &, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark &, const std::string &, YAML::anchor_t,
                const std::string &) override {}
  void OnSequenceStart(const YAML::Mark &, const std::string &, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark &, const std::string &, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

/// yaml-cpp's message for a tab-indented line ("illegal map value") does not
/// mention tabs; say so when the reported line starts with one.
std::string tabHint(const std::string &text, int line) {
  size_t pos = 0;
  for (int l = 1; l < line && pos != std::string::npos; ++l) {
    pos = text.find('\n', pos);
    if (pos != std::string::npos)
      ++pos;
  }
  if (pos == std::string::npos || pos >= text.size())
    return "";
  size_t first = text.find_first_not_of(' ', pos);
  return first != std::string::npos && text[first] == '\t'
             ? " (line " + std::to_string(line) +
                   " is indented with a tab; YAML indents with spaces)"
             : "";
}

void reportParserError(const std::string &path, const std::string &text,
                       const YAML::ParserException &e,
                       std::vector<Diagnostic> &diags) {
  int line = e.mark.is_null() ? 0 : e.mark.line + 1;
  int col = e.mark.is_null() ? 0 : e.mark.column + 1;
  if (dynamic_cast<const YAML::DeepRecursion *>(&e)) {
    diags.push_back(located(path, line, col,
                            "collections nested too deeply; a model spec "
                            "needs only a few levels"));
    return;
  }
  diags.push_back(
      located(path, line, col,
              "invalid YAML: " + e.msg + tabHint(text, line) +
                  "; expected a YAML mapping such as 'model: {family: gpt, "
                  "...}' (docs/model-spec.md)"));
}

} // namespace

std::unique_ptr<YamlDocument>
parseYamlDocument(const std::string &path, const std::string &text,
                  std::vector<Diagnostic> &diags) {
  if (!prescanText(path, text, diags))
    return nullptr;
  auto doc = std::make_unique<YamlDocument>();
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    TreeBuilder builder(path, *doc, diags);
    if (!parser.HandleNextDocument(builder))
      return doc; // no document at all: the caller reports an empty file
    DocumentStartProbe probe;
    try {
      parser.HandleNextDocument(probe);
    } catch (const StopParse &) {
    }
    if (probe.seen) {
      diags.push_back(located(path, probe.start.line + 1,
                              probe.start.column + 1,
                              "a second YAML document starts here; a model "
                              "spec is a single document (remove the '---' "
                              "separator or split the file)"));
      return nullptr;
    }
  } catch (const StopParse &) {
    return nullptr;
  } catch (const YAML::ParserException &e) {
    reportParserError(path, text, e, diags);
    return nullptr;
  } catch (const YAML::Exception &e) {
    diags.push_back(located(path, 0, 0, "invalid YAML: " + e.msg));
    return nullptr;
  } catch (const std::bad_alloc &) {
    diags.push_back(
        located(path, 0, 0, "out of memory while reading the YAML file"));
    return nullptr;
  } catch (const std::exception &e) {
    diags.push_back(
        located(path, 0, 0, std::string("cannot read the YAML: ") + e.what()));
    return nullptr;
  }
  return doc;
}

} // namespace strata::frontend
