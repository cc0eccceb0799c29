//===- InterpreterTest.cpp - reference interpreter vs hand results --------===//
//
// Finite differences only prove that gradient ops agree with forward ops as
// the interpreter evaluates them; these hand-computed values pin the forward
// semantics themselves (mask direction, transpose conventions, split order).
//
//===----------------------------------------------------------------------===//

#include "tests/unit/autodiff/Interpreter.h"

#include "dialects/strata/StrataOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace mlir;
using namespace strata::reference;

namespace {

/// Parses `body` as the ops of `func.func @main() -> <resultTypes>` and
/// evaluates it.
Evaluation run(const std::string &resultTypes, const std::string &body,
               const TensorMap &params = {}, const TensorMap &inputs = {}) {
  DialectRegistry registry;
  registry.insert<strata::StrataDialect, func::FuncDialect>();
  MLIRContext context(registry);
  context.allowUnregisteredDialects();
  context.loadAllAvailableDialects();
  std::string text =
      "func.func @main() -> (" + resultTypes + ") {\n" + body + "\n}\n";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  if (!module) {
    Evaluation failed;
    failed.error = "parse error in:\n" + text;
    return failed;
  }
  return evaluate(module->lookupSymbol<func::FuncOp>("main"), inputs, params);
}

void expectData(const Tensor &t, std::vector<int64_t> shape,
                std::vector<double> data, double tolerance = 1e-12) {
  EXPECT_EQ(t.shape, shape);
  ASSERT_EQ(t.data.size(), data.size());
  for (size_t i = 0; i < data.size(); ++i)
    EXPECT_NEAR(t.data[i], data[i], tolerance) << "element " << i;
}

Tensor iota(std::vector<int64_t> shape) {
  Tensor t(std::move(shape));
  for (size_t i = 0; i < t.data.size(); ++i)
    t.data[i] = static_cast<double>(i);
  return t;
}

TEST(ReferenceInterpreter, MatmulTransposeConventions) {
  // a = [[0,1,2],[3,4,5]], b = [[0,1],[2,3],[4,5]]; a b = [[10,13],[28,40]].
  TensorMap p{{"a", iota({2, 3})},
              {"b", iota({3, 2})},
              {"at", Tensor({3, 2}, {0, 3, 1, 4, 2, 5})},
              {"bt", Tensor({2, 3}, {0, 2, 4, 1, 3, 5})}};
  Evaluation e =
      run("tensor<2x2xf64>, tensor<2x2xf64>, tensor<2x2xf64>, tensor<2x2xf64>",
          R"(
  %a = strata.param "a" : tensor<2x3xf64>
  %b = strata.param "b" : tensor<3x2xf64>
  %at = strata.param "at" : tensor<3x2xf64>
  %bt = strata.param "bt" : tensor<2x3xf64>
  %0 = strata.matmul %a, %b : (tensor<2x3xf64>, tensor<3x2xf64>) -> tensor<2x2xf64>
  %1 = strata.matmul %at, %b {transpose_a = true} : (tensor<3x2xf64>, tensor<3x2xf64>) -> tensor<2x2xf64>
  %2 = strata.matmul %a, %bt {transpose_b = true} : (tensor<2x3xf64>, tensor<2x3xf64>) -> tensor<2x2xf64>
  %3 = strata.matmul %at, %bt {transpose_a = true, transpose_b = true} : (tensor<3x2xf64>, tensor<2x3xf64>) -> tensor<2x2xf64>
  return %0, %1, %2, %3 : tensor<2x2xf64>, tensor<2x2xf64>, tensor<2x2xf64>, tensor<2x2xf64>)",
          p);
  ASSERT_TRUE(e.ok()) << e.error;
  for (const Tensor &t : e.results)
    expectData(t, {2, 2}, {10, 13, 28, 40});
}

TEST(ReferenceInterpreter, MatmulBatchedAndBroadcast) {
  // Batch 1 of the lhs is batch 0 plus 6: its product adds 6 * column sums.
  TensorMap p{{"a", iota({2, 2, 3})}, {"b", iota({3, 2})}};
  Evaluation e = run("tensor<2x2x2xf64>", R"(
  %a = strata.param "a" : tensor<2x2x3xf64>
  %b = strata.param "b" : tensor<3x2xf64>
  %0 = strata.matmul %a, %b : (tensor<2x2x3xf64>, tensor<3x2xf64>) -> tensor<2x2x2xf64>
  return %0 : tensor<2x2x2xf64>)",
                     p);
  ASSERT_TRUE(e.ok()) << e.error;
  expectData(e.results[0], {2, 2, 2},
             {10, 13, 28, 40, 10 + 36, 13 + 54, 28 + 36, 40 + 54});
}

