//===- MpiValueShardTest.cpp - ZeRO-3 value shards on real ranks ----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Under mpirun: ranks that keep only flat ranges of their parameter boxes
// (ParamDesc::valueSharded) initialise and --init exactly those elements of
// the whole tensors; a per-rank checkpoint stores each element once, so that
// index.json alone reassembles the whole tensors, and resumes bit for bit;
// a ZeRO-3 data-parallel MLP trains bit-identically to ZeRO-1.
//
// Element positions are computed here from the ParamDesc fields directly,
// not through runtime/core/ParamLayout, so the two implementations check
// each other.
//
//===----------------------------------------------------------------------===//

#include "MpiTestSupport.h"
#include "TestPrograms.h"

#include "runtime/core/Trainer.h"
#include "runtime/io/SafeTensors.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <map>

using namespace strata::rt;
namespace fs = std::filesystem;

namespace {

/// Index in the whole tensor (row-major in its global shape) of the
/// element at flat position `flat` of a box, or -1 for padding.
int64_t tensorIndexInBox(const std::vector<int64_t> &box,
                         const std::vector<int64_t> &start,
                         const std::vector<int64_t> &global, int64_t flat) {
  std::vector<int64_t> coord(box.size());
  for (size_t d = box.size(); d-- > 0;) {
    coord[d] = flat % box[d];
    flat /= box[d];
  }
  int64_t g = 0;
  for (size_t d = 0; d < box.size(); ++d) {
    int64_t x = coord[d] + start[d];
    if (x >= global[d])
      return -1;
    g = g * global[d] + x;
  }
  return g;
}

/// The tensor element that value-buffer element `i` of `p` holds, or -1.
int64_t tensorIndex(const RankProgram &rank, const ParamDesc &p, int64_t i) {
  const std::vector<int64_t> &box = paramBoxShape(rank, p);
  std::vector<int64_t> global = p.globalShape.empty() ? box : p.globalShape;
  std::vector<int64_t> start =
      p.shardStart.empty() ? std::vector<int64_t>(box.size(), 0) : p.shardStart;
  return tensorIndexInBox(box, start, global,
                          (p.valueSharded ? p.stateOffset : 0) + i);
}

const ParamDesc &paramNamed(const RankProgram &rank, const std::string &name) {
  for (const ParamDesc &p : rank.params)
    if (p.name == name)
      return p;
  throw RuntimeError("no parameter " + name);
}

/// Expects every value `t` holds to be its tensor element of `whole`
/// (by parameter name) and padding to be zero, bit for bit.
void expectHoldsRangesOf(
    const Trainer &t, const std::map<std::string, std::vector<float>> &whole) {
  const RankProgram &rp = t.rankProgram();
  for (const ParamDesc &p : rp.params) {
    std::vector<float> v = t.readF32(p.value);
    const std::vector<float> &w = whole.at(p.name);
    int mismatches = 0;
    for (int64_t i = 0; i < int64_t(v.size()); ++i) {
      int64_t g = tensorIndex(rp, p, i);
      float want = g < 0 ? 0.0f : w[g];
      if (std::memcmp(&v[i], &want, 4) != 0 && ++mismatches <= 3)
        ADD_FAILURE() << "rank " << t.rank() << " " << p.name << "[" << i
                      << "] (tensor element " << g << ") is " << v[i]
                      << ", want " << want;
    }
  }
}

std::map<std::string, std::vector<float>> wholeValues(const Trainer &t) {
  std::map<std::string, std::vector<float>> out;
  for (const ParamDesc &p : t.rankProgram().params)
    out[p.name] = t.readF32(p.value);
  return out;
}

struct Reassembled {
  std::vector<int64_t> shape; ///< The checkpoint shape.
  std::vector<float> values;
  std::vector<int> timesStored;
};

std::vector<int64_t> jsonDims(const nlohmann::json &j) {
  return j.get<std::vector<int64_t>>();
}

/// Rebuilds every value tensor of a per-rank checkpoint from index.json
/// and the rank files, counting how often each element is stored.
std::map<std::string, Reassembled> reassemble(const fs::path &dir) {
  std::ifstream in(dir / "index.json");
  nlohmann::json index = nlohmann::json::parse(in);
  std::map<std::string, SafeTensorsFile> files;
  auto tensorIn = [&](const std::string &file, const std::string &name,
                      std::vector<int64_t> *shape) {
    auto it = files.find(file);
    if (it == files.end())
      it = files.emplace(file, SafeTensorsFile::open((dir / file).string()))
               .first;
    const SafeTensorInfo *info = it->second.find(name);
    if (!info)
      throw RuntimeError(file + " lacks " + name);
    *shape = info->shape;
    return it->second.readF32(*info);
  };
  std::map<std::string, Reassembled> out;
  for (auto &[name, t] : index.at("tensors").items()) {
    std::vector<int64_t> global = jsonDims(t.at("global_shape"));
    Reassembled &r = out[name];
    r.shape = jsonDims(t.at("checkpoint_shape"));
    r.values.assign(shapeElements(global), 0.0f);
    r.timesStored.assign(r.values.size(), 0);
    for (const nlohmann::json &piece : t.at("pieces")) {
      std::vector<int64_t> shape;
      std::vector<float> data =
          tensorIn(piece.at("file").get<std::string>(), name, &shape);
      if (piece.contains("offset")) {
        // A flat range of a box; padding elements are not stored.
        std::vector<int64_t> box = jsonDims(piece.at("box_shape"));
        std::vector<int64_t> start = jsonDims(piece.at("box_start"));
        int64_t offset = piece.at("offset"), count = piece.at("count");
        EXPECT_EQ(shape,
                  (std::vector<int64_t>{piece.at("stored").get<int64_t>()}))
            << name;
        size_t k = 0;
        for (int64_t f = offset; f < offset + count; ++f) {
          int64_t g = tensorIndexInBox(box, start, global, f);
          if (g < 0)
            continue;
          if (k < data.size())
            r.values[g] = data[k];
          ++k;
          ++r.timesStored[g];
        }
        EXPECT_EQ(k, data.size()) << name;
      } else {
        // A box, clipped to the tensor, in its own shape.
        std::vector<int64_t> start = jsonDims(piece.at("start"));
        EXPECT_EQ(shape, jsonDims(piece.at("shape"))) << name;
        for (int64_t f = 0; f < int64_t(data.size()); ++f) {
          int64_t g = tensorIndexInBox(shape, start, global, f);
          r.values[g] = data[f];
          ++r.timesStored[g];
        }
      }
    }
  }
  return out;
}

/// Checks on rank 0 that index.json reassembles `whole` exactly, every
/// element stored once.
void expectReassemblesTo(const fs::path &dir,
                         const std::map<std::string, std::vector<float>> &whole,
                         const Program &reference) {
  std::map<std::string, Reassembled> got;
  try {
    got = reassemble(dir);
  } catch (const std::exception &e) {
    ADD_FAILURE() << "reassembling " << dir << ": " << e.what();
    return;
  }
  EXPECT_EQ(got.size(), whole.size());
  for (const auto &[name, values] : whole) {
    auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << name << " is not in index.json";
      continue;
    }
    EXPECT_EQ(it->second.values, values) << name;
    EXPECT_EQ(it->second.timesStored, std::vector<int>(values.size(), 1))
        << name << ": each element must be stored exactly once";
    const ParamDesc &p = paramNamed(reference.ranks[0], name);
    std::vector<int64_t> want = p.checkpointShape.empty()
                                    ? reference.ranks[0].buffers[p.value].shape
                                    : p.checkpointShape;
    EXPECT_EQ(it->second.shape, want) << name;
  }
}

