//===- Presets.cpp - The gpt, llama and mlp presets -----------------------===//
//
// The gpt expansion follows Hugging Face GPT2LMHeadModel op for op (fused
// qkv, pre-LayerNorm, causal attention scaled by 1/sqrt(head_dim), tanh
// GELU, tied output projection) with HF's parameter names and layouts, so HF
// checkpoints load unchanged. The llama expansion follows LlamaForCausalLM
// the same way (RMSNorm, separate q/k/v projections in nn.Linear layout,
// rotary embeddings, grouped-query attention, SwiGLU, untied lm_head).
//
//===----------------------------------------------------------------------===//

#include "frontends/yaml/Presets.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace strata::frontend {

namespace {

/// A dimension viewed as `view` (row-major), split over "tp" along view
/// dimension 1 (strata.sharding's "tp@3x4x4:1": the fused QKV by heads).
std::string viewedSplit(const std::vector<int64_t> &view) {
  std::string s = "tp@";
  for (size_t i = 0; i < view.size(); ++i)
    s += (i ? "x" : "") + std::to_string(view[i]);
  return s + ":1";
}

constexpr int64_t kMaxVocab = 2147483647; // token ids are int32
const char *const kVocabHint = "'vocab: N', the number of distinct tokens";
const char *const kSeqLenHint = "'seq_len: N', the tokens per sequence";
const char *const kHiddenHint = "'hidden: N', the model width";
const char *const kLayersHint = "'layers: N', the number of blocks";

/// Appends inputs, params and ops to a graph, all located at `loc`.
class GraphBuilder {
public:
  GraphBuilder(Graph &g, SourceLoc loc) : g(g), loc(std::move(loc)) {}

  void setBlock(std::optional<int64_t> layerIndex, SourceLoc where) {
    layer = layerIndex;
    loc = std::move(where);
  }

  std::string input(const std::string &name, std::vector<int64_t> shape) {
    GraphTensor t;
    t.name = name;
    t.shape = std::move(shape);
    t.dtype = DType::I32;
    t.loc = loc;
    g.inputs.push_back(t);
    return name;
  }

  std::string param(const std::string &name, std::vector<int64_t> shape,
                    DType dtype, ParamInit::Kind init, double stddev = 0.0) {
    GraphParam p;
    p.name = name;
    p.shape = std::move(shape);
    p.dtype = dtype;
    p.loc = loc;
    p.init.kind = init;
    p.init.std = init == ParamInit::Kind::Normal ? stddev : 0.0;
    p.layer = layer;
    g.params.push_back(p);
    return name;
  }

  /// States parameter `name`'s tensor-parallel decision (GraphParam::tpSplit).
  void decide(const std::string &name, std::vector<std::string> split,
              std::vector<int64_t> view = {}, bool padded = false) {
    for (GraphParam &p : g.params)
      if (p.name == name) {
        p.tpSplit = std::move(split);
        p.tpView = std::move(view);
        p.tpPadded = padded;
      }
  }

  /// States that sequence parallelism splits `output` (the residual stream,
  /// [batch, sequence, hidden]) along the sequence.
  void splitSequence(const std::string &output) {
    for (GraphOp &o : g.ops)
      if (!o.outputs.empty() && o.outputs[0] == output)
        o.spSplit = {"", "tp", ""};
  }

  std::vector<std::string> ops(const std::string &op,
                               std::vector<std::string> inputs,
                               std::vector<std::string> outputs,
                               std::map<std::string, AttrValue> attrs = {}) {
    GraphOp o;
    o.op = op;
    o.inputs = std::move(inputs);
    o.outputs = outputs;
    o.attrs = std::move(attrs);
    o.layer = layer;
    o.loc = loc;
    g.ops.push_back(std::move(o));
    return outputs;
  }

  std::string op(const std::string &op, std::vector<std::string> inputs,
                 const std::string &output,
                 std::map<std::string, AttrValue> attrs = {}) {
    return ops(op, std::move(inputs), {output}, std::move(attrs))[0];
  }

  /// y = x . W + b with HF Conv1D layout (W is [in, out]).
  std::string linear(const std::string &x, const std::string &w,
                     const std::string &b, const std::string &out) {
    std::string mm = op("matmul", {x, w}, out + "_mm");
    return op("bias_add", {mm, b}, out);
  }

