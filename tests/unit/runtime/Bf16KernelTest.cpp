//===- Bf16KernelTest.cpp - Kernels that read and write bf16 themselves ---===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Every kernel with a bfloat16 form, run by the CPU device on bf16 buffers,
// gives bit for bit what its float32 form gives on the widened values with
// the results narrowed once (what the device's staging computed before),
// and the device stages nothing for it: no float32 copy outside the arena.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuDevice.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/kernels/Bf16Math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace strata::rt;
using strata::kernels::bf16ToFloat;
using strata::kernels::floatToBf16;

namespace {

struct Operand {
  DType dtype; ///< In the bf16 program (the reference is all f32).
  int64_t elements;
  bool positive = false; ///< rstd-like statistics
};

struct Result {
  std::vector<std::vector<float>> values; ///< Per operand, as floats.
  uint64_t stagingBytes = 0;
};

/// Runs one instruction on buffers of the given dtypes (or all float32),
/// from the same initial values.
Result runOne(Opcode op, const std::vector<Operand> &ops,
              const std::vector<int64_t> &ints,
              const std::vector<double> &floats, bool allF32, unsigned seed) {
  RankProgram rank;
  uint64_t offset = 0;
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  Instruction inst;
  inst.opcode = op, inst.ints = ints, inst.floats = floats;
  std::vector<std::vector<float>> init;
  for (const Operand &o : ops) {
    BufferDesc b;
    b.name = "b" + std::to_string(rank.buffers.size());
    b.dtype = allF32 ? DType::F32 : o.dtype;
    b.shape = {o.elements};
    b.offset = offset;
    offset += (uint64_t(o.elements) * 4 + 63) / 64 * 64;
    inst.operands.push_back(uint32_t(rank.buffers.size()));
    rank.buffers.push_back(b);
    std::vector<float> v(size_t(o.elements));
    for (float &x : v) {
      x = dist(gen);
      if (o.positive)
        x = 0.5f + std::fabs(x);
      if (o.dtype == DType::BF16) // representable in both programs
        x = bf16ToFloat(floatToBf16(x));
    }
    init.push_back(v);
  }
  rank.arenaBytes = offset;
  rank.sequences[int(SequenceKind::Microbatch)].push_back(inst);
  cpu::CpuDevice device;
  device.prepare(rank);
  for (size_t i = 0; i < ops.size(); ++i) {
    const BufferDesc &b = rank.buffers[i];
    if (b.dtype == DType::BF16) {
      std::vector<uint16_t> h(init[i].size());
      for (size_t j = 0; j < h.size(); ++j)
        h[j] = floatToBf16(init[i][j]);
      device.upload(b.offset, h.data(), h.size() * 2);
    } else {
      device.upload(b.offset, init[i].data(), init[i].size() * 4);
    }
  }
  device.run(SequenceKind::Microbatch, ExecContext{});
  Result out;
  out.stagingBytes = device.stagingBytes();
  for (size_t i = 0; i < ops.size(); ++i) {
    const BufferDesc &b = rank.buffers[i];
    std::vector<float> v(init[i].size());
    if (b.dtype == DType::BF16) {
      std::vector<uint16_t> h(v.size());
      device.download(b.offset, h.data(), h.size() * 2);
      for (size_t j = 0; j < v.size(); ++j)
        v[j] = bf16ToFloat(h[j]);
    } else {
      device.download(b.offset, v.data(), v.size() * 4);
    }
    out.values.push_back(v);
  }
  return out;
}

void expectNativeAndExact(const char *what, Opcode op,
                          const std::vector<Operand> &ops,
                          const std::vector<int64_t> &ints,
                          const std::vector<double> &floats = {}) {
  SCOPED_TRACE(what);
  EXPECT_TRUE(cpu::kernelTakesDtypes(op, [&] {
    std::vector<DType> d;
    for (const Operand &o : ops)
      d.push_back(o.dtype);
    return d;
  }()));
  Result native = runOne(op, ops, ints, floats, false, 11);
  Result wide = runOne(op, ops, ints, floats, true, 11);
  EXPECT_EQ(native.stagingBytes, 0u);
  for (size_t i = 0; i < ops.size(); ++i)
    for (size_t j = 0; j < native.values[i].size(); ++j) {
      float want = wide.values[i][j];
      if (ops[i].dtype == DType::BF16)
        want = bf16ToFloat(floatToBf16(want));
      ASSERT_EQ(native.values[i][j], want)
          << "operand " << i << " [" << j << "]";
    }
}

constexpr DType H = DType::BF16, F = DType::F32;

TEST(Bf16KernelTest, ElementwiseKernels) {
  const int64_t n = 1000; // not a multiple of the vector width
  expectNativeAndExact("add", Opcode::Add, {{H, n}, {H, n}, {H, n}}, {});
  expectNativeAndExact("mul", Opcode::Mul, {{H, n}, {H, n}, {H, n}}, {});
  expectNativeAndExact("scale", Opcode::Scale, {{H, n}, {H, n}}, {}, {0.3});
  expectNativeAndExact("gelu_fwd", Opcode::GeluFwd, {{H, n}, {H, n}}, {});
  expectNativeAndExact("gelu_bwd", Opcode::GeluBwd, {{H, n}, {H, n}, {H, n}},
                       {});
}

TEST(Bf16KernelTest, DataMovementAndSums) {
  const int64_t n = 1000;
  expectNativeAndExact("fill", Opcode::Fill, {{H, n}}, {}, {0.7});
  expectNativeAndExact("copy", Opcode::Copy, {{H, n}, {H, n}}, {});
  expectNativeAndExact("accumulate into f32", Opcode::Accumulate,
                       {{H, n}, {F, n}}, {});
  expectNativeAndExact("accumulate into bf16", Opcode::Accumulate,
                       {{H, n}, {H, n}}, {});
  // [2, 64, 3, 2, 16] -> [3, 2, 2, 64, 16]: the qkv split's transpose.
  expectNativeAndExact("transpose", Opcode::Transpose,
                       {{H, 2 * 64 * 3 * 2 * 16}, {H, 2 * 64 * 3 * 2 * 16}},
                       {5, 2, 64, 3, 2, 16, 2, 0, 3, 1, 4});
  expectNativeAndExact("transpose, strided inner", Opcode::Transpose,
                       {{H, 6 * 10}, {H, 6 * 10}}, {2, 6, 10, 1, 0});
  // outer 4, big 10, small 3, start 5, inner 7.
  expectNativeAndExact("slice_copy", Opcode::SliceCopy,
                       {{H, 4 * 10 * 7}, {H, 4 * 3 * 7}}, {4, 10, 3, 5, 7});
  for (int64_t acc : {0, 1})
    expectNativeAndExact(acc ? "slice_insert accumulating" : "slice_insert",
                         Opcode::SliceInsert, {{H, 4 * 3 * 7}, {H, 4 * 10 * 7}},
                         {4, 10, 3, 5, 7, acc});
}

TEST(Bf16KernelTest, BiasKernels) {
  const int64_t rows = 7, n = 72;
  expectNativeAndExact("bias_add", Opcode::BiasAdd,
                       {{H, rows * n}, {H, n}, {H, rows * n}}, {n});
  expectNativeAndExact("bias_grad into f32", Opcode::BiasGrad,
                       {{H, rows * n}, {F, n}}, {n});
  expectNativeAndExact("bias_grad into bf16", Opcode::BiasGrad,
                       {{H, rows * n}, {H, n}}, {n});
}

TEST(Bf16KernelTest, LayerNorm) {
  const int64_t rows = 37, n = 768;
  expectNativeAndExact(
      "layernorm_fwd", Opcode::LayerNormFwd,
      {{H, rows * n}, {H, n}, {H, n}, {H, rows * n}, {F, rows}, {F, rows}}, {n},
      {1e-5});
  for (DType g : {F, H})
    expectNativeAndExact(g == F ? "layernorm_bwd f32 dgamma"
                                : "layernorm_bwd bf16 dgamma",
                         Opcode::LayerNormBwd,
                         {{H, rows * n},
                          {H, rows * n},
                          {H, n},
                          {F, rows},
                          {F, rows, true},
                          {H, rows * n},
                          {g, n},
                          {g, n}},
                         {n});
}

TEST(Bf16KernelTest, UnfusedSoftmax) {
  const int64_t n = 37; // rows of two [n, n] causal blocks
  for (int64_t causal : {0, 1})
    expectNativeAndExact(causal ? "softmax_fwd causal" : "softmax_fwd",
                         Opcode::SoftmaxFwd, {{H, 2 * n * n}, {H, 2 * n * n}},
                         {n, causal}, {0.25});
  expectNativeAndExact("softmax_bwd", Opcode::SoftmaxBwd,
                       {{H, 2 * n * n}, {H, 2 * n * n}, {H, 2 * n * n}}, {n},
                       {0.25});
}

TEST(Bf16KernelTest, LlamaKernels) {
  const int64_t rows = 37, n = 768, seq = 6, dim = 8, outer = 5;
  expectNativeAndExact("rms_norm_fwd", Opcode::RmsNormFwd,
                       {{H, rows * n}, {H, n}, {H, rows * n}, {F, rows}}, {n},
                       {1e-6});
  for (DType g : {F, H})
    expectNativeAndExact(g == F ? "rms_norm_bwd f32 dweight"
                                : "rms_norm_bwd bf16 dweight",
                         Opcode::RmsNormBwd,
                         {{H, rows * n},
                          {H, rows * n},
                          {H, n},
                          {F, rows, true},
                          {H, rows * n},
                          {g, n}},
                         {n});
  const int64_t r = outer * seq * dim;
  expectNativeAndExact("rotary_fwd", Opcode::RotaryFwd, {{H, r}, {H, r}},
                       {seq, dim}, {10000.0});
  expectNativeAndExact("rotary_bwd", Opcode::RotaryBwd, {{H, r}, {H, r}},
                       {seq, dim}, {10000.0});
  const int64_t m = 999;
  expectNativeAndExact("silu_fwd", Opcode::SiluFwd, {{H, m}, {H, m}}, {});
  expectNativeAndExact("silu_bwd", Opcode::SiluBwd, {{H, m}, {H, m}, {H, m}},
                       {});
  expectNativeAndExact("silu_mul_fwd", Opcode::SiluMulFwd,
                       {{H, m}, {H, m}, {H, m}}, {});
  expectNativeAndExact("silu_mul_bwd", Opcode::SiluMulBwd,
                       {{H, m}, {H, m}, {H, m}, {H, m}, {H, m}}, {});
  // outer 2, n 3 kv heads, 3 repeats, inner 10.
  expectNativeAndExact("repeat_interleave", Opcode::RepeatInterleave,
                       {{H, 2 * 3 * 10}, {H, 2 * 3 * 3 * 10}}, {2, 3, 3, 10});
  expectNativeAndExact("repeat_interleave_bwd", Opcode::RepeatInterleaveBwd,
                       {{H, 2 * 3 * 3 * 10}, {H, 2 * 3 * 10}}, {2, 3, 3, 10});
}

TEST(Bf16KernelTest, FusedCausalAttention) {
  // Two query heads per kv head; 200 positions cross the 128-row tiles.
  const int64_t batch = 2, heads = 4, kvHeads = 2, seq = 200, dim = 16;
  const int64_t qn = batch * heads * seq * dim,
                kn = batch * kvHeads * seq * dim, rows = batch * heads * seq;
  std::vector<int64_t> shape{batch, heads, kvHeads, seq, dim};
  expectNativeAndExact("causal_attention_fwd", Opcode::CausalAttentionFwd,
                       {{H, qn}, {H, kn}, {H, kn}, {H, qn}, {F, rows}}, shape,
                       {0.25});
  // The backward from the forward's own output and log-sum-exp.
  Result fwd = runOne(Opcode::CausalAttentionFwd,
                      {{H, qn}, {H, kn}, {H, kn}, {H, qn}, {F, rows}}, shape,
                      {0.25}, false, 11);
  EXPECT_TRUE(std::isfinite(fwd.values[4][0]));
  expectNativeAndExact("causal_attention_bwd", Opcode::CausalAttentionBwd,
                       {{H, qn},
                        {H, qn},
                        {H, kn},
                        {H, kn},
                        {H, qn},
                        {F, rows},
                        {H, qn},
                        {H, kn},
                        {H, kn}},
                       shape, {0.25});
}

TEST(Bf16KernelTest, MixedDtypesAreStaged) {
  // An f32 bias on a bf16 activation has no bf16 form: the device stages
  // it, as before, and the result is still the f32 kernel's, narrowed.
  EXPECT_FALSE(cpu::kernelTakesDtypes(Opcode::BiasAdd, {H, F, H}));
  EXPECT_FALSE(
      cpu::kernelTakesDtypes(Opcode::LayerNormFwd, {H, H, H, H, H, H}));
  EXPECT_FALSE(cpu::kernelTakesDtypes(Opcode::Add, {F, F, F}));
  Result staged =
      runOne(Opcode::BiasAdd, {{H, 64}, {F, 8}, {H, 64}}, {8}, {}, false, 3);
  EXPECT_GT(staged.stagingBytes, 0u);
}

} // namespace
