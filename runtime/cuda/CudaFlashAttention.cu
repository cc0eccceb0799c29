//===- CudaFlashAttention.cu - bf16 causal attention on tensor cores ------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// FlashAttention-2 (Dao 2023) for bf16 programs on sm_80 and later: the
// products run on the tensor cores (mma.sync.m16n8k16, bf16 operands,
// float32 accumulators), tiles move into shared memory with cp.async and out
// of it with ldmatrix. Layouts and semantics are runtime/cpu/
// AttentionKernels.h's: q, out, dout, dq [batch, heads, seq, D]; k, v, dk,
// dv [batch, kvHeads, seq, D] (bf16); lse [batch, heads, seq] (float32);
// query head h reads kv head h / (heads / kvHeads). The per-row arithmetic
// is runtime/kernels/AttentionMath.h's and the fragment layouts
// runtime/kernels/MmaFragments.h's, which the host test emulates.
//
//   forward: block = (query tile of 64 rows, batch * head), four warps of
//     16 rows; Q stays in registers, each key tile up to the diagonal
//     passes through shared memory: S = Q K^T, online softmax in registers
//     (exp2 of pre-scaled scores), O += P V with P taken straight from the
//     accumulators.
//   backward: D_i = dO_i . O_i first (one warp per row); then
//     dq: block = (query tile, batch * head): per key tile, S, P from lse,
//       dP = dO V^T, dS, dQ += dS K;
//     dk, dv: block = (key tile of 64, batch * kv head): per query head of
//       the group and query tile at or below the diagonal, S^T = K Q^T,
//       P^T, dV += P^T dO, dP^T = V dO^T, dS^T, dK += dS^T Q.
//   Every output element has one writer and a fixed summation order: the
//   results are deterministic (no atomics).
//
// Head dimensions 16, 32, 64 and 128 have kernels; others (and operands
// off 16-byte alignment) run the float32 kernel on widened copies
// (CudaDevice stages them).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaKernels.h"

#include "runtime/kernels/AttentionMath.h"
#include "runtime/kernels/Bf16Math.h"
#include "runtime/kernels/MmaFragments.h"

#include <cfloat>
#include <cstdint>

namespace strata::rt::cuda {

namespace k = strata::kernels;
namespace mf = strata::kernels::mma;

namespace {

using bf16 = uint16_t;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct Exp2 {
  __device__ float operator()(float x) const { return exp2f(x); }
};
struct DeviceExp {
  __device__ float operator()(float x) const { return __expf(x); }
};
struct DeviceLog {
  __device__ float operator()(float x) const { return logf(x); }
};

//===--- Warp-level primitives -------------------------------------------===//

__device__ inline uint32_t sharedAddress(const void *p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

__device__ inline void ldmatrixX4(uint32_t (&r)[4], const bf16 *p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(sharedAddress(p)));
}

__device__ inline void ldmatrixX4Trans(uint32_t (&r)[4], const bf16 *p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, "
      "[%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(sharedAddress(p)));
}

/// c += a b (16 x 8 += 16 x 16 . 16 x 8), bf16 operands, float32 sums.
__device__ inline void mma16816(float (&c)[4], const uint32_t (&a)[4],
                                uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                 "r"(b1));
}

/// Two floats rounded to nearest-even bf16, `lo` in the low half.
__device__ inline uint32_t packBf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ inline void cpAsync16(bf16 *dst, const bf16 *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                   sharedAddress(dst)),
               "l"(src));
}
__device__ inline void cpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
__device__ inline void cpAsyncWaitAll() {
  asm volatile("cp.async.wait_group 0;\n" ::);
}
/// Waits for all but the most recent group (the prefetch in flight).
__device__ inline void cpAsyncWaitPrior() {
  asm volatile("cp.async.wait_group 1;\n" ::);
}