  /// y = x . W^T with nn.Linear layout (W is [out, in]), no bias.
  std::string linearT(const std::string &x, const std::string &w,
                      const std::string &out) {
    return op("matmul", {x, w}, out, {{"transpose_b", true}});
  }

private:
  Graph &g;
  SourceLoc loc;
  std::optional<int64_t> layer;
};

std::optional<DType> readFloatDType(MapReader &model) {
  std::optional<std::string> name = model.getChoice(
      "dtype", {"float32", "bfloat16", "float16"}, std::string("float32"));
  if (!name)
    return std::nullopt;
  return parseDType(*name);
}

/// `attention: fused | unfused`; true for fused (the default).
std::optional<bool> readAttention(MapReader &model) {
  std::optional<std::string> kind =
      model.getChoice("attention", {"fused", "unfused"}, std::string("fused"));
  if (!kind)
    return std::nullopt;
  return *kind == "fused";
}

/// ffn_hidden defaults to 4 * hidden.
std::optional<int64_t> readFfnHidden(MapReader &model,
                                     std::optional<int64_t> hidden) {
  if (model.has("ffn_hidden"))
    return model.getInt("ffn_hidden", 1, kMaxPresetDim, 0);
  if (!hidden)
    return std::nullopt;
  if (*hidden > kMaxPresetDim / 4) {
    model.r.error(model.keyLoc("hidden"),
                  "'hidden' is " + std::to_string(*hidden) +
                      ", so the default ffn_hidden (4 * hidden) exceeds " +
                      std::to_string(kMaxPresetDim) +
                      "; expected a smaller hidden or an explicit ffn_hidden");
    return std::nullopt;
  }
  return 4 * *hidden;
}

/// Divisors of n near `near`, for "expected a divisor of n such as ...".
std::string someDivisors(int64_t n, int64_t near) {
  std::vector<int64_t> divs;
  for (int64_t d = 1; d * d <= n && divs.size() < 4096; ++d)
    if (n % d == 0) {
      divs.push_back(d);
      divs.push_back(n / d);
    }
  std::sort(divs.begin(), divs.end());
  divs.erase(std::unique(divs.begin(), divs.end()), divs.end());
  std::stable_sort(divs.begin(), divs.end(), [&](int64_t a, int64_t b) {
    return std::llabs(a - near) < std::llabs(b - near);
  });
  divs.resize(std::min<size_t>(divs.size(), 4));
  std::sort(divs.begin(), divs.end());
  std::vector<std::string> words;
  for (int64_t d : divs)
    words.push_back(std::to_string(d));
  return joinChoices(words);
}

/// Sum of a list of element counts with overflow checking.
std::optional<int64_t>
sumCounts(std::initializer_list<std::optional<int64_t>> xs) {
  int64_t total = 0;
  for (const std::optional<int64_t> &x : xs) {
    if (!x)
      return std::nullopt;
    std::optional<int64_t> s = checkedAdd(total, *x);
    if (!s)
      return std::nullopt;
    total = *s;
  }
  return total;
}

std::optional<int64_t> mul3(int64_t a, int64_t b, int64_t c) {
  std::optional<int64_t> ab = checkedMul(a, b);
  return ab ? checkedMul(*ab, c) : std::nullopt;
}

/// The sizes every transformer preset has; each is null where its key
/// failed to read (the error is reported).
struct TransformerSizes {
  std::optional<int64_t> vocab, seqLen, hidden, heads, layers;
  bool ok() const { return vocab && seqLen && hidden && heads && layers; }
};

TransformerSizes readTransformerSizes(MapReader &model, const char *headsHint) {
  TransformerSizes t;
  t.vocab = model.getInt("vocab", 1, kMaxVocab, std::nullopt, kVocabHint);
  t.seqLen =
      model.getInt("seq_len", 1, kMaxPresetDim, std::nullopt, kSeqLenHint);
  t.hidden =
      model.getInt("hidden", 1, kMaxPresetDim, std::nullopt, kHiddenHint);
  t.heads = model.getInt("heads", 1, kMaxPresetDim, std::nullopt, headsHint);
  t.layers = model.getInt("layers", 1, kMaxLayers, std::nullopt, kLayersHint);
  return t;
}

/// Reports (at `key`) a `count` that does not divide `of`'s value `total`.
bool requireDivisor(MapReader &model, const std::string &key, int64_t count,
                    const std::string &of, int64_t total,
                    const std::string &why = "") {
  if (total % count == 0)
    return true;
  model.r.error(model.find(key),
                "'" + key + "' (" + std::to_string(count) +
                    ") does not divide '" + of + "' (" + std::to_string(total) +
                    "); expected a divisor of " + std::to_string(total) +
                    " such as " + someDivisors(total, count) + why);
  return false;
}

} // namespace

