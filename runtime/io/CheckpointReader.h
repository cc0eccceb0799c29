//===- CheckpointReader.h - Whole tensors out of any checkpoint -----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// A checkpoint directory holds either whole tensors (one rank:
// model.safetensors, optimizer.safetensors, trainer.json) or one file of
// pieces per rank plus index.json (docs/runtime.md). This reader
// reassembles whole tensors from either, without the program that wrote
// them, so a checkpoint can be consolidated into one weights file, loaded
// with --init, or resumed under another plan or rank count.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_IO_CHECKPOINTREADER_H
#define STRATA_RUNTIME_IO_CHECKPOINTREADER_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strata::rt {

class SafeTensorsFile;

/// Whether `dir` holds a checkpoint (trainer.json or index.json).
bool hasCheckpointState(const std::string &dir);

/// The checkpoint a --resume/--init path names: the directory itself when
/// it holds one, or what the `latest` pointer of a run directory written by
/// --save names. Throws RuntimeError saying what `path` is instead.
std::string resolveCheckpointPath(const std::string &path,
                                  const std::string &flag);

class CheckpointReader {
public:
  /// Opens the checkpoint directory `dir` (resolveCheckpointPath first for
  /// a run directory). Throws RuntimeError naming what is wrong.
  static CheckpointReader open(const std::string &dir);
  CheckpointReader(CheckpointReader &&) noexcept;
  CheckpointReader &operator=(CheckpointReader &&) noexcept;
  ~CheckpointReader();

  const std::string &directory() const { return dir_; }
  /// trainer.json, or index.json (run state plus layout).
  const nlohmann::json &state() const { return state_; }
  bool perRank() const { return perRank_; }
  /// Parameter names, sorted.
  std::vector<std::string> tensorNames() const;
  /// The shape a tensor has in weights files (Hugging Face's).
  std::vector<int64_t> checkpointShape(const std::string &name) const;
  /// A parameter's values, whole, row-major in its checkpoint shape.
  std::vector<float> readTensor(const std::string &name) const;
  /// Whether the optimizer state `name + suffix` (".exp_avg", ...) exists.
  bool hasState(const std::string &name, const std::string &suffix) const;
  /// An optimizer state tensor, whole, in the parameter's element order.
  std::vector<float> readState(const std::string &name,
                               const std::string &suffix) const;
  /// config.json beside the tensors, or empty.
  std::string configJson() const;

private:
  CheckpointReader() = default;
  const SafeTensorsFile &file(const std::string &name) const;
  std::vector<float> assemble(const nlohmann::json &tensor,
                              const nlohmann::json &pieces,
                              const std::string &name, bool raw) const;
  std::vector<float> assembleChecked(const nlohmann::json &tensor,
                                     const nlohmann::json &pieces,
                                     const std::string &name, bool raw) const;

  std::string dir_;
  nlohmann::json state_;
  bool perRank_ = false;
  mutable std::map<std::string, std::unique_ptr<SafeTensorsFile>> files_;
};

} // namespace strata::rt

#endif // STRATA_RUNTIME_IO_CHECKPOINTREADER_H
