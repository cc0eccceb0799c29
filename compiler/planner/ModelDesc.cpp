//===- ModelDesc.cpp - Parameter counts of the planner's model view -------===//

#include "compiler/planner/ModelDesc.h"

namespace strata::planner {

int64_t ModelDesc::layerParams() const {
  int64_t h = hidden, f = ffnHidden;
  if (kind == Kind::Mlp)
    return h * f + f + f * h + h + 2 * h; // fc1, fc2, layer norm
  // qkv, attention projection, fc1, fc2 (with biases), two layer norms.
  return 3 * h * h + 3 * h + h * h + h + h * f + f + f * h + h + 4 * h;
}

int64_t ModelDesc::embeddingParams() const {
  int64_t p = vocab * hidden;
  if (kind == Kind::Transformer)
    p += seqLen * hidden; // learned positions
  return p + 2 * hidden;  // final layer norm
}

int64_t ModelDesc::totalParams() const {
  int64_t p = layers * layerParams() + embeddingParams();
  if (!tiedEmbedding)
    p += vocab * hidden;
  return p;
}

bool ModelDesc::validate(std::string &error) const {
  auto bad = [&](const char *f, int64_t v) {
    error = std::string("model field '") + f + "' must be positive, got " +
            std::to_string(v);
    return false;
  };
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
  if (dtypeBytes != 2 && dtypeBytes != 4) {
    error = "the planner models float32, bfloat16 and float16 training";
    return false;
  }
  return true;
}

} // namespace strata::planner