bool readGptConfig(MapReader &model, ModelSpec &spec) {
  GptConfig c;
  TransformerSizes t = readTransformerSizes(
      model, "'heads: N', the number of attention heads (a divisor of hidden)");
  auto ffn = readFfnHidden(model, t.hidden);
  auto dtype = readFloatDType(model);
  auto attention = readAttention(model);
  if (!t.ok() || !ffn || !dtype || !attention ||
      !requireDivisor(model, "heads", *t.heads, "hidden", *t.hidden))
    return false;
  int64_t h = *t.hidden, f = *ffn;
  // Per block: two LayerNorms, c_attn, attn c_proj, c_fc, mlp c_proj.
  std::optional<int64_t> block = sumCounts(
      {checkedMul(4, h), checkedMul(h, 3 * h), checkedMul(3, h),
       checkedMul(h, h), h, checkedMul(h, f), f, checkedMul(f, h), h});
  std::optional<int64_t> total =
      block ? sumCounts({checkedMul(*t.vocab, h), checkedMul(*t.seqLen, h),
                         checkedMul(*t.layers, *block), checkedMul(2, h)})
            : std::nullopt;
  if (!total) {
    model.r.error(model.mapNode(),
                  "this gpt model would have more than 2^62 parameters "
                  "(vocab * hidden + layers * (12 * hidden^2 + ...)); "
                  "expected smaller vocab, hidden, ffn_hidden or layers");
    return false;
  }
  c.vocab = *t.vocab;
  c.seqLen = *t.seqLen;
  c.hidden = h;
  c.heads = *t.heads;
  c.layers = *t.layers;
  c.ffnHidden = f;
  c.dtype = *dtype;
  c.fusedAttention = *attention;
  spec.gpt = c;
  return true;
}

bool readLlamaConfig(MapReader &model, ModelSpec &spec) {
  LlamaConfig c;
  TransformerSizes t = readTransformerSizes(
      model, "'heads: N', the number of attention (query) heads (a divisor "
             "of hidden)");
  auto ffn = model.getInt("ffn_hidden", 1, kMaxPresetDim, std::nullopt,
                          "'ffn_hidden: N', the inner width of the SwiGLU "
                          "MLP (Llama 3 8B: 14336)");
  std::optional<int64_t> kvHeads =
      t.heads ? model.getInt("kv_heads", 1, kMaxPresetDim, *t.heads)
              : std::nullopt;
  auto theta = model.getFloat("rope_theta", 0.0, HUGE_VAL, 10000.0,
                              /*minExclusive=*/true);
  auto eps =
      model.getFloat("norm_eps", 0.0, HUGE_VAL, 1e-5, /*minExclusive=*/true);
  auto tie = model.getBool("tie_embeddings", false);
  auto dtype = readFloatDType(model);
  auto attention = readAttention(model);
  if (!t.ok() || !ffn || !kvHeads || !theta || !eps || !tie || !dtype ||
      !attention ||
      !requireDivisor(model, "heads", *t.heads, "hidden", *t.hidden) ||
      !requireDivisor(model, "kv_heads", *kvHeads, "heads", *t.heads,
                      " (each kv head serves heads / kv_heads query heads)"))
    return false;
  if ((*t.hidden / *t.heads) % 2 != 0) {
    model.r.error(
        model.find("heads"),
        "head_dim = hidden / heads = " + std::to_string(*t.hidden / *t.heads) +
            " is odd; rotary embeddings rotate pairs of features, "
            "so expected heads such that hidden / heads is even");
    return false;
  }
  int64_t h = *t.hidden, f = *ffn, kv = *kvHeads * (h / *t.heads);
  // Per block: two RMSNorms, q, k, v, o, gate, up, down.
  std::optional<int64_t> block =
      sumCounts({checkedMul(2, h), checkedMul(h, h), checkedMul(2 * kv, h),
                 checkedMul(h, h), mul3(3, f, h)});
  std::optional<int64_t> total =
      block ? sumCounts({checkedMul(*t.vocab, h), checkedMul(*t.layers, *block),
                         h, *tie ? 0 : checkedMul(*t.vocab, h)})
            : std::nullopt;
  if (!total) {
    model.r.error(model.mapNode(),
                  "this llama model would have more than 2^62 parameters "
                  "(vocab * hidden + layers * (2 * hidden^2 + 3 * hidden * "
                  "ffn_hidden + ...)); expected smaller vocab, hidden, "
                  "ffn_hidden or layers");
    return false;
  }
  c.vocab = *t.vocab;
  c.seqLen = *t.seqLen;
  c.hidden = h;
  c.heads = *t.heads;
  c.kvHeads = *kvHeads;
  c.layers = *t.layers;
  c.ffnHidden = f;
  c.ropeTheta = *theta;
  c.normEps = *eps;
  c.tieEmbeddings = *tie;
  c.dtype = *dtype;
  c.fusedAttention = *attention;
  spec.llama = c;
  return true;
}

