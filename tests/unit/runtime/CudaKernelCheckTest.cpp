//===- CudaKernelCheckTest.cpp - CUDA kernels against the CPU's -----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Runs the CUDA kernels (runtime/cuda/CudaKernels.h) on random inputs and
// compares each with the CPU kernel of the same opcode (runtime/cpu/), the
// definition of its semantics. Needs a GPU: without one (CI) every test is
// skipped with the reason (ctest label gpu). scripts/gpu-check.sh runs it on
// a GPU machine.
//
// Bounds: kernels whose CPU and CUDA forms do the same float32 arithmetic
// per element (elementwise, casts, the embedding gradient) must match bit
// for bit; reductions in another order (norms, column sums, losses) to
// 1e-5 relative; bf16 attention on tensor cores rounds P and dS to bf16
// before its products, as FlashAttention does, and is held to 2e-2
// relative L2 against the CPU's bf16 kernel (which keeps them float32).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Device.h"
#include "runtime/cpu/AttentionKernels.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cuda/CudaKernels.h"
#include "runtime/cuda/CudaLibraries.h"
#include "runtime/kernels/Bf16Math.h"
#include "runtime/kernels/OptimizerMath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace strata::rt;
namespace k = strata::kernels;
using bf16 = uint16_t;

namespace {

#define STRATA_NEED_GPU()                                                      \
  do {                                                                         \
    if (!cuda::cudaProbe().empty())                                            \
      GTEST_SKIP() << "no GPU: " << cuda::cudaProbe();                         \
  } while (0)

/// Device memory holding a copy of a host vector.
template <typename T> struct DeviceArray {
  T *ptr = nullptr;
  size_t n = 0;
  explicit DeviceArray(const std::vector<T> &host) : n(host.size()) {
    cuda::check(cudaMalloc(&ptr, sizeof(T) * std::max<size_t>(n, 1)),
                "cudaMalloc");
    cuda::check(cudaMemcpy(ptr, host.data(), sizeof(T) * n,
                           cudaMemcpyHostToDevice),
                "upload");
  }
  explicit DeviceArray(size_t count, T poison = T()) : n(count) {
    cuda::check(cudaMalloc(&ptr, sizeof(T) * std::max<size_t>(n, 1)),
                "cudaMalloc");
    std::vector<T> fill(n, poison);
    cuda::check(cudaMemcpy(ptr, fill.data(), sizeof(T) * n,
                           cudaMemcpyHostToDevice),
                "upload");
  }
  ~DeviceArray() { cudaFree(ptr); }
  std::vector<T> host() const {
    std::vector<T> out(n);
    cuda::check(cudaDeviceSynchronize(), "kernel");
    cuda::check(cudaMemcpy(out.data(), ptr, sizeof(T) * n,
                           cudaMemcpyDeviceToHost),
                "download");
    return out;
  }
};

std::vector<float> randomFloats(size_t n, uint32_t seed, float scale = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}
std::vector<bf16> toBf16(const std::vector<float> &v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = k::floatToBf16(v[i]);
  return out;
}
std::vector<float> widen(const std::vector<bf16> &v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = k::bf16ToFloat(v[i]);
  return out;
}

double relL2(const std::vector<float> &got, const std::vector<float> &want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]))
      return INFINITY;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct AttentionCase {
  int64_t batch, heads, kvHeads, seq, dim;
};

class FlashAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(FlashAttention, MatchesTheCpuBf16Kernel) {
  STRATA_NEED_GPU();
  AttentionCase c = GetParam();
  size_t nq = size_t(c.batch * c.heads * c.seq * c.dim);
  size_t nkv = size_t(c.batch * c.kvHeads * c.seq * c.dim);
  size_t rows = size_t(c.batch * c.heads * c.seq);
  float scale = 1.0f / std::sqrt(float(c.dim));
  auto q = toBf16(randomFloats(nq, 1)), kk = toBf16(randomFloats(nkv, 2)),
       v = toBf16(randomFloats(nkv, 3)), dout = toBf16(randomFloats(nq, 4));
  cpu::AttentionShape shape{c.batch, c.heads, c.kvHeads, c.seq, c.dim};
  std::vector<bf16> out(nq), dq(nq), dk(nkv), dv(nkv);
  std::vector<float> lse(rows);
  cpu::causalAttentionFwd(q.data(), kk.data(), v.data(), out.data(),
                          lse.data(), shape, scale);
  cpu::causalAttentionBwd(dout.data(), q.data(), kk.data(), v.data(),
                          out.data(), lse.data(), dq.data(), dk.data(),
                          dv.data(), shape, scale);