/// Max / sum over the four lanes of a quad (the lanes that share rows).
__device__ inline float quadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ inline float quadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/// Rows [start, start + rows) of a [seq, D] bf16 matrix into a tile of
/// `rows` rows of stride D + 8 (the padding puts the eight rows that one
/// ldmatrix reads in eight different bank groups); rows past `seq` are
/// zeros. Issued by the whole block; completes at cpAsyncWaitAll.
template <int D>
__device__ inline void loadTile(bf16 *tile, const bf16 *src, int start,
                                int rows, int seq) {
  constexpr int kChunks = D / 8; // 16-byte chunks per row
  for (int c = threadIdx.x; c < rows * kChunks; c += kThreads) {
    int r = c / kChunks, col = (c % kChunks) * 8;
    bf16 *dst = tile + r * (D + 8) + col;
    if (start + r < seq)
      cpAsync16(dst, src + int64_t(start + r) * D + col);
    else
      *reinterpret_cast<uint4 *>(dst) = make_uint4(0, 0, 0, 0);
  }
}

/// The A fragments (16 rows from `row0`, every 16-column step of D) of a
/// tile in shared memory.
template <int D>
__device__ inline void loadA(uint32_t (&a)[D / 16][4], const bf16 *tile,
                             int row0, int lane) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    ldmatrixX4(a[kk], tile + (row0 + mf::aLoadRow(lane)) * (D + 8) + kk * 16 +
                          mf::aLoadCol(lane));
}

/// acc[n] += A . B^T for N columns, where B is stored [n][k] in `tile` (row
/// stride LD): S = Q K^T with K rows, or dP = dO V^T with V rows.
template <int K, int N, int LD>
__device__ inline void mmaABt(float (&acc)[N / 8][4],
                              const uint32_t (&a)[K / 16][4], const bf16 *tile,
                              int lane) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk)
#pragma unroll
    for (int nn = 0; nn < N / 16; ++nn) {
      uint32_t b[4];
      ldmatrixX4(b, tile + (nn * 16 + mf::bLoadRow(lane)) * LD + kk * 16 +
                        mf::bLoadCol(lane));
      mma16816(acc[2 * nn], a[kk], b[0], b[1]);
      mma16816(acc[2 * nn + 1], a[kk], b[2], b[3]);
    }
}

/// acc[n] += P . B for the D columns of B stored [k][n] in `tile` (row
/// stride D + 8), where P is 16 x K in accumulator layout (n-blocks of 8)
/// rounded to bf16: O += P V, dV += P^T dO, dQ += dS K, dK += dS^T Q.
template <int K, int D>
__device__ inline void mmaPB(float (&acc)[D / 8][4], const float (&p)[K / 8][4],
                             const bf16 *tile, int lane) {
#pragma unroll
  for (int kb = 0; kb < K / 16; ++kb) {
    uint32_t a[4];
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const float *c = p[2 * kb + mf::accToABlock(reg)];
      int pair = 2 * mf::accToAPair(reg);
      a[reg] = packBf16(c[pair], c[pair + 1]);
    }
#pragma unroll
    for (int dn = 0; dn < D / 16; ++dn) {
      uint32_t b[4];
      ldmatrixX4Trans(b, tile + (kb * 16 + mf::bTransLoadRow(lane)) * (D + 8) +
                             dn * 16 + mf::bTransLoadCol(lane));
      mma16816(acc[2 * dn], a, b[0], b[1]);
      mma16816(acc[2 * dn + 1], a, b[2], b[3]);
    }
  }
}

/// Stores 16 rows (from `row0`) of a float32 accumulator tile as bf16 rows
/// of D, times `scale`, skipping rows at or past `seq`.
template <int D>
__device__ inline void storeRows(bf16 *dst, const float (&acc)[D / 8][4],
                                 int row0, int seq, int lane, float scaleLo,
                                 float scaleHi) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    int row = row0 + mf::accRow(lane, 2 * half);
    if (row >= seq)
      continue;
    float sc = half ? scaleHi : scaleLo;
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb) {
      int col = nb * 8 + mf::accCol(lane, 0);
      *reinterpret_cast<uint32_t *>(dst + int64_t(row) * D + col) =
          packBf16(acc[nb][2 * half] * sc, acc[nb][2 * half + 1] * sc);
    }
  }
}

//===--- Forward ---------------------------------------------------------===//

constexpr int kTileRows = 64; // query rows per block: 16 per warp