bool readMlpConfig(MapReader &model, ModelSpec &spec) {
  MlpConfig c;
  auto vocab = model.getInt("vocab", 1, kMaxVocab, std::nullopt, kVocabHint);
  auto seqLen =
      model.getInt("seq_len", 1, kMaxPresetDim, std::nullopt, kSeqLenHint);
  auto hidden =
      model.getInt("hidden", 1, kMaxPresetDim, std::nullopt, kHiddenHint);
  auto layers =
      model.getInt("layers", 1, kMaxLayers, std::nullopt, kLayersHint);
  auto ffn = readFfnHidden(model, hidden);
  auto act =
      model.getChoice("activation", {"gelu", "relu"}, std::string("gelu"));
  auto dtype = readFloatDType(model);
  if (!vocab || !seqLen || !hidden || !layers || !ffn || !act || !dtype)
    return false;
  int64_t h = *hidden, f = *ffn;
  std::optional<int64_t> block =
      sumCounts({checkedMul(h, f), f, checkedMul(f, h), h});
  std::optional<int64_t> total =
      block ? sumCounts({checkedMul(*vocab, h), checkedMul(*layers, *block),
                         mul3(h, *vocab, 1), *vocab})
            : std::nullopt;
  if (!total) {
    model.r.error(model.mapNode(),
                  "this mlp model would have more than 2^62 parameters; "
                  "expected smaller vocab, hidden, ffn_hidden or layers");
    return false;
  }
  c.vocab = *vocab;
  c.seqLen = *seqLen;
  c.hidden = h;
  c.layers = *layers;
  c.ffnHidden = f;
  c.activation = *act;
  c.dtype = *dtype;
  spec.mlp = c;
  return true;
}

