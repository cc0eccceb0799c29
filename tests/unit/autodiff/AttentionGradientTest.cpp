//===- AttentionGradientTest.cpp - fused attention's gradient rule --------===//
//
// strata.causal_attention against float64 finite differences (multi-head
// and grouped-query), and against the unfused graph it replaces (matmul,
// causal softmax, matmul, with repeat_interleave for grouped-query): same
// loss and same parameter gradients.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/autodiff/GradientCheck.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

using namespace strata::reference;

namespace {

std::string f64(const std::vector<int64_t> &shape) {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + "f64>";
}

struct AttentionCase {
  int64_t batch, heads, kvHeads, seq, dim;
  double scale;
};

/// @forward: params q, k, v; the attention's output viewed as [rows, dim]
/// goes through cross-entropy against fixed targets.
std::string attentionModule(const AttentionCase &c, bool fused) {
  std::vector<int64_t> qs{c.batch, c.heads, c.seq, c.dim},
      ks{c.batch, c.kvHeads, c.seq, c.dim}, ss{c.batch, c.heads, c.seq, c.seq},
      ls{c.batch, c.heads, c.seq};
  int64_t rows = c.batch * c.heads * c.seq, group = c.heads / c.kvHeads;
  std::ostringstream os;
  os.precision(17);
  os << std::scientific; // "1" would not parse as an f64 attribute
  os << "func.func @forward() -> tensor<f64> {\n"
     << "  %q = strata.param \"q\" : " << f64(qs) << "\n"
     << "  %k = strata.param \"k\" : " << f64(ks) << "\n"
     << "  %v = strata.param \"v\" : " << f64(ks) << "\n";
  if (fused) {
    os << "  %out, %lse = strata.causal_attention %q, %k, %v {scale = "
       << c.scale << " : f64} : (" << f64(qs) << ", " << f64(ks) << ", "
       << f64(ks) << ") -> (" << f64(qs) << ", " << f64(ls) << ")\n";
  } else {
    std::string k = "%k", v = "%v";
    if (group > 1) {
      for (const char *name : {"k", "v"})
        os << "  %" << name << "r = strata.repeat_interleave %" << name
           << " {axis = 1 : i64, repeats = " << group << " : i64} : ("
           << f64(ks) << ") -> " << f64(qs) << "\n";
      k = "%kr", v = "%vr";
    }
    os << "  %s = strata.matmul %q, " << k << " {transpose_b = true} : ("
       << f64(qs) << ", " << f64(qs) << ") -> " << f64(ss) << "\n"
       << "  %p = strata.softmax %s {causal = true, scale = " << c.scale
       << " : f64} : (" << f64(ss) << ") -> " << f64(ss) << "\n"
       << "  %out = strata.matmul %p, " << v << " : (" << f64(ss) << ", "
       << f64(qs) << ") -> " << f64(qs) << "\n";
  }
  os << "  %targets = strata.input \"targets\" : tensor<" << rows << "xi32>\n"
     << "  %logits = strata.reshape %out : (" << f64(qs) << ") -> "
     << f64({rows, c.dim}) << "\n"
     << "  %loss = strata.cross_entropy %logits, %targets : ("
     << f64({rows, c.dim}) << ", tensor<" << rows << "xi32>) -> tensor<f64>\n"
     << "  return %loss : tensor<f64>\n}\n";
  return os.str();
}

TensorMap targetsFor(const AttentionCase &c) {
  int64_t rows = c.batch * c.heads * c.seq;
  return {{"targets", randomIds({rows}, c.dim, 11)}};
}

const AttentionCase kCases[] = {
    {2, 3, 3, 5, 4, 0.5}, // multi-head (gpt)
    {2, 4, 2, 6, 3, 0.9}, // grouped-query, two query heads per kv head
    {1, 4, 1, 4, 2, 1.3}, // one kv head for all (multi-query)
};

TEST(AttentionGradient, MatchesFiniteDifferences) {
  for (const AttentionCase &c : kCases) {
    SCOPED_TRACE(testing::Message() << "heads " << c.heads << " kv_heads "
                                    << c.kvHeads << " seq " << c.seq);
    std::string module = attentionModule(c, /*fused=*/true);
    GradientCheckResult r = runGradientCheck(module, targetsFor(c));
    ASSERT_TRUE(r.error.empty()) << r.error << "\nin:\n" << module;
    ASSERT_EQ(r.numeric.size(), 3u);
    for (const auto &[name, fd] : r.numeric) {
      double largest = 0.0;
      for (double x : fd.data)
        largest = std::max(largest, std::abs(x));
      EXPECT_GT(largest, 1e-4) << "the loss ignores " << name;
    }
    std::vector<std::string> mismatches =
        compareGradients(r.analytic, r.numeric);
    EXPECT_TRUE(mismatches.empty())
        << (mismatches.empty() ? "" : mismatches.front()) << "\nin:\n"
        << module;
  }
}

TEST(AttentionGradient, MatchesTheUnfusedGraph) {
  for (const AttentionCase &c : kCases) {
    SCOPED_TRACE(testing::Message()
                 << "heads " << c.heads << " kv_heads " << c.kvHeads);
    GradientCheckResult fused =
        runGradientCheck(attentionModule(c, true), targetsFor(c), 5);
    GradientCheckResult unfused =
        runGradientCheck(attentionModule(c, false), targetsFor(c), 5);
    ASSERT_TRUE(fused.error.empty()) << fused.error;
    ASSERT_TRUE(unfused.error.empty()) << unfused.error;
    EXPECT_NEAR(fused.loss, unfused.loss, 1e-12);
    ASSERT_EQ(fused.analytic.size(), 3u);
    for (const auto &[name, g] : fused.analytic) {
      ASSERT_TRUE(unfused.analytic.count(name)) << name;
      const Tensor &u = unfused.analytic.at(name);
      ASSERT_EQ(g.shape, u.shape) << name;
      for (int64_t i = 0; i < g.numElements(); ++i)
        EXPECT_NEAR(g.data[i], u.data[i], 1e-12) << name << "[" << i << "]";
    }
  }
}

TEST(AttentionGradient, KeyValueHeadsMustDivideQueryHeads) {
  AttentionCase c{1, 3, 2, 4, 2, 1.0};
  GradientCheckResult r = runGradientCheck(attentionModule(c, true), {});
  EXPECT_NE(r.error.find("kv_heads dividing heads"), std::string::npos)
      << r.error;
}

} // namespace