TEST(ReferenceInterpreter, ActivationsAndScale) {
  TensorMap p{{"x", Tensor({3}, {-1.0, 0.0, 1.0})}};
  Evaluation e = run("tensor<3xf64>, tensor<3xf64>, tensor<3xf64>", R"(
  %x = strata.param "x" : tensor<3xf64>
  %g = strata.gelu %x : (tensor<3xf64>) -> tensor<3xf64>
  %r = strata.relu %x : (tensor<3xf64>) -> tensor<3xf64>
  %s = strata.scale %x {factor = -2.5 : f64} : (tensor<3xf64>) -> tensor<3xf64>
  return %g, %r, %s : tensor<3xf64>, tensor<3xf64>, tensor<3xf64>)",
                     p);
  ASSERT_TRUE(e.ok()) << e.error;
  // GPT-2 gelu_new(1) = 0.8411919906082768.
  expectData(e.results[0], {3},
             {-0.15880800939172324, 0.0, 0.8411919906082768});
  expectData(e.results[1], {3}, {0.0, 0.0, 1.0});
  expectData(e.results[2], {3}, {2.5, 0.0, -2.5});
}

TEST(ReferenceInterpreter, LayerNormUsesBiasedVariance) {
  TensorMap p{{"x", Tensor({1, 3}, {1, 2, 3})},
              {"g", Tensor({3}, {1, 2, 1})},
              {"b", Tensor({3}, {0, 0, 10})}};
  Evaluation e = run("tensor<1x3xf64>", R"(
  %x = strata.param "x" : tensor<1x3xf64>
  %g = strata.param "g" : tensor<3xf64>
  %b = strata.param "b" : tensor<3xf64>
  %y = strata.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f64} : (tensor<1x3xf64>, tensor<3xf64>, tensor<3xf64>) -> tensor<1x3xf64>
  return %y : tensor<1x3xf64>)",
                     p);
  ASSERT_TRUE(e.ok()) << e.error;
  double z = 1.0 / std::sqrt(2.0 / 3.0 + 1e-5);
  expectData(e.results[0], {1, 3}, {-z, 0.0, z + 10.0});
}

TEST(ReferenceInterpreter, SoftmaxCausalMasksFutureKeys) {
  TensorMap p{{"s", Tensor({1, 3, 3}, 0.0)}};
  Evaluation e = run("tensor<1x3x3xf64>", R"(
  %s = strata.param "s" : tensor<1x3x3xf64>
  %p = strata.softmax %s {causal = true} : (tensor<1x3x3xf64>) -> tensor<1x3x3xf64>
  return %p : tensor<1x3x3xf64>)",
                     p);
  ASSERT_TRUE(e.ok()) << e.error;
  double t = 1.0 / 3.0;
  expectData(e.results[0], {1, 3, 3}, {1, 0, 0, 0.5, 0.5, 0, t, t, t});
}

TEST(ReferenceInterpreter, SoftmaxScalesBeforeNormalising) {
  TensorMap p{{"s", Tensor({2}, {0.0, std::log(2.0)})}};
  Evaluation e = run("tensor<2xf64>", R"(
  %s = strata.param "s" : tensor<2xf64>
  %p = strata.softmax %s {scale = 2.0 : f64} : (tensor<2xf64>) -> tensor<2xf64>
  return %p : tensor<2xf64>)",
                     p);
  ASSERT_TRUE(e.ok()) << e.error;
  expectData(e.results[0], {2}, {0.2, 0.8});
}

TEST(ReferenceInterpreter, CrossEntropyIsMeanOverPositions) {
  // Row 0: uniform logits, loss log 4. Row 1: logit 0 of class 2 against
  // log 3 elsewhere, loss log(1 + 3 * 3) = log 10.
  double l3 = std::log(3.0);
  TensorMap p{{"l", Tensor({2, 4}, {0, 0, 0, 0, l3, l3, 0, l3})}};
  TensorMap in{{"t", Tensor({2}, {1, 2})}};
  Evaluation e = run("tensor<f64>", R"(
  %l = strata.param "l" : tensor<2x4xf64>
  %t = strata.input "t" : tensor<2xi32>
  %loss = strata.cross_entropy %l, %t : (tensor<2x4xf64>, tensor<2xi32>) -> tensor<f64>
  return %loss : tensor<f64>)",
                     p, in);
  ASSERT_TRUE(e.ok()) << e.error;
  expectData(e.results[0], {}, {(std::log(4.0) + std::log(10.0)) / 2.0});
}