Graph expandGptGraph(const GptConfig &c, int64_t batch, const PresetLocs &locs,
                     int64_t rowTokens) {
  using K = ParamInit::Kind;
  Graph g;
  g.loc = locs.model;
  GraphBuilder b(g, locs.model);
  // S tokens per row (seq_len, or 1 for one generation step); the position
  // table always has seq_len rows.
  const int64_t B = batch, S = rowTokens, H = c.hidden, nh = c.heads,
                hd = c.hidden / c.heads, F = c.ffnHidden;
  const double initStd = 0.02;
  // GPT-2 scales residual projections by 1/sqrt(2 * layers) at init.
  const double projStd = 0.02 / std::sqrt(2.0 * (double)c.layers);

  std::string tokens = b.input("tokens", {B, S});
  std::string positions = b.input("positions", {B, S});
  std::string targets = b.input("targets", {B, S});
  std::string wte =
      b.param("wte.weight", {c.vocab, H}, c.dtype, K::Normal, initStd);
  std::string wpe =
      b.param("wpe.weight", {c.seqLen, H}, c.dtype, K::Normal, initStd);
  std::string x = b.op("add",
                       {b.op("embedding", {wte, tokens}, "tok_emb"),
                        b.op("embedding", {wpe, positions}, "pos_emb")},
                       "embed");
  // Megatron-LM's decisions, stated: the vocabulary-parallel embedding (and
  // so the tied head and the loss), padded where tp does not divide it; the
  // residual stream split along the sequence under sp.
  b.decide(wte, {"tp", ""}, {}, /*padded=*/true);
  b.splitSequence("tok_emb");
  b.splitSequence("pos_emb");

  for (int64_t i = 0; i < c.layers; ++i) {
    b.setBlock(i, locs.layers);
    std::string p = "h." + std::to_string(i) + ".";
    auto layerNorm = [&](const std::string &name, const std::string &in) {
      std::string w = b.param(p + name + ".weight", {H}, c.dtype, K::Ones);
      std::string bias = b.param(p + name + ".bias", {H}, c.dtype, K::Zeros);
      return b.op("layer_norm", {in, w, bias}, p + name,
                  {{"epsilon", AttrValue(1e-5)}});
    };
    std::string ln1 = layerNorm("ln_1", x);
    std::string qkvW = b.param(p + "attn.c_attn.weight", {H, 3 * H}, c.dtype,
                               K::Normal, initStd);
    std::string qkvB =
        b.param(p + "attn.c_attn.bias", {3 * H}, c.dtype, K::Zeros);
    // The fused QKV projection by heads: its features viewed as
    // [3, heads, head_dim] (the checkpoint view [hidden, 3, heads, dim]).
    b.decide(qkvW, {"", viewedSplit({3, nh, hd})}, {H, 3, nh, hd});
    b.decide(qkvB, {viewedSplit({3, nh, hd})}, {3, nh, hd});
    std::string qkv = b.linear(ln1, qkvW, qkvB, p + "attn.qkv");
    qkv = b.op("reshape", {qkv}, p + "attn.qkv_heads",
               {{"shape", std::vector<int64_t>{B, S, 3, nh, hd}}});
    qkv = b.op("transpose", {qkv}, p + "attn.qkv_t",
               {{"permutation", std::vector<int64_t>{2, 0, 3, 1, 4}}});
    std::vector<std::string> parts =
        b.ops("split", {qkv},
              {p + "attn.q_part", p + "attn.k_part", p + "attn.v_part"},
              {{"axis", int64_t(0)}, {"num", int64_t(3)}});
    std::vector<int64_t> headShape{B, nh, S, hd};
    std::string q =
        b.op("reshape", {parts[0]}, p + "attn.q", {{"shape", headShape}});
    std::string k =
        b.op("reshape", {parts[1]}, p + "attn.k", {{"shape", headShape}});
    std::string v =
        b.op("reshape", {parts[2]}, p + "attn.v", {{"shape", headShape}});
    AttrValue scale(1.0 / std::sqrt((double)hd));
    std::string ctx;
    if (c.fusedAttention) {
      ctx = b.ops("causal_attention", {q, k, v},
                  {p + "attn.ctx", p + "attn.lse"}, {{"scale", scale}})[0];
    } else {
      std::string scores =
          b.op("matmul", {q, k}, p + "attn.scores", {{"transpose_b", true}});
      std::string probs = b.op("softmax", {scores}, p + "attn.probs",
                               {{"causal", true}, {"scale", scale}});
      ctx = b.op("matmul", {probs, v}, p + "attn.ctx");
    }
    ctx = b.op("transpose", {ctx}, p + "attn.ctx_t",
               {{"permutation", std::vector<int64_t>{0, 2, 1, 3}}});
    ctx = b.op("reshape", {ctx}, p + "attn.ctx_merged",
               {{"shape", std::vector<int64_t>{B, S, H}}});
    std::string projW =
        b.param(p + "attn.c_proj.weight", {H, H}, c.dtype, K::Normal, projStd);
    std::string projB = b.param(p + "attn.c_proj.bias", {H}, c.dtype, K::Zeros);
    b.decide(projW, {"tp", ""}); // row-parallel
    std::string attn = b.linear(ctx, projW, projB, p + "attn.out");
    x = b.op("add", {x, attn}, p + "res_1");

    std::string ln2 = layerNorm("ln_2", x);
    std::string fcW =
        b.param(p + "mlp.c_fc.weight", {H, F}, c.dtype, K::Normal, initStd);
    std::string fcB = b.param(p + "mlp.c_fc.bias", {F}, c.dtype, K::Zeros);
    b.decide(fcW, {"", "tp"}); // column-parallel
    b.decide(fcB, {"tp"});
    std::string fc = b.linear(ln2, fcW, fcB, p + "mlp.fc");
    std::string act = b.op("gelu", {fc}, p + "mlp.act");
    std::string mlpW =
        b.param(p + "mlp.c_proj.weight", {F, H}, c.dtype, K::Normal, projStd);
    std::string mlpB = b.param(p + "mlp.c_proj.bias", {H}, c.dtype, K::Zeros);
    b.decide(mlpW, {"tp", ""}); // row-parallel
    std::string mlp = b.linear(act, mlpW, mlpB, p + "mlp.out");
    x = b.op("add", {x, mlp}, p + "out");
  }

  b.setBlock(std::nullopt, locs.model);
  std::string lnW = b.param("ln_f.weight", {H}, c.dtype, K::Ones);
  std::string lnB = b.param("ln_f.bias", {H}, c.dtype, K::Zeros);
  x = b.op("layer_norm", {x, lnW, lnB}, "ln_f", {{"epsilon", AttrValue(1e-5)}});
  // The output projection is tied to the token embedding, as in GPT-2.
  std::string logits =
      b.op("matmul", {x, wte}, "logits", {{"transpose_b", true}});
  std::string loss = b.op("cross_entropy", {logits, targets}, "loss");
  g.outputs = {loss};
  return g;
}

