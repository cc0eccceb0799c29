//===- MmaFragmentTest.cpp - Tensor-core fragment layouts on the host -----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The CUDA FlashAttention kernels (runtime/cuda/CudaFlashAttention.cu) feed
// mma.sync.m16n8k16 from ldmatrix with the index functions of
// runtime/kernels/MmaFragments.h. This test emulates the two instructions
// as the PTX ISA defines them (written here, independently of the header),
// then composes them exactly as the kernels' helpers do (mmaABt: Q K^T or
// dO V^T from rows in shared memory; mmaPB: P V with P taken from the
// accumulators) and checks the products against plain loops, on tiles of
// random data laid out with the kernels' padded row stride.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/Bf16Math.h"
#include "runtime/kernels/MmaFragments.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

namespace {

namespace k = strata::kernels;
namespace mf = strata::kernels::mma;
using bf16 = uint16_t;

/// A warp's registers: 32 lanes x `N` 32-bit registers.
template <int N> using WarpRegs = std::array<std::array<uint32_t, N>, 32>;

uint32_t pack(bf16 lo, bf16 hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }
float lo(uint32_t r) { return k::bf16ToFloat(bf16(r & 0xffffu)); }
float hi(uint32_t r) { return k::bf16ToFloat(bf16(r >> 16)); }

/// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16, per the PTX ISA: lane
/// 8i + r gives the address of row r of matrix i; without .trans lane l's
/// register i holds matrix i's (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1),
/// with .trans (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4).
WarpRegs<4> ldmatrix(const std::array<const bf16 *, 32> &rowAddress,
                     bool trans) {
  WarpRegs<4> out{};
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      int r0, c0, r1, c1;
      if (!trans) {
        r0 = r1 = l / 4;
        c0 = 2 * (l % 4);
        c1 = c0 + 1;
      } else {
        r0 = 2 * (l % 4);
        r1 = r0 + 1;
        c0 = c1 = l / 4;
      }
      const bf16 *row0 = rowAddress[size_t(8 * i + r0)];
      const bf16 *row1 = rowAddress[size_t(8 * i + r1)];
      out[size_t(l)][size_t(i)] = pack(row0[c0], row1[c1]);
    }
  return out;
}

/// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, per the PTX ISA:
/// with g = l / 4, t = l % 4, A's registers hold (g, 2t..), (g+8, 2t..),
/// (g, 2t+8..), (g+8, 2t+8..); B's (k 2t.., n g), (k 2t+8.., n g); C's
/// (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
void mma(std::array<std::array<float, 4>, 32> &c, const WarpRegs<4> &a,
         const WarpRegs<2> &b) {
  float A[16][16], Bm[16][8];
  for (int l = 0; l < 32; ++l) {
    int g = l / 4, t = l % 4;
    const auto &r = a[size_t(l)];
    A[g][2 * t] = lo(r[0]), A[g][2 * t + 1] = hi(r[0]);
    A[g + 8][2 * t] = lo(r[1]), A[g + 8][2 * t + 1] = hi(r[1]);
    A[g][2 * t + 8] = lo(r[2]), A[g][2 * t + 9] = hi(r[2]);
    A[g + 8][2 * t + 8] = lo(r[3]), A[g + 8][2 * t + 9] = hi(r[3]);
    const auto &q = b[size_t(l)];
    Bm[2 * t][g] = lo(q[0]), Bm[2 * t + 1][g] = hi(q[0]);
    Bm[2 * t + 8][g] = lo(q[1]), Bm[2 * t + 9][g] = hi(q[1]);
  }
  for (int l = 0; l < 32; ++l) {
    int g = l / 4, t = l % 4;
    int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t,
                                                   2 * t + 1};
    for (int r = 0; r < 4; ++r) {
      float acc = 0;
      for (int kk = 0; kk < 16; ++kk)
        acc += A[rows[r]][kk] * Bm[kk][cols[r]];
      c[size_t(l)][size_t(r)] += acc;
    }
  }
}

/// A row-major tile of bf16 values with the kernels' padded stride.
struct Tile {
  int rows, cols, stride;
  std::vector<bf16> data;
  Tile(int r, int c, std::mt19937 &rng)
      : rows(r), cols(c), stride(c + 8), data(size_t(r) * (c + 8), 0) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        data[size_t(i * stride + j)] = k::floatToBf16(dist(rng));
  }
  float at(int r, int c) const {
    return k::bf16ToFloat(data[size_t(r * stride + c)]);
  }
  const bf16 *ptr(int r, int c) const { return &data[size_t(r * stride + c)]; }
};

using Acc = std::array<std::array<float, 4>, 32>;

/// The kernels' loadA: 16 rows from row0, columns kk*16.. of `tile`.
WarpRegs<4> loadA(const Tile &tile, int row0, int kk) {
  std::array<const bf16 *, 32> rows{};
  for (int l = 0; l < 32; ++l)
    rows[size_t(l)] =
        tile.ptr(row0 + mf::aLoadRow(l), kk * 16 + mf::aLoadCol(l));
  return ldmatrix(rows, false);
}

/// The kernels' mmaABt: acc[n-block] += A . B^T, B rows in `tile`.
void mmaABt(std::vector<Acc> &acc, const Tile &a, int aRow0, const Tile &b,
            int K, int N) {
  for (int kk = 0; kk < K / 16; ++kk) {
    WarpRegs<4> af = loadA(a, aRow0, kk);
    for (int nn = 0; nn < N / 16; ++nn) {
      std::array<const bf16 *, 32> rows{};
      for (int l = 0; l < 32; ++l)
        rows[size_t(l)] =
            b.ptr(nn * 16 + mf::bLoadRow(l), kk * 16 + mf::bLoadCol(l));
      WarpRegs<4> bf = ldmatrix(rows, false);
      WarpRegs<2> b0{}, b1{};
      for (int l = 0; l < 32; ++l) {
        b0[size_t(l)] = {bf[size_t(l)][0], bf[size_t(l)][1]};
        b1[size_t(l)] = {bf[size_t(l)][2], bf[size_t(l)][3]};
      }
      mma(acc[size_t(2 * nn)], af, b0);
      mma(acc[size_t(2 * nn + 1)], af, b1);
    }
  }
}

