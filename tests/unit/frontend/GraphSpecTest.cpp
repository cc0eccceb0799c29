//===- GraphSpecTest.cpp - Explicit graphs and per-op shape rules ---------===//

#include "frontends/yaml/GraphShapes.h"
#include "tests/unit/frontend/FrontendTestUtils.h"

using namespace strata::frontend;
using namespace strata::frontend::test;

namespace {

TensorType f32(std::vector<int64_t> shape) { return {shape, DType::F32}; }
TensorType i32(std::vector<int64_t> shape) { return {shape, DType::I32}; }

/// Runs `op`'s rule with default attributes overridden by `attrs`; returns
/// the error message or "" and sets `out`.
std::string infer(const std::string &op, std::vector<TensorType> in,
                  OpAttrs attrs, std::vector<TensorType> &out) {
  const OpRule *rule = findOpRule(op);
  if (!rule)
    return "no rule";
  if (auto e = completeOpAttrs(*rule, attrs))
    return *e;
  auto e = rule->infer(in, attrs, out);
  return e ? *e : "";
}

std::vector<int64_t> inferShape(const std::string &op,
                                std::vector<TensorType> in,
                                OpAttrs attrs = {}) {
  std::vector<TensorType> out;
  std::string e = infer(op, std::move(in), std::move(attrs), out);
  EXPECT_EQ(e, "");
  return out.empty() ? std::vector<int64_t>{-99} : out[0].shape;
}

std::string inferError(const std::string &op, std::vector<TensorType> in,
                       OpAttrs attrs = {}) {
  std::vector<TensorType> out;
  return infer(op, std::move(in), std::move(attrs), out);
}

using Shape = std::vector<int64_t>;

TEST(OpRules, Matmul) {
  EXPECT_EQ(inferShape("matmul", {f32({8, 64}), f32({64, 16})}),
            (Shape{8, 16}));
  // b of rank 2 broadcasts over a's batch dims.
  EXPECT_EQ(inferShape("matmul", {f32({2, 3, 8, 64}), f32({64, 16})}),
            (Shape{2, 3, 8, 16}));
  EXPECT_EQ(inferShape("matmul", {f32({2, 8, 64}), f32({2, 16, 64})},
                       {{"transpose_b", true}}),
            (Shape{2, 8, 16}));
  EXPECT_EQ(inferShape("matmul", {f32({64, 8}), f32({64, 16})},
                       {{"transpose_a", true}}),
            (Shape{8, 16}));
  EXPECT_EQ(inferError("matmul", {f32({8, 64}), f32({32, 16})}),
            "contraction dims differ: a is [8,64] (K=64), b is [32,16] "
            "(K=32); expected b's dim 0 to be 64");
  EXPECT_EQ(inferError("matmul", {f32({2, 8, 64}), f32({3, 64, 16})}),
            "batch dims differ: a is [2,8,64], b is [3,64,16]; expected b to "
            "be rank 2 [K, N] or to have a's batch dims [2]");
  EXPECT_EQ(inferError("matmul", {f32({8, 64}), {{64, 16}, DType::BF16}}),
            "dtypes differ: a is float32[8,64], b is bfloat16[64,16]; "
            "expected both float32");
  EXPECT_EQ(inferError("matmul", {f32({64}), f32({64, 16})}),
            "a is [64] (rank 1); expected rank >= 2 [..., M, K]");
}

TEST(OpRules, EmbeddingBiasNormSoftmax) {
  EXPECT_EQ(inferShape("embedding", {f32({100, 8}), i32({4, 5})}),
            (Shape{4, 5, 8}));
  EXPECT_EQ(inferError("embedding", {f32({100, 8}), f32({4, 5})}),
            "ids is float32[4,5]; expected int32 token ids");
  EXPECT_EQ(inferError("bias_add", {f32({4, 8}), f32({7})}),
            "b is [7] but x is [4,8]; expected b to be [8] (x's last dim)");
  EXPECT_EQ(inferShape("layer_norm", {f32({4, 8}), f32({8}), f32({8})}),
            (Shape{4, 8}));
  EXPECT_EQ(inferError("layer_norm", {f32({4, 8}), f32({8}), f32({4})}),
            "beta is [4] but x is [4,8]; expected [8] (x's last dim)");
  EXPECT_EQ(inferError("layer_norm", {f32({4, 8}), f32({8}), f32({8})},
                       {{"epsilon", 0.0}}),
            "epsilon is 0.000000; expected a positive number");
  EXPECT_EQ(inferShape("softmax", {f32({2, 5, 5})}, {{"causal", true}}),
            (Shape{2, 5, 5}));
  EXPECT_EQ(inferError("softmax", {f32({2, 5, 4})}, {{"causal", true}}),
            "x is [2,5,4]; a causal softmax expects square trailing dims "
            "[..., S, S]");
  EXPECT_EQ(inferError("add", {f32({2, 5}), f32({5})}),
            "shapes differ: a is [2,5], b is [5]; expected equal shapes "
            "(there is no implicit broadcasting)");
  EXPECT_EQ(inferError("gelu", {i32({3})}),
            "x is int32[3]; expected a floating-point tensor (float32, "
            "bfloat16 or float16)");
}

TEST(OpRules, CausalAttention) {
  std::vector<TensorType> out;
  EXPECT_EQ(infer("causal_attention",
                  {f32({2, 4, 8, 16}), f32({2, 2, 8, 16}), f32({2, 2, 8, 16})},
                  {{"scale", 0.25}}, out),
            "");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape, (Shape{2, 4, 8, 16}));
  EXPECT_EQ(out[1], (TensorType{{2, 4, 8}, DType::F32}));
  EXPECT_EQ(
      inferError("causal_attention",
                 {f32({2, 3, 8, 16}), f32({2, 2, 8, 16}), f32({2, 2, 8, 16})},
                 {{"scale", 0.25}}),
      "q is [2,3,8,16], k [2,2,8,16], v [2,2,8,16]; expected q [B, "
      "heads, S, D] and k, v [B, kv_heads, S, D] with kv_heads "
      "dividing heads");
  EXPECT_EQ(
      inferError("causal_attention",
                 {f32({1, 1, 4, 2}), f32({1, 1, 4, 2}), f32({1, 1, 4, 2})}),
      "causal_attention needs the attribute 'scale' (a number)");
}

