//===- PublishedRuns.cpp - Published training runs as planner inputs ------===//
//
// Each column is read as its source states it; a '?' leaves the plan field
// to the planner. The per-source readings (which transformer family, which
// attention kernel, which FLOP count) are listed in docs/validation.md.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/PublishedRuns.h"
#include "compiler/planner/CostModel.h"

#include <algorithm>
#include <cctype>
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
/// A positive integer cell, or 0 for '?', 'n/a' and text.
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
  return end == s.c_str() ? 0.0 : v;
}
bool contains(const std::string &s, const std::string &what) {
  std::string a = s, b = what;
  std::transform(a.begin(), a.end(), a.begin(), ::tolower);
  std::transform(b.begin(), b.end(), b.begin(), ::tolower);
  return a.find(b) != std::string::npos;
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
  auto col = [&](const std::string &name) -> int {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name)
        return int(i);
    return -1;
  };
  while (std::getline(in, line)) {
    if (line.empty())
      continue;
    std::vector<std::string> f = splitCsvLine(line);
    auto get = [&](const std::string &name) -> std::string {
      int i = col(name);
      return i >= 0 && size_t(i) < f.size() ? f[i] : std::string();
    };
    PublishedRun r;
    r.id = get("row_id");
    r.sourceKey = get("source_key");
    r.model = get("model");
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
    std::string framework = get("framework");
    // Families: torchtitan trains Llama; llm-foundry's MPT has no biases,
    // ALiBi instead of a position table and no dropout; the others are GPT.
    if (r.sourceKey.rfind("TT", 0) == 0) {
      m.gatedMlp = true, m.rmsNorm = true, m.biases = false;
      // "no torch.compile": the reference RMSNorm and rotary run op by op
      // (train_configs/llama*.toml: norm_type = "rmsnorm", compile = false).
      m.eagerNorms = contains(framework, "no torch.compile");
      // recompute "selective (op-level SAC)": selective_ac_option = 'op'.
      m.opLevelSelective = true;
      m.learnedPositions = false, m.dropout = false, m.tiedEmbedding = false;
    } else if (r.sourceKey == "MPT") {
      m.biases = false, m.learnedPositions = false, m.dropout = false;
    } else if (r.sourceKey == "BLOOM") {
      m.learnedPositions = false; // ALiBi
    }
    // Attention kernel: every source here runs a fused (flash) kernel except
    // BigScience's 2022 Megatron-DeepSpeed (fused softmax over stored scores).
    if (contains(framework, "DeepSpeed"))
      m.attention = ModelDesc::Attention::Unfused;
    // Megatron-LM (and NeMo on Megatron-Core) accumulate and reduce bf16
    // gradients in fp32 (`accumulate_allreduce_grads_in_fp32`, forced on
    // for bf16 in arguments.py).
    bool megatron = (contains(framework, "Megatron") ||
                     contains(framework, "NeMo")) &&
                    !contains(framework, "DeepSpeed");
    // torchtitan's FSDP2 policy reduces in fp32
    // (MixedPrecisionPolicy(reduce_dtype=float32), its only choice).
    // Composer's FSDP mixed precision 'DEFAULT' (llm-foundry's MPT rows, the
    // README's "MP Mode" column) is param_dtype = the amp dtype,
    // reduce_dtype = float32 (composer get_mixed_precision).
    bool composerDefault =
        r.sourceKey == "MPT" && contains(get("precision"), "amp_");
    if (megatron || r.sourceKey.rfind("TT", 0) == 0 || composerDefault)
      m.gradientBytes = 4;
    std::string why;
    if (!m.validate(why)) {
      skipped.push_back(r.id + ": " + why);
      continue;
    }

    int64_t gpus = intCell(get("total_gpus"));
    std::string gpu = get("gpu");
    std::string err;
    bool isPreset = false;
    std::string preset = contains(gpu, "H100") ? "dgx-h100" : "dgx-a100";
    auto c = clusterPreset(preset + ":" + std::to_string((gpus + 7) / 8), err,
                           isPreset);
    if (!c) {
      skipped.push_back(r.id + ": " + err);
      continue;
    }
    // A per-GPU network bandwidth the source states ("~50 Gb/s per GPU").
    std::smatch match;
    std::string net = get("inter_node_bw");
    static const std::regex perGpu(R"(~?([0-9.]+) Gb/s per GPU)");
    if (std::regex_search(net, match, perGpu) && c->levels.size() > 1)
      c->levels[1].bandwidth = std::stod(match[1]) * 1e9 / 8;
    // llm-foundry's "flash attn" of 2024 is the flash-attn 2 package, which
    // predates Hopper's asynchronous tensor cores: FlashAttention-3 (Shah et
    // al., arXiv:2407.08608, Fig. 5, head dim 128, sequence 4k) measures it
    // at 319 (causal forward) and 310 (backward) of an H100's 989 TFLOP/s.
    if (contains(gpu, "H100") && contains(framework, "flash attn")) {
      c->device.attentionEfficiency = 319.0 / 989.0;
      c->device.attentionBackwardEfficiency = 310.0 / 989.0;
    }
    r.cluster = *c;

    SearchOptions &o = r.options;
    o.globalBatch = intCell(get("global_batch_seqs"));
    o.topK = 1;
    o.diagnoseInfeasible = false;
    auto pin = [&](const std::string &text) {
      std::string e;
      parsePin(text, o.pins, e);
      r.reading += (r.reading.empty() ? "" : " ") + text;
    };
    int64_t tp = intCell(get("tp")), pp = intCell(get("pp"));
    int64_t vpp = intCell(get("vpp")), dp = intCell(get("dp"));
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
    if (int64_t mb = intCell(get("micro_batch")))
      pin("micro_batch=" + std::to_string(mb));
    std::string zero = get("zero_fsdp");
    if (contains(zero, "ZeRO-3") || contains(zero, "full shard") ||
        contains(zero, "FULL_SHARD"))
      pin("zero=3");
    else if (contains(zero, "ZeRO-2") || contains(zero, "SHARD_GRAD_OP"))
      pin("zero=2");
    else if (contains(zero, "distributed optimizer") ||
             contains(zero, "ZeRO-1"))
      pin("zero=1");
    // Gradient buckets as the framework forms them: PyTorch FSDP reduces
    // one wrapped transformer block at a time; Megatron-LM's DDP buckets
    // max(40M, 1M x dp) parameters; DeepSpeed's default reduce bucket is
    // 500M elements.
    // (FSDP's unit is one block's gradients in the reduction dtype.)
    double layerBytes =
        double(m.layerParams()) *
        double(m.gradientBytes > 0 ? m.gradientBytes : m.dtypeBytes);
    if (contains(framework, "FSDP") || contains(framework, "Composer"))
      pin("bucket_bytes=" + std::to_string(int64_t(layerBytes)));
    else if (contains(framework, "DeepSpeed"))
      pin("bucket_bytes=" + std::to_string(int64_t(500e6) * m.dtypeBytes));
    else if (megatron)
      pin("bucket_bytes=" +
          std::to_string(std::max<int64_t>(40000000, 1000000 * dp) *
                         m.gradientBytes));
    std::string rc = get("recompute");
    if (rc == "none")
      pin("recompute=none");
    else if (rc.rfind("full", 0) == 0)
      pin("recompute=full");
    else if (rc.rfind("selective", 0) == 0)
      pin("recompute=selective");
    std::string sp = get("seq_parallel");
    if (sp == "yes")
      pin("sp=true");
    else if (sp == "no")
      pin("sp=false");
    // DeepSpeed's pipeline topology ('pipe', 'data', 'model'): tensor
    // parallel innermost, then data, pipeline stages outermost.
    if (contains(framework, "DeepSpeed"))
      pin("placement=tp,dp,pp");
    // DeepSpeed's bf16 optimizer accumulates each micro-batch's gradients
    // into fp32 buffers in a pass of its own.
    if (contains(zero, "DeepSpeed bf16 optimizer"))
      m.fp32GradAccumulationPass = true;
    if (m.attention == ModelDesc::Attention::Unfused)
      r.reading += " (unfused attention)";
    else if (contains(gpu, "H100") && contains(framework, "flash attn"))
      r.reading += " (FlashAttention-2)";
    if (m.eagerNorms)
      r.reading += " (eager RMSNorm)";
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

    double iter = numCell(get("reported_iter_time_s"));
    double tokens = numCell(get("reported_tokens_per_s_per_gpu"));
    double tflops = numCell(get("reported_tflops_per_gpu"));
    if (iter > 0) {
      r.metric = PublishedMetric::IterationTime, r.measured = iter;
    } else if (tokens > 0) {
      r.metric = PublishedMetric::TokensPerGpu, r.measured = tokens;
    } else if (tflops > 0 && contains(framework, "Megatron")) {
      r.metric = PublishedMetric::MegatronTflops, r.measured = tflops;
    } else {
      skipped.push_back(r.id + ": no measured value this reader understands");
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
  case PublishedMetric::MegatronTflops: {
    // Megatron-LM's num_floating_point_operations without recomputation:
    // 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) for a GPT with ffn = 4h.
    double B = double(r.options.globalBatch), s = double(m.seqLen);
    double l = double(m.layers), h = double(m.hidden), V = double(m.vocab);
    double flops =
        72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    return flops / e.stepTimeS / gpus / 1e12;
  }
  }
  return 0;
}

} // namespace strata::planner
