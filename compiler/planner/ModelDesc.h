//===- ModelDesc.h - What the planner needs to know about a model -*- C++
//-*-===//
//
// The planner reasons about a stack of identical layers between an embedding
// and a head, which is what lets it cost one layer and multiply. ModelDesc is
// that view; `modelDescFromSpec` derives it from a parsed YAML model spec so
// the planner core does not depend on the frontend.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_MODELDESC_H
#define STRATA_COMPILER_PLANNER_MODELDESC_H

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace strata::frontend {
struct ModelSpec;
} // namespace strata::frontend

namespace strata::planner {

/// One op of an explicit graph as the cost interface reports it, for a
/// micro-batch of b samples: fixed + b * perSample (the graph is imported at
/// two batch sizes and the difference taken).
struct GraphOpCost {
  double flops = 0, flopsPerSample = 0;
  double bytes = 0, bytesPerSample = 0;
  /// Result bytes per sample, held for the backward pass.
  double savedPerSample = 0;
  /// A contraction (runs at GEMM efficiency); the rest is memory-bound.
  bool contraction = false;
};

/// A contiguous run of an explicit graph's ops that one pipeline stage takes
/// whole: the ops of one `layer:` annotation in a row, or one unannotated op
/// (passes/partition/PipelineUnits.h defines the split; the planner and
/// `strata-assign-pipeline-stages` agree on it).
struct GraphUnit {
  std::string name; ///< "layer 3" or "op 5 (strata.matmul)"
  std::vector<GraphOpCost> ops;
  double params = 0; ///< parameter elements first used here
  /// Bytes per sample of the values other units read (pipeline transfers).
  double boundaryPerSample = 0;
};

struct ModelDesc {
  enum class Kind { Transformer, Mlp, Graph } kind = Kind::Transformer;
  std::string name;
  int64_t vocab = 0, seqLen = 0, hidden = 0, heads = 1, layers = 0;
  int64_t ffnHidden = 0;
  /// Compute/activation dtype: "float32", "bfloat16" or "float16". 16-bit
  /// dtypes train in mixed precision with fp32 master weights.
  std::string dtype = "float32";
  int64_t dtypeBytes = 4;
  /// Optimizer state bytes per parameter beyond the weight and gradient:
  /// Adam keeps m and v (8 in fp32), plus a 4-byte fp32 master copy in mixed
  /// precision; SGD keeps momentum (4) or nothing.
  enum class Optimizer { Adam, Sgd, SgdMomentum } optimizer = Optimizer::Adam;
  /// Bytes per gradient element as accumulated and reduced; 0 means
  /// `dtypeBytes`. Megatron-LM with bf16 forces fp32 (4):
  /// `accumulate_allreduce_grads_in_fp32` (docs/cost-model.md, "Memory").
  int64_t gradientBytes = 0;
  int64_t globalBatch = 0; ///< sequences per step; 0 = not given
  bool tiedEmbedding = true;

