//===- GradientCheckTest.cpp - every gradient rule vs finite differences --===//
//
// One test per differentiable op (and per attribute combination that takes a
// different path through its rule), a whole GPT-like block for multi-use
// values, and meta-tests showing that the check can fail.
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

std::string i32(const std::vector<int64_t> &shape) {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + "i32>";
}

/// A @forward whose `body` computes `%out` of shape `outShape`, and whose
/// loss is the cross-entropy of %out viewed as [N, C] (C its last dimension)
/// against random targets.
struct LossCase {
  std::string module;
  TensorMap inputs;
};

LossCase crossEntropyOf(const std::string &body,
                        const std::vector<int64_t> &outShape,
                        uint64_t seed = 7) {
  int64_t classes = outShape.back(), rows = 1;
  for (size_t d = 0; d + 1 < outShape.size(); ++d)
    rows *= outShape[d];
  std::ostringstream os;
  os << "func.func @forward() -> tensor<f64> {\n"
     << body << "\n"
     << "  %targets = strata.input \"targets\" : " << i32({rows}) << "\n"
     << "  %logits = strata.reshape %out : (" << f64(outShape) << ") -> "
     << f64({rows, classes}) << "\n"
     << "  %loss = strata.cross_entropy %logits, %targets : ("
     << f64({rows, classes}) << ", " << i32({rows}) << ") -> tensor<f64>\n"
     << "  return %loss : tensor<f64>\n}\n";
  return {os.str(), {{"targets", randomIds({rows}, classes, seed)}}};
}

/// `text` with every "$OP" replaced by `op`.
std::string substitute(std::string text, const std::string &op) {
  for (size_t at = text.find("$OP"); at != std::string::npos;
       at = text.find("$OP", at + op.size()))
    text.replace(at, 3, op);
  return text;
}

std::string firstLines(const std::vector<std::string> &lines, size_t n = 8) {
  std::string s;
  for (size_t i = 0; i < lines.size() && i < n; ++i)
    s += lines[i] + "\n";
  if (lines.size() > n)
    s += "... and " + std::to_string(lines.size() - n) + " more\n";
  return s;
}

/// Runs the check and expects every parameter's gradient to match; also
/// requires each parameter to have a non-zero gradient somewhere, so a case
/// whose loss ignores a parameter cannot pass vacuously.
void expectGradientsMatch(const std::string &module, const TensorMap &inputs) {
  GradientCheckResult r = runGradientCheck(module, inputs);
  ASSERT_TRUE(r.error.empty()) << r.error << "\nin:\n" << module;
  ASSERT_FALSE(r.numeric.empty()) << "no parameters in:\n" << module;
  for (const auto &[name, fd] : r.numeric) {
    double largest = 0.0;
    for (double v : fd.data)
      largest = std::max(largest, std::abs(v));
    EXPECT_GT(largest, 1e-4)
        << "the loss does not depend on \"" << name << "\"";
  }
  std::vector<std::string> mismatches = compareGradients(r.analytic, r.numeric);
  EXPECT_TRUE(mismatches.empty()) << firstLines(mismatches) << "in:\n"
                                  << module;
}

void expectGradientsMatch(const LossCase &c) {
  expectGradientsMatch(c.module, c.inputs);
}

TEST(GradientCheck, Embedding) {
  // Ids repeat (1 and 3), so the scatter-add must sum rows.
  LossCase c = crossEntropyOf(R"(
  %tab = strata.param "tab" : tensor<7x4xf64>
  %ids = strata.input "tokens" : tensor<2x3xi32>
  %out = strata.embedding %tab, %ids : (tensor<7x4xf64>, tensor<2x3xi32>) -> tensor<2x3x4xf64>)",
                              {2, 3, 4});
  c.inputs["tokens"] = Tensor({2, 3}, {1, 3, 1, 0, 6, 3});
  expectGradientsMatch(c);
}

/// matmul of params a and b with the given shapes and transpose flags.
LossCase matmulCase(const std::vector<int64_t> &a,
                    const std::vector<int64_t> &b, bool ta, bool tb,
                    const std::vector<int64_t> &out) {
  std::string attrs;
  if (ta || tb)
    attrs = std::string(" {") + (ta ? "transpose_a = true" : "") +
            (ta && tb ? ", " : "") + (tb ? "transpose_b = true" : "") + "}";
  return crossEntropyOf("  %a = strata.param \"a\" : " + f64(a) +
                            "\n  %b = strata.param \"b\" : " + f64(b) +
                            "\n  %out = strata.matmul %a, %b" + attrs + " : (" +
                            f64(a) + ", " + f64(b) + ") -> " + f64(out),
                        out);
}

TEST(GradientCheck, MatmulRank2AllTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "transpose_a=" << ta << " transpose_b=" << tb);
      std::vector<int64_t> a =
          ta ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4};
      std::vector<int64_t> b =
          tb ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5};
      expectGradientsMatch(matmulCase(a, b, ta, tb, {3, 5}));
    }
}