Graph expandLlamaGraph(const LlamaConfig &c, int64_t batch,
                       const PresetLocs &locs, int64_t rowTokens) {
  using K = ParamInit::Kind;
  Graph g;
  g.loc = locs.model;
  GraphBuilder b(g, locs.model);
  // S tokens per row: seq_len, or 1 for one generation step.
  const int64_t B = batch, S = rowTokens, H = c.hidden, nh = c.heads,
                kvh = c.kvHeads, hd = c.headDim(), F = c.ffnHidden;
  const int64_t group = nh / kvh; // query heads per kv head
  // HF LlamaPreTrainedModel._init_weights: every Linear and the embedding
  // N(0, initializer_range = 0.02), RMSNorm weights ones.
  const double initStd = 0.02;
  const AttrValue eps(c.normEps);

  std::string tokens = b.input("tokens", {B, S});
  std::string targets = b.input("targets", {B, S});
  std::string embed = b.param("model.embed_tokens.weight", {c.vocab, H},
                              c.dtype, K::Normal, initStd);
  std::string x = b.op("embedding", {embed, tokens}, "embed");
  b.decide(embed, {"tp", ""}, {}, /*padded=*/true);
  b.splitSequence("embed");

  for (int64_t i = 0; i < c.layers; ++i) {
    b.setBlock(i, locs.layers);
    std::string p = "model.layers." + std::to_string(i) + ".";
    // Declared in HF's state-dict order (LlamaDecoderLayer: self_attn, mlp,
    // input_layernorm, post_attention_layernorm).
    auto linear = [&](const std::string &name, int64_t out, int64_t in) {
      return b.param(p + name + ".weight", {out, in}, c.dtype, K::Normal,
                     initStd);
    };
    std::string qW = linear("self_attn.q_proj", nh * hd, H);
    std::string kW = linear("self_attn.k_proj", kvh * hd, H);
    std::string vW = linear("self_attn.v_proj", kvh * hd, H);
    std::string oW = linear("self_attn.o_proj", H, nh * hd);
    std::string gateW = linear("mlp.gate_proj", F, H);
    std::string upW = linear("mlp.up_proj", F, H);
    std::string downW = linear("mlp.down_proj", H, F);
    // Query heads split (the checkpoint view [heads, head_dim, hidden]); kv
    // heads by group, or shared when fewer than the members ("tp/kv").
    b.decide(qW, {"tp", ""}, {nh, hd, H});
    for (const std::string &w : {kW, vW})
      b.decide(w, {"tp/" + std::to_string(kvh), ""}, {kvh, hd, H});
    b.decide(oW, {"", "tp"});
    b.decide(gateW, {"tp", ""});
    b.decide(upW, {"tp", ""});
    b.decide(downW, {"", "tp"});
    std::string ln1W =
        b.param(p + "input_layernorm.weight", {H}, c.dtype, K::Ones);
    std::string ln2W =
        b.param(p + "post_attention_layernorm.weight", {H}, c.dtype, K::Ones);

    std::string ln1 =
        b.op("rms_norm", {x, ln1W}, p + "input_layernorm", {{"epsilon", eps}});
    // [B,S,n*hd] -> [B,n,S,hd]: the per-head layout attention works in.
    auto heads = [&](const std::string &w, int64_t n, const std::string &name) {
      std::string y = b.linearT(ln1, w, p + "self_attn." + name);
      y = b.op("reshape", {y}, p + "self_attn." + name + "_heads",
               {{"shape", std::vector<int64_t>{B, S, n, hd}}});
      return b.op("transpose", {y}, p + "self_attn." + name + "_t",
                  {{"permutation", std::vector<int64_t>{0, 2, 1, 3}}});
    };
    auto rope = [&](const std::string &in, const std::string &name) {
      return b.op("rotary_embedding", {in}, p + "self_attn." + name + "_rot",
                  {{"theta", AttrValue(c.ropeTheta)}});
    };
    // Grouped-query attention: kv head j // group serves query head j.
    auto repeatKv = [&](const std::string &in, const std::string &name) {
      if (group == 1)
        return in;
      return b.op("repeat_interleave", {in}, p + "self_attn." + name + "_rep",
                  {{"axis", int64_t(1)}, {"repeats", group}});
    };
    std::string q = rope(heads(qW, nh, "q"), "q");
    std::string k = rope(heads(kW, kvh, "k"), "k");
    std::string v = heads(vW, kvh, "v");
    AttrValue scale(1.0 / std::sqrt((double)hd));
    std::string ctx;
    if (c.fusedAttention) {
      // The fused op maps query head j to kv head j // group itself.
      ctx = b.ops("causal_attention", {q, k, v},
                  {p + "self_attn.ctx", p + "self_attn.lse"},
                  {{"scale", scale}})[0];
    } else {
      k = repeatKv(k, "k");
      v = repeatKv(v, "v");
      std::string scores = b.op("matmul", {q, k}, p + "self_attn.scores",
                                {{"transpose_b", true}});
      std::string probs = b.op("softmax", {scores}, p + "self_attn.probs",
                               {{"causal", true}, {"scale", scale}});
      ctx = b.op("matmul", {probs, v}, p + "self_attn.ctx");
    }
    ctx = b.op("transpose", {ctx}, p + "self_attn.ctx_t",
               {{"permutation", std::vector<int64_t>{0, 2, 1, 3}}});
    ctx = b.op("reshape", {ctx}, p + "self_attn.ctx_merged",
               {{"shape", std::vector<int64_t>{B, S, nh * hd}}});
    std::string attn = b.linearT(ctx, oW, p + "self_attn.out");
    x = b.op("add", {x, attn}, p + "res_1");

    std::string ln2 = b.op("rms_norm", {x, ln2W},
                           p + "post_attention_layernorm", {{"epsilon", eps}});
    std::string gate = b.linearT(ln2, gateW, p + "mlp.gate");
    std::string up = b.linearT(ln2, upW, p + "mlp.up");
    std::string act = b.op("silu_mul", {gate, up}, p + "mlp.act");
    std::string mlp = b.linearT(act, downW, p + "mlp.out");
    x = b.op("add", {x, mlp}, p + "out");
  }

  b.setBlock(std::nullopt, locs.model);
  std::string normW = b.param("model.norm.weight", {H}, c.dtype, K::Ones);
  x = b.op("rms_norm", {x, normW}, "norm", {{"epsilon", eps}});
  std::string head = c.tieEmbeddings ? embed
                                     : b.param("lm_head.weight", {c.vocab, H},
                                               c.dtype, K::Normal, initStd);
  if (!c.tieEmbeddings)
    b.decide(head, {"tp", ""}, {}, /*padded=*/true); // vocabulary-parallel
  std::string logits = b.linearT(x, head, "logits");
  g.outputs = {b.op("cross_entropy", {logits, targets}, "loss")};
  return g;
}

