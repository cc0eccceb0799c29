//===- PublishedRuns.cpp - Published training runs as planner inputs ------===//
//
// Each column is read as its source states it; a '?' leaves the plan field
// to the planner. What is read from where (the transformer family from the
// model's name and notes, the device from the GPU columns, the network from
// the stated links, the FLOP count from `flop_counting`) is listed in
// docs/validation.md, "How a row is read". A row asking for something the
// planner does not model (mixture of experts, context parallelism, FP8
// GEMMs, hybrid sharding, a device without a model) is skipped with the
// reason, never approximated.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/PublishedRuns.h"
#include "compiler/planner/CostModel.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>

namespace strata::planner {

std::vector<std::string> splitCsvLine(const std::string &line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char ch = line[i];
    if (quoted) {
      if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (ch == '"') {
        quoted = false;
      } else {
        cur += ch;
      }
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (ch != '\r') {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

namespace {
/// A positive integer cell ("8?" reads 8), or 0 for '?', 'n/a' and text.
int64_t intCell(const std::string &s) {
  char *end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || v <= 0)
    return 0;
  return v;
}
double numCell(const std::string &s) {
  char *end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  return end == s.c_str() || !std::isfinite(v) ? 0.0 : v;
}
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}
bool contains(const std::string &s, const std::string &what) {
  return lower(s).find(lower(what)) != std::string::npos;
}
bool containsAny(const std::string &s, std::initializer_list<const char *> w) {
  for (const char *x : w)
    if (contains(s, x))
      return true;
  return false;
}

/// One CSV row with its header.
struct Row {
  const std::vector<std::string> &header, &fields;
  std::string get(const std::string &name) const {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name)
        return i < fields.size() ? fields[i] : std::string();
    return std::string();
  }
};

/// The transformer family, from the model's name, the notes and the
/// framework: Llama-style models (SwiGLU, RMSNorm, rotary, no biases, no
/// dropout, untied head), Nemotron-4 (squared ReLU, rotary, no biases, untied),
/// MPT (llm-foundry's defaults: a GPT without dropout), BLOOM (ALiBi); GPT
/// otherwise.
/// Words in the notes ("rotary", "ALiBi", "untied embeddings") override.
bool readFamily(const Row &row, ModelDesc &m, std::string &why) {
  std::string model = row.get("model"), notes = row.get("notes");
  std::string framework = row.get("framework");
  std::string text = model + " " + notes;
  if (containsAny(text, {"mixture of experts", "mixture-of-experts", "moe",
                         "mixtral", "experts"})) {
    why = "mixture-of-experts layers are not modelled by the planner";
    return false;
  }
  bool llama = containsAny(model, {"llama", "mistral", "qwen", "olmo",
                                   "deepseek", "gemma", "yi-"}) ||
               contains(notes, "swiglu");
  if (llama) {
    m.gatedMlp = true, m.rmsNorm = true, m.biases = false;
    m.learnedPositions = false, m.dropout = false, m.tiedEmbedding = false;
  } else if (contains(model, "nemotron")) {
    m.biases = false, m.learnedPositions = false, m.dropout = false;
    m.tiedEmbedding = false;
  } else if (contains(model, "mpt")) {
    // llm-foundry's MPT configs set only the sizes (scripts/train/yamls/
    // pretrain/mpt-*.yaml); MPTConfig's defaults are a GPT with biases
    // (no_bias: False), a learned position table (learned_pos_emb: True,
    // ALiBi off) and no dropout (all *_pdrop 0.0). The benchmark table's
    // NumParams, L(12d² + 13d) + 2d + Vd + Sd, counts exactly those.
    m.dropout = false;
  } else if (contains(model, "bloom")) {
    m.learnedPositions = false; // ALiBi
  }
  if (containsAny(notes, {"rotary", "rope", "alibi"}))
    m.learnedPositions = false;
  if (containsAny(notes, {"no bias"}))
    m.biases = false;
  bool statedTie = false;
  if (containsAny(notes, {"untied", "untie"}))
    m.tiedEmbedding = false, statedTie = true;
  else if (containsAny(notes, {"tied embedding", "shared embedding"}))
    m.tiedEmbedding = true, statedTie = true;
  // The stated parameter count tells a tied head from an untied one when it
  // is precise enough: the nearer count wins if it is within a quarter of
  // the head's own size (Megatron-LM's "GPT 1.7B" is 24 x 2048 with an
  // untied 131072-token head: 1.48B tied, 1.75B untied).
  double statedParams = numCell(row.get("params_b")) * 1e9;
  std::string invalid; // sizes are checked (and reported) by the caller
  if (!statedTie && statedParams > 0 && !llama && m.validate(invalid)) {
    ModelDesc other = m;
    other.tiedEmbedding = !m.tiedEmbedding;
    double head = double(m.vocab) * double(m.hidden);
    double mine = std::fabs(double(m.totalParams()) - statedParams);
    double theirs = std::fabs(double(other.totalParams()) - statedParams);
    if (theirs < mine && theirs < 0.25 * head)
      m.tiedEmbedding = other.tiedEmbedding;
  }
  // torchtitan without torch.compile runs the reference RMSNorm and rotary
  // op by op (train_configs/llama*.toml: compile = false).
  if (contains(framework, "torchtitan") &&
      contains(framework, "no torch.compile"))
    m.eagerNorms = true;
  return true;
}

/// Bytes/s per GPU of the inter-node network as the row states it: "N x R
/// Gb/s" per node, "R Gb/s per GPU", or "R Gb/s" (Tb/s) for a node.
double statedNetworkPerGpu(const std::string &text, int64_t gpusPerNode) {
  std::smatch mt;
  auto bits = [](const std::string &value, const std::string &unit) {
    double v = std::stod(value);
    return (unit == "T" || unit == "t" ? v * 1e12 : v * 1e9) / 8;
  };
  static const std::regex perGpu(
      R"(([0-9.]+)\s*([GT])b(?:it)?(?:/s|ps)\s*(?:per|/)\s*GPU)",
      std::regex::icase);
  if (std::regex_search(text, mt, perGpu))
    return bits(mt[1], mt[2]);
  static const std::regex times(
      R"(([0-9]+)\s*[x\*]\s*([0-9.]+)\s*([GT])b(?:it)?(?:/s|ps))",
      std::regex::icase);
  if (std::regex_search(text, mt, times))
    return double(std::stoll(mt[1])) * bits(mt[2], mt[3]) / double(gpusPerNode);
  static const std::regex plain(R"(([0-9.]+)\s*([GT])b(?:it)?(?:/s|ps))",
                                std::regex::icase);
  if (std::regex_search(text, mt, plain))
    return bits(mt[1], mt[2]) / double(gpusPerNode);
  return 0;
}

/// The cluster: the GPU's preset (A100 40/80 GB, H100 SXM 80 GB, H200),
/// the stated GPUs per node and inter-node bandwidth.
std::optional<ClusterSpec> readCluster(const Row &row, std::string &why) {
  std::string gpu = row.get("gpu"), framework = row.get("framework");
  int64_t gpus = intCell(row.get("total_gpus"));
  if (gpus <= 0) {
    why = "total_gpus is not stated";
    return std::nullopt;
  }
  if (gpus > kMaxClusterDevices) {
    why = "total_gpus " + std::to_string(gpus) + " exceeds the planner's " +
          std::to_string(kMaxClusterDevices) + " devices";
    return std::nullopt;
  }
  double memGb = numCell(row.get("gpu_mem_gb"));
  if (memGb <= 0) {
    static const std::regex gb(R"(([0-9]+)\s*GB)", std::regex::icase);
    std::smatch mt;
    if (std::regex_search(gpu, mt, gb))
      memGb = std::stod(mt[1]);
  }
  std::string kind;
  if (contains(gpu, "H200"))
    kind = "h200";
  else if (contains(gpu, "H100") && !contains(gpu, "pcie") &&
           !std::regex_search(gpu, std::regex(R"(\bNVL\b)", std::regex::icase)))
    kind = "h100";
  else if (contains(gpu, "A100") && !contains(gpu, "pcie"))
    kind = "a100";
  else {
    why = "no device model for '" + gpu +
          "' (the planner models A100 SXM 40/80 GB, H100 SXM and H200)";
    return std::nullopt;
  }
  int64_t perNode = intCell(row.get("gpus_per_node"));
  if (perNode <= 0)
    perNode = 8;
  std::string err;
  bool isPreset = false;
  std::string preset = kind == "a100" ? "dgx-a100" : "dgx-h100";
  auto c = clusterPreset(preset + ":" + std::to_string((gpus + 7) / 8), err,
                         isPreset);
  if (!c) {
    why = err;
    return std::nullopt;
  }
  DeviceSpec &d = c->device;
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  // A stated memory size other than the preset's (H100 94/96 GB parts),
  // and a stated memory bandwidth ("96GB HBM2e 2.4 TB/s").
  if (kind == "h100" && memGb > 0 && std::fabs(memGb - 80) > 1) {
    d.name = "H100-SXM-" + std::to_string(int(memGb)) + "GB";
    d.memoryBytes = memGb * 1e9;
  }
  {
    static const std::regex hbm(R"(([0-9.]+)\s*TB/s)", std::regex::icase);
    std::smatch mt;
    if (std::regex_search(gpu, mt, hbm)) {
      double tbs = std::stod(mt[1]);
      if (tbs > 0.5 && tbs < 20)
        d.memoryBandwidth = tbs * 1e12;
    }
  }
  if (kind == "a100" && memGb > 0 && memGb < 60) {
    // A100 SXM4 40 GB: HBM2 at 1,555 GB/s (the 80 GB part: 2,039).
    d.name = "A100-SXM4-40GB";
    d.memoryBytes = 40 * GiB;
    d.memoryBandwidth = 1555e9;
  }
  if (kind == "h200") {
    // H200 SXM: the H100's compute with 141 GB of HBM3e at 4.8 TB/s.
    d.name = "H200-SXM-141GB";
    d.memoryBytes = 141e9;
    d.memoryBandwidth = 4800e9;
  }
  // Nodes of `perNode` GPUs: the NVLink level spans a node, the network
  // level the nodes.
  if (perNode != 8 || gpus < 8) {
    int64_t node = std::min(perNode, gpus);
    c->levels[0].size = node;
    if (c->levels.size() > 1)
      c->levels[1].size = (gpus + node - 1) / node;
  }
  if (c->levels.size() > 1 && c->levels[1].size <= 1)
    c->levels.resize(1);
  if (c->levels.size() > 1) {
    double net = statedNetworkPerGpu(row.get("inter_node_bw"), perNode);
    if (net > 0)
      c->levels[1].bandwidth = net;
  }
  // Attention kernels of the frameworks: llm-foundry's "flash attn" of 2024
  // and torchtitan's SDPA run the flash-attn 2 algorithm, which predates
  // Hopper's asynchronous tensor cores: FlashAttention-3 (Shah et al.,
  // arXiv:2407.08608, Fig. 5, head dim 128, sequence 4k) measures it at 319
  // (causal forward) and 310 (backward) of an H100's 989 TFLOP/s.
  if (kind != "a100" && (contains(framework, "flash attn") ||
                         contains(framework, "torchtitan"))) {
    d.attentionEfficiency = 319.0 / 989.0;
    d.attentionBackwardEfficiency = 310.0 / 989.0;
  }
  // llm-foundry's `attn_impl: triton` is the Triton FlashAttention, measured
  // on A100 by sequence length beside FlashAttention-2 (AttentionKernels.cpp).
  if (containsAny(framework, {"attn_impl triton", "triton attn",
                              "triton attention", "attn_impl: triton"})) {
    d.attentionKernel = "flash-attn-triton";
    d.attentionEfficiency = d.attentionBackwardEfficiency = 0;
  }
  return c;
}

/// The FLOP count the source divides by time, per step.
double sourceFlopsPerStep(const Row &row, const ModelDesc &m, int64_t batch) {
  std::string counting = lower(row.get("flop_counting"));
  std::string framework = row.get("framework");
  double B = double(batch), s = double(m.seqLen), l = double(m.layers);
  double h = double(m.hidden), V = double(m.vocab), a = double(m.heads);
  double f = double(m.ffnHidden), g = double(m.numKvHeads());
  std::string compact;
  for (char ch : counting)
    if (!std::isspace(static_cast<unsigned char>(ch)) && ch != '*' &&
        ch != '\xc2' && ch != '\xb7')
      compact += ch;
  bool recomputeCounted =
      containsAny(counting, {"incl. activation recompute", "hardware flops",
                             "hardware tflops", "eq.3", "eq. 3",
                             "includes the recomputation"});
  if (compact.find("6n") != std::string::npos) {
    // 6·N per token (N all parameters, or without the embedding when the
    // source says so), plus the attention term 12·l·h·s per token when the
    // source adds it ("12*l*h*q*t", "12*l*d*s").
    double n = double(m.totalParams());
    if (containsAny(counting, {"nonembedding", "non-embedding",
                               "n_nonembedding", "non_embedding"}))
      n -= double(m.vocab) * double(m.hidden);
    double perToken = 6 * n;
    if (compact.find("12l") != std::string::npos)
      perToken += 12 * l * h * s;
    return perToken * B * s;
  }
  // Megatron-LM's num_floating_point_operations (training.py): GEMMs three
  // times (forward, weight and data gradient), attention over the full s x s
  // scores, GQA's smaller k/v and SwiGLU's third matrix; for a GPT with
  // ffn = 4h it is 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)).
  double gated = m.gatedMlp ? 1.5 : 1.0;
  double layer = (1 + g / a + s / h) + (f / h) * gated;
  double flops = 12 * B * s * l * h * h * (layer + V / (2 * l * h));
  if (recomputeCounted) // one more forward of every layer
    flops += 4 * B * s * l * h * h * layer;
  (void)framework;
  return flops;
}
} // namespace

std::vector<PublishedRun> readPublishedRuns(const std::string &path,
                                            std::vector<std::string> &skipped) {
  std::vector<PublishedRun> runs;
  std::ifstream in(path);
  if (!in)
    return runs;
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header = splitCsvLine(line);
  while (std::getline(in, line)) {
    if (line.empty())
      continue;
    std::vector<std::string> f = splitCsvLine(line);
    Row row{header, f};
    auto get = [&](const std::string &name) { return row.get(name); };
    PublishedRun r;
    r.id = get("row_id");
    r.sourceKey = get("source_key");
    r.model = get("model");
    auto skip = [&](const std::string &why) {
      skipped.push_back(r.id + ": " + why);
    };
    ModelDesc &m = r.desc;
    m.name = r.model;
    m.layers = intCell(get("layers"));
    m.hidden = intCell(get("hidden"));
    m.heads = intCell(get("heads"));
    m.vocab = intCell(get("vocab"));
    m.seqLen = intCell(get("seq_len"));
    m.kvHeads = intCell(get("kv_heads")); // 0 (= heads) for '?' and "= heads"
    m.ffnHidden = intCell(get("ffn_hidden"));
    if (m.ffnHidden == 0)
      m.ffnHidden = 4 * m.hidden; // Megatron's default, as the CSV notes say
    m.dtype = "bfloat16";
    m.dtypeBytes = 2;
    std::string framework = get("framework"), precision = get("precision");
    std::string why;
    if (!readFamily(row, m, why)) {
      skip(why);
      continue;
    }
    if (contains(precision, "fp8")) {
      skip("FP8 GEMMs are not modelled (precision '" + precision + "')");
      continue;
    }
    if (contains(precision, "fp16") && !contains(precision, "bf16"))
      m.dtype = "float16";
    if (intCell(get("cp")) > 1) {
      skip("context parallelism (cp=" + get("cp") + ") is not modelled");
      continue;
    }
    std::string zero = get("zero_fsdp");
    if (containsAny(zero, {"hybrid", "hsdp"})) {
      skip("hybrid sharding ('" + zero +
           "': ZeRO-3 inside a node, replicas across) is not modelled");
      continue;
    }
    bool torchtitan = contains(framework, "torchtitan");
    bool megatron = containsAny(framework, {"Megatron", "NeMo"}) &&
                    !contains(framework, "DeepSpeed");
    std::string rc = lower(get("recompute"));
    // "Selective" recomputation is a policy of the framework's: Megatron-LM's
    // (and NeMo's, Megatron-DeepSpeed's) recomputes the attention core
    // (Korthikanti et al.); torchtitan's op-level policy (selective_ac_option
    // = 'op') keeps the matmul outputs and recomputes the rest. Other
    // policies (torchtitan's every-n-th layer, MaxText's custom
    // remat_policy) are not modelled.
    if (rc.rfind("selective", 0) == 0) {
      if (torchtitan && contains(rc, "op")) {
        m.opLevelSelective = true;
      } else if (!(megatron || contains(framework, "Megatron") ||
                   contains(rc, "core attention") ||
                   contains(rc, "attention core"))) {
        skip("the recomputation policy '" + get("recompute") +
             "' is not modelled (selective means Megatron-LM's attention-"
             "core recomputation or torchtitan's op-level policy)");
        continue;
      }
    }
    // Megatron-LM (and NeMo on Megatron-Core) accumulate and reduce bf16
    // gradients in fp32 (`accumulate_allreduce_grads_in_fp32`, forced on
    // for bf16 in arguments.py). torchtitan's FSDP2 policy reduces in fp32
    // (MixedPrecisionPolicy(reduce_dtype=float32)). Composer's FSDP mixed
    // precision 'DEFAULT' (llm-foundry's "MP Mode", with amp_*) is
    // param_dtype = the amp dtype, reduce_dtype = float32.
    bool composer = containsAny(framework, {"Composer", "llm-foundry"});
    bool composerDefault = composer && contains(precision, "amp_");
    if (megatron || torchtitan || composerDefault)
      m.gradientBytes = 4;
    // Megatron-LM's DDP (and NeMo's) reduces buckets that are views of one
    // contiguous gradient buffer.
    m.gradientBucketsAreViews = megatron;
    // NeMo's distributed_fused_adam with `grad_sync_dtype: bf16` keeps and
    // reduces the gradients in bf16, when the row says so.
    std::string stated = get("notes") + " " + zero + " " + precision;
    if (containsAny(stated, {"grad_sync_dtype bf16", "grad_sync_dtype: bf16",
                             "grad_sync_dtype=bf16"}))
      m.gradientBytes = 2;
    // Its optimizer state (NeMo megatron_base_model.py): with bf16 weights
    // and fp32 moments it stores only the masters' low 16 bits
    // (store_param_remainders: 4 + 4 + 2 bytes); with `optim.dtype: bf16`
    // the moments are bf16 and no master is stored (2 + 2).
    if (contains(stated, "distributed_fused_adam"))
      m.optimizerStateBytes =
          containsAny(stated, {"optim.dtype: bf16", "optim.dtype bf16",
                               "optimizer dtype bf16"})
              ? 4
              : 10;
    // Attention kernel: every source here runs a fused (flash) kernel except
    // DeepSpeed-era Megatron (fused softmax over stored scores).
    if (contains(framework, "DeepSpeed"))
      m.attention = ModelDesc::Attention::Unfused;
    if (!m.validate(why)) {
      skip(why);
      continue;
    }

    auto c = readCluster(row, why);
    if (!c) {
      skip(why);
      continue;
    }
    r.cluster = *c;
    std::string gpu = get("gpu");

    SearchOptions &o = r.options;
    int64_t tp = intCell(get("tp")), pp = intCell(get("pp"));
    int64_t vpp = intCell(get("vpp")), dp = intCell(get("dp"));
    int64_t mb = intCell(get("micro_batch"));
    o.globalBatch = intCell(get("global_batch_seqs"));
    if (o.globalBatch == 0 && mb > 0 && dp > 0 &&
        intCell(get("grad_accum")) > 0)
      o.globalBatch = mb * dp * intCell(get("grad_accum"));
    if (o.globalBatch == 0) {
      skip("the global batch is not stated");
      continue;
    }
    o.topK = 1;
    o.diagnoseInfeasible = false;
    auto pin = [&](const std::string &text) {
      std::string e;
      parsePin(text, o.pins, e);
      r.reading += (r.reading.empty() ? "" : " ") + text;
    };
    if (tp)
      pin("tp=" + std::to_string(tp));
    if (pp)
      pin("pp=" + std::to_string(pp));
    if (dp)
      pin("dp=" + std::to_string(dp));
    if (vpp > 1) {
      pin("schedule=interleaved");
      pin("vpp=" + std::to_string(vpp));
    }
    if (mb)
      pin("micro_batch=" + std::to_string(mb));
    if (containsAny(zero, {"ZeRO-3", "ZeRO stage 3", "stage 3", "full shard",
                           "FULL_SHARD", "fully_shard"}) ||
        (contains(zero, "FSDP") &&
         !containsAny(zero, {"SHARD_GRAD_OP", "NO_SHARD"})))
      pin("zero=3");
    else if (containsAny(zero, {"ZeRO-2", "stage 2", "SHARD_GRAD_OP"}))
      pin("zero=2");
    else if (containsAny(zero, {"distributed optimizer", "ZeRO-1", "stage 1",
                                "distributed_fused_adam"}))
      pin("zero=1");
    else if (containsAny(zero, {"none", "NO_SHARD", "DDP", "ZeRO-0"}))
      pin("zero=0");
    // Gradient buckets as the framework forms them: PyTorch FSDP reduces
    // one wrapped transformer block at a time (in the reduction dtype);
    // Megatron-LM's DDP buckets max(40M, 1M x dp) parameters; DeepSpeed's
    // default reduce bucket is 500M elements.
    double layerBytes =
        double(m.layerParams()) *
        double(m.gradientBytes > 0 ? m.gradientBytes : m.dtypeBytes);
    if (containsAny(framework, {"FSDP", "Composer", "torchtitan"}))
      pin("bucket_bytes=" + std::to_string(int64_t(layerBytes)));
    else if (contains(framework, "DeepSpeed"))
      pin("bucket_bytes=" + std::to_string(int64_t(500e6) * m.dtypeBytes));
    else if (megatron && dp)
      pin("bucket_bytes=" +
          std::to_string(std::max<int64_t>(40000000, 1000000 * dp) *
                         m.gradientBytes));
    if (rc == "none" || rc == "no" || rc == "false")
      pin("recompute=none");
    else if (rc.rfind("full", 0) == 0)
      pin("recompute=full");
    else if (rc.rfind("selective", 0) == 0)
      pin("recompute=selective");
    std::string sp = lower(get("seq_parallel"));
    if (sp == "yes" || sp == "true")
      pin("sp=true");
    else if (sp == "no" || sp == "false")
      pin("sp=false");
    // DeepSpeed's pipeline topology ('pipe', 'data', 'model'): tensor
    // parallel innermost, then data, pipeline stages outermost.
    if (contains(framework, "DeepSpeed"))
      pin("placement=tp,dp,pp");
    // DeepSpeed's pipeline engine reduces the gradients after the pipeline
    // flush (TrainSchedule's ReduceTiedGrads/ReduceGrads), not under the
    // backward.
    if (contains(framework, "DeepSpeed") && pp > 1) {
      m.gradientReductionAfterBackward = true;
      r.reading += " (gradient reduction after the flush)";
    }
    // DeepSpeed's bf16 optimizer accumulates each micro-batch's gradients
    // into fp32 buffers in a pass of its own.
    if (contains(zero, "DeepSpeed bf16 optimizer"))
      m.fp32GradAccumulationPass = true;
    if (m.attention == ModelDesc::Attention::Unfused)
      r.reading += " (unfused attention)";
    else if (r.cluster.device.attentionKernel == "flash-attn-triton")
      r.reading += " (Triton attention)";
    else if (contains(gpu, "H100") &&
             r.cluster.device.attentionEfficiency < 0.4)
      r.reading += " (FlashAttention-2)";
    if (m.eagerNorms)
      r.reading += " (eager RMSNorm)";
    if (!m.tiedEmbedding && !m.gatedMlp)
      r.reading += " (untied head)";
    if (r.cluster.device.memoryBytes < 79.0 * (1 << 30) ||
        r.cluster.device.memoryBytes > 81.0 * (1 << 30))
      r.reading += " (" + r.cluster.device.name + ")";
    // A power limit below the part's rating lowers its sustained clocks by
    // an amount no source here measures: read, said, not modelled.
    static const std::regex watts(R"(([0-9]+)\s*W\b)");
    std::smatch wm;
    if (std::regex_search(gpu, wm, watts) && contains(gpu, "H100") &&
        std::stoi(wm[1]) < 700)
      r.reading += " (" + std::string(wm[1]) + " W cap not modelled)";
    // Megatron-DeepSpeed's `--pp-partition-method type:transformer|embedding`
    // (BLOOM) balances layers and embeddings alike: the tied embedding takes
    // one layer's slot on the first and on the last stage.
    std::string notes = get("notes");
    if (contains(notes, "type:transformer|embedding") && pp > 1 &&
        (m.layers + 2) % pp == 0) {
      int64_t per = (m.layers + 2) / pp;
      r.stageLayers.assign(pp, per);
      r.stageLayers.front() -= 1, r.stageLayers.back() -= 1;
      r.reading += " stage_layers=" + std::to_string(per - 1) + "," +
                   std::to_string(per) + "..." + std::to_string(per) + "," +
                   std::to_string(per - 1);
    }

    // What was measured, in the source's units: seconds per step, tokens/s
    // per GPU, or TFLOP/s per GPU / MFU under the source's FLOP count.
    double iter = numCell(get("reported_iter_time_s"));
    double tokens = numCell(get("reported_tokens_per_s_per_gpu"));
    double tflops = numCell(get("reported_tflops_per_gpu"));
    double mfu = numCell(get("reported_mfu_pct"));
    if (iter > 0) {
      r.metric = PublishedMetric::IterationTime, r.measured = iter;
    } else if (tokens > 0) {
      r.metric = PublishedMetric::TokensPerGpu, r.measured = tokens;
    } else if (tflops > 0) {
      r.metric = PublishedMetric::TflopsPerGpu, r.measured = tflops;
      r.flopsPerStep = sourceFlopsPerStep(row, m, o.globalBatch);
    } else if (mfu > 0) {
      // MFU against the peak the source names ("/ 312e12", "989"), else
      // the device's dense 16-bit peak.
      double peak = r.cluster.device.peakFor(m.dtype);
      static const std::regex peakRe(R"(\b(312|989|1979)(?:e12)?\b)");
      std::smatch mt;
      std::string counting = get("flop_counting");
      if (std::regex_search(counting, mt, peakRe))
        peak = std::stod(mt[1]) * 1e12;
      r.metric = PublishedMetric::TflopsPerGpu;
      r.measured = mfu / 100 * peak / 1e12;
      r.flopsPerStep = sourceFlopsPerStep(row, m, o.globalBatch);
      r.reading += " (MFU " + get("reported_mfu_pct") + "% of " +
                   std::to_string(int(peak / 1e12)) + " TFLOP/s)";
    } else {
      skip("no measured value this reader understands");
      continue;
    }
    runs.push_back(std::move(r));
  }
  return runs;
}

PlanResult planAsStated(const PublishedRun &r) {
  PlanResult res = searchPlans(r.desc, r.cluster, r.options);
  if (!res.ok || r.stageLayers.empty())
    return res;
  Plan &p = res.plans[0].plan;
  if (int64_t(r.stageLayers.size()) != p.pp * p.vpp)
    return res;
  p.stageLayers = r.stageLayers;
  res.plans[0].estimate = AnalyticalCostModel(r.desc, r.cluster).estimate(p);
  return res;
}

double predictedMetric(const PublishedRun &r, const Estimate &e) {
  const ModelDesc &m = r.desc;
  double gpus = double(r.cluster.numDevices());
  double tokens = double(r.options.globalBatch) * double(m.seqLen);
  switch (r.metric) {
  case PublishedMetric::IterationTime:
    return e.stepTimeS;
  case PublishedMetric::TokensPerGpu:
    return tokens / e.stepTimeS / gpus;
  case PublishedMetric::TflopsPerGpu:
    return r.flopsPerStep / e.stepTimeS / gpus / 1e12;
  }
  return 0;
}

double predictedSpeedRatio(const PublishedRun &r, const Estimate &e) {
  double pred = predictedMetric(r, e);
  return r.metric == PublishedMetric::IterationTime ? r.measured / pred
                                                    : pred / r.measured;
}

} // namespace strata::planner
