//===- Trainer.cpp - Runs training steps of one rank's program ------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Trainer.h"

#include "runtime/core/LrSchedule.h"
#include "runtime/core/Random.h"
#include "runtime/format/Bundle.h"
#include "runtime/io/SafeTensors.h"
#include "runtime/support/Error.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

namespace strata::rt {

namespace fs = std::filesystem;

namespace {

constexpr const char *kCheckpointFormat = "strata-checkpoint";
constexpr int kCheckpointVersion = 1;

std::vector<std::string> stateSuffixes(OptimizerKind kind) {
  if (kind == OptimizerKind::AdamW)
    return {".exp_avg", ".exp_avg_sq"};
  return {".momentum"};
}

const std::vector<int64_t> &globalShapeOf(const ParamDesc &p,
                                          const BufferDesc &value) {
  return p.globalShape.empty() ? value.shape : p.globalShape;
}

bool isSharded(const ParamDesc &p, const BufferDesc &value) {
  return !p.globalShape.empty() && p.globalShape != value.shape;
}

/// Calls fn(localIndex, globalIndex) for every element of a shard.
template <typename Fn>
void forEachShardElement(const std::vector<int64_t> &local,
                         const std::vector<int64_t> &global,
                         const std::vector<int64_t> &start, Fn fn) {
  size_t rank = local.size();
  int64_t count = 1;
  for (int64_t d : local)
    count *= d;
  if (count == 0)
    return;
  std::vector<int64_t> globalStride(rank, 1), idx(rank, 0);
  for (int d = int(rank) - 2; d >= 0; --d)
    globalStride[d] = globalStride[d + 1] * global[d + 1];
  for (int64_t i = 0; i < count; ++i) {
    int64_t g = 0;
    for (size_t d = 0; d < rank; ++d)
      g += (idx[d] + (start.empty() ? 0 : start[d])) * globalStride[d];
    fn(i, g);
    for (int d = int(rank) - 1; d >= 0; --d) {
      if (++idx[d] < local[d])
        break;
      idx[d] = 0;
    }
  }
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string listNames(const std::vector<std::string> &names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 8; ++i)
    s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 8)
    s += " and " + std::to_string(names.size() - 8) + " more";
  return s;
}

} // namespace

Trainer::Trainer(Program program, uint32_t rank, std::unique_ptr<Device> device,
                 uint64_t seed)
    : program_(std::move(program)), rank_(rank), device_(std::move(device)),
      seed_(seed) {
  if (rank_ >= program_.ranks.size())
    fail("rank ", rank_, " is outside the program's world size ",
         program_.ranks.size());
  device_->prepare(rankProgram());
  int64_t rows = program_.meta.microBatch * program_.meta.seqLen;
  tokenRows_.resize(rows);
  targetRows_.resize(rows);
}

std::vector<float> Trainer::readF32(uint32_t buffer) const {
  const BufferDesc &b = rankProgram().buffers.at(buffer);
  std::vector<float> values(b.numElements());
  device_->download(b.offset, values.data(), values.size() * 4);
  return values;
}

void Trainer::writeF32(uint32_t buffer, const std::vector<float> &values) {
  const BufferDesc &b = rankProgram().buffers.at(buffer);
  if (int64_t(values.size()) != b.numElements())
    fail("internal error: writing ", values.size(), " values into '", b.name,
         "'");
  device_->upload(b.offset, values.data(), values.size() * 4);
}

void Trainer::initParameters() {
  const RankProgram &rp = rankProgram();
  for (const ParamDesc &p : rp.params) {
    const BufferDesc &value = rp.buffers[p.value];
    std::vector<float> v(value.numElements());
    if (p.init == InitKind::Ones) {
      std::fill(v.begin(), v.end(), 1.0f);
    } else if (p.init == InitKind::Normal) {
      uint64_t key = initKey(seed_, p.name);
      forEachShardElement(value.shape, globalShapeOf(p, value), p.shardStart,
                          [&](int64_t local, int64_t global) {
                            v[local] =
                                float(p.initStd * standardNormal(key, global));
                          });
    }
    writeF32(p.value, v);
    std::vector<float> zeros(v.size(), 0.0f);
    writeF32(p.grad, zeros);
    for (uint32_t s : p.state)
      writeF32(s, zeros);
  }
  step_ = 0;
}

void Trainer::checkWeightsFile(const SafeTensorsFile &file,
                               const std::vector<std::string> &expected) const {
  std::set<std::string> want(expected.begin(), expected.end());
  std::vector<std::string> missing, extra;
  for (const std::string &name : expected)
    if (!file.find(name))
      missing.push_back(name);
  for (const SafeTensorInfo &t : file.tensors())
    if (!want.count(t.name))
      extra.push_back(t.name);
  if (!missing.empty() || !extra.empty()) {
    std::string msg = file.path() + ": tensors do not match the model's "
                                    "parameters.";
    if (!missing.empty())
      msg += " Missing: " + listNames(missing) + ".";
    if (!extra.empty())
      msg += " Not in the model: " + listNames(extra) + ".";
    fail(msg, " Use a checkpoint of this model (parameter names as in "
              "the model spec).");
  }
}

