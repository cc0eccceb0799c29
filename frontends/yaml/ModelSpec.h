//===- ModelSpec.h - The parsed, validated YAML model spec ------*- C++ -*-===//
//
// The in-memory form of a model spec (docs/model-spec.md). The YAML parser
// fills it and validates it; every consumer (the IR builder, the planner, the
// training emitter) reads it. Presets (`gpt`, `llama`, `mlp`) are kept as their
// config *and* expanded into the explicit graph form, so a consumer can either
// use the structure a preset knows (the planner exploits repeated transformer
// layers) or the graph everybody shares.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_FRONTENDS_YAML_MODELSPEC_H
#define STRATA_FRONTENDS_YAML_MODELSPEC_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace strata::frontend {

/// A position in a spec file; line and col are 1-based (0 = unknown).
struct SourceLoc {
  std::string file;
  int line = 0;
  int col = 0;
};

/// One user-facing error: printed as "file:line:col: error: message".
struct Diagnostic {
  SourceLoc loc;
  std::string message;
  std::string str() const;
};

enum class DType { F32, BF16, F16, I32 };
/// "float32", "bfloat16", "float16", "int32".
const char *dtypeName(DType t);
int64_t dtypeBytes(DType t);
/// Parses a dtypeName() spelling; nullopt if it is none of them.
std::optional<DType> parseDType(const std::string &name);
/// Whether `t` is a floating-point type.
bool isFloatDType(DType t);

/// The `gpt` preset; semantics are Hugging Face GPT2LMHeadModel's.
struct GptConfig {
  int64_t vocab = 0, seqLen = 0, hidden = 0, heads = 0, layers = 0;
  int64_t ffnHidden = 0; // defaults to 4 * hidden
  DType dtype = DType::F32;
  /// `attention: fused` (default): one strata.causal_attention per layer;
  /// `unfused`: matmul, causal softmax, matmul (the [S, S] scores stored).
  bool fusedAttention = true;
};

/// The `llama` preset; semantics are Hugging Face LlamaForCausalLM's.
struct LlamaConfig {
  int64_t vocab = 0, seqLen = 0, hidden = 0, heads = 0, layers = 0;
  int64_t kvHeads = 0; // defaults to heads; divides heads
  int64_t ffnHidden = 0;
  double ropeTheta = 10000.0;
  double normEps = 1e-5;
  bool tieEmbeddings = false;
  DType dtype = DType::F32;
  bool fusedAttention = true; ///< as GptConfig::fusedAttention
  int64_t headDim() const { return hidden / heads; }
};

/// The `mlp` preset: a token-wise MLP language model (docs/model-spec.md).
struct MlpConfig {
  int64_t vocab = 0, seqLen = 0, hidden = 0, layers = 0, ffnHidden = 0;
  std::string activation = "gelu"; // gelu | relu
  DType dtype = DType::F32;
};

struct OptimizerSpec {
  enum class Kind { SGD, AdamW } kind = Kind::AdamW;
  double lr = 1e-3;
  double momentum = 0.0;             // sgd
  double beta1 = 0.9, beta2 = 0.999; // adamw
  double eps = 1e-8;
  double weightDecay = 0.0;
};

struct ScheduleSpec {
  enum class Kind { Constant, Cosine, Linear } kind = Kind::Constant;
  int64_t warmupSteps = 0;
  double minLr = 0.0;
  int64_t totalSteps = 0; // 0: not given (decay schedules require it)
};

struct TrainingSpec {
  int64_t globalBatch = 8;
  std::optional<int64_t> microBatch; // unset: one micro-batch per step
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
  double gradClip = 0.0; // 0 = off
  uint64_t seed = 0;
  bool present = false; // whether the spec had a `training:` section
};

/// An attribute value of an explicit-graph op.
using AttrValue =
    std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;

/// A dimension of a graph tensor; -1 while unresolved is never stored: the
/// symbolic `batch` dimension is resolved to the batch size at parse time.
struct GraphTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  SourceLoc loc;
};

/// How a parameter is initialised when no --init checkpoint is given.
struct ParamInit {
  enum class Kind { Normal, Zeros, Ones } kind = Kind::Normal;
  double std = 0.02;
};

struct GraphParam : GraphTensor {
  ParamInit init;
  std::optional<int64_t> layer; // index of the repeated block it belongs to
  /// The tensor-parallel decision a preset states for it, per dimension in
  /// strata.sharding's notation ("tp", "tp@3x4x4:1"; "tp/K": K key/value
  /// heads, split plainly when tp divides K, else shared by tp/K members);
  /// empty: replicated. Read by passes/sharding/SeedStatedDecisions.
  std::vector<std::string> tpSplit;
  /// The view of the checkpoint tensor the split is stated in
  /// (strata.shard_view); empty: the parameter's own shape.
  std::vector<int64_t> tpView;
  /// tp need not divide the split dimension (a vocabulary, padded).
  bool tpPadded = false;
};