TEST(GradientCheck, MatmulBatchedAllTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "transpose_a=" << ta << " transpose_b=" << tb);
      std::vector<int64_t> a =
          ta ? std::vector<int64_t>{2, 4, 3} : std::vector<int64_t>{2, 3, 4};
      std::vector<int64_t> b =
          tb ? std::vector<int64_t>{2, 5, 4} : std::vector<int64_t>{2, 4, 5};
      expectGradientsMatch(matmulCase(a, b, ta, tb, {2, 3, 5}));
    }
}

TEST(GradientCheck, MatmulRank2RhsBroadcastOverBatch) {
  for (bool tb : {false, true}) {
    SCOPED_TRACE(testing::Message() << "transpose_b=" << tb);
    std::vector<int64_t> b =
        tb ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5};
    expectGradientsMatch(matmulCase({2, 3, 4}, b, false, tb, {2, 3, 5}));
    // Two batch dimensions: the rhs gradient flattens [2, 2, 3] rows.
    expectGradientsMatch(matmulCase({2, 2, 3, 4}, b, false, tb, {2, 2, 3, 5}));
  }
}

TEST(GradientCheck, MatmulTransposedLhsWithBroadcastRhsIsRejectedCleanly) {
  // The rule declines this combination; the pass must say so, not build a
  // wrong gradient.
  LossCase c = matmulCase({2, 4, 3}, {4, 5}, true, false, {2, 3, 5});
  GradientCheckResult r = runGradientCheck(c.module, c.inputs);
  EXPECT_NE(r.error.find("strata-autodiff failed"), std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("not supported"), std::string::npos) << r.error;
}

TEST(GradientCheck, BiasAdd) {
  expectGradientsMatch(crossEntropyOf(R"(
  %x = strata.param "x" : tensor<2x3x4xf64>
  %b = strata.param "b" : tensor<4xf64>
  %out = strata.bias_add %x, %b : (tensor<2x3x4xf64>, tensor<4xf64>) -> tensor<2x3x4xf64>)",
                                      {2, 3, 4}));
}

TEST(GradientCheck, AddAndMul) {
  for (const char *op : {"add", "mul"}) {
    SCOPED_TRACE(op);
    expectGradientsMatch(crossEntropyOf(substitute(R"(
  %x = strata.param "x" : tensor<3x5xf64>
  %y = strata.param "y" : tensor<3x5xf64>
  %out = strata.$OP %x, %y : (tensor<3x5xf64>, tensor<3x5xf64>) -> tensor<3x5xf64>)",
                                                   op),
                                        {3, 5}));
  }
}

TEST(GradientCheck, AddAndMulOfAValueWithItself) {
  // Both operands are one value: the pass must sum the two operand gradients.
  for (const char *op : {"add", "mul"}) {
    SCOPED_TRACE(op);
    expectGradientsMatch(crossEntropyOf(substitute(R"(
  %x = strata.param "x" : tensor<3x5xf64>
  %out = strata.$OP %x, %x : (tensor<3x5xf64>, tensor<3x5xf64>) -> tensor<3x5xf64>)",
                                                   op),
                                        {3, 5}));
  }
}

TEST(GradientCheck, Scale) {
  expectGradientsMatch(crossEntropyOf(R"(
  %x = strata.param "x" : tensor<3x5xf64>
  %out = strata.scale %x {factor = -1.7 : f64} : (tensor<3x5xf64>) -> tensor<3x5xf64>)",
                                      {3, 5}));
}

TEST(GradientCheck, GeluAndRelu) {
  // The factor spreads inputs over [-3, 3], where gelu's curvature matters.
  for (const char *op : {"gelu", "relu"}) {
    SCOPED_TRACE(op);
    expectGradientsMatch(crossEntropyOf(substitute(R"(
  %x = strata.param "x" : tensor<4x5xf64>
  %s = strata.scale %x {factor = 3.0 : f64} : (tensor<4x5xf64>) -> tensor<4x5xf64>
  %out = strata.$OP %s : (tensor<4x5xf64>) -> tensor<4x5xf64>)",
                                                   op),
                                        {4, 5}));
  }
}

TEST(GradientCheck, LayerNorm) {
  expectGradientsMatch(crossEntropyOf(R"(
  %x = strata.param "x" : tensor<2x3x5xf64>
  %g = strata.param "g" : tensor<5xf64>
  %b = strata.param "b" : tensor<5xf64>
  %out = strata.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f64} : (tensor<2x3x5xf64>, tensor<5xf64>, tensor<5xf64>) -> tensor<2x3x5xf64>)",
                                      {2, 3, 5}));
}

TEST(GradientCheck, Softmax) {
  for (const char *attrs : {"", " {scale = 0.37 : f64}", " {causal = true}",
                            " {causal = true, scale = 2.5 : f64}"}) {
    SCOPED_TRACE(attrs);
    expectGradientsMatch(crossEntropyOf(substitute(R"(
  %x = strata.param "x" : tensor<2x2x4x4xf64>
  %out = strata.softmax %x$OP : (tensor<2x2x4x4xf64>) -> tensor<2x2x4x4xf64>)",
                                                   attrs),
                                        {2, 2, 4, 4}));
  }
}