/// Runs checks on one rank; what they throw fails the test there instead of
/// leaving the other ranks waiting in the test's next collective.
template <typename Fn> void rankZeroChecks(Fn checks) {
  try {
    checks();
  } catch (const std::exception &e) {
    ADD_FAILURE() << e.what();
  }
}

/// Rank 0's checks of the checkpoint of
/// InitFileAndCheckpointHoldEachElementOnce (a function, so that a failed
/// ASSERT skips no collective).
void checkValueShardedCheckpoint(
    const fs::path &dir, const fs::path &ckpt, uint32_t W,
    const std::map<std::string, std::vector<float>> &whole,
    const Program &reference) {
  expectReassemblesTo(ckpt, whole, reference);
  if (::testing::Test::HasFailure())
    return;
  // The reassembled tensors are a weights file for the unsharded model.
  std::map<std::string, Reassembled> got = reassemble(ckpt);
  std::vector<SafeTensorToWrite> merged;
  for (auto &[name, tensor] : got)
    merged.push_back({name, "F32", tensor.shape, tensor.values.data(),
                      tensor.values.size() * 4});
  writeSafeTensors((dir / "merged.safetensors").string(), merged, {});
  Trainer one(reference, 0, createCpuDevice(), 5);
  one.loadInitialWeights((dir / "merged.safetensors").string());
  EXPECT_EQ(wholeValues(one), whole);

  std::ifstream in(ckpt / "index.json");
  nlohmann::json index = nlohmann::json::parse(in);
  const nlohmann::json &dense = index["tensors"]["dense.weight"];
  ASSERT_EQ(dense["pieces"].size(), W);
  EXPECT_EQ(jsonDims(dense["pieces"][0]["box_shape"]),
            (std::vector<int64_t>{6, 3}));
  // tiny.bias lives on rank 0 alone; the other ranks store nothing.
  EXPECT_EQ(index["tensors"]["tiny.bias"]["pieces"].size(), 1u);
  // The replicated, unsharded parameter is a box piece saved by rank 0.
  const nlohmann::json &plain = index["tensors"]["plain.weight"]["pieces"];
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0]["file"].get<std::string>(), "rank-00000.safetensors");
  EXPECT_FALSE(plain[0].contains("offset"));
}