template <int D> constexpr int keyTile() { return D <= 64 ? 64 : 32; }

template <int D>
__global__ void __launch_bounds__(kThreads)
    flashFwdKernel(const bf16 *q, const bf16 *kIn, const bf16 *v, bf16 *out,
                   float *lse, int heads, int kvHeads, int seq, float scale) {
  constexpr int Br = kTileRows, Bc = keyTile<D>(), LD = D + 8;
  extern __shared__ __align__(16) unsigned char smemBytes[];
  // Q, then two buffers of K and V: the next key tile loads while this one
  // is used.
  bf16 *sQ = reinterpret_cast<bf16 *>(smemBytes);
  bf16 *const sKs = sQ + Br * LD, *const sVs = sKs + 2 * Bc * LD;
  auto sK = [&](int i) { return sKs + i * Bc * LD; };
  auto sV = [&](int i) { return sVs + i * Bc * LD; };

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // Longest rows first: the last query tiles see the most keys.
  const int qTile = gridDim.x - 1 - blockIdx.x, q0 = qTile * Br;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const int kvh = h / (heads / kvHeads);
  const bf16 *qBase = q + int64_t(bh) * seq * D;
  const bf16 *kBase = kIn + int64_t(b * kvHeads + kvh) * seq * D;
  const bf16 *vBase = v + int64_t(b * kvHeads + kvh) * seq * D;

  loadTile<D>(sQ, qBase, q0, Br, seq);
  loadTile<D>(sK(0), kBase, 0, Bc, seq);
  loadTile<D>(sV(0), vBase, 0, Bc, seq);
  cpAsyncCommit();

  uint32_t qf[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float rowMax[2] = {-INFINITY, -INFINITY}, rowSum[2] = {0.0f, 0.0f};
  const int rowBase = q0 + warp * 16;
  const float scaleLog2 = scale * kLog2e;

  const int lastRow = min(q0 + Br, seq) - 1;
  const int tiles = lastRow / Bc + 1;
  for (int j = 0; j < tiles; ++j) {
    const int k0 = j * Bc, cur = j & 1;
    if (j + 1 < tiles) {
      // The buffer this prefetch fills was last read in iteration j - 1,
      // which every warp finished (the barrier at its end).
      loadTile<D>(sK(cur ^ 1), kBase, k0 + Bc, Bc, seq);
      loadTile<D>(sV(cur ^ 1), vBase, k0 + Bc, Bc, seq);
      cpAsyncCommit();
      cpAsyncWaitPrior();
    } else {
      cpAsyncWaitAll();
    }
    __syncthreads();
    if (j == 0)
      loadA<D>(qf, sQ, warp * 16, lane);

    float s[Bc / 8][4];
#pragma unroll
    for (int i = 0; i < Bc / 8; ++i)
      s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
    mmaABt<D, Bc, LD>(s, qf, sK(cur), lane);

    // Scale into the exp2 domain; mask keys after the row (and past seq,
    // which are after every real row).
    const bool diagonal = k0 + Bc - 1 > rowBase;
#pragma unroll
    for (int nb = 0; nb < Bc / 8; ++nb)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        float x = s[nb][r] * scaleLog2;
        if (diagonal) {
          int row = rowBase + mf::accRow(lane, r);
          int key = k0 + nb * 8 + mf::accCol(lane, r);
          if (key > row)
            x = -INFINITY;
        }
        s[nb][r] = x;
      }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = rowMax[half];
#pragma unroll
      for (int nb = 0; nb < Bc / 8; ++nb)
        mx = fmaxf(mx, fmaxf(s[nb][2 * half], s[nb][2 * half + 1]));
      mx = quadMax(mx);
      // Every row sees key 0 in the first tile, so mx is finite here.
      float c = k::onlineRescale(rowMax[half], mx, Exp2());
      rowMax[half] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < Bc / 8; ++nb) {
        s[nb][2 * half] = exp2f(s[nb][2 * half] - mx);
        s[nb][2 * half + 1] = exp2f(s[nb][2 * half + 1] - mx);
        sum += s[nb][2 * half] + s[nb][2 * half + 1];
      }
      rowSum[half] = rowSum[half] * c + sum; // this lane's part of the row
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        o[i][2 * half] *= c;
        o[i][2 * half + 1] *= c;
      }
    }
    mmaPB<Bc, D>(o, s, sV(cur), lane);
    __syncthreads(); // before iteration j + 1 prefetches into this buffer
  }

  float inv[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float l = quadSum(rowSum[half]);
    inv[half] = 1.0f / l;
    int row = rowBase + mf::accRow(lane, 2 * half);
    if (lane % 4 == 0 && row < seq)
      lse[int64_t(bh) * seq + row] =
          k::logSumExp(rowMax[half] * kLn2, l, DeviceLog());
  }
  storeRows<D>(out + int64_t(bh) * seq * D, o, rowBase, seq, lane, inv[0],
               inv[1]);
}

