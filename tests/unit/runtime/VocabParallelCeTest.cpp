//===- VocabParallelCeTest.cpp - Sharded cross-entropy vs the whole -------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Splits a logits matrix by vocabulary columns the way tensor parallelism
// does (the last shard padded), runs ce_vp_max / ce_vp_sumexp / ce_vp_loss /
// ce_vp_bwd through the CPU kernel table with the all-reduces done by hand,
// and compares with cross_entropy_fwd/bwd on the whole matrix.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuDevice.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/format/OpSchema.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace strata::rt;

namespace {

/// Runs one instruction through the CPU kernel table, as the executor does,
/// so the test also pins the operand and attribute order.
void runKernel(Opcode opcode, std::vector<void *> operands,
               std::vector<int64_t> elements, std::vector<int64_t> ints,
               std::vector<double> floats = {}) {
  Instruction inst{opcode, {}, std::move(ints), std::move(floats)};
  cpu::BoundInstruction b;
  b.inst = &inst;
  b.operands = std::move(operands);
  b.elements = std::move(elements);
  cpu::KernelFn fn = cpu::lookupCpuKernel(opcode);
  ASSERT_NE(fn, nullptr) << getOpSchema(opcode).name;
  fn(b, ExecContext{});
}

struct Shard {
  int64_t vocabStart, valid, n;
  std::vector<float> logits; ///< [rows, n]; padding columns hold garbage.
};

/// Column shards of [rows, vocab] over `parts` ranks, each n = ceil(vocab /
/// parts) wide, as a vocabulary padded to a multiple of `parts`. Padding
/// holds large values so a kernel that reads it gives a wrong answer.
std::vector<Shard> shardColumns(const std::vector<float> &logits, int64_t rows,
                                int64_t vocab, int64_t parts) {
  int64_t n = (vocab + parts - 1) / parts;
  std::vector<Shard> shards;
  for (int64_t p = 0; p < parts; ++p) {
    Shard s;
    s.vocabStart = p * n;
    s.valid = std::max<int64_t>(0, std::min(n, vocab - s.vocabStart));
    s.n = n;
    s.logits.assign(rows * n, 50.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < s.valid; ++c)
        s.logits[r * n + c] = logits[r * vocab + s.vocabStart + c];
    shards.push_back(std::move(s));
  }
  return shards;
}

void checkSharded(int64_t rows, int64_t vocab, int64_t parts, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> logits(rows * vocab);
  for (float &x : logits)
    x = dist(gen);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab) - 1);
  std::vector<int32_t> targets(rows);
  for (int32_t &t : targets)
    t = pick(gen);
  // Targets on shard boundaries and in the last column.
  targets[0] = 0;
  targets[1] = int32_t(vocab) - 1;
  targets[2] = int32_t((vocab + parts - 1) / parts);

  std::vector<float> wholeLse(rows);
  double wholeLoss = cpu::crossEntropyFwd(logits.data(), targets.data(), rows,
                                          vocab, wholeLse.data());
  const float scale = 0.37f;
  std::vector<float> wholeGrad(rows * vocab);
  cpu::crossEntropyBwd(logits.data(), targets.data(), wholeLse.data(),
                       wholeGrad.data(), rows, vocab, scale);

  std::vector<Shard> shards = shardColumns(logits, rows, vocab, parts);
  int64_t n = shards[0].n;
  ASSERT_LT(shards.back().valid, n) << "the test wants a padded last shard";

  // ce_vp_max, then all_reduce(max).
  std::vector<float> globalMax(rows, -INFINITY);
  for (Shard &s : shards) {
    std::vector<float> rowmax(rows, NAN);
    runKernel(Opcode::CeVpMax, {s.logits.data(), rowmax.data()},
              {rows * n, rows}, {n, s.valid});
    for (int64_t r = 0; r < rows; ++r)
      globalMax[r] = std::max(globalMax[r], rowmax[r]);
  }
  // ce_vp_sumexp, then all_reduce(sum).
  std::vector<float> stats(2 * rows, 0.0f);
  for (Shard &s : shards) {
    std::vector<float> local(2 * rows, NAN);
    runKernel(Opcode::CeVpSumExp,
              {s.logits.data(), targets.data(), globalMax.data(), local.data()},
              {rows * n, rows, rows, 2 * rows}, {n, s.vocabStart, s.valid});
    for (int64_t i = 0; i < 2 * rows; ++i)
      stats[i] += local[i];
  }
  float loss = NAN;
  std::vector<float> lse(rows, NAN);
  runKernel(Opcode::CeVpLoss,
            {globalMax.data(), stats.data(), &loss, lse.data()},
            {rows, 2 * rows, 1, rows}, {rows});

  // Against the whole-matrix kernel and a double reference.
  double refLoss = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, sum = 0.0;
    for (int64_t c = 0; c < vocab; ++c)
      mx = std::max(mx, double(logits[r * vocab + c]));
    for (int64_t c = 0; c < vocab; ++c)
      sum += std::exp(double(logits[r * vocab + c]) - mx);
    double refLse = mx + std::log(sum);
    EXPECT_NEAR(lse[r], wholeLse[r], 1e-6 * (1 + std::fabs(wholeLse[r])))
        << "row " << r;
    EXPECT_NEAR(lse[r], refLse, 1e-6 * (1 + std::fabs(refLse))) << "row " << r;
    refLoss += refLse - logits[r * vocab + targets[r]];
  }
  refLoss /= double(rows);
  EXPECT_NEAR(loss, wholeLoss, 1e-6 * std::fabs(wholeLoss));
  EXPECT_NEAR(loss, refLoss, 1e-6 * std::fabs(refLoss));

  // ce_vp_bwd per shard equals the shard's columns of cross_entropy_bwd.
  for (const Shard &s : shards) {
    std::vector<float> grad(rows * n, NAN);
    runKernel(Opcode::CeVpBwd,
              {const_cast<float *>(s.logits.data()), targets.data(), lse.data(),
               grad.data()},
              {rows * n, rows, rows, rows * n}, {n, s.vocabStart, s.valid},
              {double(scale)});
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < s.valid; ++c) {
        float want = wholeGrad[r * vocab + s.vocabStart + c];
        ASSERT_NEAR(grad[r * n + c], want, 1e-6 * (1 + std::fabs(want)))
            << "row " << r << " global column " << s.vocabStart + c;
      }
      for (int64_t c = s.valid; c < n; ++c)
        ASSERT_EQ(grad[r * n + c], 0.0f) << "padding row " << r << " col " << c;
    }
  }
}