/// The kernels' mmaPB: acc[d-block] += P . B with P (16 x K) in
/// accumulator layout, B stored [k][d] in `tile`.
void mmaPB(std::vector<Acc> &acc, const std::vector<Acc> &p, const Tile &b,
           int K, int D) {
  for (int kb = 0; kb < K / 16; ++kb) {
    WarpRegs<4> a{};
    for (int l = 0; l < 32; ++l)
      for (int reg = 0; reg < 4; ++reg) {
        const auto &c = p[size_t(2 * kb + mf::accToABlock(reg))][size_t(l)];
        int pair = 2 * mf::accToAPair(reg);
        a[size_t(l)][size_t(reg)] = pack(k::floatToBf16(c[size_t(pair)]),
                                         k::floatToBf16(c[size_t(pair + 1)]));
      }
    for (int dn = 0; dn < D / 16; ++dn) {
      std::array<const bf16 *, 32> rows{};
      for (int l = 0; l < 32; ++l)
        rows[size_t(l)] = b.ptr(kb * 16 + mf::bTransLoadRow(l),
                                dn * 16 + mf::bTransLoadCol(l));
      WarpRegs<4> bf = ldmatrix(rows, true);
      WarpRegs<2> b0{}, b1{};
      for (int l = 0; l < 32; ++l) {
        b0[size_t(l)] = {bf[size_t(l)][0], bf[size_t(l)][1]};
        b1[size_t(l)] = {bf[size_t(l)][2], bf[size_t(l)][3]};
      }
      mma(acc[size_t(2 * dn)], a, b0);
      mma(acc[size_t(2 * dn + 1)], a, b1);
    }
  }
}

/// Reads accumulator element (row, col) of a 16 x (8 * blocks) tile.
float accAt(const std::vector<Acc> &acc, int row, int col) {
  for (int l = 0; l < 32; ++l)
    for (int r = 0; r < 4; ++r)
      if (mf::accRow(l, r) == row && mf::accCol(l, r) == col % 8)
        return acc[size_t(col / 8)][size_t(l)][size_t(r)];
  ADD_FAILURE() << "no lane holds (" << row << ", " << col << ")";
  return NAN;
}

TEST(MmaFragments, AccumulatorLayoutCoversTheTileOnce) {
  int seen[16][8] = {};
  for (int l = 0; l < 32; ++l)
    for (int r = 0; r < 4; ++r)
      ++seen[mf::accRow(l, r)][mf::accCol(l, r)];
  for (auto &row : seen)
    for (int count : row)
      EXPECT_EQ(count, 1);
}

class MmaProducts : public ::testing::TestWithParam<int> {};

// S = Q K^T for a warp's 16 query rows (row0 = 16: the second warp) over a
// key tile, for each head dimension the kernels instantiate.
TEST_P(MmaProducts, QueryKeyScoresMatchLoops) {
  const int D = GetParam(), keys = 64;
  std::mt19937 rng{uint32_t(D)};
  Tile q(64, D, rng), kt(keys, D, rng);
  std::vector<Acc> s(size_t(keys / 8), Acc{});
  mmaABt(s, q, 16, kt, D, keys);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < keys; ++j) {
      double ref = 0;
      for (int d = 0; d < D; ++d)
        ref += double(q.at(16 + i, d)) * double(kt.at(j, d));
      EXPECT_NEAR(accAt(s, i, j), ref, 1e-3 * (1 + std::fabs(ref)))
          << "row " << i << " key " << j;
    }
}

// O = P V with P from the accumulators (rounded to bf16, as the kernel
// packs it) and V rows [key][d] read transposed.
TEST_P(MmaProducts, ProbabilityTimesValuesMatchesLoops) {
  const int D = GetParam(), keys = 64;
  std::mt19937 rng{uint32_t(100 + D)};
  Tile v(keys, D, rng);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<Acc> p(size_t(keys / 8));
  for (auto &block : p)
    for (auto &lane : block)
      for (float &x : lane)
        x = dist(rng);
  std::vector<Acc> o(size_t(D / 8), Acc{});
  mmaPB(o, p, v, keys, D);
  for (int i = 0; i < 16; ++i)
    for (int d = 0; d < D; ++d) {
      double ref = 0;
      for (int j = 0; j < keys; ++j)
        ref += double(k::bf16ToFloat(k::floatToBf16(accAt(p, i, j)))) *
               double(v.at(j, d));
      EXPECT_NEAR(accAt(o, i, d), ref, 1e-3 * (1 + std::fabs(ref)))
          << "row " << i << " column " << d;
    }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, MmaProducts,
                         ::testing::Values(16, 32, 64, 128));

// The padded stride puts the eight rows one ldmatrix phase reads in eight
// different 16-byte bank groups, for every head dimension.
TEST(MmaFragments, PaddedRowsAvoidBankConflicts) {
  for (int D : {16, 32, 64, 128}) {
    int strideBytes = 2 * (D + 8);
    for (int phase = 0; phase < 4; ++phase) {
      bool used[8] = {};
      for (int r = 0; r < 8; ++r) {
        int group = ((phase * 8 + r) * strideBytes / 16) % 8;
        EXPECT_FALSE(used[group]) << "D " << D << " row " << r;
        used[group] = true;
      }
    }
  }
}

} // namespace