//===--- Backward --------------------------------------------------------===//

/// rowDot[i] = dO_i . O_i (float32), one warp per row.
__global__ void flashRowDotKernel(const bf16 *dout, const bf16 *out,
                                  float *rowDot, int64_t rows, int D) {
  int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows)
    return;
  const bf16 *a = dout + row * D, *b = out + row * D;
  float acc = 0.0f;
  for (int d = lane; d < D; d += 32)
    acc += k::bf16ToFloat(a[d]) * k::bf16ToFloat(b[d]);
  for (int off = 16; off > 0; off /= 2)
    acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0)
    rowDot[row] = acc;
}

/// dq: block = (query tile, batch * head).
template <int D>
__global__ void __launch_bounds__(kThreads)
    flashBwdQueryKernel(const bf16 *dout, const bf16 *q, const bf16 *kIn,
                        const bf16 *v, const float *lse, const float *rowDot,
                        bf16 *dq, int heads, int kvHeads, int seq,
                        float scale) {
  constexpr int Br = kTileRows, Bc = keyTile<D>(), LD = D + 8;
  extern __shared__ __align__(16) unsigned char smemBytes[];
  bf16 *sQ = reinterpret_cast<bf16 *>(smemBytes);
  bf16 *sDO = sQ + Br * LD;
  bf16 *const sKs = sDO + Br * LD, *const sVs = sKs + 2 * Bc * LD;
  auto sK = [&](int i) { return sKs + i * Bc * LD; };
  auto sV = [&](int i) { return sVs + i * Bc * LD; };

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int qTile = gridDim.x - 1 - blockIdx.x, q0 = qTile * Br;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const int kvh = h / (heads / kvHeads);
  const int64_t rowsAt = int64_t(bh) * seq;
  const bf16 *kBase = kIn + int64_t(b * kvHeads + kvh) * seq * D;
  const bf16 *vBase = v + int64_t(b * kvHeads + kvh) * seq * D;

  loadTile<D>(sQ, q + rowsAt * D, q0, Br, seq);
  loadTile<D>(sDO, dout + rowsAt * D, q0, Br, seq);
  loadTile<D>(sK(0), kBase, 0, Bc, seq);
  loadTile<D>(sV(0), vBase, 0, Bc, seq);
  cpAsyncCommit();

  const int rowBase = q0 + warp * 16;
  float rowLse[2], rowD[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    int row = rowBase + mf::accRow(lane, 2 * half);
    rowLse[half] = row < seq ? lse[rowsAt + row] : INFINITY;
    rowD[half] = row < seq ? rowDot[rowsAt + row] : 0.0f;
  }
  uint32_t qf[D / 16][4], dof[D / 16][4];
  float dqAcc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
    dqAcc[i][0] = dqAcc[i][1] = dqAcc[i][2] = dqAcc[i][3] = 0.0f;

  const int lastRow = min(q0 + Br, seq) - 1;
  const int tiles = lastRow / Bc + 1;
  for (int j = 0; j < tiles; ++j) {
    const int k0 = j * Bc, cur = j & 1;
    if (j + 1 < tiles) {
      loadTile<D>(sK(cur ^ 1), kBase, k0 + Bc, Bc, seq);
      loadTile<D>(sV(cur ^ 1), vBase, k0 + Bc, Bc, seq);
      cpAsyncCommit();
      cpAsyncWaitPrior();
    } else {
      cpAsyncWaitAll();
    }
    __syncthreads();
    if (j == 0) {
      loadA<D>(qf, sQ, warp * 16, lane);
      loadA<D>(dof, sDO, warp * 16, lane);
    }
    float s[Bc / 8][4], dp[Bc / 8][4];
#pragma unroll
    for (int i = 0; i < Bc / 8; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        s[i][r] = dp[i][r] = 0.0f;
    mmaABt<D, Bc, LD>(s, qf, sK(cur), lane);
    mmaABt<D, Bc, LD>(dp, dof, sV(cur), lane);
#pragma unroll
    for (int nb = 0; nb < Bc / 8; ++nb)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        int row = rowBase + mf::accRow(lane, r);
        int key = k0 + nb * 8 + mf::accCol(lane, r);
        int half = r / 2;
        float p = key > row ? 0.0f
                            : k::recomputedProbability(s[nb][r], scale,
                                                       rowLse[half],
                                                       DeviceExp());
        s[nb][r] = k::rawScoreGradient(p, dp[nb][r], rowD[half], scale);
      }
    mmaPB<Bc, D>(dqAcc, s, sK(cur), lane);
    __syncthreads(); // before iteration j + 1 prefetches into this buffer
  }
  storeRows<D>(dq + rowsAt * D, dqAcc, rowBase, seq, lane, 1.0f, 1.0f);
}