TEST(ReferenceInterpreter, TransposeResultDimIsInputDimPermI) {
  TensorMap p{{"x", iota({2, 3, 4})}};
  Evaluation e = run("tensor<4x2x3xf64>", R"(
  %x = strata.param "x" : tensor<2x3x4xf64>
  %y = strata.transpose %x {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf64>) -> tensor<4x2x3xf64>
  return %y : tensor<4x2x3xf64>)",
                     p);
  ASSERT_TRUE(e.ok()) << e.error;
  const Tensor &y = e.results[0];
  ASSERT_EQ(y.shape, (std::vector<int64_t>{4, 2, 3}));
  // y[k, i, j] = x[i, j, k] = 12 i + 4 j + k.
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        EXPECT_EQ(y.data[(k * 2 + i) * 3 + j], 12 * i + 4 * j + k);
}

TEST(ReferenceInterpreter, SplitConcatSliceOrder) {
  TensorMap p{{"x", iota({2, 4})}};
  Evaluation e = run("tensor<2x2xf64>, tensor<2x2xf64>, tensor<2x6xf64>, "
                     "tensor<1x4xf64>",
                     R"(
  %x = strata.param "x" : tensor<2x4xf64>
  %a, %b = strata.split %x {axis = -1 : i64} : (tensor<2x4xf64>) -> (tensor<2x2xf64>, tensor<2x2xf64>)
  %c = strata.concat %b, %x {axis = 1 : i64} : (tensor<2x2xf64>, tensor<2x4xf64>) -> tensor<2x6xf64>
  %s = strata.slice %x {axis = 0 : i64, offset = 1 : i64, size = 1 : i64} : (tensor<2x4xf64>) -> tensor<1x4xf64>
  return %a, %b, %c, %s : tensor<2x2xf64>, tensor<2x2xf64>, tensor<2x6xf64>, tensor<1x4xf64>)",
                     p);
  ASSERT_TRUE(e.ok()) << e.error;
  expectData(e.results[0], {2, 2}, {0, 1, 4, 5});
  expectData(e.results[1], {2, 2}, {2, 3, 6, 7});
  expectData(e.results[2], {2, 6}, {2, 3, 0, 1, 2, 3, 6, 7, 4, 5, 6, 7});
  expectData(e.results[3], {1, 4}, {4, 5, 6, 7});
}

TEST(ReferenceInterpreter, EmbeddingAndScatterAddGradient) {
  TensorMap p{{"w", iota({3, 2})}};
  TensorMap in{{"ids", Tensor({3}, {2, 0, 2})}};
  Evaluation e = run("tensor<3x2xf64>, tensor<3x2xf64>, tensor<2xf64>", R"(
  %w = strata.param "w" : tensor<3x2xf64>
  %ids = strata.input "ids" : tensor<3xi32>
  %x = strata.embedding %w, %ids : (tensor<3x2xf64>, tensor<3xi32>) -> tensor<3x2xf64>
  %g = strata.embedding_grad %x, %ids : (tensor<3x2xf64>, tensor<3xi32>) -> tensor<3x2xf64>
  %b = strata.bias_grad %x : (tensor<3x2xf64>) -> tensor<2xf64>
  return %x, %g, %b : tensor<3x2xf64>, tensor<3x2xf64>, tensor<2xf64>)",
                     p, in);
  ASSERT_TRUE(e.ok()) << e.error;
  expectData(e.results[0], {3, 2}, {4, 5, 0, 1, 4, 5});
  expectData(e.results[1], {3, 2}, {0, 1, 0, 0, 8, 10});
  expectData(e.results[2], {2}, {8, 11});
}