TEST(GradientCheck, ReshapeBetweenOps) {
  expectGradientsMatch(crossEntropyOf(R"(
  %x = strata.param "x" : tensor<2x3x4xf64>
  %w = strata.param "w" : tensor<6x5xf64>
  %r = strata.reshape %x : (tensor<2x3x4xf64>) -> tensor<4x6xf64>
  %out = strata.matmul %r, %w : (tensor<4x6xf64>, tensor<6x5xf64>) -> tensor<4x5xf64>)",
                                      {4, 5}));
}

TEST(GradientCheck, Transpose) {
  // A permutation that is not its own inverse, on distinct dimension sizes.
  expectGradientsMatch(crossEntropyOf(R"(
  %x = strata.param "x" : tensor<2x3x4xf64>
  %out = strata.transpose %x {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf64>) -> tensor<4x2x3xf64>)",
                                      {4, 2, 3}));
}

TEST(GradientCheck, SplitAllResultsUsed) {
  expectGradientsMatch(crossEntropyOf(R"(
  %x = strata.param "x" : tensor<2x6x3xf64>
  %a, %b, %c = strata.split %x {axis = 1 : i64} : (tensor<2x6x3xf64>) -> (tensor<2x2x3xf64>, tensor<2x2x3xf64>, tensor<2x2x3xf64>)
  %ab = strata.mul %a, %b : (tensor<2x2x3xf64>, tensor<2x2x3xf64>) -> tensor<2x2x3xf64>
  %out = strata.add %ab, %c : (tensor<2x2x3xf64>, tensor<2x2x3xf64>) -> tensor<2x2x3xf64>)",
                                      {2, 2, 3}));
}

TEST(GradientCheck, SplitOnlySomeResultsUsed) {
  // Only the middle part reaches the loss; the others get zero gradients.
  expectGradientsMatch(crossEntropyOf(R"(
  %x = strata.param "x" : tensor<2x6x3xf64>
  %a, %out, %c = strata.split %x {axis = -2 : i64} : (tensor<2x6x3xf64>) -> (tensor<2x2x3xf64>, tensor<2x2x3xf64>, tensor<2x2x3xf64>))",
                                      {2, 2, 3}));
}

TEST(GradientCheck, ConcatUnequalSizes) {
  expectGradientsMatch(crossEntropyOf(R"(
  %a = strata.param "a" : tensor<2x3xf64>
  %b = strata.param "b" : tensor<2x5xf64>
  %out = strata.concat %a, %b {axis = 1 : i64} : (tensor<2x3xf64>, tensor<2x5xf64>) -> tensor<2x8xf64>)",
                                      {2, 8}));
  expectGradientsMatch(crossEntropyOf(R"(
  %a = strata.param "a" : tensor<1x4xf64>
  %b = strata.param "b" : tensor<3x4xf64>
  %c = strata.param "c" : tensor<2x4xf64>
  %out = strata.concat %a, %b, %c {axis = 0 : i64} : (tensor<1x4xf64>, tensor<3x4xf64>, tensor<2x4xf64>) -> tensor<6x4xf64>)",
                                      {6, 4}));
}

TEST(GradientCheck, ConcatNegativeAxis) {
  // The axis attribute is an I64Attr, whose accessor returns uint64_t: a rule
  // that tests `getAxis() < 0` never sees the negative axis.
  expectGradientsMatch(crossEntropyOf(R"(
  %a = strata.param "a" : tensor<2x3xf64>
  %b = strata.param "b" : tensor<2x5xf64>
  %out = strata.concat %a, %b {axis = -1 : i64} : (tensor<2x3xf64>, tensor<2x5xf64>) -> tensor<2x8xf64>)",
                                      {2, 8}));
}

TEST(GradientCheck, CrossEntropyOverSeveralDimensions) {
  const char *module = R"(
func.func @forward() -> tensor<f64> {
  %logits = strata.param "logits" : tensor<2x3x5xf64>
  %targets = strata.input "targets" : tensor<2x3xi32>
  %loss = strata.cross_entropy %logits, %targets : (tensor<2x3x5xf64>, tensor<2x3xi32>) -> tensor<f64>
  return %loss : tensor<f64>
})";
  expectGradientsMatch(module, {{"targets", randomIds({2, 3}, 5, 3)}});
}

TEST(GradientCheck, ForwardWithExtraResults) {
  // Results after the loss are for inspection and carry no gradient.
  const char *module = R"(
func.func @forward() -> (tensor<f64>, tensor<2x3xf64>) {
  %logits = strata.param "logits" : tensor<2x3xf64>
  %targets = strata.input "targets" : tensor<2xi32>
  %p = strata.softmax %logits : (tensor<2x3xf64>) -> tensor<2x3xf64>
  %loss = strata.cross_entropy %logits, %targets : (tensor<2x3xf64>, tensor<2xi32>) -> tensor<f64>
  return %loss, %p : tensor<f64>, tensor<2x3xf64>
})";
  expectGradientsMatch(module, {{"targets", randomIds({2}, 3, 4)}});
}

