//===- CheckpointReader.cpp - Whole tensors out of any checkpoint ---------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/io/CheckpointReader.h"

#include "runtime/io/CheckpointFiles.h"
#include "runtime/io/SafeTensors.h"
#include "runtime/support/Error.h"
#include "runtime/support/FileIO.h"

#include <algorithm>
#include <filesystem>

namespace strata::rt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json readStateFile(const std::string &path) {
  std::vector<uint8_t> bytes =
      readRegularFile(path, "a JSON file written by --save");
  return decodeCheckpointState(bytes, path);
}

std::vector<int64_t> dims(const json &j, const std::string &where) {
  if (!j.is_array())
    fail(where, ": malformed checkpoint index: expected a shape");
  std::vector<int64_t> d;
  for (const json &x : j) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0)
      fail(where, ": malformed checkpoint index: bad dimension");
    d.push_back(x.get<int64_t>());
  }
  return d;
}

/// Elements of a shape from an index; a product past 2^56 (no checkpoint
/// holds that much) is a malformed index, not an overflow.
int64_t product(const std::vector<int64_t> &d, const std::string &where) {
  int64_t n = 1;
  for (int64_t x : d)
    if (__builtin_mul_overflow(n, x, &n) || n > (int64_t(1) << 56))
      fail(where,
           ": malformed checkpoint index: a shape of more than 2^56 elements");
  return n;
}

/// The step-numbered checkpoints of a run directory, oldest first.
std::vector<fs::path> stepDirectories(const fs::path &dir) {
  std::vector<fs::path> steps;
  std::error_code ec;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && e.is_directory(ec) &&
        hasCheckpointState(e.path().string()))
      steps.push_back(e.path());
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

} // namespace

bool hasCheckpointState(const std::string &dir) {
  std::error_code ec;
  fs::path root(dir);
  return fs::is_regular_file(root / "trainer.json", ec) ||
         fs::is_regular_file(root / "index.json", ec);
}

std::string resolveCheckpointPath(const std::string &path,
                                  const std::string &flag) {
  std::error_code ec;
  fs::path root(path);
  if (!fs::exists(root, ec))
    fail(flag, " ", path, ": no such file or directory");
  if (!fs::is_directory(root, ec))
    fail(flag, " ", path,
         ": is a file; expected a checkpoint directory written by --save");
  if (hasCheckpointState(path))
    return path;
  fs::path latest = root / "latest";
  if (fs::exists(latest, ec)) {
    if (!hasCheckpointState(latest.string()))
      fail(flag, " ", path, ": 'latest' does not point at a checkpoint");
    std::error_code linkError;
    fs::path target = fs::read_symlink(latest, linkError);
    return (linkError ? latest : root / target).string();
  }
  std::vector<fs::path> steps = stepDirectories(root);
  if (!steps.empty())
    return steps.back().string();
  fail(flag, " ", path,
       ": not a Strata checkpoint (no trainer.json or index.json) nor a run "
       "directory written by --save (no 'latest' or step-N checkpoint)");
}

CheckpointReader::CheckpointReader(CheckpointReader &&) noexcept = default;
CheckpointReader &
CheckpointReader::operator=(CheckpointReader &&) noexcept = default;
CheckpointReader::~CheckpointReader() = default;

CheckpointReader CheckpointReader::open(const std::string &dir) {
  CheckpointReader r;
  r.dir_ = dir;
  fs::path root(dir);
  std::error_code ec;
  r.perRank_ = fs::is_regular_file(root / "index.json", ec);
  if (!r.perRank_ && !fs::is_regular_file(root / "trainer.json", ec))
    fail(dir, ": no trainer.json or index.json; not a Strata checkpoint "
              "directory (written by --save)");
  std::string statePath =
      (root / (r.perRank_ ? "index.json" : "trainer.json")).string();
  r.state_ = readStateFile(statePath);
  verifyCheckpointFiles(dir, r.state_, statePath);
  if (r.perRank_ &&
      (!r.state_.contains("tensors") || !r.state_["tensors"].is_object()))
    fail(dir, "/index.json: malformed checkpoint index: no tensors");
  return r;
}

