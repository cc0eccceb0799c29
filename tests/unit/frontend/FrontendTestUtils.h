//===- FrontendTestUtils.h - Helpers for the YAML frontend tests -*- C++
//-*-===//

#ifndef STRATA_TESTS_UNIT_FRONTEND_FRONTENDTESTUTILS_H
#define STRATA_TESTS_UNIT_FRONTEND_FRONTENDTESTUTILS_H

#include "frontends/yaml/ModelSpec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata::frontend::test {

struct LoadResult {
  std::optional<ModelSpec> spec;
  std::vector<Diagnostic> diags;

  /// All diagnostics, one per line, for failure messages.
  std::string text() const {
    std::string s;
    for (const Diagnostic &d : diags)
      s += d.str() + "\n";
    return s;
  }
};

/// Loads `contents` as the spec file "m.yaml".
inline LoadResult loadText(const std::string &contents) {
  LoadResult r;
  r.spec = loadModelSpec("m.yaml", r.diags, &contents);
  return r;
}

/// Expects the load to fail with a first diagnostic that starts with
/// `prefix` (which includes "m.yaml:LINE:COL: error: ...").
inline void expectError(const std::string &contents,
                        const std::string &prefix) {
  LoadResult r = loadText(contents);
  EXPECT_FALSE(r.spec.has_value()) << "loaded although expected: " << prefix;
  ASSERT_FALSE(r.diags.empty()) << "no diagnostic; expected: " << prefix;
  EXPECT_EQ(r.diags[0].str().substr(0, prefix.size()), prefix) << r.text();
}

/// Finds a param by name, or fails the test.
inline const GraphParam *findParam(const Graph &g, const std::string &name) {
  for (const GraphParam &p : g.params)
    if (p.name == name)
      return &p;
  ADD_FAILURE() << "no param " << name;
  return nullptr;
}

} // namespace strata::frontend::test

#endif // STRATA_TESTS_UNIT_FRONTEND_FRONTENDTESTUTILS_H