TEST(VocabParallelCeTest, TwoShardsMatchWholeMatrix) {
  checkSharded(/*rows=*/9, /*vocab=*/77, /*parts=*/2, 1);
}

TEST(VocabParallelCeTest, ThreeShardsMatchWholeMatrix) {
  checkSharded(/*rows=*/6, /*vocab=*/100, /*parts=*/3, 2);
}

TEST(VocabParallelCeTest, WideRowsUseTheVectorPath) {
  checkSharded(/*rows=*/4, /*vocab=*/1031, /*parts=*/3, 3);
}

TEST(VocabParallelCeTest, AllPaddingShardIsNeutral) {
  // vocab 7 over 4 ranks of width 2: the last shard holds 1 real column;
  // over 5 ranks the last holds none.
  checkSharded(/*rows=*/3, /*vocab=*/7, /*parts=*/4, 4);
  checkSharded(/*rows=*/3, /*vocab=*/7, /*parts=*/5, 5);
  const int64_t rows = 2, n = 3;
  std::vector<float> logits(rows * n, 1.0f), rowmax(rows);
  runKernel(Opcode::CeVpMax, {logits.data(), rowmax.data()}, {rows * n, rows},
            {n, 0});
  EXPECT_EQ(rowmax[0], -std::numeric_limits<float>::max());
  std::vector<int32_t> targets = {0, 1};
  std::vector<float> stats(2 * rows, NAN);
  std::vector<float> globalMax = {0.5f, 0.5f};
  runKernel(Opcode::CeVpSumExp,
            {logits.data(), targets.data(), globalMax.data(), stats.data()},
            {rows * n, rows, rows, 2 * rows}, {n, 0, 0});
  for (float v : stats)
    EXPECT_EQ(v, 0.0f);
}

/// Buffers laid out back to back in one arena.
std::vector<BufferDesc> layout(std::vector<std::pair<DType, int64_t>> specs) {
  std::vector<BufferDesc> out;
  uint64_t offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    BufferDesc d;
    d.name = "b" + std::to_string(i);
    d.offset = offset;
    d.dtype = specs[i].first;
    d.shape = {specs[i].second};
    offset += d.byteSize();
    out.push_back(d);
  }
  return out;
}

TEST(VocabParallelCeTest, VerifierChecksSizesAndAttributes) {
  const DType F = DType::F32, I = DType::I32;
  // rows = 4, n = 5.
  auto bufs = layout({{F, 20},
                      {I, 4},
                      {F, 4},
                      {F, 8},
                      {F, 1},
                      {F, 4},
                      {F, 20},
                      {F, 3},
                      {F, 7}});
  auto verify = [&](Opcode op, std::vector<uint32_t> operands,
                    std::vector<int64_t> ints,
                    std::vector<double> floats = {}) {
    return verifyInstruction(
        {op, std::move(operands), std::move(ints), std::move(floats)}, bufs);
  };
  EXPECT_EQ(verify(Opcode::CeVpMax, {0, 2}, {5, 4}), "");
  EXPECT_NE(verify(Opcode::CeVpMax, {0, 2}, {5, 6}), ""); // valid > n
  EXPECT_NE(verify(Opcode::CeVpMax, {0, 7}, {5, 5}), ""); // rowmax size
  EXPECT_EQ(verify(Opcode::CeVpSumExp, {0, 1, 2, 3}, {5, 10, 5}), "");
  EXPECT_NE(verify(Opcode::CeVpSumExp, {0, 1, 2, 8}, {5, 10, 5}), "");
  EXPECT_NE(verify(Opcode::CeVpSumExp, {0, 1, 2, 3}, {5, -1, 5}), "");
  EXPECT_NE(verify(Opcode::CeVpSumExp, {0, 2, 2, 3}, {5, 0, 5}), ""); // dtype
  EXPECT_EQ(verify(Opcode::CeVpLoss, {2, 3, 4, 5}, {4}), "");
  EXPECT_NE(verify(Opcode::CeVpLoss, {2, 3, 4, 5}, {3}), "");
  EXPECT_NE(verify(Opcode::CeVpLoss, {2, 3, 4, 5}, {0}), "");
  EXPECT_EQ(verify(Opcode::CeVpBwd, {0, 1, 5, 6}, {5, 0, 3}, {0.5}), "");
  EXPECT_EQ(verify(Opcode::CeVpBwd, {0, 1, 5, 0}, {5, 0, 3}, {0.5}), "")
      << "dlogits may overwrite logits in place";
  EXPECT_NE(verify(Opcode::CeVpBwd, {0, 1, 5, 6}, {5, 0, 3}), "");
  EXPECT_NE(verify(Opcode::CeVpBwd, {0, 1, 7, 6}, {5, 0, 3}, {0.5}), "");
}

} // namespace