  DeviceArray<bf16> dQ(q), dK(kk), dV(v), dDout(dout), dOut(nq, 0xffff),
      dDq(nq, 0xffff), dDk(nkv, 0xffff), dDv(nkv, 0xffff);
  DeviceArray<float> dLse(rows, NAN);
  const void *ops[] = {dQ.ptr, dK.ptr, dV.ptr, dOut.ptr};
  ASSERT_TRUE(cuda::flashAttentionSupports(c.dim, ops, 4));
  cuda::flashAttentionFwd(dQ.ptr, dK.ptr, dV.ptr, dOut.ptr, dLse.ptr, c.batch,
                          c.heads, c.kvHeads, c.seq, c.dim, scale, nullptr);
  EXPECT_LT(relL2(widen(dOut.host()), widen(out)), 2e-2) << "out";
  EXPECT_LT(relL2(dLse.host(), lse), 1e-3) << "lse";
  DeviceArray<float> scratch(
      cuda::flashAttentionScratchBytes(c.batch, c.heads, c.seq) /
      sizeof(float));
  // The backward reads the CPU's out and lse: each half is checked alone.
  DeviceArray<bf16> cpuOut(out);
  DeviceArray<float> cpuLse(lse);
  cuda::flashAttentionBwd(dDout.ptr, dQ.ptr, dK.ptr, dV.ptr, cpuOut.ptr,
                          cpuLse.ptr, dDq.ptr, dDk.ptr, dDv.ptr, scratch.ptr,
                          c.batch, c.heads, c.kvHeads, c.seq, c.dim, scale,
                          nullptr);
  EXPECT_LT(relL2(widen(dDq.host()), widen(dq)), 2e-2) << "dq";
  EXPECT_LT(relL2(widen(dDk.host()), widen(dk)), 2e-2) << "dk";
  EXPECT_LT(relL2(widen(dDv.host()), widen(dv)), 2e-2) << "dv";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashAttention,
    ::testing::Values(AttentionCase{2, 4, 4, 256, 64},   // GPT-2's head dim
                      AttentionCase{1, 8, 2, 200, 128},  // GQA, ragged seq
                      AttentionCase{2, 4, 4, 64, 16},    // gpt-tiny
                      AttentionCase{1, 4, 1, 130, 32},   // MQA, ragged
                      AttentionCase{1, 2, 2, 1024, 64}), // long rows
    [](const ::testing::TestParamInfo<AttentionCase> &info) {
      const AttentionCase &c = info.param;
      return "b" + std::to_string(c.batch) + "h" + std::to_string(c.heads) +
             "kv" + std::to_string(c.kvHeads) + "s" + std::to_string(c.seq) +
             "d" + std::to_string(c.dim);
    });

TEST(CudaKernels, ConvertRoundsLikeTheCpu) {
  STRATA_NEED_GPU();
  std::vector<float> x = randomFloats(100003, 7, 3.0f);
  x[5] = NAN;
  x[6] = INFINITY;
  x[7] = 1e-40f;
  DeviceArray<float> dx(x);
  DeviceArray<bf16> dy(x.size(), 0);
  cuda::convert(dx.ptr, cuda::Elem::F32, dy.ptr, cuda::Elem::BF16,
                int64_t(x.size()), nullptr);
  std::vector<bf16> got = dy.host(), want(x.size());
  cpu::narrowToBf16(x.data(), want.data(), int64_t(x.size()));
  EXPECT_EQ(got, want);
  // Off 16-byte alignment: the scalar path.
  DeviceArray<bf16> dz(x.size(), 0);
  cuda::convert(dx.ptr + 1, cuda::Elem::F32, dz.ptr + 1, cuda::Elem::BF16,
                int64_t(x.size()) - 1, nullptr);
  std::vector<bf16> shifted = dz.host();
  for (size_t i = 1; i < x.size(); ++i)
    ASSERT_EQ(shifted[i], want[i]) << i;
}

