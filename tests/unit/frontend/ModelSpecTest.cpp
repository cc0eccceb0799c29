//===- ModelSpecTest.cpp - Presets, training and input errors -------------===//

#include "tests/unit/frontend/FrontendTestUtils.h"

#include <cmath>
#include <random>

using namespace strata::frontend;
using namespace strata::frontend::test;

namespace {

const char *kGpt2Small = R"(model:
  family: gpt
  vocab: 50257
  seq_len: 1024
  hidden: 768
  heads: 12
  layers: 12
)";

std::vector<int64_t> shapeOf(const Graph &g, const std::string &param) {
  const GraphParam *p = findParam(g, param);
  return p ? p->shape : std::vector<int64_t>{};
}

TEST(GptPreset, Gpt2SmallMatchesHuggingFace) {
  LoadResult r = loadText(kGpt2Small);
  ASSERT_TRUE(r.spec) << r.text();
  const Graph &g = r.spec->graph;
  // HF GPT2LMHeadModel("gpt2") has 124,439,808 parameters (lm_head tied).
  EXPECT_EQ(g.numParamElements(), 124439808);
  EXPECT_EQ(g.params.size(), 2u + 12u * 12u + 2u);
  EXPECT_EQ(shapeOf(g, "wte.weight"), (std::vector<int64_t>{50257, 768}));
  EXPECT_EQ(shapeOf(g, "wpe.weight"), (std::vector<int64_t>{1024, 768}));
  EXPECT_EQ(shapeOf(g, "h.0.attn.c_attn.weight"),
            (std::vector<int64_t>{768, 2304}));
  EXPECT_EQ(shapeOf(g, "h.0.attn.c_attn.bias"), (std::vector<int64_t>{2304}));
  EXPECT_EQ(shapeOf(g, "h.5.attn.c_proj.weight"),
            (std::vector<int64_t>{768, 768}));
  EXPECT_EQ(shapeOf(g, "h.11.mlp.c_fc.weight"),
            (std::vector<int64_t>{768, 3072}));
  EXPECT_EQ(shapeOf(g, "h.11.mlp.c_proj.weight"),
            (std::vector<int64_t>{3072, 768}));
  EXPECT_EQ(shapeOf(g, "ln_f.bias"), (std::vector<int64_t>{768}));
  // HF state-dict order within a block.
  std::vector<std::string> block0;
  for (size_t i = 2; i < 14; ++i)
    block0.push_back(g.params[i].name);
  EXPECT_EQ(block0,
            (std::vector<std::string>{
                "h.0.ln_1.weight", "h.0.ln_1.bias", "h.0.attn.c_attn.weight",
                "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight",
                "h.0.attn.c_proj.bias", "h.0.ln_2.weight", "h.0.ln_2.bias",
                "h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.bias",
                "h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.bias"}));
}

TEST(GptPreset, InitFollowsGpt2) {
  LoadResult r = loadText(kGpt2Small);
  ASSERT_TRUE(r.spec) << r.text();
  const Graph &g = r.spec->graph;
  const GraphParam *wte = findParam(g, "wte.weight");
  const GraphParam *proj = findParam(g, "h.3.mlp.c_proj.weight");
  const GraphParam *attnProj = findParam(g, "h.3.attn.c_proj.weight");
  const GraphParam *fc = findParam(g, "h.3.mlp.c_fc.weight");
  const GraphParam *lnW = findParam(g, "h.3.ln_1.weight");
  const GraphParam *lnB = findParam(g, "h.3.ln_1.bias");
  const GraphParam *bias = findParam(g, "h.3.attn.c_attn.bias");
  ASSERT_TRUE(wte && proj && attnProj && fc && lnW && lnB && bias);
  EXPECT_EQ(wte->init.kind, ParamInit::Kind::Normal);
  EXPECT_DOUBLE_EQ(wte->init.std, 0.02);
  EXPECT_DOUBLE_EQ(fc->init.std, 0.02);
  EXPECT_DOUBLE_EQ(proj->init.std, 0.02 / std::sqrt(24.0));
  EXPECT_DOUBLE_EQ(attnProj->init.std, 0.02 / std::sqrt(24.0));
  EXPECT_EQ(lnW->init.kind, ParamInit::Kind::Ones);
  EXPECT_EQ(lnB->init.kind, ParamInit::Kind::Zeros);
  EXPECT_EQ(bias->init.kind, ParamInit::Kind::Zeros);
  EXPECT_EQ(proj->layer, 3);
  EXPECT_FALSE(wte->layer.has_value());
}