TEST(OpRules, LayoutOps) {
  EXPECT_EQ(inferShape("reshape", {f32({2, 3, 4})}, {{"shape", Shape{6, -1}}}),
            (Shape{6, 4}));
  EXPECT_EQ(inferError("reshape", {f32({2, 3, 4})}, {{"shape", Shape{5, -1}}}),
            "x is [2,3,4] (24 elements), which cannot be reshaped to [5,-1]; "
            "expected the known dims' product to divide 24");
  EXPECT_EQ(inferError("reshape", {f32({2, 3})}, {{"shape", Shape{-1, -1}}}),
            "shape [-1,-1] has more than one -1; expected at most one "
            "inferred dim");
  EXPECT_EQ(inferShape("transpose", {f32({2, 3, 4})},
                       {{"permutation", Shape{2, 0, 1}}}),
            (Shape{4, 2, 3}));
  EXPECT_EQ(inferError("transpose", {f32({2, 3, 4})},
                       {{"permutation", Shape{0, 0, 1}}}),
            "permutation [0,0,1] does not fit x [2,3,4]; expected a "
            "permutation of 0..2");
  std::vector<TensorType> out;
  EXPECT_EQ(infer("split", {f32({6, 4})},
                  {{"axis", int64_t(-2)}, {"num", int64_t(3)}}, out),
            "");
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].shape, (Shape{2, 4}));
  EXPECT_EQ(inferError("split", {f32({6, 4})},
                       {{"axis", int64_t(1)}, {"num", int64_t(3)}}),
            "x is [6,4], whose dim 1 (4) cannot be split into 3 equal parts; "
            "expected num to divide it");
  EXPECT_EQ(inferShape("concat", {f32({2, 3}), f32({2, 5}), f32({2, 1})},
                       {{"axis", int64_t(1)}}),
            (Shape{2, 9}));
  EXPECT_EQ(
      inferError("concat", {f32({2, 3}), f32({3, 5})}, {{"axis", int64_t(1)}}),
      "input 1 is float32[3,5] but input 0 is float32[2,3]; expected the "
      "same dtype and dims except dim 1");
  EXPECT_EQ(inferShape("cross_entropy", {f32({4, 5, 10}), i32({4, 5})}),
            (Shape{}));
  EXPECT_EQ(inferError("cross_entropy", {f32({4, 5, 10}), i32({4, 10})}),
            "targets is int32[4,10] but logits is [4,5,10]; expected targets "
            "int32[4,5] (logits without the class dim)");
}

