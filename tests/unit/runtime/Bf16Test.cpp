//===- Bf16Test.cpp - bfloat16 conversion, matmul and kernel staging ------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Device.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/format/OpSchema.h"
#include "runtime/kernels/Bf16Math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace strata::rt;
using strata::kernels::bf16ToFloat;
using strata::kernels::floatToBf16;

namespace {

float fromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::vector<uint16_t> randomBf16(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (uint16_t &x : v)
    x = floatToBf16(dist(gen));
  return v;
}

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16ToFloat(0x3F80), 1.0f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even 1.
  EXPECT_EQ(floatToBf16(fromBits(0x3F808000u)), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(floatToBf16(fromBits(0x3F818000u)), 0x3F82);
  // Just above half rounds up; just below rounds down.
  EXPECT_EQ(floatToBf16(fromBits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(floatToBf16(fromBits(0x3F807FFFu)), 0x3F80);
  EXPECT_EQ(floatToBf16(-2.5f), 0xC020);
  // The largest float rounds to infinity; infinities and NaNs survive.
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(fromBits(0x7F800001u)))));
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(fromBits(0xFFFFFFFFu)))));
  // Widening then narrowing is the identity.
  for (uint32_t h = 0; h < 0x10000; h += 7)
    if (!std::isnan(bf16ToFloat(uint16_t(h))))
      ASSERT_EQ(floatToBf16(bf16ToFloat(uint16_t(h))), h);
}

TEST(Bf16Test, VectorConversionsMatchTheScalarRule) {
  std::vector<float> x(1000);
  std::mt19937 gen(3);
  std::uniform_int_distribution<uint32_t> bits;
  for (float &v : x)
    v = fromBits(bits(gen) & 0xBFFFFFFFu); // finite
  std::vector<uint16_t> h(x.size());
  cpu::narrowToBf16(x.data(), h.data(), int64_t(x.size()));
  std::vector<float> back(x.size());
  cpu::widenBf16(h.data(), back.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(h[i], floatToBf16(x[i])) << i;
    ASSERT_EQ(back[i], bf16ToFloat(h[i])) << i;
  }
}

/// bf16 x bf16 GEMMs against a double reference of the same bf16 values,
/// into an f32 destination (accumulating) and a bf16 one (rounded once).
TEST(Bf16Test, MixedMatmulAccumulatesInFloat32) {
  for (bool transA : {false, true})
    for (bool transB : {false, true}) {
      cpu::MatmulShape s;
      s.batch = 2, s.m = 13, s.n = 17, s.k = 64;
      s.transA = transA, s.transB = transB;
      auto a = randomBf16(size_t(s.batch * s.m * s.k), 1);
      auto b = randomBf16(size_t(s.batch * s.k * s.n), 2);
      std::vector<double> want(size_t(s.batch * s.m * s.n), 0.5);
      for (int64_t t = 0; t < s.batch; ++t)
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = 0; j < s.n; ++j) {
            double acc = 0;
            for (int64_t l = 0; l < s.k; ++l) {
              int64_t ai = transA ? l * s.m + i : i * s.k + l;
              int64_t bi = transB ? j * s.k + l : l * s.n + j;
              acc += double(bf16ToFloat(a[t * s.m * s.k + ai])) *
                     double(bf16ToFloat(b[t * s.k * s.n + bi]));
            }
            want[(t * s.m + i) * s.n + j] += acc;
          }
      std::vector<float> c32(want.size(), 0.5f);
      cpu::matmulMixed(a.data(), DType::BF16, b.data(), DType::BF16, c32.data(),
                       DType::F32, s, 1.0f, 1.0f);
      std::vector<uint16_t> c16(want.size());
      cpu::matmulMixed(a.data(), DType::BF16, b.data(), DType::BF16, c16.data(),
                       DType::BF16, s, 1.0f, 0.0f);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(c32[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
        double noBias = want[i] - 0.5;
        ASSERT_NEAR(bf16ToFloat(c16[i]), noBias,
                    std::ldexp(1.0, -8) * std::fabs(noBias) + 1e-4)
            << i;
      }
    }
}