TEST(GptPreset, GraphIsTypedAndLocated) {
  std::string text = std::string(kGpt2Small) +
                     "training:\n  global_batch: 16\n  micro_batch: 2\n";
  LoadResult r = loadText(text);
  ASSERT_TRUE(r.spec) << r.text();
  const ModelSpec &s = *r.spec;
  EXPECT_EQ(s.batch, 2);
  EXPECT_EQ(s.gpt->ffnHidden, 3072);
  const Graph &g = s.graph;
  ASSERT_EQ(g.outputs, std::vector<std::string>{"loss"});
  EXPECT_EQ(g.values.at("loss"), (TensorType{{}, DType::F32}));
  EXPECT_EQ(g.values.at("logits").shape,
            (std::vector<int64_t>{2, 1024, 50257}));
  // Fused attention by default: no [S, S] value in the graph.
  EXPECT_EQ(g.values.count("h.0.attn.scores"), 0u);
  EXPECT_EQ(g.values.at("h.0.attn.ctx").shape,
            (std::vector<int64_t>{2, 12, 1024, 64}));
  EXPECT_EQ(g.values.at("h.0.attn.lse"),
            (TensorType{{2, 12, 1024}, DType::F32}));
  EXPECT_EQ(g.values.at("h.0.attn.qkv_t").shape,
            (std::vector<int64_t>{3, 2, 12, 1024, 64}));
  EXPECT_EQ(g.values.at("positions"), (TensorType{{2, 1024}, DType::I32}));
  // Every op has its output types, and block ops point at `layers:`.
  for (const GraphOp &op : g.ops) {
    ASSERT_EQ(op.outputTypes.size(), op.outputs.size()) << op.op;
    if (op.layer)
      EXPECT_EQ(op.loc.line, 7) << op.outputs[0];
    else
      EXPECT_EQ(op.loc.line, 1) << op.outputs[0];
  }
  int attentions = 0;
  for (const GraphOp &op : g.ops) {
    EXPECT_NE(op.op, "softmax");
    if (op.op != "causal_attention")
      continue;
    ++attentions;
    EXPECT_DOUBLE_EQ(std::get<double>(op.attrs.at("scale")), 0.125);
  }
  EXPECT_EQ(attentions, 12);
  const GraphOp &last = g.ops.back();
  EXPECT_EQ(last.op, "cross_entropy");
  const GraphOp &head = g.ops[g.ops.size() - 2];
  EXPECT_EQ(head.inputs[1], "wte.weight"); // tied output projection
  EXPECT_TRUE(std::get<bool>(head.attrs.at("transpose_b")));
  EXPECT_FALSE(std::get<bool>(head.attrs.at("transpose_a"))); // defaults filled
}

TEST(GptPreset, UnfusedAttentionKeepsTheScores) {
  for (const char *family : {"gpt", "llama"}) {
    SCOPED_TRACE(family);
    std::string text = std::string("model: {family: ") + family +
                       ", vocab: 64, seq_len: 8, hidden: 16, heads: 4, "
                       "layers: 1, ffn_hidden: 24, attention: unfused" +
                       (std::string(family) == "llama" ? ", kv_heads: 2" : "") +
                       "}\n";
    LoadResult r = loadText(text);
    ASSERT_TRUE(r.spec) << r.text();
    int softmaxes = 0, fused = 0;
    for (const GraphOp &op : r.spec->graph.ops) {
      softmaxes += op.op == "softmax";
      fused += op.op == "causal_attention";
      if (op.op == "softmax")
        EXPECT_EQ(op.outputTypes[0].shape, (std::vector<int64_t>{8, 4, 8, 8}));
    }
    EXPECT_EQ(softmaxes, 1);
    EXPECT_EQ(fused, 0);
  }
}

TEST(GptPreset, AttentionMustBeFusedOrUnfused) {
  expectError("model: {family: gpt, vocab: 64, seq_len: 8, hidden: 16, "
              "heads: 2, layers: 1, attention: flash}\n",
              "m.yaml:1:89: error: 'attention' is 'flash'; expected fused "
              "or unfused");
}