/// dk, dv: block = (key tile, batch * kv head); sums over the group's query
/// heads in order.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flashBwdKeyKernel(const bf16 *dout, const bf16 *q, const bf16 *kIn,
                      const bf16 *v, const float *lse, const float *rowDot,
                      bf16 *dk, bf16 *dv, int heads, int kvHeads, int seq,
                      float scale) {
  constexpr int Bk = kTileRows, Bq = keyTile<D>(), LD = D + 8;
  extern __shared__ __align__(16) unsigned char smemBytes[];
  // K and V, then two buffers of (Q, dO, lse, D) for the query tiles.
  bf16 *sK = reinterpret_cast<bf16 *>(smemBytes);
  bf16 *sV = sK + Bk * LD;
  bf16 *const tiles2 = sV + Bk * LD; // [buffer][Q | dO]
  float *const stats2 = reinterpret_cast<float *>(tiles2 + 4 * Bq * LD);
  auto sQ = [&](int i) { return tiles2 + i * 2 * Bq * LD; };
  auto sDO = [&](int i) { return tiles2 + i * 2 * Bq * LD + Bq * LD; };
  auto sLse = [&](int i) { return stats2 + i * 2 * Bq; };
  auto sDot = [&](int i) { return stats2 + i * 2 * Bq + Bq; };

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int kTile = gridDim.x - 1 - blockIdx.x, k0 = kTile * Bk;
  const int bkv = blockIdx.y, b = bkv / kvHeads, kvh = bkv % kvHeads;
  const int group = heads / kvHeads;
  const int64_t kvRowsAt = int64_t(bkv) * seq;

  loadTile<D>(sK, kIn + kvRowsAt * D, k0, Bk, seq);
  loadTile<D>(sV, v + kvRowsAt * D, k0, Bk, seq);
  cpAsyncCommit();

  const int keyBase = k0 + warp * 16;
  float dkAcc[D / 8][4], dvAcc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      dkAcc[i][r] = dvAcc[i][r] = 0.0f;

  // Query tiles that reach this key tile (rows >= k0), for every query
  // head of the group: one flat list of items, the next prefetched while
  // this one is used.
  const int firstTile = k0 / Bq;
  const int tilesPerHead = (seq + Bq - 1) / Bq - firstTile;
  const int items = group * tilesPerHead;
  auto issue = [&](int item, int buffer) {
    const int h = kvh * group + item / tilesPerHead;
    const int q0 = (firstTile + item % tilesPerHead) * Bq;
    const int64_t rowsAt = int64_t(b * heads + h) * seq;
    loadTile<D>(sQ(buffer), q + rowsAt * D, q0, Bq, seq);
    loadTile<D>(sDO(buffer), dout + rowsAt * D, q0, Bq, seq);
    for (int r = threadIdx.x; r < Bq; r += kThreads) {
      bool real = q0 + r < seq;
      sLse(buffer)[r] = real ? lse[rowsAt + q0 + r] : INFINITY;
      sDot(buffer)[r] = real ? rowDot[rowsAt + q0 + r] : 0.0f;
    }
    cpAsyncCommit();
  };
  issue(0, 0);
  for (int item = 0; item < items; ++item) {
    const int cur = item & 1;
    const int q0 = (firstTile + item % tilesPerHead) * Bq;
    if (item + 1 < items) {
      issue(item + 1, cur ^ 1);
      cpAsyncWaitPrior();
    } else {
      cpAsyncWaitAll();
    }
    __syncthreads();

    uint32_t kf[D / 16][4];
    loadA<D>(kf, sK, warp * 16, lane);
    float st[Bq / 8][4], dpt[Bq / 8][4];
#pragma unroll
    for (int n = 0; n < Bq / 8; ++n)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        st[n][r] = dpt[n][r] = 0.0f;
    mmaABt<D, Bq, LD>(st, kf, sQ(cur), lane); // S^T = K Q^T
    {
      uint32_t vf[D / 16][4];
      loadA<D>(vf, sV, warp * 16, lane);
      mmaABt<D, Bq, LD>(dpt, vf, sDO(cur), lane); // dP^T = V dO^T
    }
#pragma unroll
    for (int nb = 0; nb < Bq / 8; ++nb)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        int key = keyBase + mf::accRow(lane, r);
        int qc = nb * 8 + mf::accCol(lane, r);
        int row = q0 + qc;
        float p = key > row || row >= seq
                      ? 0.0f
                      : k::recomputedProbability(st[nb][r], scale,
                                                 sLse(cur)[qc], DeviceExp());
        st[nb][r] = p;
        dpt[nb][r] = k::rawScoreGradient(p, dpt[nb][r], sDot(cur)[qc], scale);
      }
    mmaPB<Bq, D>(dvAcc, st, sDO(cur), lane); // dV += P^T dO
    mmaPB<Bq, D>(dkAcc, dpt, sQ(cur), lane); // dK += dS^T Q
    __syncthreads(); // before item + 1 prefetches into this buffer
  }
  storeRows<D>(dk + kvRowsAt * D, dkAcc, keyBase, seq, lane, 1.0f, 1.0f);
  storeRows<D>(dv + kvRowsAt * D, dvAcc, keyBase, seq, lane, 1.0f, 1.0f);
}