TEST(OpRules, Attributes) {
  const OpRule *matmul = findOpRule("matmul");
  ASSERT_TRUE(matmul);
  OpAttrs attrs;
  EXPECT_FALSE(completeOpAttrs(*matmul, attrs));
  EXPECT_EQ(attrs.size(), 2u); // defaults filled in
  attrs = {{"transpose_c", true}};
  EXPECT_EQ(*completeOpAttrs(*matmul, attrs),
            "unknown attribute 'transpose_c' for matmul; did you mean "
            "'transpose_a'? expected transpose_a or transpose_b");
  attrs = {{"transpose_a", int64_t(1)}};
  EXPECT_EQ(*completeOpAttrs(*matmul, attrs),
            "attribute 'transpose_a' of matmul has the wrong type; expected "
            "true or false");
  attrs = {};
  EXPECT_EQ(*completeOpAttrs(*findOpRule("scale"), attrs),
            "scale needs the attribute 'factor' (a number)");
  attrs = {{"kind", int64_t(1)}};
  EXPECT_EQ(*completeOpAttrs(*findOpRule("unary"), attrs),
            "attribute 'kind' of unary has the wrong type; expected a name");
  EXPECT_EQ(opRules().size(), 25u);
}

const char *kGraphHead = R"(model: {family: graph}
training: {global_batch: 4}
graph:
  inputs:
    - {name: tokens, shape: [batch, 16], dtype: int32}
    - {name: targets, shape: [batch, 16], dtype: int32}
  params:
    - {name: embed, shape: [128, 64]}
    - {name: w, shape: [32, 16], init: ones}
    - {name: head, shape: [64, 128]}
    - {name: w16, shape: [2], dtype: float16}
  ops:
)";
const char *kGraphTail =
    R"(    - {op: matmul, inputs: [x, head], outputs: [logits]}
    - {op: cross_entropy, inputs: [logits, targets], outputs: [loss]}
  outputs: [loss]
)";

std::string graphWith(const std::string &ops,
                      const std::string &tail = kGraphTail) {
  return kGraphHead + ops + tail;
}

TEST(ExplicitGraph, LoadsTypedGraph) {
  LoadResult r = loadText(
      "model: {family: graph, dtype: bfloat16}\n" +
      graphWith("    - {op: embedding, inputs: [embed, tokens], outputs: [x], "
                "layer: 3}\n")
          .substr(std::string("model: {family: graph}\n").size()));
  ASSERT_TRUE(r.spec) << r.text();
  const Graph &g = r.spec->graph;
  EXPECT_EQ(r.spec->family, "graph");
  EXPECT_EQ(g.inputs[0].shape, (Shape{4, 16})); // batch resolved
  EXPECT_EQ(g.params[0].dtype, DType::BF16);    // model dtype by default
  EXPECT_EQ(g.params[1].init.kind, ParamInit::Kind::Ones);
  EXPECT_EQ(g.params[3].dtype, DType::F16);
  EXPECT_EQ(g.values.at("x"), (TensorType{{4, 16, 64}, DType::BF16}));
  EXPECT_EQ(g.values.at("logits").shape, (Shape{4, 16, 128}));
  EXPECT_EQ(g.ops[0].layer, 3);
  EXPECT_EQ(g.ops[0].loc.line, 13);
  EXPECT_EQ(g.ops[0].loc.col, 7);
  EXPECT_EQ(g.ops[1].inputLocs[1].col, 32);
  EXPECT_FALSE(std::get<bool>(g.ops[1].attrs.at("transpose_b")));
}