TEST(GradientCheck, DefaultLossScaleIsMicroOverGlobalBatch) {
  // Without loss-scale the seed is micro_batch / global_batch = 1/4, so the
  // accumulated gradient is a quarter of the loss gradient.
  const char *module = R"(
module attributes {strata.training = {global_batch = 8 : i64, micro_batch = 2 : i64}} {
  func.func @forward() -> tensor<f64> {
    %logits = strata.param "logits" : tensor<2x3xf64>
    %targets = strata.input "targets" : tensor<2xi32>
    %loss = strata.cross_entropy %logits, %targets : (tensor<2x3xf64>, tensor<2xi32>) -> tensor<f64>
    return %loss : tensor<f64>
  }
})";
  GradientCheckResult r =
      runGradientCheck(module, {{"targets", randomIds({2}, 3, 5)}},
                       /*seed=*/1, /*eps=*/1e-6, /*lossScale=*/0.0);
  ASSERT_TRUE(r.error.empty()) << r.error;
  for (double &v : r.numeric.at("logits").data)
    v *= 0.25;
  std::vector<std::string> mismatches = compareGradients(r.analytic, r.numeric);
  EXPECT_TRUE(mismatches.empty()) << firstLines(mismatches);
}

/// One pre-norm transformer block with a tied embedding, as the gpt preset
/// builds it: B=2, S=4, H=8, 2 heads of 4, MLP 16, vocabulary 11.
constexpr const char *kGptBlock = R"(
func.func @forward() -> tensor<f64> {
  %tokens = strata.input "tokens" : tensor<2x4xi32>
  %targets = strata.input "targets" : tensor<2x4xi32>
  %positions = strata.input "positions" : tensor<4xi32>
  %wte = strata.param "wte" : tensor<11x8xf64>
  %wpe = strata.param "wpe" : tensor<4x8xf64>
  %ln1_g = strata.param "ln1.g" : tensor<8xf64>
  %ln1_b = strata.param "ln1.b" : tensor<8xf64>
  %w_qkv = strata.param "attn.qkv.w" : tensor<8x24xf64>
  %b_qkv = strata.param "attn.qkv.b" : tensor<24xf64>
  %w_o = strata.param "attn.proj.w" : tensor<8x8xf64>
  %ln2_g = strata.param "ln2.g" : tensor<8xf64>
  %ln2_b = strata.param "ln2.b" : tensor<8xf64>
  %w_fc = strata.param "mlp.fc.w" : tensor<8x16xf64>
  %b_fc = strata.param "mlp.fc.b" : tensor<16xf64>
  %w_pr = strata.param "mlp.proj.w" : tensor<16x8xf64>
  %lnf_g = strata.param "lnf.g" : tensor<8xf64>
  %lnf_b = strata.param "lnf.b" : tensor<8xf64>

  %te = strata.embedding %wte, %tokens : (tensor<11x8xf64>, tensor<2x4xi32>) -> tensor<2x4x8xf64>
  %pe = strata.embedding %wpe, %positions : (tensor<4x8xf64>, tensor<4xi32>) -> tensor<4x8xf64>
  %pe2 = strata.concat %pe, %pe {axis = 0 : i64} : (tensor<4x8xf64>, tensor<4x8xf64>) -> tensor<8x8xf64>
  %pe3 = strata.reshape %pe2 : (tensor<8x8xf64>) -> tensor<2x4x8xf64>
  %x0 = strata.add %te, %pe3 : (tensor<2x4x8xf64>, tensor<2x4x8xf64>) -> tensor<2x4x8xf64>

  %h1 = strata.layer_norm %x0, %ln1_g, %ln1_b {epsilon = 1.0e-05 : f64} : (tensor<2x4x8xf64>, tensor<8xf64>, tensor<8xf64>) -> tensor<2x4x8xf64>
  %qkv0 = strata.matmul %h1, %w_qkv : (tensor<2x4x8xf64>, tensor<8x24xf64>) -> tensor<2x4x24xf64>
  %qkv1 = strata.bias_add %qkv0, %b_qkv : (tensor<2x4x24xf64>, tensor<24xf64>) -> tensor<2x4x24xf64>
  %qkv2 = strata.reshape %qkv1 : (tensor<2x4x24xf64>) -> tensor<2x4x3x2x4xf64>
  %qkv3 = strata.transpose %qkv2 {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x4x3x2x4xf64>) -> tensor<3x2x2x4x4xf64>
  %q0, %k0, %v0 = strata.split %qkv3 {axis = 0 : i64} : (tensor<3x2x2x4x4xf64>) -> (tensor<1x2x2x4x4xf64>, tensor<1x2x2x4x4xf64>, tensor<1x2x2x4x4xf64>)
  %q = strata.reshape %q0 : (tensor<1x2x2x4x4xf64>) -> tensor<2x2x4x4xf64>
  %k = strata.reshape %k0 : (tensor<1x2x2x4x4xf64>) -> tensor<2x2x4x4xf64>
  %v = strata.reshape %v0 : (tensor<1x2x2x4x4xf64>) -> tensor<2x2x4x4xf64>
  %s = strata.matmul %q, %k {transpose_b = true} : (tensor<2x2x4x4xf64>, tensor<2x2x4x4xf64>) -> tensor<2x2x4x4xf64>
  %p = strata.softmax %s {causal = true, scale = 5.000000e-01 : f64} : (tensor<2x2x4x4xf64>) -> tensor<2x2x4x4xf64>
  %ctx0 = strata.matmul %p, %v : (tensor<2x2x4x4xf64>, tensor<2x2x4x4xf64>) -> tensor<2x2x4x4xf64>
  %ctx1 = strata.transpose %ctx0 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x4x4xf64>) -> tensor<2x4x2x4xf64>
  %ctx2 = strata.reshape %ctx1 : (tensor<2x4x2x4xf64>) -> tensor<2x4x8xf64>
  %attn = strata.matmul %ctx2, %w_o : (tensor<2x4x8xf64>, tensor<8x8xf64>) -> tensor<2x4x8xf64>
  %x1 = strata.add %x0, %attn : (tensor<2x4x8xf64>, tensor<2x4x8xf64>) -> tensor<2x4x8xf64>

  %h2 = strata.layer_norm %x1, %ln2_g, %ln2_b {epsilon = 1.0e-05 : f64} : (tensor<2x4x8xf64>, tensor<8xf64>, tensor<8xf64>) -> tensor<2x4x8xf64>
  %f0 = strata.matmul %h2, %w_fc : (tensor<2x4x8xf64>, tensor<8x16xf64>) -> tensor<2x4x16xf64>
  %f1 = strata.bias_add %f0, %b_fc : (tensor<2x4x16xf64>, tensor<16xf64>) -> tensor<2x4x16xf64>
  %f2 = strata.gelu %f1 : (tensor<2x4x16xf64>) -> tensor<2x4x16xf64>
  %f3 = strata.matmul %f2, %w_pr : (tensor<2x4x16xf64>, tensor<16x8xf64>) -> tensor<2x4x8xf64>
  %x2 = strata.add %x1, %f3 : (tensor<2x4x8xf64>, tensor<2x4x8xf64>) -> tensor<2x4x8xf64>

  %hf = strata.layer_norm %x2, %lnf_g, %lnf_b {epsilon = 1.0e-05 : f64} : (tensor<2x4x8xf64>, tensor<8xf64>, tensor<8xf64>) -> tensor<2x4x8xf64>
  %logits = strata.matmul %hf, %wte {transpose_b = true} : (tensor<2x4x8xf64>, tensor<11x8xf64>) -> tensor<2x4x11xf64>
  %loss = strata.cross_entropy %logits, %targets : (tensor<2x4x11xf64>, tensor<2x4xi32>) -> tensor<f64>
  return %loss : tensor<f64>
})";