template <int D> size_t fwdShared() {
  return sizeof(bf16) * (kTileRows + 4 * keyTile<D>()) * (D + 8);
}
template <int D> size_t bwdQueryShared() {
  return sizeof(bf16) * (2 * kTileRows + 4 * keyTile<D>()) * (D + 8);
}
template <int D> size_t bwdKeyShared() {
  return sizeof(bf16) * (2 * kTileRows + 4 * keyTile<D>()) * (D + 8) +
         4 * sizeof(float) * keyTile<D>();
}

/// Raises a kernel's dynamic shared-memory limit once (above 48 KiB a
/// kernel must opt in).
template <typename Kernel>
void allowShared(Kernel kernel, size_t bytes, bool &done) {
  if (done)
    return;
  if (bytes > 48 * 1024)
    check(cudaFuncSetAttribute(kernel,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(bytes)),
          "raising the attention kernel's shared-memory limit");
  done = true;
}

template <int D>
void launchFwd(const bf16 *q, const bf16 *kIn, const bf16 *v, bf16 *out,
               float *lse, int64_t batch, int64_t heads, int64_t kvHeads,
               int64_t seq, float scale, Stream s) {
  static bool ready = false;
  size_t shared = fwdShared<D>();
  allowShared(flashFwdKernel<D>, shared, ready);
  dim3 grid(unsigned((seq + kTileRows - 1) / kTileRows),
            unsigned(batch * heads));
  flashFwdKernel<D><<<grid, kThreads, shared, s>>>(
      q, kIn, v, out, lse, int(heads), int(kvHeads), int(seq), scale);
}