/// The inferred type of a graph value (docs/model-spec.md, "Op reference").
struct TensorType {
  std::vector<int64_t> shape; // rank 0: a scalar
  DType dtype = DType::F32;
  bool operator==(const TensorType &o) const {
    return shape == o.shape && dtype == o.dtype;
  }
};

struct GraphOp {
  std::string op; // dialect op name without the "strata." prefix
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  /// Every attribute of the op's schema, defaults filled in, so consumers
  /// never need to know a default.
  std::map<std::string, AttrValue> attrs;
  std::optional<int64_t> layer; // index of the repeated block it belongs to
  /// Under sequence parallelism, the split of its (first) result a preset
  /// states (the residual stream along the sequence); empty: none.
  std::vector<std::string> spSplit;
  SourceLoc loc;
  /// Where each input / output name was written; empty for preset graphs
  /// (their diagnostics point at `loc`).
  std::vector<SourceLoc> inputLocs, outputLocs;
  /// Inferred by validation: one per output, in order.
  std::vector<TensorType> outputTypes;
};

/// The explicit graph form: named values, ops with inputs/outputs/attributes.
struct Graph {
  std::vector<GraphTensor> inputs;
  std::vector<GraphParam> params;
  std::vector<GraphOp> ops;
  std::vector<std::string> outputs; // the first output is the scalar loss
  SourceLoc loc;
  std::vector<SourceLoc> outputLocs; // empty for preset graphs
  /// Type of every value (inputs, params and op outputs), filled by
  /// validation, so the IR builder can create typed ops directly.
  std::map<std::string, TensorType> values;

  /// Total number of parameter elements (tied weights count once).
  int64_t numParamElements() const;
};

struct ModelSpec {
  std::string path;   // the spec file, as given
  std::string family; // "gpt", "llama", "mlp" or "graph"
  std::optional<GptConfig> gpt;
  std::optional<LlamaConfig> llama;
  std::optional<MlpConfig> mlp;
  /// The batch size the forward graph is built for: training.microBatch if
  /// given, else training.globalBatch.
  int64_t batch = 0;
  Graph graph;
  TrainingSpec training;
};

/// Number of elements of a shape (1 for a scalar). Shapes in a validated
/// spec have at most 2^62 elements, so this never overflows for them.
int64_t numElements(const std::vector<int64_t> &shape);

/// How to build the graph, beyond what the spec says.
struct LoadOptions {
  /// Build the graph for this many sequences instead of the spec's
  /// micro_batch (or global_batch): a data-parallel replica's micro-batch.
  std::optional<int64_t> batch;
  /// Build the forward of one new position per sequence (generation with a
  /// key/value cache): inputs [batch, 1]; parameters keep their shapes.
  /// Presets only; an explicit graph's shapes are the user's.
  bool decode = false;
};

/// Parses and validates the spec at `path` (or, if `contents` is given, that
/// text, reported as `path`). On failure returns nullopt and appends at least
/// one located diagnostic to `diags`. Never throws, aborts or crashes.
std::optional<ModelSpec> loadModelSpec(const std::string &path,
                                       std::vector<Diagnostic> &diags,
                                       const std::string *contents = nullptr,
                                       const LoadOptions &options = {});

/// The YAML file beside an ONNX model (`model.onnx` -> `model.yaml`;
/// docs/model-spec.md, "ONNX models"): which ONNX values are the token ids
/// and the logits, and the `training:` section.
struct OnnxSidecar {
  std::string path;          ///< the YAML file
  std::string tokens;        ///< ONNX graph input holding token ids ("": the only one)
  std::string logits;        ///< ONNX graph output the loss is taken of
  SourceLoc tokensLoc, logitsLoc;
  TrainingSpec training;
  int64_t batch = 0;         ///< as ModelSpec::batch
};

/// Reads the sidecar of the ONNX model at `onnxPath`. On failure returns
/// nullopt after appending located diagnostics.
std::optional<OnnxSidecar> loadOnnxSidecar(const std::string &onnxPath,
                                           std::vector<Diagnostic> &diags,
                                           const LoadOptions &options = {});

/// Loads an ONNX model (with its sidecar) as an explicit graph
/// (frontends/onnx/OnnxImport.cpp); loadModelSpec calls it for `*.onnx`.
std::optional<ModelSpec> loadOnnxModel(const std::string &path,
                                       std::vector<Diagnostic> &diags,
                                       const LoadOptions &options = {});

/// The exported initial values of an ONNX model's parameters (float32,
/// row-major) by parameter name, in the graph's parameter order: what
/// `strata import model.onnx --weights-out FILE` writes for `--init`.
std::optional<std::vector<std::pair<std::string, std::vector<float>>>>
loadOnnxWeights(const std::string &path, std::vector<Diagnostic> &diags);

} // namespace strata::frontend

#endif // STRATA_FRONTENDS_YAML_MODELSPEC_H