TEST(GptPreset, Bfloat16KeepsLossInFloat32) {
  LoadResult r = loadText("model: {family: gpt, vocab: 64, seq_len: 8, "
                          "hidden: 16, heads: 2, layers: 1, ffn_hidden: 24, "
                          "dtype: bfloat16}\n");
  ASSERT_TRUE(r.spec) << r.text();
  const Graph &g = r.spec->graph;
  EXPECT_EQ(findParam(g, "h.0.mlp.c_fc.weight")->shape,
            (std::vector<int64_t>{16, 24}));
  EXPECT_EQ(g.values.at("logits").dtype, DType::BF16);
  EXPECT_EQ(g.values.at("loss").dtype, DType::F32);
  EXPECT_FALSE(r.spec->training.present);
  EXPECT_EQ(r.spec->batch, 8);
}

TEST(MlpPreset, ExpandsResidualBlocks) {
  LoadResult r = loadText("model:\n  family: mlp\n  vocab: 100\n  seq_len: 5\n"
                          "  hidden: 8\n  layers: 3\n  activation: relu\n");
  ASSERT_TRUE(r.spec) << r.text();
  const Graph &g = r.spec->graph;
  EXPECT_EQ(r.spec->mlp->ffnHidden, 32);
  EXPECT_EQ(shapeOf(g, "embed.weight"), (std::vector<int64_t>{100, 8}));
  EXPECT_EQ(shapeOf(g, "layers.2.fc1.weight"), (std::vector<int64_t>{8, 32}));
  EXPECT_EQ(shapeOf(g, "layers.2.fc2.weight"), (std::vector<int64_t>{32, 8}));
  EXPECT_EQ(shapeOf(g, "head.weight"), (std::vector<int64_t>{8, 100}));
  EXPECT_EQ(shapeOf(g, "head.bias"), (std::vector<int64_t>{100}));
  EXPECT_EQ(g.numParamElements(),
            100 * 8 + 3 * (8 * 32 + 32 + 32 * 8 + 8) + 8 * 100 + 100);
  int relus = 0;
  for (const GraphOp &op : g.ops)
    relus += op.op == "relu";
  EXPECT_EQ(relus, 3);
  EXPECT_EQ(g.values.at("logits").shape, (std::vector<int64_t>{8, 5, 100}));
  EXPECT_EQ(g.inputs.size(), 2u); // tokens, targets: no positions
}

