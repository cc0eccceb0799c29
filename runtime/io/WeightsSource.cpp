//===- WeightsSource.cpp - Whole weights for --init, by parameter name ----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/io/WeightsSource.h"

#include "runtime/io/CheckpointReader.h"
#include "runtime/io/SafeTensors.h"
#include "runtime/support/Error.h"

#include <filesystem>

namespace strata::rt {

std::string listNames(const std::vector<std::string> &names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 8; ++i)
    s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 8)
    s += " and " + std::to_string(names.size() - 8) + " more";
  return s;
}

namespace {

void checkNames(const std::string &source,
                const std::vector<std::string> &missing,
                const std::vector<std::string> &extra) {
  if (missing.empty() && extra.empty())
    return;
  std::string msg = source + ": tensors do not match the model's parameters.";
  if (!missing.empty())
    msg += " Missing: " + listNames(missing) + ".";
  if (!extra.empty())
    msg += " Not in the model: " + listNames(extra) + ".";
  fail(msg, " Use a checkpoint of this model (parameter names as in the "
            "model spec).");
}

/// Module state that Hugging Face checkpoints carry beside the weights and
/// the model rebuilds: GPT-2's causal-mask buffers (`h.N.attn.bias`
/// [1,1,n,n], `h.N.attn.masked_bias`) and Llama's rotary frequencies
/// (`model.layers.N.self_attn.rotary_emb.inv_freq`, which the rotary op
/// computes from rope_theta).
bool isModelBuffer(const std::string &name) {
  auto endsWith = [&](const std::string &suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) ==
               0;
  };
  return endsWith(".attn.bias") || endsWith(".attn.masked_bias") ||
         endsWith(".rotary_emb.inv_freq");
}

} // namespace

WeightsSource::WeightsSource(WeightsSource &&) noexcept = default;
WeightsSource &WeightsSource::operator=(WeightsSource &&) noexcept = default;
WeightsSource::~WeightsSource() = default;

WeightsSource WeightsSource::open(const std::string &path,
                                  const std::set<std::string> &params) {
  WeightsSource w;
  std::error_code ec;
  std::vector<std::string> missing, extra;
  if (std::filesystem::is_directory(path, ec)) {
    w.checkpoint_ = std::make_unique<CheckpointReader>(
        CheckpointReader::open(resolveCheckpointPath(path, "--init")));
    w.source_ = w.checkpoint_->directory();
    std::vector<std::string> names = w.checkpoint_->tensorNames();
    std::set<std::string> have(names.begin(), names.end());
    for (const std::string &name : params)
      if (!have.count(name))
        missing.push_back(name);
    for (const std::string &name : names)
      if (!params.count(name))
        extra.push_back(name);
    checkNames(w.source_, missing, extra);
    return w;
  }
  w.source_ = path;
  w.file_ = std::make_unique<SafeTensorsFile>(SafeTensorsFile::open(path));
  const SafeTensorInfo *lmHead = nullptr;
  for (const SafeTensorInfo &t : w.file_->tensors()) {
    std::string name = t.name;
    if (!params.count(name) && name.rfind("transformer.", 0) == 0 &&
        params.count(name.substr(12)))
      name = name.substr(12);
    if (params.count(name)) {
      if (w.found_.count(name))
        fail(path, ": holds '", name,
             "' twice (with and without the 'transformer.' prefix)");
      w.found_[name] = &t;
    } else if (isModelBuffer(name)) {
      continue;
    } else if (name == "lm_head.weight" && params.count("wte.weight")) {
      lmHead = &t;
    } else {
      extra.push_back(t.name);
    }
  }
  for (const std::string &name : params)
    if (!w.found_.count(name))
      missing.push_back(name);
  checkNames(path, missing, extra);
  // The output projection is tied to wte: a separate head must be a copy.
  if (lmHead) {
    const SafeTensorInfo &wte = *w.found_["wte.weight"];
    if (lmHead->shape != wte.shape ||
        w.file_->readF32(*lmHead) != w.file_->readF32(wte))
      fail(path, ": 'lm_head.weight' differs from 'wte.weight', but this "
                 "model ties its output projection to the token embedding "
                 "(as GPT-2 does); it cannot take an untied head");
  }
  return w;
}

std::vector<int64_t> WeightsSource::shape(const std::string &param) const {
  if (checkpoint_)
    return checkpoint_->checkpointShape(param);
  return found_.at(param)->shape;
}

std::vector<float> WeightsSource::read(const std::string &param) const {
  if (checkpoint_)
    return checkpoint_->readTensor(param);
  return file_->readF32(*found_.at(param));
}

} // namespace strata::rt
