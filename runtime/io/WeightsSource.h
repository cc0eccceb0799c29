//===- WeightsSource.h - Whole weights for --init, by parameter name ------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// What --init (and generation) reads weights from: a safetensors file, in
// Strata's names or Hugging Face's spellings (GPT2LMHeadModel's
// `transformer.` prefix, the `h.N.attn.bias` / `masked_bias` mask buffers,
// a `lm_head.weight` that must equal the tied `wte.weight`), or a
// checkpoint directory of any plan (CheckpointReader reassembles it).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_IO_WEIGHTSSOURCE_H
#define STRATA_RUNTIME_IO_WEIGHTSSOURCE_H

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace strata::rt {

class CheckpointReader;
class SafeTensorsFile;
struct SafeTensorInfo;

/// "'a', 'b' and 3 more": up to eight names for an error message.
std::string listNames(const std::vector<std::string> &names);

class WeightsSource {
public:
  /// Opens `path` for a model whose parameters are `params`; checks that
  /// every parameter is there and nothing else (missing and extra tensors
  /// are named). Throws RuntimeError.
  static WeightsSource open(const std::string &path,
                            const std::set<std::string> &params);
  WeightsSource(WeightsSource &&) noexcept;
  WeightsSource &operator=(WeightsSource &&) noexcept;
  ~WeightsSource();

  /// Names the file or checkpoint directory in messages.
  const std::string &source() const { return source_; }
  std::vector<int64_t> shape(const std::string &param) const;
  /// Whole values, row-major in shape(param), converted to f32.
  std::vector<float> read(const std::string &param) const;

private:
  WeightsSource() = default;
  std::string source_;
  std::unique_ptr<SafeTensorsFile> file_;
  std::map<std::string, const SafeTensorInfo *> found_;
  std::unique_ptr<CheckpointReader> checkpoint_;
};

} // namespace strata::rt

#endif // STRATA_RUNTIME_IO_WEIGHTSSOURCE_H
