//===- Presets.h - The gpt, llama and mlp presets ---------------*- C++ -*-===//
//
// A preset is read from its `model:` mapping and expanded into the explicit
// graph form, so downstream code consumes one thing. Ops and params of the
// repeated blocks carry their block index in `layer`.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_FRONTENDS_YAML_PRESETS_H
#define STRATA_FRONTENDS_YAML_PRESETS_H

#include "frontends/yaml/ModelSpec.h"
#include "frontends/yaml/YamlFields.h"

namespace strata::frontend {

/// Largest value accepted for a preset's size fields (seq_len, hidden, ...).
constexpr int64_t kMaxPresetDim = int64_t(1) << 40;
/// Largest `layers:` of a preset. Import, plan and compile hold the expanded
/// graph of every layer (tens of KB each), so this bounds their memory to a
/// few hundred MB; the largest published models have a few hundred layers.
constexpr int64_t kMaxLayers = 10000;

/// Where the expanded graph's parts point in the spec: the `model:` mapping
/// for the embeddings and the head, the `layers:` key for the blocks.
struct PresetLocs {
  SourceLoc model, layers;
};

/// Read the preset's keys from `model` (already known to have that family)
/// into spec.gpt / spec.llama / spec.mlp. Return false after reporting
/// errors.
bool readGptConfig(MapReader &model, ModelSpec &spec);
bool readLlamaConfig(MapReader &model, ModelSpec &spec);
bool readMlpConfig(MapReader &model, ModelSpec &spec);

/// The graph of a preset for a batch of `batch` sequences of `rowTokens`
/// tokens each (docs/model-spec.md describes each, value by value).
/// `rowTokens` is the spec's seq_len for training; 1 builds the forward of
/// one new position for generation (position tables keep seq_len rows).
Graph expandGptGraph(const GptConfig &cfg, int64_t batch,
                     const PresetLocs &locs, int64_t rowTokens);
Graph expandLlamaGraph(const LlamaConfig &cfg, int64_t batch,
                       const PresetLocs &locs, int64_t rowTokens);
Graph expandMlpGraph(const MlpConfig &cfg, int64_t batch,
                     const PresetLocs &locs, int64_t rowTokens);

/// The Hugging Face `config.json` of a preset model that has one (gpt:
/// GPT2LMHeadModel, llama: LlamaForCausalLM), as JSON text; empty for
/// other families.
std::string hfConfigJson(const ModelSpec &spec);

} // namespace strata::frontend

#endif // STRATA_FRONTENDS_YAML_PRESETS_H