Graph expandMlpGraph(const MlpConfig &c, int64_t batch, const PresetLocs &locs,
                     int64_t rowTokens) {
  using K = ParamInit::Kind;
  Graph g;
  g.loc = locs.model;
  GraphBuilder b(g, locs.model);
  const int64_t B = batch, S = rowTokens, H = c.hidden, F = c.ffnHidden;
  const double initStd = 0.02;
  std::string tokens = b.input("tokens", {B, S});
  std::string targets = b.input("targets", {B, S});
  std::string embed =
      b.param("embed.weight", {c.vocab, H}, c.dtype, K::Normal, initStd);
  std::string x = b.op("embedding", {embed, tokens}, "embed");
  b.decide(embed, {"tp", ""}, {}, /*padded=*/true);
  b.splitSequence("embed");
  for (int64_t i = 0; i < c.layers; ++i) {
    b.setBlock(i, locs.layers);
    std::string p = "layers." + std::to_string(i) + ".";
    std::string w1 =
        b.param(p + "fc1.weight", {H, F}, c.dtype, K::Normal, initStd);
    std::string b1 = b.param(p + "fc1.bias", {F}, c.dtype, K::Zeros);
    std::string w2 =
        b.param(p + "fc2.weight", {F, H}, c.dtype, K::Normal, initStd);
    std::string b2 = b.param(p + "fc2.bias", {H}, c.dtype, K::Zeros);
    b.decide(w1, {"", "tp"});
    b.decide(b1, {"tp"});
    b.decide(w2, {"tp", ""});
    std::string h = b.linear(x, w1, b1, p + "fc1");
    h = b.op(c.activation, {h}, p + "act");
    h = b.linear(h, w2, b2, p + "fc2");
    x = b.op("add", {x, h}, p + "out");
  }
  b.setBlock(std::nullopt, locs.model);
  std::string headW =
      b.param("head.weight", {H, c.vocab}, c.dtype, K::Normal, initStd);
  std::string headB = b.param("head.bias", {c.vocab}, c.dtype, K::Zeros);
  b.decide(headW, {"", "tp"}, {}, /*padded=*/true); // vocabulary-parallel
  b.decide(headB, {"tp"}, {}, /*padded=*/true);
  std::string logits = b.linear(x, headW, headB, "logits");
  g.outputs = {b.op("cross_entropy", {logits, targets}, "loss")};
  return g;
}

