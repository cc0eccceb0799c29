//===- ExecutorTest.cpp - Training a hand-built MLP program ---------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "TestPrograms.h"

#include "runtime/core/Trainer.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace strata::rt;
namespace fs = std::filesystem;

namespace {

fs::path scratchDir(const std::string &name) {
  fs::path dir = fs::temp_directory_path() /
                 ("strata-exec-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

Trainer makeTrainer(const Program &program, uint64_t seed = 1234) {
  Trainer t(program, 0, createCpuDevice(), seed);
  t.initParameters();
  return t;
}

bool sameBits(double a, double b) { return std::memcmp(&a, &b, 8) == 0; }

TEST(ExecutorTest, MlpLossFallsOnSyntheticStream) {
  Program program = testprograms::buildMlpProgram();
  Trainer trainer = makeTrainer(program);
  TokenData data =
      TokenData::synthetic(1234, program.meta.vocab, program.meta.seqLen);
  std::vector<double> losses;
  for (int i = 0; i < 30; ++i) {
    StepStats s = trainer.runStep(data);
    EXPECT_EQ(s.step, i);
    ASSERT_TRUE(std::isfinite(s.loss));
    ASSERT_TRUE(s.gradNorm.has_value());
    losses.push_back(s.loss);
  }
  // Starts near ln(vocab) and learns the Markov chain's structure.
  EXPECT_NEAR(losses.front(), std::log(64.0), 0.1);
  double tail = (losses[27] + losses[28] + losses[29]) / 3;
  EXPECT_LT(tail, losses.front() - 0.8) << "first " << losses.front();
}

TEST(ExecutorTest, SgdAlsoTrains) {
  testprograms::MlpConfig config;
  config.optimizer = OptimizerKind::Sgd;
  config.lr = 1.0;
  config.gradClip = 0.0;
  config.initStd = 0.3;
  Program program = testprograms::buildMlpProgram(config);
  Trainer trainer = makeTrainer(program);
  TokenData data = TokenData::synthetic(7, 64, 16);
  double first = trainer.runStep(data).loss, last = first;
  for (int i = 1; i < 30; ++i)
    last = trainer.runStep(data).loss;
  EXPECT_LT(last, first - 0.5);
}

TEST(ExecutorTest, ResumeContinuesTheExactTrajectory) {
  Program program = testprograms::buildMlpProgram();
  TokenData data = TokenData::synthetic(99, 64, 16);
  fs::path dir = scratchDir("resume");
  std::string ckpt = (dir / "ckpt").string();

  Trainer straight = makeTrainer(program, 99);
  std::vector<StepStats> reference;
  for (int i = 0; i < 30; ++i)
    reference.push_back(straight.runStep(data));

  Trainer first = makeTrainer(program, 99);
  for (int i = 0; i < 10; ++i)
    first.runStep(data);
  first.saveCheckpoint(ckpt);
  // Saving again over an existing checkpoint replaces it.
  first.saveCheckpoint(ckpt);

  Trainer resumed(program, 0, createCpuDevice(), /*seed=*/0);
  resumed.initParameters();
  resumed.loadCheckpoint(ckpt);
  EXPECT_EQ(resumed.step(), 10);
  EXPECT_EQ(resumed.seed(), 99u);
  for (int i = 10; i < 30; ++i) {
    StepStats s = resumed.runStep(data);
    EXPECT_EQ(s.step, i);
    EXPECT_TRUE(sameBits(s.loss, reference[i].loss))
        << "step " << i << ": " << s.loss << " vs " << reference[i].loss;
    EXPECT_TRUE(sameBits(*s.gradNorm, *reference[i].gradNorm));
  }
  for (const ParamDesc &p : program.ranks[0].params)
    EXPECT_EQ(resumed.readF32(p.value), straight.readF32(p.value)) << p.name;
  fs::remove_all(dir);
}

/// The whole hand-written backward (and the executor's binding of it) is
/// checked against central differences of the program's own loss.
TEST(ExecutorTest, WholeProgramGradientMatchesFiniteDifferences) {
  testprograms::MlpConfig config;
  config.numMicrobatches = 1;
  config.initStd = 0.5;
  Program program = testprograms::buildMlpProgram(config);
  const RankProgram &rp = program.ranks[0];
  auto device = createCpuDevice();
  device->prepare(rp);
  Trainer init(program, 0, createCpuDevice(), 3);
  init.initParameters();
  for (const ParamDesc &p : rp.params) {
    std::vector<float> v = init.readF32(p.value);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] += 0.01f * float(i % 7); // Non-zero biases too.
    device->upload(rp.buffers[p.value].offset, v.data(), v.size() * 4);
  }
  TokenData data = TokenData::synthetic(3, config.vocab, config.seqLen);
  std::vector<int32_t> tokens(config.microBatch * config.seqLen),
      targets(tokens.size());
  data.fillSamples(0, config.microBatch, DataOrder::Sequential, 0,
                   tokens.data(), targets.data());
  device->upload(rp.buffers[rp.tokens].offset, tokens.data(),
                 tokens.size() * 4);
  device->upload(rp.buffers[rp.targets].offset, targets.data(),
                 targets.size() * 4);
  auto loss = [&] {
    device->run(SequenceKind::StepBegin, {});
    device->run(SequenceKind::Microbatch, {});
    float l;
    device->download(rp.buffers[rp.loss].offset, &l, 4);
    return double(l);
  };
  loss();
  for (const ParamDesc &p : rp.params) {
    const BufferDesc &value = rp.buffers[p.value];
    std::vector<float> grad(value.numElements()), v(value.numElements());
    device->download(rp.buffers[p.grad].offset, grad.data(), grad.size() * 4);
    device->download(value.offset, v.data(), v.size() * 4);
    // The largest gradient entries, where float noise matters least.
    std::vector<size_t> order(grad.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 3, order.end(),
                      [&](size_t a, size_t b) {
                        return std::fabs(grad[a]) > std::fabs(grad[b]);
                      });
    for (int j = 0; j < 3; ++j) {
      size_t i = order[j];
      const float h = 1e-2f;
      float keep = v[i];
      auto at = [&](float x) {
        device->upload(value.offset + i * 4, &x, 4);
        return loss();
      };
      double numeric = (at(keep + h) - at(keep - h)) / (2 * h);
      at(keep);
      EXPECT_NEAR(grad[i], numeric, 0.02 * std::fabs(numeric) + 2e-4)
          << p.name << "[" << i << "]";
    }
  }
}

TEST(ExecutorTest, InitIsDeterministicAndFollowsTheSpec) {
  Program program = testprograms::buildMlpProgram();
  Trainer a = makeTrainer(program, 5), b = makeTrainer(program, 5),
          c = makeTrainer(program, 6);
  const RankProgram &rp = program.ranks[0];
  uint32_t wte = rp.params[0].value, bias = rp.params[2].value;
  EXPECT_EQ(a.readF32(wte), b.readF32(wte));
  EXPECT_NE(a.readF32(wte), c.readF32(wte));
  for (float v : a.readF32(bias))
    EXPECT_EQ(v, 0.0f);
  std::vector<float> w = a.readF32(wte);
  double sum = 0, sq = 0;
  for (float v : w) {
    sum += v;
    sq += double(v) * v;
  }
  double mean = sum / w.size(), stddev = std::sqrt(sq / w.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(stddev, 0.02, 0.002);
}

TEST(ExecutorTest, CheckpointErrorsNameTheProblem) {
  Program program = testprograms::buildMlpProgram();
  fs::path dir = scratchDir("ckerr");
  Trainer t = makeTrainer(program);
  EXPECT_THROW(t.loadCheckpoint((dir / "missing").string()), RuntimeError);

  // A checkpoint of a different model: names differ.
  testprograms::MlpConfig other;
  other.hidden = 16;
  Trainer small = makeTrainer(testprograms::buildMlpProgram(other));
  std::string ckpt = (dir / "small").string();
  small.saveCheckpoint(ckpt);
  try {
    t.loadCheckpoint(ckpt);
    FAIL() << "shape mismatch accepted";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("wte.weight"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("[64, 16]"), std::string::npos)
        << e.what();
  }
  // --save never replaces something that is not a checkpoint.
  fs::path plain = dir / "notes";
  fs::create_directories(plain);
  std::ofstream(plain / "keep.txt") << "precious";
  EXPECT_THROW(t.saveCheckpoint(plain.string()), RuntimeError);
  EXPECT_TRUE(fs::exists(plain / "keep.txt"));
  fs::remove_all(dir);
}

} // namespace