const SafeTensorsFile &CheckpointReader::file(const std::string &name) const {
  if (name.find('/') != std::string::npos || name.empty() || name[0] == '.')
    fail(dir_, "/index.json: malformed checkpoint index: file name '", name,
         "'");
  auto it = files_.find(name);
  if (it == files_.end())
    it = files_
             .emplace(name, std::make_unique<SafeTensorsFile>(
                                SafeTensorsFile::open(dir_ + "/" + name)))
             .first;
  return *it->second;
}

std::vector<std::string> CheckpointReader::tensorNames() const {
  std::vector<std::string> names;
  if (perRank_) {
    for (auto it = state_["tensors"].begin(); it != state_["tensors"].end();
         ++it)
      names.push_back(it.key());
  } else {
    for (const SafeTensorInfo &t : file("model.safetensors").tensors())
      names.push_back(t.name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<int64_t>
CheckpointReader::checkpointShape(const std::string &name) const {
  if (!perRank_) {
    const SafeTensorInfo *info = file("model.safetensors").find(name);
    if (!info)
      fail(dir_, "/model.safetensors: no tensor '", name, "'");
    return info->shape;
  }
  const json &t = state_["tensors"].value(name, json());
  if (!t.is_object())
    fail(dir_, "/index.json: no tensor '", name, "'");
  std::string where = dir_ + "/index.json: tensor '" + name + "'";
  return dims(t.value("checkpoint_shape", t.value("global_shape", json())),
              where);
}

std::vector<float> CheckpointReader::assemble(const json &tensor,
                                              const json &pieces,
                                              const std::string &name,
                                              bool raw) const {
  std::string where = dir_ + "/index.json: tensor '" + name + "'";
  // A field of the wrong JSON type is a malformed index like any other.
  try {
    return assembleChecked(tensor, pieces, name, raw);
  } catch (const json::exception &e) {
    fail(where, ": malformed checkpoint index: ", e.what());
  }
}

std::vector<float> CheckpointReader::assembleChecked(const json &tensor,
                                                     const json &pieces,
                                                     const std::string &name,
                                                     bool raw) const {
  std::string where = dir_ + "/index.json: tensor '" + name + "'";
  std::vector<int64_t> view = dims(tensor.value("global_shape", json()), where);
  int64_t total = product(view, where);
  if (!pieces.is_array())
    fail(where, ": malformed checkpoint index: no pieces");
  // Every element comes from a piece's data: the pieces bound the tensor
  // before anything of its size is allocated.
  int64_t held = 0;
  for (const json &piece : pieces) {
    if (!piece.is_object())
      fail(where, ": malformed checkpoint index: a piece is not an object");
    const SafeTensorInfo *info =
        file(piece.value("file", std::string())).find(name);
    held += info ? info->numElements() : 0;
  }
  if (total > held)
    fail(where, ": its pieces hold ", held, " of its ", total,
         " elements; the checkpoint is incomplete");
  std::vector<float> out(total, 0.0f);
  std::vector<char> seen(total, 0);
  size_t rank = view.size();
  std::vector<int64_t> stride(rank, 1);
  for (int d = int(rank) - 2; d >= 0; --d)
    stride[d] = stride[d + 1] * view[d + 1];
  // Walks flat indices [begin, end) of a box (row-major in `box`, placed at
  // `start` in the view); fn(globalIndex or -1 when past the view).
  auto walk = [&](const std::vector<int64_t> &start,
                  const std::vector<int64_t> &box, int64_t begin, int64_t end,
                  auto fn) {
    if (start.size() != rank || box.size() != rank)
      fail(where, ": malformed checkpoint index: piece rank");
    std::vector<int64_t> idx(rank, 0);
    for (int64_t d = int64_t(rank) - 1, rest = begin; d >= 0; --d) {
      idx[d] = box[d] ? rest % box[d] : 0;
      rest = box[d] ? rest / box[d] : 0;
    }
    for (int64_t i = begin; i < end; ++i) {
      int64_t g = 0;
      bool inside = true;
      for (size_t d = 0; d < rank; ++d) {
        int64_t x = idx[d] + start[d];
        inside = inside && x < view[d];
        g += x * stride[d];
      }
      fn(inside ? g : -1);
      for (int d = int(rank) - 1; d >= 0; --d) {
        if (++idx[d] < box[d])
          break;
        idx[d] = 0;
      }
    }
  };
  if (!pieces.is_array())
    fail(where, ": malformed checkpoint index: no pieces");
  for (const json &piece : pieces) {
    const SafeTensorsFile &f = file(piece.value("file", std::string()));
    const SafeTensorInfo *info = f.find(name);
    if (!info)
      fail(f.path(), ": tensor '", name,
           "' is missing; the checkpoint is "
           "incomplete");
    std::vector<float> values = f.readF32(*info);
    size_t k = 0;
    auto take = [&](int64_t g, bool consumes) {
      if (consumes && k >= values.size())
        fail(f.path(), ": tensor '", name, "' is shorter than its index says");
      if (g >= 0) {
        out[g] = values[k];
        seen[g] = 1;
      }
      k += consumes;
    };
    if (piece.contains("shape")) {
      std::vector<int64_t> shape = dims(piece["shape"], where);
      walk(dims(piece.value("start", json()), where), shape, 0,
           product(shape, where), [&](int64_t g) { take(g, true); });
    } else {
      std::vector<int64_t> box = dims(piece.value("box_shape", json()), where);
      int64_t offset = piece.value("offset", int64_t(0)),
              count = piece.value("count", int64_t(0));
      if (offset < 0 || count < 0 || count > product(box, where) - offset)
        fail(where, ": malformed checkpoint index: range outside its box");
      walk(dims(piece.value("box_start", json()), where), box, offset,
           offset + count, [&](int64_t g) { take(g, raw || g >= 0); });
    }
    if (k != values.size())
      fail(f.path(), ": tensor '", name, "' has ", values.size(),
           " values; its index says ", k);
  }
  int64_t missing = std::count(seen.begin(), seen.end(), 0);
  if (missing > 0)
    fail(where, ": its pieces leave ", missing, " of ", total,
         " elements unset; the checkpoint is incomplete");
  return out;
}

std::vector<float> CheckpointReader::readTensor(const std::string &name) const {
  if (!perRank_) {
    const SafeTensorsFile &f = file("model.safetensors");
    const SafeTensorInfo *info = f.find(name);
    if (!info)
      fail(f.path(), ": no tensor '", name, "'");
    return f.readF32(*info);
  }
  const json &t = state_["tensors"].value(name, json());
  if (!t.is_object())
    fail(dir_, "/index.json: no tensor '", name, "'");
  return assemble(t, t.value("pieces", json()), name, /*raw=*/false);
}

bool CheckpointReader::hasState(const std::string &name,
                                const std::string &suffix) const {
  if (!perRank_)
    return file("optimizer.safetensors").find(name + suffix) != nullptr;
  return state_.contains("optimizer_state") &&
         state_["optimizer_state"].contains(name + suffix);
}

std::vector<float>
CheckpointReader::readState(const std::string &name,
                            const std::string &suffix) const {
  if (!perRank_) {
    const SafeTensorsFile &f = file("optimizer.safetensors");
    const SafeTensorInfo *info = f.find(name + suffix);
    if (!info)
      fail(f.path(), ": no tensor '", name + suffix, "'");
    return f.readF32(*info);
  }
  const json &t = state_["tensors"].value(name, json());
  const json &states = state_.value("optimizer_state", json());
  const json &s =
      states.is_object() ? states.value(name + suffix, json()) : json();
  if (!t.is_object() || !s.is_object())
    fail(dir_, "/index.json: no optimizer state '", name + suffix, "'");
  return assemble(t, s.value("pieces", json()), name + suffix, /*raw=*/true);
}

std::string CheckpointReader::configJson() const {
  std::error_code ec;
  fs::path config = fs::path(dir_) / "config.json";
  if (!fs::is_regular_file(config, ec))
    return {};
  std::vector<uint8_t> bytes = readRegularFile(config.string(), "config.json");
  return std::string(bytes.begin(), bytes.end());
}

} // namespace strata::rt