TEST(MpiValueShardTest, InitHoldsTheRangesOfTheUnshardedInit) {
  auto comms = mpitest::mpiComms();
  const uint32_t W = comms->worldSize(), r = comms->worldRank();
  Program program = testprograms::buildValueShardedProgram(W);
  Trainer sharded(program, r, createCpuDevice(), 5, comms);
  sharded.initParameters();
  Trainer whole(testprograms::buildValueShardedReference(W), 0,
                createCpuDevice(), 5);
  whole.initParameters();
  expectHoldsRangesOf(sharded, wholeValues(whole));
  // Grads and optimizer state start at zero.
  for (const ParamDesc &p : sharded.rankProgram().params)
    for (uint32_t s : p.state)
      EXPECT_EQ(
          sharded.readF32(s),
          std::vector<float>(sharded.rankProgram().buffers[s].numElements()));
}

TEST(MpiValueShardTest, InitFileAndCheckpointHoldEachElementOnce) {
  auto comms = mpitest::mpiComms();
  const uint32_t W = comms->worldSize(), r = comms->worldRank();
  Program program = testprograms::buildValueShardedProgram(W);
  Program reference = testprograms::buildValueShardedReference(W);
  fs::path dir = mpitest::sharedTempDir("zero3-init");
  fs::path file = dir / "init.safetensors";

  // Whole tensors with distinct values, in checkpoint shapes.
  std::map<std::string, std::vector<float>> whole;
  std::vector<SafeTensorToWrite> tensors;
  float next = 0.5f;
  for (const ParamDesc &p : reference.ranks[0].params) {
    const BufferDesc &b = reference.ranks[0].buffers[p.value];
    std::vector<float> &v = whole[p.name];
    for (int64_t i = 0; i < b.numElements(); ++i)
      v.push_back(next++);
    tensors.push_back({p.name, "F32",
                       p.checkpointShape.empty() ? b.shape : p.checkpointShape,
                       v.data(), v.size() * 4});
  }
  if (r == 0) {
    fs::create_directories(dir);
    writeSafeTensors(file.string(), tensors, {});
  }
  comms->world().barrier();

  Trainer t(program, r, createCpuDevice(), 5, comms);
  t.loadInitialWeights(file.string());
  expectHoldsRangesOf(t, whole);

  fs::path ckpt = dir / "ckpt";
  t.saveCheckpoint(ckpt.string());
  if (r == 0)
    rankZeroChecks(
        [&] { checkValueShardedCheckpoint(dir, ckpt, W, whole, reference); });

  Trainer back(program, r, createCpuDevice(), 11, comms);
  back.loadCheckpoint(ckpt.string());
  for (const ParamDesc &p : back.rankProgram().params)
    EXPECT_EQ(back.readF32(p.value), t.readF32(p.value)) << p.name;
  comms->world().barrier();
  if (r == 0)
    fs::remove_all(dir);
}

testprograms::MlpConfig replicaConfig() {
  testprograms::MlpConfig c;
  c.microBatch = 2;
  c.numMicrobatches = 2;
  return c;
}

std::vector<StepStats> train(Trainer &t, const TokenData &data, int steps) {
  t.setDataOrder(DataOrder::Sequential);
  std::vector<StepStats> out;
  for (int i = 0; i < steps; ++i)
    out.push_back(t.runStep(data));
  return out;
}

void expectSameSteps(const std::vector<StepStats> &a,
                     const std::vector<StepStats> &b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a[i].loss, &b[i].loss, 8), 0)
        << i << ": " << a[i].loss << " vs " << b[i].loss;
    ASSERT_TRUE(a[i].gradNorm && b[i].gradNorm);
    EXPECT_EQ(std::memcmp(&*a[i].gradNorm, &*b[i].gradNorm, 8), 0) << i;
  }
}