TEST(CudaKernels, ElementwiseBf16MatchesTheCpuBitForBit) {
  STRATA_NEED_GPU();
  size_t n = 65541;
  auto a = toBf16(randomFloats(n, 11)), b = toBf16(randomFloats(n, 12));
  DeviceArray<bf16> da(a), db(b), dout(n, 0);
  std::vector<bf16> want(n);
  cpu::geluBwd(a.data(), b.data(), want.data(), int64_t(n));
  cuda::geluBwd(da.ptr, db.ptr, dout.ptr, cuda::Elem::BF16, int64_t(n),
                nullptr);
  EXPECT_EQ(dout.host(), want) << "gelu_bwd";
  cpu::add(a.data(), b.data(), want.data(), int64_t(n));
  cuda::add(da.ptr, db.ptr, dout.ptr, cuda::Elem::BF16, int64_t(n), nullptr);
  EXPECT_EQ(dout.host(), want) << "add";
}

TEST(CudaKernels, LayerNormBf16WithFusedResidualMatchesTheCpu) {
  STRATA_NEED_GPU();
  int64_t rows = 300, n = 768;
  size_t total = size_t(rows * n);
  auto a = toBf16(randomFloats(total, 21)), r = toBf16(randomFloats(total, 22));
  auto g = toBf16(randomFloats(size_t(n), 23)),
       be = toBf16(randomFloats(size_t(n), 24));
  std::vector<bf16> sum(total), out(total);
  std::vector<float> mean(static_cast<size_t>(rows)),
      rstd(static_cast<size_t>(rows));
  cpu::add(a.data(), r.data(), sum.data(), int64_t(total));
  cpu::layerNormFwd(sum.data(), g.data(), be.data(), out.data(), mean.data(),
                    rstd.data(), rows, n, 1e-5f);
  DeviceArray<bf16> da(a), dr(r), dg(g), db(be), dsum(total, 0),
      dout(total, 0);
  DeviceArray<float> dmean(static_cast<size_t>(rows)),
      drstd(static_cast<size_t>(rows));
  cuda::layerNormFwd(da.ptr, dg.ptr, db.ptr, dout.ptr, cuda::Elem::BF16,
                     dmean.ptr, drstd.ptr, rows, n, 1e-5f, nullptr, dr.ptr,
                     dsum.ptr);
  EXPECT_EQ(dsum.host(), sum);
  EXPECT_LT(relL2(widen(dout.host()), widen(out)), 1e-2);
  EXPECT_LT(relL2(drstd.host(), rstd), 1e-5);

  // Backward: the row part and the two-stage column sums into float32.
  auto dy = toBf16(randomFloats(total, 25));
  std::vector<bf16> dx(total);
  std::vector<float> dgamma(size_t(n), 0.5f), dbeta(size_t(n), -0.5f);
  cpu::layerNormBwd(dy.data(), sum.data(), g.data(), mean.data(), rstd.data(),
                    dx.data(), dgamma.data(), dbeta.data(), rows, n);
  DeviceArray<bf16> ddy(dy), dxs(total, 0);
  DeviceArray<float> ddg(std::vector<float>(size_t(n), 0.5f)),
      ddb(std::vector<float>(size_t(n), -0.5f)), dmean2(mean), drstd2(rstd);
  DeviceArray<float> scratch(cuda::columnScratchBytes(rows, n) / 4);
  cuda::layerNormBwd(ddy.ptr, dsum.ptr, dg.ptr, dmean2.ptr, drstd2.ptr, dxs.ptr,
                     cuda::Elem::BF16, ddg.ptr, ddb.ptr, cuda::Elem::F32, rows,
                     n, scratch.ptr, nullptr);
  EXPECT_LT(relL2(widen(dxs.host()), widen(dx)), 1e-2);
  EXPECT_LT(relL2(ddg.host(), dgamma), 1e-5);
  EXPECT_LT(relL2(ddb.host(), dbeta), 1e-5);
}