void Trainer::loadParamValue(const ParamDesc &param, std::vector<float> global,
                             const std::vector<int64_t> &fileShape,
                             const std::string &source) {
  const RankProgram &rp = rankProgram();
  const BufferDesc &value = rp.buffers[param.value];
  const std::vector<int64_t> &shape = globalShapeOf(param, value);
  if (fileShape != shape)
    fail(source, ": tensor '", param.name, "' has shape ",
         shapeString(fileShape), ", the model needs ", shapeString(shape));
  if (!isSharded(param, value)) {
    writeF32(param.value, global);
    return;
  }
  std::vector<float> local(value.numElements());
  forEachShardElement(value.shape, shape, param.shardStart,
                      [&](int64_t l, int64_t g) { local[l] = global[g]; });
  writeF32(param.value, local);
}

void Trainer::loadInitialWeights(const std::string &path) {
  initParameters(); // Zero grads and optimizer state.
  SafeTensorsFile file = SafeTensorsFile::open(path);
  std::vector<std::string> names;
  for (const ParamDesc &p : rankProgram().params)
    names.push_back(p.name);
  checkWeightsFile(file, names);
  for (const ParamDesc &p : rankProgram().params) {
    const SafeTensorInfo &info = *file.find(p.name);
    loadParamValue(p, file.readF32(info), info.shape, "--init " + path);
  }
}

StepStats Trainer::runStep(const TokenData &data) {
  const ModelMeta &m = program_.meta;
  const RankProgram &rp = rankProgram();
  auto start = std::chrono::steady_clock::now();
  StepStats stats;
  stats.step = step_;
  stats.lr = learningRate(program_.train, step_);
  ExecContext ctx{step_, stats.lr};

  device_->run(SequenceKind::StepBegin, ctx);
  const BufferDesc &tokens = rp.buffers[rp.tokens];
  const BufferDesc &targets = rp.buffers[rp.targets];
  const BufferDesc &lossBuf = rp.buffers[rp.loss];
  double lossSum = 0.0;
  for (int64_t mb = 0; mb < m.numMicrobatches; ++mb) {
    data.fillRows(step_, m.globalBatch, mb * m.microBatch, m.microBatch,
                  tokenRows_.data(), targetRows_.data());
    device_->upload(tokens.offset, tokenRows_.data(), tokenRows_.size() * 4);
    device_->upload(targets.offset, targetRows_.data(), targetRows_.size() * 4);
    if (rp.positions != kNoBuffer) {
      // Position of each token in its row: the same for every micro-batch.
      std::vector<int32_t> positions(tokenRows_.size());
      for (size_t i = 0; i < positions.size(); ++i)
        positions[i] = static_cast<int32_t>(i % m.seqLen);
      device_->upload(rp.buffers[rp.positions].offset, positions.data(),
                      positions.size() * 4);
    }
    device_->run(SequenceKind::Microbatch, ctx);
    float loss;
    device_->download(lossBuf.offset, &loss, 4);
    lossSum += loss;
  }
  device_->run(SequenceKind::Update, ctx);
  if (rp.gradSumSq != kNoBuffer) {
    double sumsq;
    device_->download(rp.buffers[rp.gradSumSq].offset, &sumsq, 8);
    stats.gradNorm = std::sqrt(sumsq);
  }
  stats.loss = lossSum / double(m.numMicrobatches);
  stats.tokens = m.numMicrobatches * m.microBatch * m.seqLen;
  stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  ++step_;
  return stats;
}