std::string hfConfigJson(const ModelSpec &spec) {
  auto n = [](int64_t v) { return std::to_string(v); };
  auto f = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return std::string(buf);
  };
  // What transformers needs to rebuild the model exactly (no dropout).
  if (spec.gpt) {
    const GptConfig &c = *spec.gpt;
    return "{\n"
           "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
           "  \"model_type\": \"gpt2\",\n"
           "  \"vocab_size\": " +
           n(c.vocab) +
           ",\n"
           "  \"n_positions\": " +
           n(c.seqLen) +
           ",\n"
           "  \"n_ctx\": " +
           n(c.seqLen) +
           ",\n"
           "  \"n_embd\": " +
           n(c.hidden) +
           ",\n"
           "  \"n_layer\": " +
           n(c.layers) +
           ",\n"
           "  \"n_head\": " +
           n(c.heads) +
           ",\n"
           "  \"n_inner\": " +
           n(c.ffnHidden) +
           ",\n"
           "  \"activation_function\": \"gelu_new\",\n"
           "  \"layer_norm_epsilon\": 1e-05,\n"
           "  \"initializer_range\": 0.02,\n"
           "  \"resid_pdrop\": 0.0,\n"
           "  \"embd_pdrop\": 0.0,\n"
           "  \"attn_pdrop\": 0.0,\n"
           "  \"tie_word_embeddings\": true,\n"
           "  \"torch_dtype\": \"float32\"\n"
           "}\n";
  }
  if (spec.llama) {
    const LlamaConfig &c = *spec.llama;
    return "{\n"
           "  \"architectures\": [\"LlamaForCausalLM\"],\n"
           "  \"model_type\": \"llama\",\n"
           "  \"vocab_size\": " +
           n(c.vocab) +
           ",\n"
           "  \"max_position_embeddings\": " +
           n(c.seqLen) +
           ",\n"
           "  \"hidden_size\": " +
           n(c.hidden) +
           ",\n"
           "  \"intermediate_size\": " +
           n(c.ffnHidden) +
           ",\n"
           "  \"num_hidden_layers\": " +
           n(c.layers) +
           ",\n"
           "  \"num_attention_heads\": " +
           n(c.heads) +
           ",\n"
           "  \"num_key_value_heads\": " +
           n(c.kvHeads) +
           ",\n"
           "  \"head_dim\": " +
           n(c.headDim()) +
           ",\n"
           "  \"hidden_act\": \"silu\",\n"
           "  \"rms_norm_eps\": " +
           f(c.normEps) +
           ",\n"
           "  \"rope_theta\": " +
           f(c.ropeTheta) +
           ",\n"
           "  \"attention_bias\": false,\n"
           "  \"mlp_bias\": false,\n"
           "  \"attention_dropout\": 0.0,\n"
           "  \"initializer_range\": 0.02,\n"
           "  \"tie_word_embeddings\": " +
           (c.tieEmbeddings ? "true" : "false") +
           ",\n"
           "  \"torch_dtype\": \"float32\"\n"
           "}\n";
  }
  return {};
}

} // namespace strata::frontend