// Every transpose path (16-byte rows kept whole, the last two dimensions
// swapped, the general one) moves exactly the CPU's elements.
TEST(CudaKernels, TransposesMatchTheCpuBitForBit) {
  STRATA_NEED_GPU();
  struct Case {
    std::vector<int64_t> dims, perm;
  };
  for (const Case &c : {Case{{8, 64, 3, 4, 64}, {2, 0, 3, 1, 4}},
                        Case{{2, 64, 4, 16}, {0, 2, 1, 3}},
                        Case{{3, 40, 24}, {0, 2, 1}},
                        Case{{5, 6, 7}, {2, 0, 1}}}) {
    int64_t n = 1;
    for (int64_t d : c.dims)
      n *= d;
    auto x = toBf16(randomFloats(size_t(n), 91));
    std::vector<bf16> want(static_cast<size_t>(n));
    cpu::transpose(x.data(), want.data(), int(c.dims.size()), c.dims.data(),
                   c.perm.data());
    DeviceArray<bf16> dx(x), dout(static_cast<size_t>(n), bf16(0));
    cuda::transpose(dx.ptr, dout.ptr, cuda::Elem::BF16, int(c.dims.size()),
                    c.dims.data(), c.perm.data(), nullptr);
    EXPECT_EQ(dout.host(), want) << "rank " << c.dims.size();
  }
}

TEST(CudaKernels, EmbeddingGradientMatchesTheCpuBitForBit) {
  STRATA_NEED_GPU();
  int64_t count = 5000, rows = 97, hidden = 96;
  std::mt19937 rng(31);
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (int32_t &id : ids)
    id = int32_t(rng() % uint32_t(rows + 3)); // some out of this shard
  auto dout = randomFloats(size_t(count * hidden), 32);
  auto table = randomFloats(size_t(rows * hidden), 33);
  std::vector<float> want = table;
  cpu::embeddingBwd(ids.data(), count, dout.data(), rows, hidden, 0,
                    want.data());
  DeviceArray<int32_t> dids(ids);
  DeviceArray<float> ddout(dout), dtable(table);
  size_t bytes = cuda::embeddingBwdScratchBytes(count);
  DeviceArray<uint8_t> scratch(bytes);
  cuda::embeddingBwd(dids.ptr, count, ddout.ptr, rows, hidden, 0, dtable.ptr,
                     scratch.ptr, bytes, nullptr);
  EXPECT_EQ(dtable.host(), want);
}

// The loss and its gradient in one pass, the row in shared memory (GPT-2's
// vocabulary) and not (a wider one), on padded rows.
TEST(CudaKernels, CrossEntropyForwardBackwardMatchesTheCpu) {
  STRATA_NEED_GPU();
  for (int64_t vocab : {int64_t(50257), int64_t(60001)}) {
    int64_t rows = 48, ld = (vocab + 7) / 8 * 8;
    auto logits = randomFloats(size_t(rows * vocab), 61, 2.0f);
    std::vector<int32_t> targets(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      targets[size_t(r)] = int32_t((r * 7919) % vocab);
    std::vector<float> lse(static_cast<size_t>(rows)),
        grad(static_cast<size_t>(rows * vocab));
    float scale = 1.0f / float(rows);
    double loss = cpu::crossEntropyFwd(logits.data(), targets.data(), rows,
                                       vocab, lse.data());
    cpu::crossEntropyBwd(logits.data(), targets.data(), lse.data(),
                         grad.data(), rows, vocab, scale);
    std::vector<float> padded(size_t(rows * ld), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      std::copy(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab,
                padded.begin() + r * ld);
    DeviceArray<float> dl(padded), dlse(static_cast<size_t>(rows)),
        dloss(1);
    DeviceArray<int32_t> dt(targets);
    DeviceArray<double> scratch(static_cast<size_t>(rows));
    DeviceArray<bf16> dg(size_t(rows * ld), bf16(0x7fc0));
    cuda::crossEntropyFwdBwd(dl.ptr, ld, dt.ptr, rows, vocab, dlse.ptr,
                             dloss.ptr, scratch.ptr, dg.ptr, ld, scale, true,
                             nullptr);
    EXPECT_LT(relL2(dlse.host(), lse), 1e-6) << vocab;
    EXPECT_NEAR(dloss.host()[0], loss, 1e-5 * loss) << vocab;
    std::vector<bf16> got = dg.host();
    std::vector<float> gotDense(size_t(rows * vocab));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < vocab; ++j)
        gotDense[size_t(r * vocab + j)] = k::bf16ToFloat(got[size_t(r * ld + j)]);
      for (int64_t j = vocab; j < ld; ++j)
        EXPECT_EQ(got[size_t(r * ld + j)], 0) << "padding " << r << "," << j;
    }
    EXPECT_LT(relL2(gotDense, widen(toBf16(grad))), 1e-2) << vocab;
  }
}