void Trainer::saveCheckpoint(const std::string &dir) const {
  const RankProgram &rp = rankProgram();
  fs::path target(dir);
  std::error_code ec;
  if (fs::exists(target, ec)) {
    if (!fs::is_directory(target, ec) ||
        (!fs::is_empty(target, ec) && !fs::exists(target / "trainer.json")))
      fail("--save ", dir,
           ": exists and is not a Strata checkpoint; "
           "choose another directory");
  }
  // Gather everything before touching the file system.
  std::vector<std::vector<float>> values, states;
  std::vector<SafeTensorToWrite> model, optimizer;
  std::vector<std::string> suffixes = stateSuffixes(program_.train.optimizer);
  values.reserve(rp.params.size());
  states.reserve(rp.params.size() * suffixes.size());
  std::vector<std::string> stateNames;
  stateNames.reserve(rp.params.size() * suffixes.size());
  for (const ParamDesc &p : rp.params) {
    const BufferDesc &value = rp.buffers[p.value];
    if (isSharded(p, value))
      fail("--save ", dir, ": parameter '", p.name,
           "' is sharded; this runtime saves unsharded parameters only");
    values.push_back(readF32(p.value));
    model.push_back({p.name, "F32", value.shape, values.back().data(),
                     values.back().size() * 4});
    for (size_t s = 0; s < p.state.size(); ++s) {
      states.push_back(readF32(p.state[s]));
      stateNames.push_back(p.name + suffixes[s]);
      optimizer.push_back({stateNames.back(), "F32", value.shape,
                           states.back().data(), states.back().size() * 4});
    }
  }
  nlohmann::json state = {
      {"format", kCheckpointFormat},
      {"version", kCheckpointVersion},
      {"family", program_.meta.family},
      {"optimizer",
       program_.train.optimizer == OptimizerKind::AdamW ? "adamw" : "sgd"},
      {"step", step_},
      {"seed", seed_},
      {"data_position", step_ * program_.meta.globalBatch},
      {"rng", {{"kind", "counter-splitmix64"}, {"seed", seed_}}},
  };

  fs::path tmp = target.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(tmp, ec))
    fail("--save ", dir, ": cannot create ", tmp.string(), ": ", ec.message());
  try {
    std::map<std::string, std::string> meta = {{"format", "pt"}};
    writeSafeTensors((tmp / "model.safetensors").string(), model, meta);
    writeSafeTensors((tmp / "optimizer.safetensors").string(), optimizer, meta);
    std::string text = state.dump(2) + "\n";
    writeFileAtomically((tmp / "trainer.json").string(),
                        std::vector<uint8_t>(text.begin(), text.end()), false);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::path old = target.string() + ".old-" + std::to_string(::getpid());
  bool hadOld = fs::exists(target, ec);
  if (hadOld) {
    fs::rename(target, old, ec);
    if (ec) {
      fs::remove_all(tmp, ec);
      fail("--save ", dir, ": cannot move the old checkpoint aside");
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    std::error_code ignore;
    if (hadOld)
      fs::rename(old, target, ignore);
    fs::remove_all(tmp, ignore);
    fail("--save ", dir,
         ": cannot rename the new checkpoint into place: ", ec.message());
  }
  if (hadOld)
    fs::remove_all(old, ec);
}

void Trainer::loadCheckpoint(const std::string &dir) {
  fs::path root(dir);
  std::string statePath = (root / "trainer.json").string();
  std::ifstream in(statePath);
  if (!in)
    fail("--resume ", dir,
         ": no trainer.json; not a Strata checkpoint "
         "directory (written by --save)");
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(in);
    if (state.at("format").get<std::string>() != kCheckpointFormat ||
        state.at("version").get<int>() != kCheckpointVersion)
      fail(statePath, ": unsupported checkpoint format or version");
    std::string opt = state.at("optimizer").get<std::string>();
    std::string want =
        program_.train.optimizer == OptimizerKind::AdamW ? "adamw" : "sgd";
    if (opt != want)
      fail(statePath, ": checkpoint was trained with ", opt,
           " but this program uses ", want);
    int64_t step = state.at("step").get<int64_t>();
    if (step < 0)
      fail(statePath, ": negative step");
    step_ = step;
    seed_ = state.at("seed").get<uint64_t>();
  } catch (const nlohmann::json::exception &e) {
    fail(statePath, ": malformed checkpoint state: ", e.what());
  }

  const RankProgram &rp = rankProgram();
  std::string modelPath = (root / "model.safetensors").string();
  std::string optPath = (root / "optimizer.safetensors").string();
  SafeTensorsFile model = SafeTensorsFile::open(modelPath);
  SafeTensorsFile optimizer = SafeTensorsFile::open(optPath);
  std::vector<std::string> names, stateNames;
  std::vector<std::string> suffixes = stateSuffixes(program_.train.optimizer);
  for (const ParamDesc &p : rp.params) {
    names.push_back(p.name);
    for (const std::string &s : suffixes)
      stateNames.push_back(p.name + s);
  }
  checkWeightsFile(model, names);
  checkWeightsFile(optimizer, stateNames);
  auto exactF32 = [](const SafeTensorsFile &file, const std::string &name) {
    const SafeTensorInfo &info = *file.find(name);
    if (info.dtype != "F32")
      fail(file.path(), ": tensor '", name, "' is ", info.dtype,
           "; a checkpoint must hold F32 to resume exactly");
    return file.readF32(info);
  };
  for (const ParamDesc &p : rp.params) {
    loadParamValue(p, exactF32(model, p.name), model.find(p.name)->shape,
                   modelPath);
    for (size_t s = 0; s < p.state.size(); ++s) {
      std::string name = p.name + suffixes[s];
      const SafeTensorInfo &info = *optimizer.find(name);
      if (info.shape != rp.buffers[p.state[s]].shape)
        fail(optPath, ": tensor '", name, "' has shape ",
             shapeString(info.shape), ", the model needs ",
             shapeString(rp.buffers[p.state[s]].shape));
      writeF32(p.state[s], exactF32(optimizer, name));
    }
    writeF32(p.grad, std::vector<float>(rp.buffers[p.grad].numElements()));
  }
}

} // namespace strata::rt