TEST(Training, ReadsEveryField) {
  LoadResult r = loadText(
      R"(model: {family: mlp, vocab: 16, seq_len: 4, hidden: 8, layers: 1}
training:
  global_batch: 32
  micro_batch: 8
  optimizer: {kind: adamw, lr: 3e-4, betas: [0.8, 0.95], eps: 1e-6, weight_decay: 0.1}
  schedule: {kind: cosine, warmup_steps: 10, total_steps: 100, min_lr: 1e-5}
  grad_clip: 1.5
  seed: 42
)");
  ASSERT_TRUE(r.spec) << r.text();
  const TrainingSpec &t = r.spec->training;
  EXPECT_TRUE(t.present);
  EXPECT_EQ(t.globalBatch, 32);
  EXPECT_EQ(t.microBatch, 8);
  EXPECT_EQ(r.spec->batch, 8);
  EXPECT_EQ(t.optimizer.kind, OptimizerSpec::Kind::AdamW);
  EXPECT_DOUBLE_EQ(t.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(t.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(t.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(t.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(t.optimizer.weightDecay, 0.1);
  EXPECT_EQ(t.schedule.kind, ScheduleSpec::Kind::Cosine);
  EXPECT_EQ(t.schedule.warmupSteps, 10);
  EXPECT_EQ(t.schedule.totalSteps, 100);
  EXPECT_DOUBLE_EQ(t.schedule.minLr, 1e-5);
  EXPECT_DOUBLE_EQ(t.gradClip, 1.5);
  EXPECT_EQ(t.seed, 42u);
}

TEST(Training, SgdAndDefaults) {
  LoadResult r = loadText("model: {family: mlp, vocab: 16, seq_len: 4, "
                          "hidden: 8, layers: 1}\ntraining:\n  optimizer: "
                          "{kind: sgd, lr: 0.5, momentum: 0.9}\n");
  ASSERT_TRUE(r.spec) << r.text();
  const TrainingSpec &t = r.spec->training;
  EXPECT_EQ(t.globalBatch, 8);
  EXPECT_FALSE(t.microBatch.has_value());
  EXPECT_EQ(t.optimizer.kind, OptimizerSpec::Kind::SGD);
  EXPECT_DOUBLE_EQ(t.optimizer.momentum, 0.9);
  EXPECT_EQ(t.schedule.kind, ScheduleSpec::Kind::Constant);
}

TEST(Examples, AllLoad) {
  for (const char *name :
       {"mlp.yaml", "gpt-tiny.yaml", "gpt2-small.yaml", "graph-mlp.yaml"}) {
    std::vector<Diagnostic> diags;
    std::string path = std::string(STRATA_EXAMPLES_DIR) + "/models/" + name;
    std::optional<ModelSpec> spec = loadModelSpec(path, diags);
    EXPECT_TRUE(spec.has_value())
        << name << ": " << (diags.empty() ? "" : diags[0].str());
  }
}

// --- Errors: each names file:line:col, what is wrong and what is expected.

const char *kTail = "  seq_len: 64\n  hidden: 64\n  heads: 4\n  layers: 2\n";

TEST(Errors, FileLevel) {
  expectError("", "m.yaml:1:1: error: the file is empty");
  expectError("# nothing\n\n", "m.yaml:1:1: error: the file is empty");
  expectError("model: {family: gpt\n", "m.yaml:2:1: error: invalid YAML: ");
  expectError(std::string("model:\n  fam\0ily: gpt\n", 21),
              "m.yaml:2:6: error: NUL byte: this is not a text file");
  expectError("model:\n  family: gp\xff\n",
              "m.yaml:2:13: error: invalid UTF-8 (byte 0xFF)");
  expectError("- model\n", "m.yaml:1:1: error: the top level is a list");
  expectError("a: 1\n---\nb: 2\n",
              "m.yaml:2:1: error: a second YAML document starts here");
  expectError("model: " + std::string(100000, '['),
              "m.yaml:1:72: error: collections nested more than 64");
  expectError("a: &x [1, 2]\nb: [*x, *x]\n",
              "m.yaml:2:5: error: YAML aliases (*name) are not supported");
  expectError("model:\n\tfamily: gpt\n",
              "m.yaml:2:8: error: invalid YAML: illegal map value (line 2 is "
              "indented with a tab; YAML indents with spaces)");
  expectError("model: !custom {family: gpt}\n",
              "m.yaml:1:8: error: unsupported YAML tag '!custom'");
  std::vector<Diagnostic> diags;
  std::string huge((64u << 20) + 1, ' ');
  EXPECT_FALSE(loadModelSpec("big.yaml", diags, &huge));
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_EQ(diags[0].str(), "big.yaml: error: the spec is larger than 64 "
                            "MiB; a model spec is a small text file");
}

TEST(Errors, PathLevel) {
  std::vector<Diagnostic> diags;
  EXPECT_FALSE(loadModelSpec("/nonexistent/model.yaml", diags));
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_EQ(diags[0].str(), "/nonexistent/model.yaml: error: cannot open the "
                            "model spec: No such file or directory; expected "
                            "a path to a YAML file");
  diags.clear();
  EXPECT_FALSE(loadModelSpec(STRATA_EXAMPLES_DIR, diags));
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_NE(diags[0].str().find("error: is a directory"), std::string::npos);
}

TEST(Errors, KeysAndTypes) {
  expectError("model:\n  family: gpt\n  vocab: 512\n  vocabulary: 3\n" +
                  std::string(kTail),
              "m.yaml:4:3: error: unknown key 'vocabulary' in 'model' (family "
              "gpt); did you mean 'vocab'?");
  expectError("modle: {}\n", "m.yaml:1:1: error: unknown key 'modle' in the "
                             "top level; did you mean 'model'?");
  expectError("model:\n  family: gpt\n  vocab: \"512\"\n" + std::string(kTail),
              "m.yaml:3:10: error: 'vocab' is the quoted string \"512\"; "
              "expected an integer between 1 and 2147483647 (write the "
              "number without quotes)");
  expectError("model:\n  family: gpt\n  vocab: [512]\n" + std::string(kTail),
              "m.yaml:3:10: error: 'vocab' is a list; expected an integer");
  expectError("model:\n  family: gpt\n  vocab: 2.5\n" + std::string(kTail),
              "m.yaml:3:10: error: 'vocab' is 2.5, not an integer");
  expectError("model: [gpt]\n", "m.yaml:1:8: error: 'model' is a list; "
                                "expected a mapping");
  expectError("model: {family: mlp, vocab: 4, seq_len: 4, hidden: 4, layers: "
              "1}\ntraining: {schedule: [cosine]}\n",
              "m.yaml:2:22: error: 'schedule' is a list; expected a mapping");
  expectError("model:\n  family: gpt\n" + std::string(kTail),
              "m.yaml:2:3: error: 'model' (family gpt) is missing the "
              "required key 'vocab'");
  expectError("model: {vocab: 5}\n", "m.yaml:1:8: error: 'model' is missing "
                                     "the required key 'family'");
  expectError("model:\n  family: gpt\n  vocab: 512\n  seq_len: 64\n  hidden: "
              "64\n  hidden: 32\n  heads: 4\n  layers: 2\n",
              "m.yaml:6:3: error: duplicate key 'hidden' in 'model' (family "
              "gpt), first given at 5:3");
  expectError("model: {family: gtp}\n",
              "m.yaml:1:17: error: 'family' is 'gtp'; did you mean 'gpt'? "
              "expected gpt, llama, mlp or graph");
  expectError("model: {family: mlp, vocab: 4, seq_len: 4, hidden: 4, layers: "
              "1, activation: swish}\n",
              "m.yaml:1:78: error: 'activation' is 'swish'; expected gelu or "
              "relu");
  expectError("training: {global_batch: 8}\n",
              "m.yaml:1:1: error: the spec has no 'model:' section");
}

TEST(Errors, Ranges) {
  expectError("model:\n  family: gpt\n  vocab: 512\n  seq_len: 64\n  hidden: "
              "64\n  heads: 0\n  layers: 2\n",
              "m.yaml:6:10: error: 'heads' is 0; expected a positive integer");
  expectError("model:\n  family: gpt\n  vocab: 99999999999999999999\n" +
                  std::string(kTail),
              "m.yaml:3:10: error: 'vocab' is 99999999999999999999, which is "
              "out of range");
  expectError("model:\n  family: gpt\n  vocab: 1e30\n" + std::string(kTail),
              "m.yaml:3:10: error: 'vocab' is 1e30, which is out of range");
  expectError("model:\n  family: gpt\n  vocab: 3000000000\n" +
                  std::string(kTail),
              "m.yaml:3:10: error: 'vocab' is 3000000000, which is too large; "
              "expected an integer between 1 and 2147483647");
  expectError("model: {family: gpt, vocab: 2147483647, seq_len: 8, hidden: "
              "274877906944, ffn_hidden: 1, heads: 1, layers: 2}\n",
              "m.yaml:1:8: error: this gpt model would have more than 2^62 "
              "parameters");
  expectError("model: {family: mlp, vocab: 2000000000, seq_len: 1000000000, "
              "hidden: 8, layers: 1}\ntraining: {global_batch: 4096}\n",
              "m.yaml:1:1: error: matmul 'logits_mm': output 'logits_mm' "
              "would be [4096,1000000000,2000000000], more than 2^62 "
              "elements");
  expectError("model:\n  family: gpt\n  vocab: 512\n  seq_len: 64\n  hidden: "
              "100\n  heads: 12\n  layers: 2\n",
              "m.yaml:6:10: error: 'heads' (12) does not divide 'hidden' "
              "(100); expected a divisor of 100 such as 4, 5, 10 or 20");
  const std::string mlp = "model: {family: mlp, vocab: 4, seq_len: 4, "
                          "hidden: 4, layers: 1}\n";
  expectError(mlp + "training:\n  global_batch: 8\n  micro_batch: 3\n",
              "m.yaml:4:16: error: 'micro_batch' (3) does not divide "
              "'global_batch' (8); expected a divisor of 8");
  expectError(mlp + "training:\n  schedule: {kind: linear, warmup_steps: 5, "
                    "total_steps: 5}\n",
              "m.yaml:3:58: error: 'total_steps' (5) is not greater than "
              "'warmup_steps' (5)");
  expectError(mlp + "training:\n  schedule: {kind: cosine}\n",
              "m.yaml:3:13: error: 'schedule' (kind cosine) is missing the "
              "required key 'total_steps'");
  expectError(mlp + "training:\n  optimizer: {lr: 0}\n",
              "m.yaml:3:19: error: 'lr' is 0; expected a positive number");
  expectError(mlp + "training:\n  optimizer: {lr: .nan}\n",
              "m.yaml:3:19: error: 'lr' is .nan, which is not a finite number");
  expectError(mlp + "training:\n  optimizer: {betas: [0.9, 1.0]}\n",
              "m.yaml:3:28: error: 'betas[1]' is 1; expected a number in "
              "[0, 1)");
  expectError(mlp + "training:\n  optimizer: {kind: sgd, betas: [0.9, 0.9]}\n",
              "m.yaml:3:26: error: unknown key 'betas' in 'optimizer' (kind "
              "sgd)");
}

TEST(Errors, ManyErrorsAreCapped) {
  std::string text = "model: {family: graph}\ngraph:\n  ops:\n";
  for (int i = 0; i < 500; ++i)
    text += "    - {op: relu, inputs: [x" + std::to_string((i + 1) % 500) +
            "], outputs: [x" + std::to_string(i) + "]}\n";
  text += "  outputs: [x0]\n";
  LoadResult r = loadText(text);
  EXPECT_FALSE(r.spec);
  ASSERT_EQ(r.diags.size(), 21u);
  EXPECT_EQ(r.diags[0].str(),
            "m.yaml:4:27: error: relu 'x0': input 'x1' depends on this op's "
            "own output, a cycle: x0 -> x499 -> x498 -> x497 -> ... (493 "
            "more) -> x3 -> x2 -> x1 -> x0; expected an acyclic graph");
  EXPECT_EQ(r.diags[20].str(), "m.yaml: error: too many errors in the graph; "
                               "stopping after 20 (fix the ones above first)");
}

/// Random byte edits of a valid spec must give either a spec or a located
/// diagnostic: never a crash, hang or exception.
TEST(Errors, MutatedSpecsNeverCrash) {
  const std::string base = std::string(R"(model:
  family: gpt
  vocab: 64
  seq_len: 8
  hidden: 16
  heads: 2
  layers: 1
training:
  global_batch: 4
  optimizer: {kind: adamw, lr: 1e-3, betas: [0.9, 0.99]}
  schedule: {kind: cosine, warmup_steps: 1, total_steps: 10}
)");
  const std::string alphabet = "[]{}:,-#&*!|>'\"\n 0123456789abcgptx\t?%@`";
  std::mt19937 rng(1234);
  int loaded = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text = base;
    int edits = 1 + (int)(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % (text.size() + 1);
      char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
      case 0:
        text.insert(text.begin() + pos, c);
        break;
      case 1:
        if (pos < text.size())
          text.erase(pos, 1);
        break;
      default:
        if (pos < text.size())
          text[pos] = c;
      }
    }
    LoadResult r = loadText(text);
    if (r.spec) {
      ++loaded;
      EXPECT_TRUE(r.diags.empty()) << text;
      continue;
    }
    ASSERT_FALSE(r.diags.empty()) << "no diagnostic for:\n" << text;
    EXPECT_EQ(r.diags[0].loc.file, "m.yaml");
    EXPECT_GT(r.diags[0].loc.line, 0) << r.diags[0].str() << "\n" << text;
  }
  // Some edits (in comments or values) keep the spec valid.
  EXPECT_GT(loaded, 0);
}

TEST(Diagnostic, Formats) {
  EXPECT_EQ((Diagnostic{{"a.yaml", 3, 7}, "bad"}).str(),
            "a.yaml:3:7: error: bad");
  EXPECT_EQ((Diagnostic{{"a.yaml", 3, 0}, "bad"}).str(),
            "a.yaml:3: error: bad");
  EXPECT_EQ((Diagnostic{{"a.yaml", 0, 0}, "bad"}).str(), "a.yaml: error: bad");
  EXPECT_EQ((Diagnostic{{"", 0, 0}, "bad"}).str(), "error: bad");
  EXPECT_STREQ(dtypeName(DType::BF16), "bfloat16");
  EXPECT_EQ(dtypeBytes(DType::F16), 2);
  EXPECT_EQ(dtypeBytes(DType::I32), 4);
  EXPECT_EQ(parseDType("float16"), DType::F16);
  EXPECT_FALSE(parseDType("fp16").has_value());
}

} // namespace