TEST(CudaKernels, BiasGradTwoStagesMatchTheCpu) {
  STRATA_NEED_GPU();
  int64_t rows = 8192, n = 2304;
  auto dout = toBf16(randomFloats(size_t(rows * n), 41));
  std::vector<float> want(size_t(n), 1.0f);
  cpu::biasGrad(dout.data(), want.data(), rows, n);
  DeviceArray<bf16> ddout(dout);
  DeviceArray<float> dbias(std::vector<float>(size_t(n), 1.0f));
  DeviceArray<float> scratch(cuda::columnScratchBytes(rows, n) / 4);
  cuda::biasGrad(ddout.ptr, cuda::Elem::BF16, dbias.ptr, cuda::Elem::F32, rows,
                 n, scratch.ptr, nullptr);
  EXPECT_LT(relL2(dbias.host(), want), 1e-5);
}

// nvcc contracts a * b + c into fused multiply-adds where the CPU build may
// not (and vice versa): the update agrees to a few ulp, not bit for bit.
TEST(CudaKernels, MultiTensorAdamWMatchesTheCpu) {
  STRATA_NEED_GPU();
  std::vector<int64_t> sizes = {768, 100000, 3};
  std::vector<std::vector<float>> p, g, m, v;
  std::vector<std::unique_ptr<DeviceArray<float>>> dev;
  std::vector<cuda::TensorSlot> slots;
  std::vector<cuda::TensorChunk> chunks;
  k::AdamWCoefficients c = k::adamwCoefficients(3e-4, 0.9, 0.95, 1e-8, 0.1, 7);
  for (size_t t = 0; t < sizes.size(); ++t) {
    size_t n = size_t(sizes[t]);
    p.push_back(randomFloats(n, uint32_t(50 + t)));
    g.push_back(randomFloats(n, uint32_t(60 + t)));
    m.push_back(randomFloats(n, uint32_t(70 + t), 0.1f));
    std::vector<float> vv = randomFloats(n, uint32_t(80 + t), 0.1f);
    for (float &x : vv)
      x = x * x;
    v.push_back(vv);
    for (auto *h : {&p[t], &g[t], &m[t], &v[t]})
      dev.push_back(std::make_unique<DeviceArray<float>>(*h));
    cuda::TensorSlot s;
    s.param = dev[4 * t]->ptr;
    s.grad = dev[4 * t + 1]->ptr;
    s.state0 = dev[4 * t + 2]->ptr;
    s.state1 = dev[4 * t + 3]->ptr;
    s.n = sizes[t];
    slots.push_back(s);
    for (int64_t start = 0; start < sizes[t]; start += cuda::kOptimizerChunk)
      chunks.push_back({int32_t(t), start});
  }
  std::vector<uint8_t> slotBytes(sizeof(cuda::TensorSlot) * slots.size());
  std::memcpy(slotBytes.data(), slots.data(), slotBytes.size());
  std::vector<uint8_t> chunkBytes(sizeof(cuda::TensorChunk) * chunks.size());
  std::memcpy(chunkBytes.data(), chunks.data(), chunkBytes.size());
  std::vector<uint8_t> coeffBytes(sizeof(c));
  std::memcpy(coeffBytes.data(), &c, sizeof(c));
  DeviceArray<uint8_t> dslots(slotBytes), dchunks(chunkBytes),
      dcoeff(coeffBytes.size());
  cuda::writeSmall(dcoeff.ptr, coeffBytes.data(), coeffBytes.size(), nullptr);
  cuda::adamwMulti(reinterpret_cast<cuda::TensorSlot *>(dslots.ptr),
                   reinterpret_cast<cuda::TensorChunk *>(dchunks.ptr),
                   int64_t(chunks.size()),
                   reinterpret_cast<k::AdamWCoefficients *>(dcoeff.ptr),
                   nullptr);
  for (size_t t = 0; t < sizes.size(); ++t) {
    cpu::adamwStep(p[t].data(), g[t].data(), m[t].data(), v[t].data(),
                   sizes[t], 3e-4, 0.9, 0.95, 1e-8, 0.1, 7);
    EXPECT_LT(relL2(dev[4 * t]->host(), p[t]), 1e-6) << "param " << t;
    EXPECT_LT(relL2(dev[4 * t + 2]->host(), m[t]), 1e-6) << "exp_avg " << t;
    EXPECT_LT(relL2(dev[4 * t + 3]->host(), v[t]), 1e-6) << "exp_avg_sq "
                                                         << t;
  }
}

} // namespace