TEST(MpiValueShardTest, ZeroThreeTrainsLikeZeroOneBitForBit) {
  auto comms = mpitest::mpiComms();
  const uint32_t W = comms->worldSize(), r = comms->worldRank();
  Program zero1 = testprograms::buildDataParallelMlp(
      replicaConfig(), {W, true, /*zero=*/true, /*zero3=*/false});
  Program zero3 = testprograms::buildDataParallelMlp(
      replicaConfig(), {W, true, /*zero=*/true, /*zero3=*/true});
  TokenData data = TokenData::synthetic(3, 64, 16);
  Trainer a(zero1, r, createCpuDevice(), 3, comms);
  Trainer b(zero3, r, createCpuDevice(), 3, comms);
  a.initParameters();
  b.initParameters();
  expectSameSteps(train(a, data, 4), train(b, data, 4));
  // The ZeRO-3 rank keeps its slice of what the ZeRO-1 rank holds whole.
  for (size_t i = 0; i < b.rankProgram().params.size(); ++i) {
    const ParamDesc &p = b.rankProgram().params[i];
    std::vector<float> whole = a.readF32(a.rankProgram().params[i].value);
    std::vector<float> slice = b.readF32(p.value);
    ASSERT_TRUE(p.valueSharded);
    EXPECT_EQ(slice,
              std::vector<float>(whole.begin() + p.stateOffset,
                                 whole.begin() + p.stateOffset + slice.size()))
        << p.name;
  }
}

TEST(MpiValueShardTest, ZeroThreeCheckpointResumesBitForBit) {
  auto comms = mpitest::mpiComms();
  const uint32_t W = comms->worldSize(), r = comms->worldRank();
  Program zero3 = testprograms::buildDataParallelMlp(replicaConfig(),
                                                     {W, true, true, true});
  Program zero1 = testprograms::buildDataParallelMlp(replicaConfig(),
                                                     {W, true, true, false});
  TokenData data = TokenData::synthetic(7, 64, 16);
  fs::path dir = mpitest::sharedTempDir("zero3-ckpt");

  Trainer straight(zero3, r, createCpuDevice(), 7, comms);
  straight.initParameters();
  std::vector<StepStats> all = train(straight, data, 4);
  // ZeRO-1 holds whole parameters with the same values (see above).
  Trainer whole(zero1, r, createCpuDevice(), 7, comms);
  whole.initParameters();
  train(whole, data, 2);

  {
    Trainer first(zero3, r, createCpuDevice(), 7, comms);
    first.initParameters();
    train(first, data, 2);
    first.saveCheckpoint(dir.string());
  }
  if (r == 0)
    rankZeroChecks([&] {
      std::map<std::string, std::vector<float>> values = wholeValues(whole);
      expectReassemblesTo(dir, values,
                          testprograms::buildMlpProgram(replicaConfig()));
      // Every rank stores its own slice of every value.
      SafeTensorsFile last = SafeTensorsFile::open(
          (dir / ("rank-0000" + std::to_string(W - 1) + ".safetensors"))
              .string());
      const SafeTensorInfo *wte = last.find("wte.weight");
      EXPECT_NE(wte, nullptr);
      if (wte)
        EXPECT_EQ(wte->shape, (std::vector<int64_t>{64 * 32 / W}));
    });
  comms->world().barrier();

  Trainer resumed(zero3, r, createCpuDevice(), 99, comms);
  resumed.initParameters();
  resumed.loadCheckpoint(dir.string());
  EXPECT_EQ(resumed.step(), 2);
  std::vector<StepStats> rest = train(resumed, data, 2);
  expectSameSteps(rest, {all[2], all[3]});
  for (const ParamDesc &p : resumed.rankProgram().params)
    EXPECT_EQ(resumed.readF32(p.value), straight.readF32(p.value)) << p.name;

  // The ZeRO-1 layout of the same model resumes it by resharding values
  // and optimizer state: the same steps up to reassociation.
  Trainer resharded(zero1, r, createCpuDevice(), 7, comms);
  resharded.initParameters();
  resharded.loadCheckpoint(dir.string());
  EXPECT_EQ(resharded.step(), 2);
  std::vector<StepStats> again = train(resharded, data, 2);
  for (int i = 0; i < 2; ++i)
    EXPECT_NEAR(again[i].loss, all[2 + i].loss, 1e-5 * all[2 + i].loss) << i;
  comms->world().barrier();
  if (r == 0)
    fs::remove_all(dir);
}

} // namespace
