//===- MpiTrainingTest.cpp - Multi-rank training, checkpoints and init ----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Under mpirun with N ranks: a data-parallel MLP over N replicas must match
// the one-rank program on the same global batch step for step (plain
// all-reduce, all-reduce overlapped with the last backward, and ZeRO-1); a
// per-rank checkpoint resumes bit for bit; --init fills padded and viewed
// shards from whole tensors.
//
//===----------------------------------------------------------------------===//

#include "MpiTestSupport.h"
#include "TestPrograms.h"

#include "runtime/core/Trainer.h"
#include "runtime/format/ProgramBuilder.h"
#include "runtime/io/SafeTensors.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

using namespace strata::rt;
namespace fs = std::filesystem;

namespace {

fs::path sharedDir(const std::string &name) {
  return mpitest::sharedTempDir(name);
}

testprograms::MlpConfig replicaConfig() {
  testprograms::MlpConfig c;
  c.microBatch = 2;
  c.numMicrobatches = 2;
  return c;
}

std::vector<StepStats> train(Trainer &t, const TokenData &data, int steps) {
  // Consecutive windows: the tolerances below were set for them.
  t.setDataOrder(DataOrder::Sequential);
  std::vector<StepStats> out;
  for (int i = 0; i < steps; ++i)
    out.push_back(t.runStep(data));
  return out;
}

void expectMatchesOneRank(const testprograms::DataParallelConfig &dp) {
  auto comms = mpitest::mpiComms();
  const uint32_t W = comms->worldSize(), r = comms->worldRank();
  testprograms::MlpConfig c = replicaConfig();
  testprograms::DataParallelConfig cfg = dp;
  cfg.replicas = W;
  Program program = testprograms::buildDataParallelMlp(c, cfg);
  // The reference: one rank, the same global batch in the same row order.
  testprograms::MlpConfig single = c;
  single.numMicrobatches = c.numMicrobatches * W;
  Program reference = testprograms::buildMlpProgram(single);
  TokenData data = TokenData::synthetic(1234, c.vocab, c.seqLen);

  Trainer one(reference, 0, createCpuDevice(), 1234);
  one.initParameters();
  Trainer many(program, r, createCpuDevice(), 1234, comms);
  many.initParameters();
  std::vector<StepStats> a = train(one, data, 6), b = train(many, data, 6);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i].loss, a[i].loss, 1e-5 * std::abs(a[i].loss)) << i;
    ASSERT_TRUE(b[i].gradNorm && a[i].gradNorm);
    EXPECT_NEAR(*b[i].gradNorm, *a[i].gradNorm, 1e-4 * *a[i].gradNorm) << i;
    EXPECT_EQ(b[i].tokens, a[i].tokens);
  }
  // And the parameters agree at the end. AdamW divides by the root of tiny
  // second moments, which magnifies reassociation differences to ~1e-5 in
  // 6 steps; a wrong gradient scale would be off by ~lr = 3e-2.
  for (size_t p = 0; p < many.rankProgram().params.size(); ++p) {
    std::vector<float> x = one.readF32(one.rankProgram().params[p].value);
    std::vector<float> y = many.readF32(many.rankProgram().params[p].value);
    ASSERT_EQ(x.size(), y.size());
    double maxDiff = 0;
    for (size_t i = 0; i < x.size(); ++i)
      maxDiff = std::max(maxDiff, double(std::abs(x[i] - y[i])));
    EXPECT_LT(maxDiff, 2e-4) << many.rankProgram().params[p].name;
  }
}

TEST(MpiTrainingTest, DataParallelMatchesOneRankWithBlockingAllReduce) {
  expectMatchesOneRank({2, /*overlap=*/false, /*zero=*/false});
}

TEST(MpiTrainingTest, DataParallelMatchesOneRankWithOverlappedAllReduce) {
  expectMatchesOneRank({2, /*overlap=*/true, /*zero=*/false});
}

TEST(MpiTrainingTest, ZeroShardedOptimizerMatchesOneRank) {
  expectMatchesOneRank({2, /*overlap=*/true, /*zero=*/true});
}

