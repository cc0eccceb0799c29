//===- ModelSpec.cpp - Loading and validating a YAML model spec -----------===//
//
// loadModelSpec reads the file (bounded), parses it into a located tree,
// reads the `training:` section first (the graph is built for its batch
// size), then the `model:` section, expands presets or reads the explicit
// graph, and validates the graph. Each stage reports every error it can find
// before the next stage is skipped.
//
//===----------------------------------------------------------------------===//

#include "frontends/yaml/ModelSpec.h"

#include "frontends/yaml/GraphParser.h"
#include "frontends/yaml/GraphValidation.h"
#include "frontends/yaml/Presets.h"
#include "frontends/yaml/YamlDocument.h"
#include "frontends/yaml/YamlFields.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace strata::frontend {

std::string Diagnostic::str() const {
  std::string s = loc.file;
  if (loc.line > 0) {
    s += ":" + std::to_string(loc.line);
    if (loc.col > 0)
      s += ":" + std::to_string(loc.col);
  }
  return s + (s.empty() ? "" : ": ") + "error: " + message;
}

const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32:
    return "float32";
  case DType::BF16:
    return "bfloat16";
  case DType::F16:
    return "float16";
  case DType::I32:
    return "int32";
  }
  return "unknown";
}

int64_t dtypeBytes(DType t) {
  switch (t) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::BF16:
  case DType::F16:
    return 2;
  }
  return 0;
}

std::optional<DType> parseDType(const std::string &name) {
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::I32})
    if (name == dtypeName(t))
      return t;
  return std::nullopt;
}

bool isFloatDType(DType t) { return t != DType::I32; }