  // Transformer variants. The defaults describe GPT-2 (the `gpt` preset);
  // the `llama` preset changes all of them.
  /// Key/value heads (grouped-query attention); 0 means `heads`.
  int64_t kvHeads = 0;
  /// SwiGLU MLP: gate and up [h, f] and down [f, h], no biases.
  bool gatedMlp = false;
  /// RMSNorm (a weight only) instead of LayerNorm (weight and bias).
  bool rmsNorm = false;
  /// The RMSNorm and rotary embeddings run as the reference PyTorch modules,
  /// op by op in fp32 (torchtitan without torch.compile), not as fused
  /// kernels; costed per kernel (docs/cost-model.md, "Eager norms").
  bool eagerNorms = false;
  /// Selective recomputation is torchtitan's op-level policy (Llama with a
  /// fused attention kernel): the attention kernel's output and every other
  /// matmul's (wq, wv, w1, w2) are kept, the rest of the layer's forward
  /// (wk, wo, w3 and every elementwise op) runs again in backward.
  bool opLevelSelective = false;
  /// Each micro-batch's 16-bit weight gradients are added into fp32
  /// gradient buffers by a separate pass (DeepSpeed's BF16_Optimizer:
  /// read the 16-bit gradient, read and write the fp32 one), instead of
  /// the weight-gradient GEMM accumulating in place.
  bool fp32GradAccumulationPass = false;
  /// Optimizer state bytes per parameter, the fp32 master copy included,
  /// when the framework's optimizer keeps other than Adam's default (8, +4
  /// for the master under mixed precision): NeMo's distributed_fused_adam
  /// keeps the masters' low 16 bits beside bf16 weights (10), or bf16
  /// moments and no master with `optim.dtype: bf16` (4). 0 = the default.
  double optimizerStateBytes = 0;
  /// The gradient buckets are views into one contiguous gradient buffer
  /// (Megatron-LM's and NeMo's DDP), not communication buffers of their own
  /// (PyTorch DDP, DeepSpeed): they take no memory beyond the gradients.
  bool gradientBucketsAreViews = false;
  /// The data-parallel gradient reduction (and ZeRO-1/2's parameter
  /// all-gather) runs after the last micro-batch's backward instead of
  /// overlapping it bucket by bucket: DeepSpeed's pipeline engine reduces
  /// after the pipeline flush (its ReduceGrads instruction).
  bool gradientReductionAfterBackward = false;
  /// The program runs on Strata's own runtime (a spec compiled by Strata),
  /// not a framework being emulated for validation: on a GPU its loss is
  /// one kernel that reads the float32 logits once and writes their
  /// gradient (16-bit: the cast the head's backward reads), not separate
  /// softmax, loss and gradient passes (runtime/cuda/CudaBindPlan.h).
  bool strataRuntime = false;
  /// Biases on the attention and MLP projections.
  bool biases = true;
  /// A learned position table [seq_len, hidden] (rotary embeddings have none).
  bool learnedPositions = true;
  /// Dropout after the embedding, the attention probabilities and each
  /// residual branch (Megatron-LM's GPT recipe, whose memory model the cost
  /// model follows); Llama trains without.
  bool dropout = true;
  /// The attention kernel production runs use: a fused (FlashAttention-style)
  /// kernel keeps no s^2 scores, recomputes them in backward and skips the
  /// masked half of a causal score matrix; Unfused materialises scores and
  /// probabilities (Megatron-LM 2021; `attention: unfused`). modelDescFromSpec
  /// sets it from the spec (`strata.causal_attention`, the presets' default),
  /// so the model costs what the runtime runs (docs/cost-model.md).
  enum class Attention { Fused, Unfused } attention = Attention::Fused;
  /// Causal (decoder) attention; a fused kernel skips the masked blocks.
  bool causal = true;

  /// Explicit graphs (Kind::Graph): the pipeline units in order; `layers`
  /// is their count. Costed op by op through the dialect's cost interface.
  std::vector<GraphUnit> units;
  /// Units whose ops and types repeat an earlier unit's, costed once.
  int64_t repeatedUnits = 0;

  int64_t numKvHeads() const { return kvHeads > 0 ? kvHeads : heads; }
  /// Width of the k (and the v) projection: kv heads x head dim.
  int64_t kvWidth() const { return numKvHeads() * (hidden / heads); }
  /// Parameters of one norm.
  int64_t normParams() const { return rmsNorm ? hidden : 2 * hidden; }

  bool mixedPrecision() const { return dtypeBytes < 4; }
  /// Parameters of one repeated layer (weights and biases).
  int64_t layerParams() const;
  /// Embedding (+ position table) and final-norm parameters; a tied head
  /// reuses the embedding.
  int64_t embeddingParams() const;
  int64_t totalParams() const;
  /// Whether `tp` ranks can split the model's heads, kv heads (or hold
  /// replicas of them: tp a multiple of kv_heads) and MLP features; if not,
  /// says why in `why` (a sentence to follow "tp=N: ").
  bool tpFits(int64_t tp, std::string *why = nullptr) const;
  /// Whether tensor parallelism replicates kv heads (tp > kv_heads).
  bool replicatesKvHeads(int64_t tp) const {
    return kind == Kind::Transformer && tp > numKvHeads();
  }
  /// Checks sizes are positive and consistent; on failure says which field.
  bool validate(std::string &error) const;
};

/// Fills `units` (and the sizes) of an explicit graph's ModelDesc. The
/// driver provides it (it imports the graph into MLIR), which keeps the
/// planner libraries free of MLIR. Returns false and sets `error` on failure.
using GraphCoster = std::function<bool(const frontend::ModelSpec &spec,
                                       ModelDesc &desc, std::string &error)>;

/// Derives the planner's view of a parsed model spec. Explicit graphs need
/// `costGraph`; without it the error says so.
std::optional<ModelDesc> modelDescFromSpec(const frontend::ModelSpec &spec,
                                           std::string &error,
                                           const GraphCoster &costGraph = {});

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_MODELDESC_H