TensorMap gptInputs() {
  return {{"tokens", randomIds({2, 4}, 11, 21)},
          {"targets", randomIds({2, 4}, 11, 22)},
          {"positions", Tensor({4}, {0, 1, 2, 3})}};
}

TEST(GradientCheck, GptBlockWithTiedEmbedding) {
  expectGradientsMatch(kGptBlock, gptInputs());
}

//===----------------------------------------------------------------------===//
// Llama family
//===----------------------------------------------------------------------===//

TEST(GradientCheck, RmsNorm) {
  expectGradientsMatch(crossEntropyOf(R"(
  %x = strata.param "x" : tensor<2x3x5xf64>
  %w = strata.param "w" : tensor<5xf64>
  %out = strata.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : (tensor<2x3x5xf64>, tensor<5xf64>) -> tensor<2x3x5xf64>)",
                                      {2, 3, 5}));
}

TEST(GradientCheck, RotaryEmbedding) {
  // Positions along dim -2 (4 of them), pairs (i, i + 3) of a head dim of 6;
  // a small theta makes every pair's angle large.
  for (const char *theta : {"1.0e+04", "2.5"}) {
    SCOPED_TRACE(theta);
    expectGradientsMatch(crossEntropyOf(substitute(R"(
  %x = strata.param "x" : tensor<2x3x4x6xf64>
  %out = strata.rotary_embedding %x {theta = $OP : f64} : (tensor<2x3x4x6xf64>) -> tensor<2x3x4x6xf64>)",
                                                   theta),
                                        {2, 3, 4, 6}));
  }
}