TEST(MpiTrainingTest, PerRankCheckpointResumesBitForBit) {
  auto comms = mpitest::mpiComms();
  const uint32_t W = comms->worldSize(), r = comms->worldRank();
  testprograms::DataParallelConfig dp{W, true, true};
  Program program = testprograms::buildDataParallelMlp(replicaConfig(), dp);
  TokenData data = TokenData::synthetic(7, 64, 16);
  fs::path dir = sharedDir("ckpt");

  Trainer straight(program, r, createCpuDevice(), 7, comms);
  straight.initParameters();
  std::vector<StepStats> all = train(straight, data, 4);

  {
    Trainer first(program, r, createCpuDevice(), 7, comms);
    first.initParameters();
    train(first, data, 2);
    first.saveCheckpoint(dir.string());
    // Saving again replaces the checkpoint atomically.
    first.saveCheckpoint(dir.string());
  }
  if (r == 0) {
    EXPECT_TRUE(fs::exists(dir / "index.json"));
    for (uint32_t q = 0; q < W; ++q) {
      char name[64];
      std::snprintf(name, sizeof name, "rank-%05u.safetensors", q);
      EXPECT_TRUE(fs::exists(dir / name)) << name;
    }
    // Replicated values are saved once, by rank 0; ZeRO state by each rank.
    SafeTensorsFile last = SafeTensorsFile::open(
        (dir / ("rank-0000" + std::to_string(W - 1) + ".safetensors"))
            .string());
    EXPECT_EQ(last.find("wte.weight"), nullptr);
    ASSERT_NE(last.find("wte.weight.exp_avg"), nullptr);
    EXPECT_EQ(last.find("wte.weight.exp_avg")->shape,
              (std::vector<int64_t>{64 * 32 / W}));
  }
  comms->world().barrier();

  Trainer resumed(program, r, createCpuDevice(), 99, comms);
  resumed.initParameters();
  resumed.loadCheckpoint(dir.string());
  EXPECT_EQ(resumed.step(), 2);
  EXPECT_EQ(resumed.seed(), 7u);
  std::vector<StepStats> rest = train(resumed, data, 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(std::memcmp(&rest[i].loss, &all[2 + i].loss, 8), 0)
        << rest[i].loss << " vs " << all[2 + i].loss;
    EXPECT_EQ(std::memcmp(&*rest[i].gradNorm, &*all[2 + i].gradNorm, 8), 0);
  }
  for (const ParamDesc &p : resumed.rankProgram().params)
    EXPECT_EQ(resumed.readF32(p.value), straight.readF32(p.value)) << p.name;

  // Another plan (here: no ZeRO) resumes it by resharding, optimizer
  // state included: the same steps up to reassociation.
  Program other =
      testprograms::buildDataParallelMlp(replicaConfig(), {W, true, false});
  Trainer resharded(other, r, createCpuDevice(), 99, comms);
  resharded.initParameters();
  resharded.loadCheckpoint(dir.string());
  EXPECT_EQ(resharded.step(), 2);
  EXPECT_EQ(resharded.seed(), 7u);
  std::vector<StepStats> again = train(resharded, data, 2);
  for (int i = 0; i < 2; ++i)
    EXPECT_NEAR(again[i].loss, all[2 + i].loss, 1e-5 * all[2 + i].loss) << i;
  comms->world().barrier();
  if (r == 0)
    fs::remove_all(dir);
}