TEST(ExplicitGraph, LocatedErrors) {
  const std::string embed =
      "    - {op: embedding, inputs: [embed, tokens], outputs: [x]}\n";
  expectError(graphWith(embed + "    - {op: matmul, inputs: [x, w], outputs: "
                                "[y]}\n"),
              "m.yaml:14:7: error: matmul 'y': contraction dims differ: a is "
              "[4,16,64] (K=64), b is [32,16] (K=32); expected b's dim 0 to "
              "be 64");
  expectError(graphWith("    - {op: embeding, inputs: [embed, tokens], "
                        "outputs: [x]}\n"),
              "m.yaml:13:12: error: unknown op 'embeding'; did you mean "
              "'embedding'?");
  expectError(graphWith("    - {op: embedding, inputs: [embd, tokens], "
                        "outputs: [x]}\n"),
              "m.yaml:13:32: error: embedding 'x': undefined value 'embd'; "
              "did you mean 'embed'?");
  expectError(graphWith(embed + "    - {op: relu, inputs: [x], outputs: "
                                "[tokens]}\n"),
              "m.yaml:14:41: error: duplicate value name 'tokens': already "
              "defined as an input at 5:7");
  expectError(
      graphWith("    - {op: matmul, inputs: [x, head], outputs: [y]}\n" +
                embed),
      "m.yaml:13:29: error: matmul 'y': input 'x' is used before it is "
      "defined (by embedding at 14:58)");
  expectError(graphWith(embed + "    - {op: add, inputs: [x, c], outputs: "
                                "[a]}\n    - {op: relu, inputs: [b], outputs: "
                                "[c]}\n    - {op: relu, inputs: [a], outputs: "
                                "[b]}\n"),
              "m.yaml:14:29: error: add 'a': input 'c' depends on this op's "
              "own output, a cycle: a -> b -> c -> a");
  expectError(graphWith(embed + "    - {op: relu, inputs: [x, x], outputs: "
                                "[y]}\n"),
              "m.yaml:14:7: error: relu 'y': relu takes 1 input, relu(x); "
              "got 2");
  expectError(graphWith(embed + "    - {op: relu, inputs: [x], outputs: [y], "
                                "attrs: {scale: 2}}\n"),
              "m.yaml:14:52: error: relu takes no attributes");
  expectError(graphWith(embed + "    - {op: softmax, inputs: [x], outputs: "
                                "[y], attrs: {causal: yes}}\n"),
              "m.yaml:14:64: error: causal is 'yes'; expected true or false");
  expectError(graphWith(embed, "  outputs: [loss]\n"),
              "m.yaml:14:13: error: graph output 'loss' is not defined");
  expectError("model: {family: graph}\ngraph:\n  inputs:\n    - {name: t, "
              "shape: [batch, 0]}\n  ops: []\n  outputs: [t]\n",
              "m.yaml:4:32: error: shape[1] is 0; expected a positive integer");
  expectError("model: {family: graph}\ngraph:\n  params:\n    - {name: p, "
              "shape: [4], init: zeros, std: 0.1}\n  ops: []\n  outputs: "
              "[p]\n",
              "m.yaml:4:42: error: 'std' applies only to init: normal");
  expectError("model: {family: graph}\ngraph:\n  params:\n    - {name: p, "
              "shape: [4]}\n  ops: []\n  outputs: [p]\n",
              "m.yaml:6:13: error: the first graph output 'p' is float32[4]; "
              "expected the scalar float loss");
  expectError("model: {family: graph}\n",
              "m.yaml:1:8: error: family: graph needs a top-level 'graph:'");
}

} // namespace