/// A kernel without a bf16 form computes on widened copies: bit for bit the
/// f32 kernel on the widened inputs, its outputs narrowed once, and its f32
/// operands (the saved statistics) untouched by the staging.
TEST(Bf16Test, DeviceStagesBf16OperandsOfFloat32Kernels) {
  const int64_t rows = 6, n = 40;
  auto x = randomBf16(size_t(rows * n), 4), gamma = randomBf16(size_t(n), 5),
       beta = randomBf16(size_t(n), 6);
  RankProgram rank;
  uint64_t offset = 0;
  auto add = [&](const char *name, DType dt, int64_t elements) {
    BufferDesc b;
    b.name = name, b.dtype = dt, b.shape = {elements}, b.offset = offset;
    offset += (b.byteSize() + 63) / 64 * 64;
    rank.buffers.push_back(b);
    return uint32_t(rank.buffers.size() - 1);
  };
  uint32_t bx = add("x", DType::BF16, rows * n), bg = add("g", DType::BF16, n),
           bb = add("b", DType::BF16, n),
           bo = add("out", DType::BF16, rows * n),
           bm = add("mean", DType::F32, rows),
           br = add("rstd", DType::F32, rows);
  rank.arenaBytes = offset;
  Instruction ln;
  ln.opcode = Opcode::LayerNormFwd;
  ln.operands = {bx, bg, bb, bo, bm, br};
  ln.ints = {n};
  ln.floats = {1e-5};
  rank.sequences[int(SequenceKind::Microbatch)].push_back(ln);
  auto device = createCpuDevice();
  device->prepare(rank);
  device->upload(rank.buffers[bx].offset, x.data(), x.size() * 2);
  device->upload(rank.buffers[bg].offset, gamma.data(), gamma.size() * 2);
  device->upload(rank.buffers[bb].offset, beta.data(), beta.size() * 2);
  device->run(SequenceKind::Microbatch, ExecContext{});
  std::vector<uint16_t> out(size_t(rows * n));
  std::vector<float> mean(rows), rstd(rows);
  device->download(rank.buffers[bo].offset, out.data(), out.size() * 2);
  device->download(rank.buffers[bm].offset, mean.data(), rows * 4);
  device->download(rank.buffers[br].offset, rstd.data(), rows * 4);

  auto widen = [](const std::vector<uint16_t> &v) {
    std::vector<float> f(v.size());
    cpu::widenBf16(v.data(), f.data(), int64_t(v.size()));
    return f;
  };
  auto xf = widen(x), gf = widen(gamma), bf = widen(beta);
  std::vector<float> of(out.size()), mf(rows), rf(rows);
  cpu::layerNormFwd(xf.data(), gf.data(), bf.data(), of.data(), mf.data(),
                    rf.data(), rows, n, 1e-5f);
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_EQ(out[i], floatToBf16(of[i])) << i;
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_EQ(mean[r], mf[r]);
    ASSERT_EQ(rstd[r], rf[r]);
  }
}

TEST(Bf16Test, SchemaAcceptsBf16ForFloat32OperandsAndConverts) {
  std::vector<BufferDesc> buffers(3);
  buffers[0].name = "x", buffers[0].dtype = DType::BF16, buffers[0].shape = {8};
  buffers[1].name = "y", buffers[1].dtype = DType::F32, buffers[1].shape = {8};
  buffers[2].name = "i", buffers[2].dtype = DType::I32, buffers[2].shape = {8};
  for (size_t i = 0; i < buffers.size(); ++i)
    buffers[i].offset = 64 * i;
  EXPECT_EQ(dtypeBytes(DType::BF16), 2u);
  EXPECT_STREQ(dtypeName(DType::BF16), "bf16");
  Instruction conv;
  conv.opcode = Opcode::Convert;
  conv.operands = {0, 1};
  EXPECT_EQ(verifyInstruction(conv, buffers, nullptr), "");
  conv.operands = {2, 1};
  EXPECT_NE(verifyInstruction(conv, buffers, nullptr).find("is i32"),
            std::string::npos);
  Instruction gelu;
  gelu.opcode = Opcode::GeluFwd;
  gelu.operands = {0, 1};
  EXPECT_EQ(verifyInstruction(gelu, buffers, nullptr), "");
}

} // namespace