/// A program whose "emb.weight" [V, 2] is split by rows over the ranks, 3
/// rows each, the last box padded past V; "attn.weight" is replicated and
/// viewed as [2, 3, 2] of a [2, 6] checkpoint tensor.
Program buildShardedProgram(uint32_t world, int64_t vocab) {
  ModelMeta meta;
  meta.family = "sharded";
  meta.vocab = vocab;
  meta.seqLen = 1;
  meta.microBatch = 1;
  meta.numMicrobatches = 1;
  meta.globalBatch = world;
  meta.worldSize = world;
  meta.planDescription = "row-sharded embedding test";
  TrainConfig train;
  MultiRankProgramBuilder mb(meta, train);
  for (uint32_t r = 0; r < world; ++r) {
    ProgramBuilder &b = mb.rank(r);
    b.setLoss(b.addBuffer("loss", {1}));
    b.emit(SequenceKind::Microbatch, Opcode::Fill, {b.loss()}, {}, {0.0});
    uint32_t emb =
        b.addParam("emb.weight", {3, 2}, InitKind::Normal, 1.0, false);
    b.rankProgram().params[emb].globalShape = {vocab, 2};
    b.rankProgram().params[emb].shardStart = {3 * int64_t(r), 0};
    uint32_t attn =
        b.addParam("attn.weight", {2, 3, 2}, InitKind::Normal, 1.0, false);
    b.rankProgram().params[attn].checkpointShape = {2, 6};
  }
  return mb.finish();
}

TEST(MpiTrainingTest, InitFillsPaddedAndViewedShards) {
  auto comms = mpitest::mpiComms();
  const uint32_t W = comms->worldSize(), r = comms->worldRank();
  const int64_t V = 3 * W - 2; // The last box has two padding rows.
  Program program = buildShardedProgram(W, V);
  fs::path dir = sharedDir("init");
  fs::path file = dir / "init.safetensors";
  std::vector<float> emb(V * 2), attn(12);
  for (size_t i = 0; i < emb.size(); ++i)
    emb[i] = float(i) + 0.5f;
  for (size_t i = 0; i < attn.size(); ++i)
    attn[i] = -float(i);
  if (r == 0) {
    fs::create_directories(dir);
    writeSafeTensors(file.string(),
                     {{"emb.weight", "F32", {V, 2}, emb.data(), emb.size() * 4},
                      {"attn.weight", "F32", {2, 6}, attn.data(), 48}},
                     {});
  }
  comms->world().barrier();

  Trainer t(program, r, createCpuDevice(), 5, comms);
  // Random init leaves the padding zero.
  t.initParameters();
  std::vector<float> local = t.readF32(t.rankProgram().params[0].value);
  for (int64_t row = 0; row < 3; ++row)
    for (int64_t c = 0; c < 2; ++c) {
      bool padding = 3 * int64_t(r) + row >= V;
      if (padding)
        EXPECT_EQ(local[row * 2 + c], 0.0f);
      else
        EXPECT_NE(local[row * 2 + c], 0.0f);
    }

  t.loadInitialWeights(file.string());
  local = t.readF32(t.rankProgram().params[0].value);
  for (int64_t row = 0; row < 3; ++row)
    for (int64_t c = 0; c < 2; ++c) {
      int64_t g = 3 * int64_t(r) + row;
      EXPECT_EQ(local[row * 2 + c], g < V ? emb[g * 2 + c] : 0.0f)
          << "rank " << r << " row " << row;
    }
  EXPECT_EQ(t.readF32(t.rankProgram().params[1].value), attn);

  // Saving writes only in-range rows, and the viewed tensor once.
  fs::path ckpt = dir / "ckpt";
  t.saveCheckpoint(ckpt.string());
  if (r == 0) {
    SafeTensorsFile lastFile = SafeTensorsFile::open(
        (ckpt / ("rank-0000" + std::to_string(W - 1) + ".safetensors"))
            .string());
    ASSERT_NE(lastFile.find("emb.weight"), nullptr);
    EXPECT_EQ(lastFile.find("emb.weight")->shape,
              (std::vector<int64_t>{V - 3 * (W - 1), 2}));
    EXPECT_EQ(lastFile.find("attn.weight"), nullptr);
    SafeTensorsFile firstFile =
        SafeTensorsFile::open((ckpt / "rank-00000.safetensors").string());
    ASSERT_NE(firstFile.find("attn.weight"), nullptr);
  }
  Trainer back(program, r, createCpuDevice(), 5, comms);
  back.loadCheckpoint(ckpt.string());
  EXPECT_EQ(back.readF32(back.rankProgram().params[0].value), local);
  comms->world().barrier();
  if (r == 0)
    fs::remove_all(dir);
}

} // namespace