TEST(GradientCheck, SiluAndSiluMul) {
  expectGradientsMatch(crossEntropyOf(R"(
  %x = strata.param "x" : tensor<4x5xf64>
  %s = strata.scale %x {factor = 3.0 : f64} : (tensor<4x5xf64>) -> tensor<4x5xf64>
  %out = strata.silu %s : (tensor<4x5xf64>) -> tensor<4x5xf64>)",
                                      {4, 5}));
  expectGradientsMatch(crossEntropyOf(R"(
  %g = strata.param "gate" : tensor<4x5xf64>
  %u = strata.param "up" : tensor<4x5xf64>
  %s = strata.scale %g {factor = 3.0 : f64} : (tensor<4x5xf64>) -> tensor<4x5xf64>
  %out = strata.silu_mul %s, %u : (tensor<4x5xf64>, tensor<4x5xf64>) -> tensor<4x5xf64>)",
                                      {4, 5}));
}

TEST(GradientCheck, UnaryOfEveryKind) {
  // sqrt and reciprocal of exp(2x), so their inputs are positive; the
  // others of 2x.
  for (std::string kind :
       {"sqrt", "reciprocal", "erf", "tanh", "sigmoid", "exp", "neg"}) {
    SCOPED_TRACE(kind);
    bool positive = kind == "sqrt" || kind == "reciprocal";
    std::string body = substitute(R"(
  %x = strata.param "x" : tensor<4x5xf64>
  %s = strata.scale %x {factor = 2.0 : f64} : (tensor<4x5xf64>) -> tensor<4x5xf64>
  %e = strata.unary %s {kind = "exp"} : (tensor<4x5xf64>) -> tensor<4x5xf64>
  %out = strata.unary $IN {kind = "$OP"} : (tensor<4x5xf64>) -> tensor<4x5xf64>)",
                                  kind);
    body.replace(body.find("$IN"), 3, positive ? "%e" : "%s");
    expectGradientsMatch(crossEntropyOf(body, {4, 5}));
  }
}

TEST(GradientCheck, BinaryOfEveryKindAndBroadcast) {
  // rhs of lhs's shape, a suffix [5], a suffix with leading 1s [1, 5], a
  // two-dim suffix [3, 5], a scalar, a [2, 3, 1] and a [2, 1, 5] (a run of
  // 1s at the end, in the middle); rhs is exp(y), positive; a tanh after it
  // so that adding a scalar changes the loss.
  for (std::string kind : {"add", "sub", "mul", "div"})
    for (std::string rhs :
         {"2x3x5", "5", "1x5", "3x5", "", "1", "2x3x1", "2x1x5"}) {
      SCOPED_TRACE(kind + " by " + rhs);
      std::string t = "tensor<" + (rhs.empty() ? "" : rhs + "x") + "f64>";
      std::string body = R"(
  %x = strata.param "x" : tensor<2x3x5xf64>
  %y = strata.param "y" : )" +
                         t + R"(
  %e = strata.unary %y {kind = "exp"} : ()" +
                         t + ") -> " + t + R"(
  %b = strata.binary %x, %e {kind = ")" +
                         kind + R"("} : (tensor<2x3x5xf64>, )" + t +
                         R"() -> tensor<2x3x5xf64>
  %out = strata.unary %b {kind = "tanh"} : (tensor<2x3x5xf64>) -> tensor<2x3x5xf64>)";
      expectGradientsMatch(crossEntropyOf(body, {2, 3, 5}));
    }
}

TEST(GradientCheck, ReduceMeanOverEachAxis) {
  // The mean times a parameter, so every entry's gradient differs.
  for (const char *axis : {"0", "1", "-1"}) {
    SCOPED_TRACE(axis);
    std::string body = substitute(R"(
  %x = strata.param "x" : tensor<3x4x5xf64>
  %m = strata.reduce_mean %x {axis = $OP : i64} : (tensor<3x4x5xf64>) -> $MEAN
  %w = strata.param "w" : $MEAN
  %p = strata.mul %m, %w : ($MEAN, $MEAN) -> $MEAN
  %out = strata.reshape %p : ($MEAN) -> $OUT)",
                                  axis);
    std::string mean = std::string(axis) == "0"   ? "tensor<1x4x5xf64>"
                       : std::string(axis) == "1" ? "tensor<3x1x5xf64>"
                                                  : "tensor<3x4x1xf64>";
    for (size_t at = body.find("$MEAN"); at != std::string::npos;
         at = body.find("$MEAN"))
      body.replace(at, 5, mean);
    // Over the last axis the classes are the 4 means of each row.
    bool last = std::string(axis) == "-1";
    std::vector<int64_t> outShape =
        last ? std::vector<int64_t>{3, 4}
             : std::vector<int64_t>{std::string(axis) == "0" ? 1 : 3,
                                    std::string(axis) == "1" ? 1 : 4, 5};
    std::string out = f64(outShape);
    body.replace(body.find("$OUT"), 4, out);
    expectGradientsMatch(crossEntropyOf(body, outShape));
  }
}

TEST(GradientCheck, SiluMulOfAValueWithItself) {
  expectGradientsMatch(crossEntropyOf(R"(
  %x = strata.param "x" : tensor<4x5xf64>
  %out = strata.silu_mul %x, %x : (tensor<4x5xf64>, tensor<4x5xf64>) -> tensor<4x5xf64>)",
                                      {4, 5}));
}

