//===- Checkpoint.cpp - Parameter init, --init weights and checkpoints ----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Every value a rank holds is defined on the whole tensor's element indices
// (ParamLayout.h), so initialisation and loading never depend on the plan,
// whether a rank holds a box of the tensor or (ZeRO-3) a flat range of one.
// A one-rank run saves whole tensors (model.safetensors is a plain weights
// file); a multi-rank run saves one file per rank plus index.json. Loading
// under the plan that saved it reads each rank's pieces directly; any other
// plan or rank count goes through LoadWeights.cpp (docs/runtime.md).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/ParamLayout.h"
#include "runtime/core/Random.h"
#include "runtime/core/Trainer.h"

#include "runtime/format/Bundle.h"
#include "runtime/io/CheckpointFiles.h"
#include "runtime/io/CheckpointReader.h"
#include "runtime/io/SafeTensors.h"
#include "runtime/io/WeightsSource.h"
#include "runtime/support/Error.h"
#include "runtime/support/FileIO.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unistd.h>

namespace strata::rt {

namespace fs = std::filesystem;

namespace {

constexpr const char *kCheckpointFormat = "strata-checkpoint";
constexpr int kCheckpointVersion = 1;

const char *optimizerName(OptimizerKind kind) {
  return kind == OptimizerKind::AdamW ? "adamw" : "sgd";
}

std::string rankFileName(uint32_t rank) {
  char name[64];
  std::snprintf(name, sizeof name, "rank-%05u.safetensors", rank);
  return name;
}

const ParamDesc *findParam(const RankProgram &rank, const std::string &name) {
  for (const ParamDesc &p : rank.params)
    if (p.name == name)
      return &p;
  return nullptr;
}

std::vector<float> readExactF32(const SafeTensorsFile &file,
                                const std::string &name) {
  const SafeTensorInfo &info = *file.find(name);
  if (info.dtype != "F32")
    fail(file.path(), ": tensor '", name, "' is ", info.dtype,
         "; a checkpoint must hold F32 to resume exactly");
  return file.readF32(info);
}

/// What every checkpoint records about the run, one rank or many.
nlohmann::json runState(const Program &program, int64_t step, uint64_t seed,
                        int64_t dataPosition, DataOrder order) {
  return {
      {"format", kCheckpointFormat},
      {"version", kCheckpointVersion},
      {"family", program.meta.family},
      {"optimizer", optimizerName(program.train.optimizer)},
      {"step", step},
      {"seed", seed},
      {"data_position", dataPosition},
      {"data_order", dataOrderName(order)},
      {"rng", {{"kind", "counter-splitmix64"}, {"seed", seed}}},
  };
}

nlohmann::json readJson(const std::string &path, const std::string &what) {
  std::vector<uint8_t> bytes;
  try {
    bytes = readRegularFile(path, "a JSON file written by --save");
  } catch (const RuntimeError &e) {
    fail(what, ": ", e.what());
  }
  return decodeCheckpointState(bytes, path);
}

/// Writes one file of a checkpoint into the temporary directory and records
/// its size and CRC-32 for the state file's "files".
void writeCheckpointFile(const fs::path &tmp, const std::string &name,
                         const std::vector<uint8_t> &bytes,
                         nlohmann::json &files) {
  saveCrashPoint();
  writeFileAtomically((tmp / name).string(), bytes, false);
  files[name] = fileRecord(bytes.data(), bytes.size());
}

/// The state file (trainer.json or index.json), written last, with every
/// other file's checksum and its own.
void writeStateFile(const fs::path &tmp, const std::string &name,
                    nlohmann::json state, const nlohmann::json &files,
                    int indent) {
  state["files"] = files;
  std::string text = encodeCheckpointState(std::move(state), indent);
  saveCrashPoint();
  writeFileAtomically((tmp / name).string(),
                      std::vector<uint8_t>(text.begin(), text.end()), false);
}

/// config.json beside the tensors, for the families that have one.
void writeConfig(const Program &program, const fs::path &dir,
                 nlohmann::json &files) {
  const std::string &text = program.meta.hfConfig;
  if (!text.empty())
    writeCheckpointFile(dir, "config.json",
                        std::vector<uint8_t>(text.begin(), text.end()), files);
}

void checkSaveTarget(const std::string &dir) {
  fs::path target(dir);
  std::error_code ec;
  if (fs::exists(target, ec) && !isCheckpointDirectory(dir))
    fail("--save ", dir,
         ": exists and is not a Strata checkpoint; choose another directory");
}

} // namespace

std::vector<std::string> stateSuffixes(OptimizerKind kind) {
  if (kind == OptimizerKind::AdamW)
    return {".exp_avg", ".exp_avg_sq"};
  return {".momentum"};
}

bool isCheckpointDirectory(const std::string &dir) {
  fs::path target(dir);
  std::error_code ec;
  return fs::is_directory(target, ec) &&
         (fs::is_empty(target, ec) || fs::exists(target / "trainer.json") ||
          fs::exists(target / "index.json"));
}

void Trainer::initParameters() {
  const RankProgram &rp = rankProgram();
  for (const ParamDesc &p : rp.params) {
    ParamLayout layout = layoutOf(rp, p);
    std::vector<float> v(rp.buffers[p.value].numElements(), 0.0f);
    uint64_t key = initKey(seed_, p.name);
    // Padding past the global shape stays zero whatever the init.
    if (p.init == InitKind::Ones)
      forEachHeldValue(layout, [&](int64_t l, int64_t) { v[l] = 1.0f; });
    else if (p.init == InitKind::Normal)
      forEachHeldValue(layout, [&](int64_t l, int64_t g) {
        v[l] = float(p.initStd * standardNormal(key, g));
      });
    writeF32(p.value, v);
    writeF32(p.grad, std::vector<float>(rp.buffers[p.grad].numElements()));
    for (uint32_t s : p.state)
      writeF32(s, std::vector<float>(rp.buffers[s].numElements()));
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

void Trainer::loadParamValue(const ParamDesc &param,
                             const std::vector<float> &global,
                             const std::vector<int64_t> &fileShape,
                             const std::string &source) {
  ParamLayout layout = layoutOf(rankProgram(), param);
  if (fileShape != layout.checkpoint)
    fail(source, ": tensor '", param.name, "' has shape ",
         shapeString(fileShape), ", the model needs ",
         shapeString(layout.checkpoint));
  std::vector<float> local(rankProgram().buffers[param.value].numElements(),
                           0.0f);
  forEachHeldValue(layout, [&](int64_t l, int64_t g) { local[l] = global[g]; });
  writeF32(param.value, local);
}

Trainer::ValueSource Trainer::valueSource(uint32_t rank,
                                          const ParamDesc &param) const {
  ParamLayout mine = layoutOf(program_.ranks[rank], param);
  ValueSource best{rank, mine.valueOffset, mine.valueOffset + mine.valueCount};
  if (mine.valueSharded && mine.valueCount == 0)
    return best; // Nothing to save or load.
  for (uint32_t r = 0; r < program_.ranks.size(); ++r) {
    const ParamDesc *other = findParam(program_.ranks[r], param.name);
    if (!other || r == rank)
      continue;
    ParamLayout theirs = layoutOf(program_.ranks[r], *other);
    if (theirs.local != mine.local || theirs.view != mine.view ||
        theirs.start != mine.start)
      continue;
    int64_t begin = theirs.valueOffset, end = begin + theirs.valueCount;
    if (begin > mine.valueOffset || end < mine.valueOffset + mine.valueCount)
      continue;
    int64_t width = end - begin, bestWidth = best.end - best.begin;
    if (width > bestWidth || (width == bestWidth && r < best.rank))
      best = {r, begin, end};
  }
  return best;
}

uint32_t Trainer::stateOwner(uint32_t rank, const ParamDesc &param) const {
  ParamLayout mine = layoutOf(program_.ranks[rank], param);
  for (uint32_t r = 0; r < rank; ++r) {
    const ParamDesc *other = findParam(program_.ranks[r], param.name);
    if (other && layoutOf(program_.ranks[r], *other) == mine)
      return r;
  }
  return rank;
}

std::string Trainer::layoutFingerprint() const {
  std::string text = optimizerName(program_.train.optimizer);
  for (const RankProgram &rank : program_.ranks) {
    text += "|rank" + std::to_string(rank.rank);
    for (const ParamDesc &p : rank.params) {
      ParamLayout l = layoutOf(rank, p);
      text += "|" + p.name + shapeString(l.local) + shapeString(l.view) +
              shapeString(l.start) + shapeString(l.checkpoint) + "+" +
              std::to_string(l.stateOffset) + ":" +
              std::to_string(l.stateCount);
      // Only value-sharded parameters add to the text, so that earlier
      // checkpoints keep their fingerprints.
      if (l.valueSharded)
        text += "~v" + std::to_string(l.valueOffset) + ":" +
                std::to_string(l.valueCount);
    }
  }
  uint64_t h =
      fnv1a64(reinterpret_cast<const uint8_t *>(text.data()), text.size());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, h);
  return hex;
}

void Trainer::saveCheckpoint(const std::string &dir) const {
  if (worldSize() == 1)
    saveSingleRank(dir);
  else
    saveMultiRank(dir);
}

static void readTrainerState(const nlohmann::json &state,
                             const std::string &path, OptimizerKind optimizer,
                             const ModelMeta &meta, int64_t &step,
                             uint64_t &seed, int64_t &dataPosition,
                             DataOrder &order, bool &hadOrder);

void Trainer::loadCheckpoint(const std::string &path) {
  std::string dir = resolveCheckpointPath(path, "--resume");
  fs::path root(dir);
  bool perRank = fs::exists(root / "index.json");
  // The plan that wrote it is this one: every rank reads its own pieces.
  // Otherwise the checkpoint is resharded (LoadWeights.cpp).
  if (perRank && worldSize() > 1 && sameLayout(dir))
    loadMultiRank(dir);
  else if (!perRank && worldSize() == 1)
    loadSingleRank(dir);
  else {
    CheckpointReader checkpoint = CheckpointReader::open(dir);
    std::string statePath = dir + (perRank ? "/index.json" : "/trainer.json");
    readTrainerState(checkpoint.state(), statePath, program_.train.optimizer,
                     program_.meta, step_, seed_, dataPosition_, dataOrder_,
                     checkpointHadDataOrder_);
    loadResharded(checkpoint);
  }
}

bool Trainer::sameLayout(const std::string &dir) const {
  std::string indexPath = (fs::path(dir) / "index.json").string();
  nlohmann::json index = readJson(indexPath, "--resume " + dir);
  return index.value("world_size", 0u) == worldSize() &&
         index.value("layout_fingerprint", std::string()) ==
             layoutFingerprint();
}

void Trainer::saveSingleRank(const std::string &dir) const {
  const RankProgram &rp = rankProgram();
  fs::path target(dir);
  checkSaveTarget(dir);
  // Gather everything before touching the file system.
  std::vector<std::vector<float>> values, states;
  std::vector<SafeTensorToWrite> model, optimizer;
  std::vector<std::string> suffixes = stateSuffixes(program_.train.optimizer);
  values.reserve(rp.params.size());
  states.reserve(rp.params.size() * suffixes.size());
  std::vector<std::string> stateNames;
  stateNames.reserve(rp.params.size() * suffixes.size());
  for (const ParamDesc &p : rp.params) {
    ParamLayout layout = layoutOf(rp, p);
    if (!layout.coversWhole() || layout.valueOffset != 0 ||
        layout.valueCount != layout.boxElements())
      fail("--save ", dir, ": parameter '", p.name, "' holds only part of ",
           shapeString(layout.view),
           " on the only rank; the program is "
           "inconsistent, recompile it");
    std::vector<float> local = readF32(p.value);
    values.emplace_back(shapeElements(layout.checkpoint));
    forEachHeldValue(
        layout, [&](int64_t l, int64_t g) { values.back()[g] = local[l]; });
    model.push_back({p.name, "F32", layout.checkpoint, values.back().data(),
                     values.back().size() * 4});
    for (size_t s = 0; s < p.state.size(); ++s) {
      states.push_back(readF32(p.state[s]));
      stateNames.push_back(p.name + suffixes[s]);
      optimizer.push_back({stateNames.back(), "F32",
                           rp.buffers[p.state[s]].shape, states.back().data(),
                           states.back().size() * 4});
    }
  }
  nlohmann::json state =
      runState(program_, step_, seed_, dataPosition_, dataOrder_);

  std::error_code ec;
  fs::path tmp = target.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(tmp, ec))
    fail("--save ", dir, ": cannot create ", tmp.string(), ": ", ec.message());
  try {
    std::map<std::string, std::string> meta = {{"format", "pt"}};
    nlohmann::json files = nlohmann::json::object();
    writeCheckpointFile(tmp, "model.safetensors",
                        encodeSafeTensors(model, meta), files);
    writeCheckpointFile(tmp, "optimizer.safetensors",
                        encodeSafeTensors(optimizer, meta), files);
    writeConfig(program_, tmp, files);
    writeStateFile(tmp, "trainer.json", state, files, 2);
    publishDirectory(tmp.string(), dir, "--save");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

/// Reads trainer state shared by both layouts; checks optimizer and step.
static void readTrainerState(const nlohmann::json &state,
                             const std::string &path, OptimizerKind optimizer,
                             const ModelMeta &meta, int64_t &step,
                             uint64_t &seed, int64_t &dataPosition,
                             DataOrder &order, bool &hadOrder) {
  // Every field is checked for its type and range: a negative or
  // fractional step, seed or position would otherwise convert silently.
  auto field = [&](const char *name) -> const nlohmann::json & {
    if (!state.is_object() || !state.contains(name))
      fail(path, ": malformed checkpoint state: no '", name, "'");
    return state[name];
  };
  auto counter = [&](const char *name) -> uint64_t {
    const nlohmann::json &v = field(name);
    if (!v.is_number_unsigned())
      fail(path, ": malformed checkpoint state: '", name,
           "' must be a non-negative integer, got ", v.dump());
    return v.get<uint64_t>();
  };
  auto text = [&](const char *name) -> std::string {
    const nlohmann::json &v = field(name);
    if (!v.is_string())
      fail(path, ": malformed checkpoint state: '", name,
           "' must be a string, got ", v.dump());
    return v.get<std::string>();
  };
  if (text("format") != kCheckpointFormat ||
      counter("version") != uint64_t(kCheckpointVersion))
    fail(path, ": unsupported checkpoint format or version");
  std::string opt = text("optimizer");
  if (opt != optimizerName(optimizer))
    fail(path, ": checkpoint was trained with ", opt, " but this program uses ",
         optimizerName(optimizer));
  if (state.contains("family") && text("family") != meta.family)
    fail(path, ": checkpoint of a '", text("family"),
         "' model; this program trains a '", meta.family, "' model");
  uint64_t stepCount = counter("step");
  if (stepCount > uint64_t(INT64_MAX / std::max<int64_t>(1, meta.globalBatch)))
    fail(path, ": malformed checkpoint state: step ", stepCount,
         " is out of range");
  step = int64_t(stepCount);
  seed = counter("seed");
  // Checkpoints before sampled data recorded only step * global batch.
  uint64_t position = state.contains("data_position")
                          ? counter("data_position")
                          : uint64_t(step * meta.globalBatch);
  if (position > uint64_t(INT64_MAX / 2))
    fail(path, ": malformed checkpoint state: data_position ", position,
         " is out of range");
  dataPosition = int64_t(position);
  hadOrder = state.contains("data_order");
  std::string name = hadOrder ? text("data_order") : "sequential";
  if (name != "random" && name != "sequential")
    fail(path, ": unknown data_order '", name, "'");
  order = name == "random" ? DataOrder::Random : DataOrder::Sequential;
  if (state.contains("rng")) {
    const nlohmann::json &rng = state["rng"];
    if (!rng.is_object() || !rng.contains("seed") ||
        !rng["seed"].is_number_unsigned() ||
        rng["seed"].get<uint64_t>() != seed)
      fail(path, ": malformed checkpoint state: 'rng' must record the seed ",
           seed);
  }
}

void Trainer::loadSingleRank(const std::string &dir) {
  fs::path root(dir);
  std::string statePath = (root / "trainer.json").string();
  nlohmann::json state = readJson(statePath, "--resume " + dir);
  readTrainerState(state, statePath, program_.train.optimizer, program_.meta,
                   step_, seed_, dataPosition_, dataOrder_,
                   checkpointHadDataOrder_);
  verifyCheckpointFiles(dir, state, statePath);

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
  for (const ParamDesc &p : rp.params) {
    loadParamValue(p, readExactF32(model, p.name), model.find(p.name)->shape,
                   modelPath);
    for (size_t s = 0; s < p.state.size(); ++s) {
      std::string name = p.name + suffixes[s];
      const SafeTensorInfo &info = *optimizer.find(name);
      if (info.shape != rp.buffers[p.state[s]].shape)
        fail(optPath, ": tensor '", name, "' has shape ",
             shapeString(info.shape), ", the model needs ",
             shapeString(rp.buffers[p.state[s]].shape));
      writeF32(p.state[s], readExactF32(optimizer, name));
    }
    writeF32(p.grad, std::vector<float>(rp.buffers[p.grad].numElements()));
  }
}

void Trainer::saveMultiRank(const std::string &dir) const {
  Communicator &world = comms_->world();
  const uint32_t W = worldSize();
  fs::path target(dir);
  // Every rank names the same temporary directory: the ranks of one job
  // share the file system the checkpoint goes to.
  fs::path tmp = target.string() + ".tmp-save";
  // All ranks learn whether every rank succeeded, so none is left waiting;
  // a failing rank reports its own error, the others name it.
  auto agree = [&](const std::string &localError, const char *phase) {
    std::vector<double> failed(W, 0.0);
    if (!localError.empty())
      failed[rank_] = 1.0;
    world.allReduce(failed.data(), W, DType::F64, ReduceOp::Sum);
    std::string ranks;
    for (uint32_t r = 0; r < W; ++r)
      if (failed[r] > 0)
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    if (ranks.empty())
      return;
    std::error_code ec;
    if (rank_ == 0)
      fs::remove_all(tmp, ec);
    if (!localError.empty())
      throw RuntimeError(localError);
    throw CollectiveError("--save " + dir + ": " + phase +
                          " failed on rank(s) " + ranks +
                          "; an existing checkpoint is left unchanged");
  };
  auto attempt = [](auto &&body) -> std::string {
    try {
      body();
      return {};
    } catch (const std::exception &e) {
      return e.what();
    }
  };

  agree(attempt([&] {
          if (rank_ != 0)
            return;
          checkSaveTarget(dir);
          std::error_code ec;
          fs::remove_all(tmp, ec);
          if (!fs::create_directories(tmp, ec))
            fail("--save ", dir, ": cannot create ", tmp.string(), ": ",
                 ec.message());
        }),
        "creating the temporary directory");

  const RankProgram &rp = rankProgram();
  std::vector<std::string> suffixes = stateSuffixes(program_.train.optimizer);
  double mine[2] = {0.0, 0.0};
  agree(attempt([&] {
          std::vector<std::vector<float>> data;
          std::vector<SafeTensorToWrite> tensors;
          std::vector<std::string> names;
          data.reserve(rp.params.size() * (1 + suffixes.size()));
          names.reserve(data.capacity());
          for (const ParamDesc &p : rp.params) {
            ParamLayout layout = layoutOf(rp, p);
            if (valueOwner(rank_, p) == rank_ &&
                (!p.valueSharded || layout.valueCount > 0)) {
              // The elements inside the tensor, in flat order: a box piece
              // in the box's clipped shape, a ZeRO-3 range piece flat.
              std::vector<float> local = readF32(p.value);
              std::vector<float> piece;
              piece.reserve(local.size());
              forEachHeldValue(layout, [&](int64_t l, int64_t) {
                piece.push_back(local[l]);
              });
              std::vector<int64_t> shape =
                  p.valueSharded ? std::vector<int64_t>{int64_t(piece.size())}
                                 : layout.clipped();
              data.push_back(std::move(piece));
              names.push_back(p.name);
              tensors.push_back({names.back(), "F32", shape, data.back().data(),
                                 data.back().size() * 4});
            }
            if (stateOwner(rank_, p) == rank_)
              for (size_t s = 0; s < p.state.size(); ++s) {
                data.push_back(readF32(p.state[s]));
                names.push_back(p.name + suffixes[s]);
                tensors.push_back({names.back(),
                                   "F32",
                                   {int64_t(data.back().size())},
                                   data.back().data(),
                                   data.back().size() * 4});
              }
          }
          std::vector<uint8_t> bytes =
              encodeSafeTensors(tensors, {{"format", "pt"}});
          saveCrashPoint();
          writeFileAtomically((tmp / rankFileName(rank_)).string(), bytes,
                              false);
          mine[0] = double(bytes.size());
          mine[1] = double(crc32Of(bytes.data(), bytes.size()));
        }),
        "writing the rank files");
  // Rank 0 records every rank file's size and CRC-32 in the index: each
  // rank contributes its own pair (sizes below 2^53 are exact doubles).
  std::vector<double> records(2 * size_t(W), 0.0);
  records[2 * rank_] = mine[0];
  records[2 * rank_ + 1] = mine[1];
  world.allReduce(records.data(), int64_t(records.size()), DType::F64,
                  ReduceOp::Sum);

  agree(
      attempt([&] {
        if (rank_ != 0)
          return;
        // Every rank's layout is in the program, so rank 0 can index
        // every piece without gathering anything.
        nlohmann::json tensors = nlohmann::json::object();
        nlohmann::json states = nlohmann::json::object();
        for (const RankProgram &r : program_.ranks)
          for (const ParamDesc &p : r.params) {
            ParamLayout l = layoutOf(r, p);
            auto &t = tensors[p.name];
            t["global_shape"] = l.view;
            t["checkpoint_shape"] = l.checkpoint;
            if (valueOwner(r.rank, p) == r.rank && !p.valueSharded)
              t["pieces"].push_back({{"file", rankFileName(r.rank)},
                                     {"start", l.start},
                                     {"shape", l.clipped()}});
            else if (valueOwner(r.rank, p) == r.rank && l.valueCount > 0)
              t["pieces"].push_back(
                  {{"file", rankFileName(r.rank)},
                   {"box_start", l.start},
                   {"box_shape", l.local},
                   {"offset", l.valueOffset},
                   {"count", l.valueCount},
                   {"stored", countInFlatRange(l, l.valueOffset,
                                               l.valueOffset + l.valueCount)}});
            if (stateOwner(r.rank, p) == r.rank)
              for (const std::string &suffix : suffixes)
                states[p.name + suffix]["pieces"].push_back(
                    {{"file", rankFileName(r.rank)},
                     {"box_start", l.start},
                     {"box_shape", l.local},
                     {"offset", l.stateOffset},
                     {"count", l.stateCount}});
          }
        nlohmann::json index =
            runState(program_, step_, seed_, dataPosition_, dataOrder_);
        index["layout"] = "per-rank";
        index["world_size"] = W;
        index["plan"] = program_.meta.planDescription;
        index["layout_fingerprint"] = layoutFingerprint();
        index["tensors"] = tensors;
        index["optimizer_state"] = states;
        nlohmann::json files = nlohmann::json::object();
        char crc[9];
        for (uint32_t r = 0; r < W; ++r) {
          std::snprintf(crc, sizeof crc, "%08x", uint32_t(records[2 * r + 1]));
          files[rankFileName(r)] = {{"bytes", uint64_t(records[2 * r])},
                                    {"crc32", crc}};
        }
        writeConfig(program_, tmp, files);
        writeStateFile(tmp, "index.json", index, files, 1);
        publishDirectory(tmp.string(), dir, "--save");
      }),
      "publishing the checkpoint");
}

void Trainer::loadMultiRank(const std::string &dir) {
  fs::path root(dir);
  std::string indexPath = (root / "index.json").string();
  nlohmann::json index = readJson(indexPath, "--resume " + dir);
  readTrainerState(index, indexPath, program_.train.optimizer, program_.meta,
                   step_, seed_, dataPosition_, dataOrder_,
                   checkpointHadDataOrder_);
  uint32_t savedWorld = 0;
  std::string savedPlan, savedLayout;
  try {
    savedWorld = index.at("world_size").get<uint32_t>();
    savedPlan = index.at("plan").get<std::string>();
    savedLayout = index.at("layout_fingerprint").get<std::string>();
  } catch (const nlohmann::json::exception &e) {
    fail(indexPath, ": malformed checkpoint index: ", e.what());
  }
  if (savedWorld != worldSize() || savedLayout != layoutFingerprint())
    fail("--resume ", dir, ": the checkpoint was saved by a run of ",
         savedWorld, " ranks (plan: ", savedPlan, "); this program runs on ",
         worldSize(), " ranks (plan: ", program_.meta.planDescription, ")",
         savedWorld == worldSize() ? " with a different parameter layout" : "",
         "; internal error: the layouts were checked to match");

  const RankProgram &rp = rankProgram();
  std::vector<std::string> suffixes = stateSuffixes(program_.train.optimizer);
  std::map<uint32_t, SafeTensorsFile> files;
  auto fileOf = [&](uint32_t owner) -> const SafeTensorsFile & {
    auto it = files.find(owner);
    if (it == files.end()) {
      verifyCheckpointFiles(dir, index, indexPath, rankFileName(owner));
      it = files
               .emplace(owner, SafeTensorsFile::open(
                                   (root / rankFileName(owner)).string()))
               .first;
    }
    return it->second;
  };
  auto tensor = [&](const SafeTensorsFile &file, const std::string &name,
                    const std::vector<int64_t> &shape) {
    const SafeTensorInfo *info = file.find(name);
    if (!info)
      fail(file.path(), ": tensor '", name,
           "' is missing; the checkpoint "
           "is incomplete");
    if (info->shape != shape)
      fail(file.path(), ": tensor '", name, "' has shape ",
           shapeString(info->shape), ", this rank needs ", shapeString(shape));
    return readExactF32(file, name);
  };
  for (const ParamDesc &p : rp.params) {
    ParamLayout layout = layoutOf(rp, p);
    std::vector<float> local(rp.buffers[p.value].numElements(), 0.0f);
    ValueSource source = valueSource(rank_, p);
    if (layout.valueCount > 0) {
      // The owner saved the elements of its range inside the tensor in
      // flat order; this rank's range lies within that range.
      const ParamDesc &owner = *findParam(program_.ranks[source.rank], p.name);
      std::vector<int64_t> shape = owner.valueSharded
                                       ? std::vector<int64_t>{countInFlatRange(
                                             layout, source.begin, source.end)}
                                       : layout.clipped();
      std::vector<float> piece = tensor(fileOf(source.rank), p.name, shape);
      int64_t k = 0, begin = layout.valueOffset,
              end = begin + layout.valueCount;
      forEachInFlatRange(layout, source.begin, source.end,
                         [&](int64_t i, int64_t) {
                           if (i >= begin && i < end)
                             local[i - begin] = piece[k];
                           ++k;
                         });
    }
    writeF32(p.value, local);
    const SafeTensorsFile &stateFile = fileOf(stateOwner(rank_, p));
    for (size_t s = 0; s < p.state.size(); ++s)
      writeF32(p.state[s],
               tensor(stateFile, p.name + suffixes[s], {layout.stateCount}));
    writeF32(p.grad, std::vector<float>(rp.buffers[p.grad].numElements()));
  }
}

} // namespace strata::rt