TEST(ReferenceInterpreter, AccumulateGradSumsAndClipScalesByGlobalNorm) {
  Evaluation e = run("", R"(
  %a = strata.constant {value = 3.0 : f64} : tensor<1xf64>
  %b = strata.constant {value = 2.0 : f64} : tensor<2xf64>
  strata.accumulate_grad %a {param = "a"} : tensor<1xf64>
  strata.accumulate_grad %b {param = "b"} : tensor<2xf64>
  strata.accumulate_grad %b {param = "b"} : tensor<2xf64>
  strata.clip_grad_norm {max_norm = 1.0 : f64}
  return)");
  ASSERT_TRUE(e.ok()) << e.error;
  // Gradients 3 and (4, 4): norm sqrt(41).
  double c = 1.0 / (std::sqrt(41.0) + 1e-6);
  expectData(e.grads.at("a"), {1}, {3 * c});
  expectData(e.grads.at("b"), {2}, {4 * c, 4 * c});
}

TEST(ReferenceInterpreter, ClipGradNormLeavesSmallGradients) {
  Evaluation e = run("", R"(
  %a = strata.constant {value = 0.5 : f64} : tensor<2xf64>
  strata.accumulate_grad %a {param = "a"} : tensor<2xf64>
  strata.clip_grad_norm {max_norm = 1.0 : f64}
  return)");
  ASSERT_TRUE(e.ok()) << e.error;
  expectData(e.grads.at("a"), {2}, {0.5, 0.5});
}

TEST(ReferenceInterpreter, UnknownOpIsAnErrorNamingIt) {
  Evaluation e = run("tensor<2xf64>", R"(
  %0 = "mystery.op"() : () -> tensor<2xf64>
  return %0 : tensor<2xf64>)");
  EXPECT_FALSE(e.ok());
  EXPECT_NE(e.error.find("'mystery.op'"), std::string::npos) << e.error;
  EXPECT_TRUE(e.results.empty());
}

TEST(ReferenceInterpreter, MissingParamAndBadIdsAreErrors) {
  Evaluation missing = run("tensor<2xf64>", R"(
  %w = strata.param "w" : tensor<2xf64>
  return %w : tensor<2xf64>)");
  EXPECT_NE(missing.error.find("parameter \"w\""), std::string::npos)
      << missing.error;

  TensorMap p{{"w", iota({3, 2})}};
  TensorMap in{{"ids", Tensor({1}, {1.5})}};
  Evaluation fractional = run("tensor<1x2xf64>", R"(
  %w = strata.param "w" : tensor<3x2xf64>
  %ids = strata.input "ids" : tensor<1xi32>
  %x = strata.embedding %w, %ids : (tensor<3x2xf64>, tensor<1xi32>) -> tensor<1x2xf64>
  return %x : tensor<1x2xf64>)",
                              p, in);
  EXPECT_NE(fractional.error.find("'strata.embedding'"), std::string::npos)
      << fractional.error;
}

// Ids outside [row_start, row_start + V) give zero rows (and no gradient):
// a vocabulary-parallel table looks up only its own rows.
TEST(ReferenceInterpreter, EmbeddingRowStartSkipsOtherRows) {
  TensorMap p{{"w", iota({3, 2})}};
  TensorMap in{{"ids", Tensor({4}, {1, 2, 4, 5})}};
  Evaluation e = run("tensor<4x2xf64>, tensor<3x2xf64>", R"(
  %w = strata.param "w" : tensor<3x2xf64>
  %ids = strata.input "ids" : tensor<4xi32>
  %x = strata.embedding %w, %ids {row_start = 2 : i64} : (tensor<3x2xf64>, tensor<4xi32>) -> tensor<4x2xf64>
  %g = strata.embedding_grad %x, %ids {row_start = 2 : i64} : (tensor<4x2xf64>, tensor<4xi32>) -> tensor<3x2xf64>
  return %x, %g : tensor<4x2xf64>, tensor<3x2xf64>)",
                     p, in);
  ASSERT_TRUE(e.ok()) << e.error;
  expectData(e.results[0], {4, 2}, {0, 0, 0, 1, 4, 5, 0, 0});
  expectData(e.results[1], {3, 2}, {0, 1, 0, 0, 4, 5});
}

TEST(ReferenceInterpreter, SuppliedShapeMustMatchTheIrType) {
  TensorMap p{{"w", iota({3})}};
  Evaluation e = run("tensor<2xf64>", R"(
  %w = strata.param "w" : tensor<2xf64>
  return %w : tensor<2xf64>)",
                     p);
  EXPECT_NE(e.error.find("IR type says [2]"), std::string::npos) << e.error;
}

} // namespace