template <int D>
void launchBwd(const bf16 *dout, const bf16 *q, const bf16 *kIn, const bf16 *v,
               const float *lse, float *rowDot, bf16 *dq, bf16 *dk, bf16 *dv,
               int64_t batch, int64_t heads, int64_t kvHeads, int64_t seq,
               float scale, Stream s) {
  static bool readyQ = false, readyK = false;
  size_t sharedQ = bwdQueryShared<D>(), sharedK = bwdKeyShared<D>();
  allowShared(flashBwdQueryKernel<D>, sharedQ, readyQ);
  allowShared(flashBwdKeyKernel<D>, sharedK, readyK);
  dim3 gridQ(unsigned((seq + kTileRows - 1) / kTileRows),
             unsigned(batch * heads));
  flashBwdQueryKernel<D><<<gridQ, kThreads, sharedQ, s>>>(
      dout, q, kIn, v, lse, rowDot, dq, int(heads), int(kvHeads), int(seq),
      scale);
  dim3 gridK(unsigned((seq + kTileRows - 1) / kTileRows),
             unsigned(batch * kvHeads));
  flashBwdKeyKernel<D><<<gridK, kThreads, sharedK, s>>>(
      dout, q, kIn, v, lse, rowDot, dk, dv, int(heads), int(kvHeads), int(seq),
      scale);
}

bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

} // namespace

bool flashAttentionSupports(int64_t headDim, const void *const *operands,
                            int count) {
  if (headDim != 16 && headDim != 32 && headDim != 64 && headDim != 128)
    return false;
  for (int i = 0; i < count; ++i)
    if (operands[i] && !aligned16(operands[i]))
      return false;
  return true;
}

size_t flashAttentionScratchBytes(int64_t batch, int64_t heads, int64_t seq) {
  return sizeof(float) * size_t(batch * heads * seq);
}

void flashAttentionFwd(const uint16_t *q, const uint16_t *kIn,
                       const uint16_t *v, uint16_t *out, float *lse,
                       int64_t batch, int64_t heads, int64_t kvHeads,
                       int64_t seq, int64_t headDim, float scale, Stream s) {
  switch (headDim) {
  case 16:
    return launchFwd<16>(q, kIn, v, out, lse, batch, heads, kvHeads, seq,
                         scale, s);
  case 32:
    return launchFwd<32>(q, kIn, v, out, lse, batch, heads, kvHeads, seq,
                         scale, s);
  case 64:
    return launchFwd<64>(q, kIn, v, out, lse, batch, heads, kvHeads, seq,
                         scale, s);
  default:
    return launchFwd<128>(q, kIn, v, out, lse, batch, heads, kvHeads, seq,
                          scale, s);
  }
}

void flashAttentionBwd(const uint16_t *dout, const uint16_t *q,
                       const uint16_t *kIn, const uint16_t *v,
                       const uint16_t *out, const float *lse, uint16_t *dq,
                       uint16_t *dk, uint16_t *dv, float *rowDot,
                       int64_t batch, int64_t heads, int64_t kvHeads,
                       int64_t seq, int64_t headDim, float scale, Stream s) {
  int64_t rows = batch * heads * seq;
  flashRowDotKernel<<<unsigned((rows + kWarps - 1) / kWarps), kThreads, 0,
                      s>>>(dout, out, rowDot, rows, int(headDim));
  switch (headDim) {
  case 16:
    return launchBwd<16>(dout, q, kIn, v, lse, rowDot, dq, dk, dv, batch, heads,
                         kvHeads, seq, scale, s);
  case 32:
    return launchBwd<32>(dout, q, kIn, v, lse, rowDot, dq, dk, dv, batch, heads,
                         kvHeads, seq, scale, s);
  case 64:
    return launchBwd<64>(dout, q, kIn, v, lse, rowDot, dq, dk, dv, batch, heads,
                         kvHeads, seq, scale, s);
  default:
    return launchBwd<128>(dout, q, kIn, v, lse, rowDot, dq, dk, dv, batch,
                          heads, kvHeads, seq, scale, s);
  }
}

} // namespace strata::rt::cuda