TEST(GradientCheck, RepeatInterleave) {
  // Inner axis (kv heads of [B, kv, S, d]) and the last axis (negative).
  expectGradientsMatch(crossEntropyOf(R"(
  %x = strata.param "x" : tensor<2x2x3x4xf64>
  %out = strata.repeat_interleave %x {axis = 1 : i64, repeats = 3 : i64} : (tensor<2x2x3x4xf64>) -> tensor<2x6x3x4xf64>)",
                                      {2, 6, 3, 4}));
  expectGradientsMatch(crossEntropyOf(R"(
  %x = strata.param "x" : tensor<3x4xf64>
  %out = strata.repeat_interleave %x {axis = -1 : i64, repeats = 2 : i64} : (tensor<3x4xf64>) -> tensor<3x8xf64>)",
                                      {3, 8}));
}

/// One Llama block as the llama preset builds it (RMSNorm, separate q/k/v in
/// nn.Linear layout, rotary embeddings, grouped-query attention with 2 query
/// heads sharing 1 kv head, SwiGLU, untied head): B=2, S=4, H=8, head dim 4,
/// ffn 12, vocabulary 11.
constexpr const char *kLlamaBlock = R"(
func.func @forward() -> tensor<f64> {
  %tokens = strata.input "tokens" : tensor<2x4xi32>
  %targets = strata.input "targets" : tensor<2x4xi32>
  %embed = strata.param "embed" : tensor<11x8xf64>
  %wq = strata.param "q" : tensor<8x8xf64>
  %wk = strata.param "k" : tensor<4x8xf64>
  %wv = strata.param "v" : tensor<4x8xf64>
  %wo = strata.param "o" : tensor<8x8xf64>
  %wg = strata.param "gate" : tensor<12x8xf64>
  %wu = strata.param "up" : tensor<12x8xf64>
  %wd = strata.param "down" : tensor<8x12xf64>
  %n1 = strata.param "norm1" : tensor<8xf64>
  %n2 = strata.param "norm2" : tensor<8xf64>
  %nf = strata.param "normf" : tensor<8xf64>
  %head = strata.param "head" : tensor<11x8xf64>

  %x0 = strata.embedding %embed, %tokens : (tensor<11x8xf64>, tensor<2x4xi32>) -> tensor<2x4x8xf64>
  %h1 = strata.rms_norm %x0, %n1 {epsilon = 1.0e-05 : f64} : (tensor<2x4x8xf64>, tensor<8xf64>) -> tensor<2x4x8xf64>
  %q0 = strata.matmul %h1, %wq {transpose_b = true} : (tensor<2x4x8xf64>, tensor<8x8xf64>) -> tensor<2x4x8xf64>
  %q1 = strata.reshape %q0 : (tensor<2x4x8xf64>) -> tensor<2x4x2x4xf64>
  %q2 = strata.transpose %q1 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x4xf64>) -> tensor<2x2x4x4xf64>
  %q = strata.rotary_embedding %q2 {theta = 1.0e+02 : f64} : (tensor<2x2x4x4xf64>) -> tensor<2x2x4x4xf64>
  %k0 = strata.matmul %h1, %wk {transpose_b = true} : (tensor<2x4x8xf64>, tensor<4x8xf64>) -> tensor<2x4x4xf64>
  %k1 = strata.reshape %k0 : (tensor<2x4x4xf64>) -> tensor<2x4x1x4xf64>
  %k2 = strata.transpose %k1 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x4x1x4xf64>) -> tensor<2x1x4x4xf64>
  %k3 = strata.rotary_embedding %k2 {theta = 1.0e+02 : f64} : (tensor<2x1x4x4xf64>) -> tensor<2x1x4x4xf64>
  %k = strata.repeat_interleave %k3 {axis = 1 : i64, repeats = 2 : i64} : (tensor<2x1x4x4xf64>) -> tensor<2x2x4x4xf64>
  %v0 = strata.matmul %h1, %wv {transpose_b = true} : (tensor<2x4x8xf64>, tensor<4x8xf64>) -> tensor<2x4x4xf64>
  %v1 = strata.reshape %v0 : (tensor<2x4x4xf64>) -> tensor<2x4x1x4xf64>
  %v2 = strata.transpose %v1 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x4x1x4xf64>) -> tensor<2x1x4x4xf64>
  %v = strata.repeat_interleave %v2 {axis = 1 : i64, repeats = 2 : i64} : (tensor<2x1x4x4xf64>) -> tensor<2x2x4x4xf64>
  %s = strata.matmul %q, %k {transpose_b = true} : (tensor<2x2x4x4xf64>, tensor<2x2x4x4xf64>) -> tensor<2x2x4x4xf64>
  %p = strata.softmax %s {causal = true, scale = 5.000000e-01 : f64} : (tensor<2x2x4x4xf64>) -> tensor<2x2x4x4xf64>
  %c0 = strata.matmul %p, %v : (tensor<2x2x4x4xf64>, tensor<2x2x4x4xf64>) -> tensor<2x2x4x4xf64>
  %c1 = strata.transpose %c0 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x4x4xf64>) -> tensor<2x4x2x4xf64>
  %c2 = strata.reshape %c1 : (tensor<2x4x2x4xf64>) -> tensor<2x4x8xf64>
  %attn = strata.matmul %c2, %wo {transpose_b = true} : (tensor<2x4x8xf64>, tensor<8x8xf64>) -> tensor<2x4x8xf64>
  %x1 = strata.add %x0, %attn : (tensor<2x4x8xf64>, tensor<2x4x8xf64>) -> tensor<2x4x8xf64>

  %h2 = strata.rms_norm %x1, %n2 {epsilon = 1.0e-05 : f64} : (tensor<2x4x8xf64>, tensor<8xf64>) -> tensor<2x4x8xf64>
  %g = strata.matmul %h2, %wg {transpose_b = true} : (tensor<2x4x8xf64>, tensor<12x8xf64>) -> tensor<2x4x12xf64>
  %u = strata.matmul %h2, %wu {transpose_b = true} : (tensor<2x4x8xf64>, tensor<12x8xf64>) -> tensor<2x4x12xf64>
  %a = strata.silu_mul %g, %u : (tensor<2x4x12xf64>, tensor<2x4x12xf64>) -> tensor<2x4x12xf64>
  %m = strata.matmul %a, %wd {transpose_b = true} : (tensor<2x4x12xf64>, tensor<8x12xf64>) -> tensor<2x4x8xf64>
  %x2 = strata.add %x1, %m : (tensor<2x4x8xf64>, tensor<2x4x8xf64>) -> tensor<2x4x8xf64>

  %hf = strata.rms_norm %x2, %nf {epsilon = 1.0e-05 : f64} : (tensor<2x4x8xf64>, tensor<8xf64>) -> tensor<2x4x8xf64>
  %logits = strata.matmul %hf, %head {transpose_b = true} : (tensor<2x4x8xf64>, tensor<11x8xf64>) -> tensor<2x4x11xf64>
  %loss = strata.cross_entropy %logits, %targets : (tensor<2x4x11xf64>, tensor<2x4xi32>) -> tensor<f64>
  return %loss : tensor<f64>
})";

