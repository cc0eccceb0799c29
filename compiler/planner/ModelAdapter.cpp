//===- ModelAdapter.cpp - ModelSpec -> planner::ModelDesc
//------------------===//
//
// Kept apart from the planner core so the core builds and tests without the
// YAML frontend.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/ModelDesc.h"
#include "frontends/yaml/ModelSpec.h"

namespace strata::planner {

static void setDtype(ModelDesc &d, frontend::DType t) {
  switch (t) {
  case frontend::DType::BF16:
    d.dtype = "bfloat16";
    d.dtypeBytes = 2;
    break;
  case frontend::DType::F16:
    d.dtype = "float16";
    d.dtypeBytes = 2;
    break;
  default:
    d.dtype = "float32";
    d.dtypeBytes = 4;
    break;
  }
}

std::optional<ModelDesc> modelDescFromSpec(const frontend::ModelSpec &spec,
                                           std::string &error,
                                           const GraphCoster &costGraph) {
  ModelDesc d;
  d.name = spec.path;
  d.strataRuntime = true;
  if (spec.gpt) {
    const frontend::GptConfig &g = *spec.gpt;
    d.kind = ModelDesc::Kind::Transformer;
    d.vocab = g.vocab;
    d.seqLen = g.seqLen;
    d.hidden = g.hidden;
    d.heads = g.heads;
    d.layers = g.layers;
    d.ffnHidden = g.ffnHidden > 0 ? g.ffnHidden : 4 * g.hidden;
    d.dropout = false; // the gpt preset has no dropout op
    d.attention = g.fusedAttention ? ModelDesc::Attention::Fused
                                   : ModelDesc::Attention::Unfused;
    setDtype(d, g.dtype);
  } else if (spec.llama) {
    const frontend::LlamaConfig &l = *spec.llama;
    d.kind = ModelDesc::Kind::Transformer;
    d.vocab = l.vocab;
    d.seqLen = l.seqLen;
    d.hidden = l.hidden;
    d.heads = l.heads;
    d.kvHeads = l.kvHeads;
    d.layers = l.layers;
    d.ffnHidden = l.ffnHidden;
    d.gatedMlp = true;
    d.rmsNorm = true;
    d.biases = false;
    d.learnedPositions = false;
    d.dropout = false;
    d.tiedEmbedding = l.tieEmbeddings;
    d.attention = l.fusedAttention ? ModelDesc::Attention::Fused
                                   : ModelDesc::Attention::Unfused;
    setDtype(d, l.dtype);
  } else if (spec.mlp) {
    const frontend::MlpConfig &m = *spec.mlp;
    d.kind = ModelDesc::Kind::Mlp;
    d.vocab = m.vocab;
    d.seqLen = m.seqLen;
    d.hidden = m.hidden;
    d.heads = 1;
    d.layers = m.layers;
    d.ffnHidden = m.ffnHidden > 0 ? m.ffnHidden : 4 * m.hidden;
    d.dropout = false;
    setDtype(d, m.dtype);
  } else {
    // An explicit graph: costed op by op, its units found in the IR.
    d.kind = ModelDesc::Kind::Graph;
    if (!costGraph) {
      error = spec.path + ": explicit graphs are planned by the `strata` "
                          "driver, which costs them through the dialect";
      return std::nullopt;
    }
    setDtype(d, spec.graph.params.empty() ? frontend::DType::F32
                                          : spec.graph.params[0].dtype);
    // Tokens per sample for throughput: the first input's second dimension
    // (the sequence), else one.
    d.seqLen = 1;
    if (!spec.graph.inputs.empty() && spec.graph.inputs[0].shape.size() >= 2)
      d.seqLen = spec.graph.inputs[0].shape[1];
    d.tiedEmbedding = false;
    d.dropout = false;
    if (!costGraph(spec, d, error))
      return std::nullopt;
    d.layers = int64_t(d.units.size());
  }
  const frontend::OptimizerSpec &o = spec.training.optimizer;
  if (o.kind == frontend::OptimizerSpec::Kind::AdamW)
    d.optimizer = ModelDesc::Optimizer::Adam;
  else
    d.optimizer = o.momentum != 0.0 ? ModelDesc::Optimizer::SgdMomentum
                                    : ModelDesc::Optimizer::Sgd;
  d.globalBatch = spec.training.globalBatch;
  if (!d.validate(error)) {
    error = spec.path + ": " + error;
    return std::nullopt;
  }
  return d;
}

} // namespace strata::planner
