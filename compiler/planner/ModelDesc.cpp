//===- ModelDesc.cpp - Parameter counts of the planner's model view -------===//

#include "compiler/planner/ModelDesc.h"

namespace strata::planner {

int64_t ModelDesc::layerParams() const {
  if (kind == Kind::Graph) { // the average unit
    double sum = 0;
    for (const GraphUnit &u : units)
      sum += u.params;
    return units.empty() ? 0 : int64_t(sum / double(units.size()));
  }
  int64_t h = hidden, f = ffnHidden;
  if (kind == Kind::Mlp)
    return h * f + f + f * h + h + 2 * h; // fc1, fc2, layer norm
  int64_t kv = kvWidth();
  // q, k, v and the output projection; the MLP; two norms.
  int64_t attention = h * h + 2 * h * kv + h * h;
  int64_t mlp = gatedMlp ? 3 * h * f : 2 * h * f;
  if (biases) {
    attention += h + 2 * kv + h;
    mlp += gatedMlp ? 2 * f + h : f + h;
  }
  return attention + mlp + 2 * normParams();
}

int64_t ModelDesc::embeddingParams() const {
  if (kind == Kind::Graph)
    return 0; // every parameter belongs to a unit
  int64_t p = vocab * hidden;
  if (kind == Kind::Transformer && learnedPositions)
    p += seqLen * hidden;
  return p + normParams(); // final norm
}

int64_t ModelDesc::totalParams() const {
  if (kind == Kind::Graph) {
    double sum = 0;
    for (const GraphUnit &u : units)
      sum += u.params;
    return int64_t(sum);
  }
  int64_t p = layers * layerParams() + embeddingParams();
  if (!tiedEmbedding)
    p += vocab * hidden;
  return p;
}

bool ModelDesc::tpFits(int64_t tp, std::string *why) const {
  auto no = [&](const std::string &reason) {
    if (why)
      *why = reason;
    return false;
  };
  if (kind == Kind::Transformer) {
    if (heads % tp)
      return no("the model's " + std::to_string(heads) +
                " attention heads cannot be split evenly; pick a divisor");
    int64_t kv = numKvHeads();
    if (kv % tp && tp % kv)
      return no("the model's " + std::to_string(kv) +
                " kv heads can be neither split evenly nor replicated "
                "evenly; pick a divisor or a multiple of " +
                std::to_string(kv));
  }
  if (kind == Kind::Graph) // the rules split what divides; the rest stays
    return true;
  if (ffnHidden % tp)
    return no("ffn_hidden " + std::to_string(ffnHidden) +
              " is not divisible by it");
  return true;
}

bool ModelDesc::validate(std::string &error) const {
  auto bad = [&](const char *f, int64_t v) {
    error = std::string("model field '") + f + "' must be positive, got " +
            std::to_string(v);
    return false;
  };
  if (kind == Kind::Graph) {
    if (units.empty() || layers != int64_t(units.size())) {
      error = "an explicit graph needs at least one op";
      return false;
    }
    if (seqLen <= 0)
      return bad("seq_len", seqLen);
    if (dtypeBytes != 2 && dtypeBytes != 4) {
      error = "the planner models float32, bfloat16 and float16 training";
      return false;
    }
    return true;
  }
  if (vocab <= 0)
    return bad("vocab", vocab);
  if (seqLen <= 0)
    return bad("seq_len", seqLen);
  if (hidden <= 0)
    return bad("hidden", hidden);
  if (layers <= 0)
    return bad("layers", layers);
  if (ffnHidden <= 0)
    return bad("ffn_hidden", ffnHidden);
  if (heads <= 0)
    return bad("heads", heads);
  if (kind == Kind::Transformer && hidden % heads != 0) {
    error = "hidden (" + std::to_string(hidden) +
            ") must be divisible by heads (" + std::to_string(heads) + ")";
    return false;
  }
  if (kvHeads < 0 || (kvHeads > 0 && heads % kvHeads != 0)) {
    error = "kv_heads (" + std::to_string(kvHeads) +
            ") must be a positive divisor of heads (" + std::to_string(heads) +
            ")";
    return false;
  }
  if (dtypeBytes != 2 && dtypeBytes != 4) {
    error = "the planner models float32, bfloat16 and float16 training";
    return false;
  }
  return true;
}

} // namespace strata::planner