TEST(GradientCheck, LlamaBlockWithGroupedQueryAttention) {
  expectGradientsMatch(kLlamaBlock, {{"tokens", randomIds({2, 4}, 11, 23)},
                                     {"targets", randomIds({2, 4}, 11, 24)}});
}

TEST(GradientCheckMeta, WrongGradientIsReported) {
  LossCase c = matmulCase({3, 4}, {4, 5}, false, false, {3, 5});
  GradientCheckResult r = runGradientCheck(c.module, c.inputs);
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_TRUE(compareGradients(r.analytic, r.numeric).empty());
  // A perturbation well below the gradients' size, well above the tolerance.
  r.analytic.at("b").data[7] += 1e-4;
  std::vector<std::string> mismatches = compareGradients(r.analytic, r.numeric);
  ASSERT_EQ(mismatches.size(), 1u) << firstLines(mismatches);
  EXPECT_NE(mismatches[0].find("param \"b\" element 7"), std::string::npos)
      << mismatches[0];
}

TEST(GradientCheckMeta, MissingOrExtraGradientIsReported) {
  LossCase c = matmulCase({3, 4}, {4, 5}, false, false, {3, 5});
  GradientCheckResult r = runGradientCheck(c.module, c.inputs);
  ASSERT_TRUE(r.error.empty()) << r.error;
  TensorMap analytic = r.analytic;
  analytic.erase("a");
  analytic["c"] = Tensor({1}, 0.0);
  std::vector<std::string> mismatches = compareGradients(analytic, r.numeric);
  ASSERT_EQ(mismatches.size(), 2u) << firstLines(mismatches);
  EXPECT_NE(mismatches[0].find("\"a\": no strata.accumulate_grad"),
            std::string::npos);
  EXPECT_NE(mismatches[1].find("\"c\""), std::string::npos);
}

TEST(GradientCheckMeta, GradientOfTheWrongOpIsReported) {
  // A deliberately wrong rule, emulated in IR: gradients built for relu
  // checked against a gelu forward must disagree.
  LossCase c = crossEntropyOf(R"(
  %x = strata.param "x" : tensor<4x5xf64>
  %out = strata.gelu %x : (tensor<4x5xf64>) -> tensor<4x5xf64>)",
                              {4, 5});
  GradientCheckResult gelu = runGradientCheck(c.module, c.inputs);
  ASSERT_TRUE(gelu.error.empty()) << gelu.error;
  std::string reluModule = c.module;
  reluModule.replace(reluModule.find("strata.gelu"), 11, "strata.relu");
  GradientCheckResult relu = runGradientCheck(reluModule, c.inputs);
  ASSERT_TRUE(relu.error.empty()) << relu.error;
  EXPECT_FALSE(compareGradients(relu.analytic, gelu.numeric).empty());
}

} // namespace
