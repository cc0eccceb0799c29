//===- Generator.cpp - Sampling from a model with its inference program ---===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Generator.h"

#include "runtime/core/ParamLayout.h"
#include "runtime/core/Random.h"
#include "runtime/io/WeightsSource.h"
#include "runtime/support/Error.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

namespace strata::rt {

Generator::Generator(const Program &program, std::unique_ptr<Device> device)
    : meta_(program.meta), device_(std::move(device)) {
  if (!program.decode)
    fail("this program has no inference program (model family '",
         program.meta.family,
         "'); generation needs a gpt, llama or mlp model compiled by a strata "
         "that "
         "emits one: recompile it");
  decode_ = *program.decode;
  maxPositions_ = meta_.seqLen;
  device_->prepare(decode_);
}

void Generator::initWeights(uint64_t seed) {
  for (const ParamDesc &p : decode_.params) {
    const BufferDesc &b = decode_.buffers[p.value];
    std::vector<float> v(b.numElements(), 0.0f);
    uint64_t key = initKey(seed, p.name);
    for (int64_t e = 0; e < int64_t(v.size()); ++e)
      v[e] = p.init == InitKind::Ones ? 1.0f
             : p.init == InitKind::Normal
                 ? float(p.initStd * standardNormal(key, e))
                 : 0.0f;
    device_->upload(b.offset, v.data(), v.size() * 4);
  }
  reset();
}

void Generator::setWeights(const std::string &name,
                           const std::vector<float> &values) {
  for (const ParamDesc &p : decode_.params)
    if (p.name == name) {
      const BufferDesc &b = decode_.buffers[p.value];
      if (int64_t(values.size()) != b.numElements())
        fail("'", name, "' has ", b.numElements(), " elements, got ",
             values.size());
      device_->upload(b.offset, values.data(), values.size() * 4);
      reset();
      return;
    }
  fail("the inference program has no parameter '", name, "'");
}

void Generator::loadWeights(const std::string &path) {
  std::set<std::string> names;
  for (const ParamDesc &p : decode_.params)
    names.insert(p.name);
  WeightsSource weights = WeightsSource::open(path, names);
  for (const ParamDesc &p : decode_.params) {
    const BufferDesc &b = decode_.buffers[p.value];
    std::vector<int64_t> shape = weights.shape(p.name);
    const std::vector<int64_t> &want =
        p.checkpointShape.empty() ? b.shape : p.checkpointShape;
    if (shape != want)
      fail(weights.source(), ": tensor '", p.name, "' has shape ",
           shapeString(shape), ", the model needs ", shapeString(want));
    std::vector<float> values = weights.read(p.name);
    device_->upload(b.offset, values.data(), values.size() * 4);
  }
  reset();
}

std::vector<float> Generator::feed(int64_t token) {
  if (token < 0 || token >= meta_.vocab)
    fail("token id ", token, " is outside the model's vocabulary of ",
         meta_.vocab);
  if (position_ >= maxPositions_)
    fail("internal error: the key/value cache is full");
  int32_t t = int32_t(token), pos = int32_t(position_);
  device_->upload(decode_.buffers[decode_.tokens].offset, &t, 4);
  if (decode_.positions != kNoBuffer)
    device_->upload(decode_.buffers[decode_.positions].offset, &pos, 4);
  device_->run(SequenceKind::Microbatch, ExecContext{position_, 0.0, nullptr});
  ++position_;
  std::vector<float> logits(meta_.vocab);
  device_->download(decode_.buffers[decode_.logits].offset, logits.data(),
                    logits.size() * 4);
  return logits;
}

int64_t Generator::sample(const std::vector<float> &logits,
                          const SamplingOptions &options, double u) {
  int64_t n = int64_t(logits.size());
  if (options.temperature <= 0.0 || options.topK == 1)
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  // Candidates by descending logit (lowest id first among equals).
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  int64_t keep = options.topK > 0 ? std::min(options.topK, n) : n;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](int64_t a, int64_t b) {
                      return logits[a] > logits[b] ||
                             (logits[a] == logits[b] && a < b);
                    });
  std::vector<double> weights(keep);
  double top = double(logits[order[0]]), total = 0.0;
  for (int64_t i = 0; i < keep; ++i)
    total += weights[i] =
        std::exp((double(logits[order[i]]) - top) / options.temperature);
  double target = u * total, cumulative = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    cumulative += weights[i];
    if (target < cumulative)
      return order[i];
  }
  return order[keep - 1];
}

std::vector<int64_t> Generator::generate(const std::vector<int64_t> &prompt,
                                         int64_t count,
                                         const SamplingOptions &options) {
  if (prompt.empty())
    fail("generation needs a prompt of at least one token");
  std::vector<int64_t> tokens = prompt;
  // The context fed so far starts at tokens[start].
  size_t start = tokens.size() > size_t(maxPositions_)
                     ? tokens.size() - size_t(maxPositions_)
                     : 0;
  reset();
  std::vector<float> logits;
  for (size_t i = start; i < tokens.size(); ++i)
    logits = feed(tokens[i]);
  uint64_t key = splitmix64(options.seed ^ 0x47454E45524154ULL);
  for (int64_t i = 0; i < count; ++i) {
    int64_t next =
        sample(logits, options, uniformOpen01(splitmix64(key + uint64_t(i))));
    tokens.push_back(next);
    if (i + 1 == count)
      break;
    if (position_ >= maxPositions_) {
      // Recompute the cache from the last half of the context.
      reset();
      start = tokens.size() - size_t(std::max<int64_t>(1, maxPositions_ / 2));
      for (size_t k = start; k + 1 < tokens.size(); ++k)
        feed(tokens[k]);
    }
    logits = feed(next);
  }
  return tokens;
}

} // namespace strata::rt