int64_t numElements(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

int64_t Graph::numParamElements() const {
  int64_t n = 0;
  for (const GraphParam &p : params)
    n += numElements(p.shape);
  return n;
}

namespace {

/// Reads the whole file, refusing directories, pipes, devices, unreadable
/// paths and files beyond kMaxSpecBytes. The file is opened without blocking
/// and checked after opening, so a FIFO cannot hang the read and /dev/zero
/// cannot fill memory.
bool readSpecFile(const std::string &path, std::string &text,
                  std::vector<Diagnostic> &diags) {
  auto fail = [&](const std::string &message) {
    diags.push_back(Diagnostic{SourceLoc{path, 0, 0}, message});
    return false;
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return fail(std::string("cannot open the model spec: ") +
                std::strerror(errno) + "; expected a path to a YAML file");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return fail(std::string("cannot read the model spec: ") +
                std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    return fail("is a directory; expected a YAML model spec file");
  if (!S_ISREG(st.st_mode))
    return fail(std::string("is not a regular file (") +
                (S_ISFIFO(st.st_mode)  ? "a pipe"
                 : S_ISCHR(st.st_mode) ? "a character device"
                                       : "not a plain file") +
                "); expected a YAML model spec file");
  auto tooLarge = [&]() {
    return fail("the file is larger than " +
                std::to_string(kMaxSpecBytes >> 20) +
                " MiB; a model spec is a small text file");
  };
  if ((uint64_t)st.st_size > kMaxSpecBytes)
    return tooLarge();
  text.clear();
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return fail(std::string("cannot read the model spec: ") +
                  std::strerror(errno));
    if (n == 0)
      break;
    text.append(buf, size_t(n));
    if (text.size() > kMaxSpecBytes)
      return tooLarge();
  }
  return true;
}

/// Peeks at `family` so that the `model:` keys can be checked against the
/// ones that family accepts.
std::optional<std::string> readFamily(SpecReader &r, const YamlNode *model) {
  const std::vector<std::string> families = {"gpt", "llama", "mlp", "graph"};
  if (!model->isMap()) {
    r.error(model, std::string("'model' is ") + model->kindDescription() +
                       "; expected a mapping such as {family: gpt, vocab: "
                       "512, ...}");
    return std::nullopt;
  }
  for (const auto &[k, v] : model->entries)
    if (k->isScalar() && k->value == "family")
      return r.readChoice(v, "'family'", families);
  r.error(model, "'model' is missing the required key 'family'; expected "
                 "family: gpt, llama, mlp or graph");
  return std::nullopt;
}

std::vector<std::string> modelKeys(const std::string &family) {
  if (family == "gpt")
    return {"family", "vocab",      "seq_len", "hidden",   "heads",
            "layers", "ffn_hidden", "dtype",   "attention"};
  if (family == "llama")
    return {"family",         "vocab",  "seq_len",    "hidden",     "heads",
            "kv_heads",       "layers", "ffn_hidden", "rope_theta", "norm_eps",
            "tie_embeddings", "dtype",  "attention"};
  if (family == "mlp")
    return {"family", "vocab",      "seq_len",    "hidden",
            "layers", "ffn_hidden", "activation", "dtype"};
  return {"family", "dtype"};
}

/// Optional sections with a `kind:` key name the kind in messages about
/// their keys; that only makes sense once the node is a mapping.
bool expectSectionMap(SpecReader &r, const YamlNode *node,
                      const std::string &what, const std::string &example) {
  if (node->isMap() || node->isNull())
    return true;
  r.error(node, what + " is " + node->kindDescription() +
                    "; expected a mapping such as " + example);
  return false;
}

bool readOptimizer(SpecReader &r, const YamlNode *node, OptimizerSpec &opt) {
  if (!expectSectionMap(r, node, "'optimizer'", "{kind: adamw, lr: 1e-3}"))
    return false;
  std::string kind = "adamw";
  if (node->isMap()) {
    for (const auto &[k, v] : node->entries)
      if (k->isScalar() && k->value == "kind") {
        auto c = r.readChoice(v, "'kind'", {"sgd", "adamw"});
        if (!c)
          return false;
        kind = *c;
      }
  }
  std::vector<std::string> keys =
      kind == "sgd"
          ? std::vector<std::string>{"kind", "lr", "momentum", "weight_decay"}
          : std::vector<std::string>{"kind", "lr", "betas", "eps",
                                     "weight_decay"};
  MapReader m(r, node, "'optimizer' (kind " + kind + ")", keys);
  if (!m.valid())
    return false;
  opt.kind =
      kind == "sgd" ? OptimizerSpec::Kind::SGD : OptimizerSpec::Kind::AdamW;
  bool ok = true;
  auto set = [&](std::optional<double> v, double &out) {
    if (v)
      out = *v;
    else
      ok = false;
  };
  set(m.getFloat("lr", 0.0, HUGE_VAL, 1e-3, /*minExclusive=*/true), opt.lr);
  set(m.getFloat("weight_decay", 0.0, HUGE_VAL, 0.0), opt.weightDecay);
  if (kind == "sgd") {
    set(m.getFloat("momentum", 0.0, 1.0, 0.0), opt.momentum);
    return ok;
  }
  set(m.getFloat("eps", 0.0, HUGE_VAL, 1e-8, /*minExclusive=*/true), opt.eps);
  if (const YamlNode *betas = m.find("betas")) {
    if (!betas->isSequence() || betas->items.size() != 2) {
      r.error(betas,
              std::string("'betas' is ") +
                  (betas->isSequence()
                       ? "a list of " + std::to_string(betas->items.size()) +
                             " numbers"
                       : betas->kindDescription()) +
                  "; expected a list of two numbers in [0, 1), such "
                  "as [0.9, 0.999]");
      return false;
    }
    double *outs[] = {&opt.beta1, &opt.beta2};
    for (int i = 0; i < 2; ++i) {
      std::string what = "'betas[" + std::to_string(i) + "]'";
      auto v = r.readFloat(betas->items[i], what, 0.0, 1.0);
      if (v && *v >= 1.0) {
        r.error(betas->items[i], what + " is 1; expected a number in [0, 1) "
                                        "(AdamW divides by 1 - beta^t)");
        v.reset();
      }
      set(v, *outs[i]);
    }
  }
  return ok;
}

bool readSchedule(SpecReader &r, const YamlNode *node, double lr,
                  ScheduleSpec &s) {
  if (!expectSectionMap(r, node, "'schedule'",
                        "{kind: cosine, warmup_steps: 100, total_steps: "
                        "1000}"))
    return false;
  std::string kind = "constant";
  if (node->isMap()) {
    for (const auto &[k, v] : node->entries)
      if (k->isScalar() && k->value == "kind") {
        auto c = r.readChoice(v, "'kind'", {"constant", "cosine", "linear"});
        if (!c)
          return false;
        kind = *c;
      }
  }
  std::vector<std::string> keys =
      kind == "constant"
          ? std::vector<std::string>{"kind", "warmup_steps", "total_steps"}
          : std::vector<std::string>{"kind", "warmup_steps", "min_lr",
                                     "total_steps"};
  MapReader m(r, node, "'schedule' (kind " + kind + ")", keys);
  if (!m.valid())
    return false;
  s.kind = kind == "constant" ? ScheduleSpec::Kind::Constant
           : kind == "cosine" ? ScheduleSpec::Kind::Cosine
                              : ScheduleSpec::Kind::Linear;
  auto warmup = m.getInt("warmup_steps", 0, kInt64Max, 0);
  auto total =
      m.getInt("total_steps", 1, kInt64Max,
               kind == "constant" ? std::optional<int64_t>(0) : std::nullopt,
               "a positive number of steps (cosine and linear decay "
               "to min_lr over total_steps)");
  auto minLr = m.getFloat("min_lr", 0.0, HUGE_VAL, 0.0);
  if (!warmup || !total || !minLr)
    return false;
  if (kind != "constant" && *total <= *warmup) {
    r.error(m.find("total_steps"),
            "'total_steps' (" + std::to_string(*total) +
                ") is not greater than 'warmup_steps' (" +
                std::to_string(*warmup) +
                "); expected total_steps > "
                "warmup_steps so that the " +
                kind + " decay has steps");
    return false;
  }
  if (*minLr > lr) {
    r.error(m.find("min_lr"), "'min_lr' (" + std::to_string(*minLr) +
                                  ") is greater than the optimizer's lr (" +
                                  std::to_string(lr) +
                                  "); expected min_lr <= lr");
    return false;
  }
  s.warmupSteps = *warmup;
  s.totalSteps = *total;
  s.minLr = *minLr;
  return true;
}

bool readTraining(SpecReader &r, const YamlNode *node, TrainingSpec &t) {
  MapReader m(r, node, "'training'",
              {"global_batch", "micro_batch", "optimizer", "schedule",
               "grad_clip", "seed"});
  if (!m.valid())
    return false;
  t.present = true;
  bool ok = true;
  auto global = m.getInt("global_batch", 1, kMaxPresetDim, 8);
  if (global)
    t.globalBatch = *global;
  else
    ok = false;
  if (const YamlNode *micro = m.find("micro_batch")) {
    auto v = r.readInt(micro, "'micro_batch'", 1, kMaxPresetDim);
    if (v && global && *global % *v != 0) {
      r.error(micro, "'micro_batch' (" + std::to_string(*v) +
                         ") does not divide 'global_batch' (" +
                         std::to_string(*global) + "); expected a divisor of " +
                         std::to_string(*global));
      v.reset();
    }
    if (v)
      t.microBatch = *v;
    else
      ok = false;
  }
  if (const YamlNode *opt = m.find("optimizer"))
    ok = readOptimizer(r, opt, t.optimizer) && ok;
  if (const YamlNode *sched = m.find("schedule"))
    ok = readSchedule(r, sched, t.optimizer.lr, t.schedule) && ok;
  if (auto clip = m.getFloat("grad_clip", 0.0, HUGE_VAL, 0.0))
    t.gradClip = *clip;
  else
    ok = false;
  if (auto seed = m.getInt("seed", 0, kInt64Max, 0))
    t.seed = (uint64_t)*seed;
  else
    ok = false;
  return ok;
}

std::optional<ModelSpec> loadFromDocument(SpecReader &r,
                                          const YamlDocument &doc,
                                          std::vector<Diagnostic> &diags,
                                          const LoadOptions &options) {
  const YamlNode *root = doc.root;
  if (!root || root->isNull()) {
    r.error(SourceLoc{r.path, 1, 1},
            "the file is empty; expected a YAML mapping with a 'model:' "
            "section (docs/model-spec.md)");
    return std::nullopt;
  }
  if (!root->isMap()) {
    r.error(root, std::string("the top level is ") + root->kindDescription() +
                      "; expected a mapping with a 'model:' section (and "
                      "optional 'training:' and 'graph:')");
    return std::nullopt;
  }
  MapReader top(r, root, "the top level", {"model", "training", "graph"});
  ModelSpec spec;
  spec.path = r.path;
  if (const YamlNode *training = top.find("training"))
    readTraining(r, training, spec.training);
  spec.batch = options.batch.value_or(
      spec.training.microBatch.value_or(spec.training.globalBatch));

  const YamlNode *modelNode = top.find("model");
  if (!modelNode) {
    r.error(root, "the spec has no 'model:' section; expected 'model: "
                  "{family: gpt | llama | mlp | graph, ...}'");
    return std::nullopt;
  }
  std::optional<std::string> family = readFamily(r, modelNode);
  if (!family)
    return std::nullopt;
  spec.family = *family;
  MapReader model(r, modelNode, "'model' (family " + *family + ")",
                  modelKeys(*family));
  const YamlNode *graphNode = top.find("graph");
  if (*family != "graph" && graphNode) {
    r.error(top.keyNode("graph"),
            "a 'graph:' section is only for family: graph; the " + *family +
                " preset builds its own graph (remove 'graph:' or use "
                "family: graph)");
  }
  if (*family == "graph" && !graphNode) {
    r.error(modelNode, "family: graph needs a top-level 'graph:' section "
                       "with inputs, params, ops and outputs");
  }
  PresetLocs locs{top.keyLoc("model"), model.keyLoc("layers")};
  if (*family == "gpt") {
    if (readGptConfig(model, spec) && !r.failed())
      spec.graph = expandGptGraph(*spec.gpt, spec.batch, locs,
                                  options.decode ? 1 : spec.gpt->seqLen);
  } else if (*family == "llama") {
    if (readLlamaConfig(model, spec) && !r.failed())
      spec.graph = expandLlamaGraph(*spec.llama, spec.batch, locs,
                                    options.decode ? 1 : spec.llama->seqLen);
  } else if (*family == "mlp") {
    if (readMlpConfig(model, spec) && !r.failed())
      spec.graph = expandMlpGraph(*spec.mlp, spec.batch, locs,
                                  options.decode ? 1 : spec.mlp->seqLen);
  } else if (graphNode && options.decode) {
    r.error(top.keyNode("graph"),
            "generation needs a preset model (gpt, mlp): an explicit graph "
            "is built for its own sequence length");
  } else if (graphNode) {
    auto dtype = model.getChoice("dtype", {"float32", "bfloat16", "float16"},
                                 std::string("float32"));
    if (dtype && !r.failed())
      readExplicitGraph(r, graphNode, *parseDType(*dtype), spec.batch,
                        spec.graph);
  }
  if (r.failed())
    return std::nullopt;
  if (!validateGraph(spec.graph, r.path, diags))
    return std::nullopt;
  return spec;
}

} // namespace

static bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::optional<OnnxSidecar> loadOnnxSidecar(const std::string &onnxPath,
                                           std::vector<Diagnostic> &diags,
                                           const LoadOptions &options) {
  OnnxSidecar side;
  side.path = onnxPath.substr(0, onnxPath.size() - 5) + ".yaml";
  try {
    std::string text;
    if (!readSpecFile(side.path, text, diags)) {
      diags.back().message +=
          " (an ONNX model needs a YAML file beside it naming its logits "
          "output: 'onnx: {logits: NAME}' and an optional 'training:' "
          "section; docs/model-spec.md)";
      return std::nullopt;
    }
    std::unique_ptr<YamlDocument> doc =
        parseYamlDocument(side.path, text, diags);
    if (!doc)
      return std::nullopt;
    SpecReader r(side.path, diags);
    const YamlNode *root = doc->root;
    if (!root || !root->isMap()) {
      r.error(SourceLoc{side.path, 1, 1},
              "expected a mapping with an 'onnx:' section (logits, tokens) "
              "and an optional 'training:' section");
      return std::nullopt;
    }
    MapReader top(r, root, "the top level", {"onnx", "training"});
    if (const YamlNode *training = top.find("training"))
      readTraining(r, training, side.training);
    side.batch = options.batch.value_or(
        side.training.microBatch.value_or(side.training.globalBatch));
    if (const YamlNode *onnx =
            top.require("onnx", "'onnx: {logits: NAME}' naming the ONNX "
                                "output the loss is taken of")) {
      MapReader m(r, onnx, "'onnx'", {"logits", "tokens"});
      if (m.valid()) {
        if (const YamlNode *n = m.require(
                "logits", "the name of the ONNX graph output holding the "
                          "logits [batch, seq, vocab]")) {
          side.logitsLoc = r.loc(n);
          if (auto v = r.readString(n, "'logits'"))
            side.logits = *v;
        }
        if (const YamlNode *n = m.find("tokens")) {
          side.tokensLoc = r.loc(n);
          if (auto v = r.readString(n, "'tokens'"))
            side.tokens = *v;
        }
      }
    }
    if (r.failed())
      return std::nullopt;
    return side;
  } catch (const std::exception &e) {
    diags.push_back(Diagnostic{SourceLoc{side.path, 0, 0},
                               std::string("cannot load: ") + e.what()});
  }
  return std::nullopt;
}

std::optional<ModelSpec> loadModelSpec(const std::string &path,
                                       std::vector<Diagnostic> &diags,
                                       const std::string *contents,
                                       const LoadOptions &options) {
  if (!contents && endsWith(path, ".onnx"))
    return loadOnnxModel(path, diags, options);
  try {
    std::string text;
    if (contents) {
      if (contents->size() > kMaxSpecBytes) {
        diags.push_back(Diagnostic{
            SourceLoc{path, 0, 0},
            "the spec is larger than " + std::to_string(kMaxSpecBytes >> 20) +
                " MiB; a model spec is a small text file"});
        return std::nullopt;
      }
      text = *contents;
    } else if (!readSpecFile(path, text, diags)) {
      return std::nullopt;
    }
    std::unique_ptr<YamlDocument> doc = parseYamlDocument(path, text, diags);
    if (!doc)
      return std::nullopt;
    SpecReader reader(path, diags);
    return loadFromDocument(reader, *doc, diags, options);
  } catch (const std::bad_alloc &) {
    diags.push_back(Diagnostic{SourceLoc{path, 0, 0},
                               "out of memory while loading the model spec"});
  } catch (const std::exception &e) {
    diags.push_back(
        Diagnostic{SourceLoc{path, 0, 0},
                   std::string("cannot load the model spec: ") + e.what()});
  }
  return std::nullopt;
}

} // namespace strata::frontend
