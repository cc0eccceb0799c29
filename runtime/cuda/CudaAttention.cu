//===- CudaAttention.cu - Fused causal attention on CUDA ------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// FlashAttention-2 forward and backward in fp32, with the layouts and
// semantics of runtime/cpu/AttentionKernels.h: q, out, dout, dq are
// [batch, heads, seq, headDim], k, v, dk, dv [batch, kvHeads, seq, headDim],
// lse [batch, heads, seq]; query head h reads kv head h / (heads / kvHeads).
// The online-softmax and score-gradient arithmetic is
// runtime/kernels/AttentionMath.h, the functions the CPU kernel runs.
//
// Simple first: a block owns one tile of T rows and walks the other
// operand's tiles through shared memory; the products are plain loops of
// fp32 multiply-adds (no tensor cores yet), so no [seq x seq] buffer exists.
//   forward: block = (batch * head, query tile); per key tile up to the
//     diagonal: S = Q K^T, online softmax per row, O = c O + P V; at the end
//     O /= l and lse = m + log l.
//   backward dq: block = (batch * head, query tile); D_i = dO_i . O_i; per
//     key tile: P from S and lse, dP = dO V^T, dS, dQ += dS K.
//   backward dk, dv: block = (batch * kv head, key tile); per query head of
//     the group and query tile at or below the diagonal: P, dS as above (D_i
//     recomputed from the tile's dO and O), dV += P^T dO, dK += dS^T Q.
// Each output element has one writer, so dk, dv need no atomics and every
// result is deterministic.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaKernels.h"

#include "runtime/kernels/AttentionMath.h"

#include <cfloat>
#include <cstdio>
#include <cstdlib>

namespace strata::rt::cuda {

namespace k = strata::kernels;

namespace {

constexpr int kAttentionThreads = 256;

struct DeviceExp {
  __device__ float operator()(float x) const { return expf(x); }
};
struct DeviceLog {
  __device__ float operator()(float x) const { return logf(x); }
};

/// Rows (and keys) per tile: 32 while the tiles of a 64-wide head fit, 16
/// for wider heads, so the backward's eight tiles stay within 64 KiB for
/// headDim <= 128.
int attentionTile(int64_t headDim) { return headDim <= 64 ? 32 : 16; }

/// Copies rows [start, start + rows) of a [seq, D] matrix into a T x D
/// tile; missing rows become zeros.
__device__ void loadTile(float *tile, const float *src, int64_t start,
                         int64_t rows, int T, int64_t D) {
  for (int64_t e = threadIdx.x; e < T * D; e += blockDim.x) {
    int64_t r = e / D;
    tile[e] = r < rows ? src[(start + r) * D + e % D] : 0.0f;
  }
}

/// out[r][c] = sum_d a[r][d] b[c][d] for a T x T result.
__device__ void rowDots(float *out, const float *a, const float *b, int T,
                        int64_t D) {
  for (int e = threadIdx.x; e < T * T; e += blockDim.x) {
    const float *ar = a + (e / T) * D, *bc = b + (e % T) * D;
    float acc = 0.0f;
    for (int64_t d = 0; d < D; ++d)
      acc += ar[d] * bc[d];
    out[e] = acc;
  }
}

__global__ void causalAttentionFwdKernel(const float *q, const float *kIn,
                                         const float *vIn, float *out,
                                         float *lse, int64_t heads,
                                         int64_t kvHeads, int64_t S, int64_t D,
                                         float scale, int T) {
  extern __shared__ float smem[];
  float *qs = smem, *ks = qs + T * D, *vs = ks + T * D, *os = vs + T * D;
  float *ss = os + T * D, *rowMax = ss + T * T, *rowSum = rowMax + T,
        *rescale = rowSum + T;
  int64_t bh = blockIdx.x, b = bh / heads, h = bh % heads;
  int64_t kvh = h / (heads / kvHeads);
  int64_t i0 = int64_t(blockIdx.y) * T, rows = min(int64_t(T), S - i0);
  const float *qh = q + bh * S * D;
  const float *kh = kIn + (b * kvHeads + kvh) * S * D;
  const float *vh = vIn + (b * kvHeads + kvh) * S * D;
  loadTile(qs, qh, i0, rows, T, D);
  for (int64_t e = threadIdx.x; e < T * D; e += blockDim.x)
    os[e] = 0.0f;
  for (int r = threadIdx.x; r < T; r += blockDim.x) {
    rowMax[r] = -INFINITY;
    rowSum[r] = 0.0f;
  }
  __syncthreads();
  for (int64_t j0 = 0; j0 < i0 + rows; j0 += T) {
    int64_t cols = min(int64_t(T), i0 + rows - j0);
    loadTile(ks, kh, j0, cols, T, D);
    loadTile(vs, vh, j0, cols, T, D);
    __syncthreads();
    rowDots(ss, qs, ks, T, D);
    __syncthreads();
    // One thread per row: the online softmax of its scores in this tile.
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      float *sr = ss + r * T;
      int64_t valid = k::causalValidKeys(i0 + r, j0, cols);
      float tileMax = -INFINITY;
      for (int64_t c = 0; c < valid; ++c)
        tileMax = fmaxf(tileMax, scale * sr[c]);
      float newMax = fmaxf(rowMax[r], tileMax), acc = 0.0f;
      for (int64_t c = 0; c < T; ++c) {
        float p = c < valid ? expf(scale * sr[c] - newMax) : 0.0f;
        sr[c] = p;
        acc += p;
      }
      // Every row has a key in the first tile, so newMax is finite; a row
      // with no key in a later tile keeps its maximum (factor 1).
      float c = k::onlineRescale(rowMax[r], newMax, DeviceExp());
      rowSum[r] = rowSum[r] * c + acc;
      rowMax[r] = newMax;
      rescale[r] = c;
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < rows * D; e += blockDim.x) {
      int64_t r = e / D, d = e % D;
      const float *pr = ss + r * T;
      float acc = 0.0f;
      for (int c = 0; c < T; ++c)
        acc += pr[c] * vs[c * D + d];
      os[e] = os[e] * rescale[r] + acc;
    }
    __syncthreads();
  }
  for (int64_t e = threadIdx.x; e < rows * D; e += blockDim.x)
    out[bh * S * D + (i0 + e / D) * D + e % D] = os[e] / rowSum[e / D];
  for (int r = threadIdx.x; r < rows; r += blockDim.x)
    lse[bh * S + i0 + r] = k::logSumExp(rowMax[r], rowSum[r], DeviceLog());
}

/// P and dS of the score tile of query rows [i0, i0 + rows) and keys
/// [j0, j0 + cols), from the tiles qs, dos (query side), ks, vs (key side),
/// the rows' lse and D: ps = P, dss = dS (both T x T, zero where masked).
__device__ void scoreGradientTile(float *ps, float *dss, const float *qs,
                                  const float *dos, const float *ks,
                                  const float *vs, const float *rowLse,
                                  const float *rowDot, int64_t i0, int64_t rows,
                                  int64_t j0, int64_t cols, int T, int64_t D,
                                  float scale) {
  for (int e = threadIdx.x; e < T * T; e += blockDim.x) {
    int r = e / T, c = e % T;
    float p = 0.0f, ds = 0.0f;
    if (r < rows && c < k::causalValidKeys(i0 + r, j0, cols)) {
      const float *qr = qs + r * D, *kc = ks + c * D;
      const float *gr = dos + r * D, *vc = vs + c * D;
      float raw = 0.0f, dp = 0.0f;
      for (int64_t d = 0; d < D; ++d) {
        raw += qr[d] * kc[d];
        dp += gr[d] * vc[d];
      }
      p = k::recomputedProbability(raw, scale, rowLse[r], DeviceExp());
      ds = k::rawScoreGradient(p, dp, rowDot[r], scale);
    }
    ps[e] = p;
    dss[e] = ds;
  }
}

/// rowLse, rowDot of query rows [i0, i0 + rows): the saved lse and
/// D_i = dO_i . O_i (from the dO tile `dos` and O in global memory).
__device__ void rowStatistics(float *rowLse, float *rowDot, const float *dos,
                              const float *outHead, const float *lseHead,
                              int64_t i0, int64_t rows, int T, int64_t D) {
  for (int r = threadIdx.x; r < T; r += blockDim.x) {
    float acc = 0.0f;
    if (r < rows) {
      const float *o = outHead + (i0 + r) * D;
      for (int64_t d = 0; d < D; ++d)
        acc += dos[r * D + d] * o[d];
    }
    rowDot[r] = acc;
    rowLse[r] = r < rows ? lseHead[i0 + r] : 0.0f;
  }
}

__global__ void causalAttentionBwdQueryKernel(
    const float *dout, const float *q, const float *kIn, const float *vIn,
    const float *out, const float *lse, float *dq, int64_t heads,
    int64_t kvHeads, int64_t S, int64_t D, float scale, int T) {
  extern __shared__ float smem[];
  float *qs = smem, *dos = qs + T * D, *ks = dos + T * D, *vs = ks + T * D;
  float *dqs = vs + T * D, *ps = dqs + T * D, *dss = ps + T * T;
  float *rowLse = dss + T * T, *rowDot = rowLse + T;
  int64_t bh = blockIdx.x, b = bh / heads, h = bh % heads;
  int64_t kvh = h / (heads / kvHeads);
  int64_t i0 = int64_t(blockIdx.y) * T, rows = min(int64_t(T), S - i0);
  const float *kh = kIn + (b * kvHeads + kvh) * S * D;
  const float *vh = vIn + (b * kvHeads + kvh) * S * D;
  loadTile(qs, q + bh * S * D, i0, rows, T, D);
  loadTile(dos, dout + bh * S * D, i0, rows, T, D);
  for (int64_t e = threadIdx.x; e < T * D; e += blockDim.x)
    dqs[e] = 0.0f;
  __syncthreads();
  rowStatistics(rowLse, rowDot, dos, out + bh * S * D, lse + bh * S, i0, rows,
                T, D);
  for (int64_t j0 = 0; j0 < i0 + rows; j0 += T) {
    int64_t cols = min(int64_t(T), i0 + rows - j0);
    loadTile(ks, kh, j0, cols, T, D);
    loadTile(vs, vh, j0, cols, T, D);
    __syncthreads();
    scoreGradientTile(ps, dss, qs, dos, ks, vs, rowLse, rowDot, i0, rows, j0,
                      cols, T, D, scale);
    __syncthreads();
    // dQ_i += dS K_j.
    for (int64_t e = threadIdx.x; e < rows * D; e += blockDim.x) {
      int64_t r = e / D, d = e % D;
      float acc = 0.0f;
      for (int c = 0; c < T; ++c)
        acc += dss[r * T + c] * ks[c * D + d];
      dqs[e] += acc;
    }
    __syncthreads();
  }
  for (int64_t e = threadIdx.x; e < rows * D; e += blockDim.x)
    dq[bh * S * D + i0 * D + e] = dqs[e];
}

__global__ void causalAttentionBwdKeyKernel(const float *dout, const float *q,
                                            const float *kIn, const float *vIn,
                                            const float *out, const float *lse,
                                            float *dk, float *dv, int64_t heads,
                                            int64_t kvHeads, int64_t S,
                                            int64_t D, float scale, int T) {
  extern __shared__ float smem[];
  float *ks = smem, *vs = ks + T * D, *dks = vs + T * D, *dvs = dks + T * D;
  float *qs = dvs + T * D, *dos = qs + T * D, *ps = dos + T * D;
  float *dss = ps + T * T, *rowLse = dss + T * T, *rowDot = rowLse + T;
  int64_t bkv = blockIdx.x, b = bkv / kvHeads, kvh = bkv % kvHeads;
  int64_t group = heads / kvHeads;
  int64_t j0 = int64_t(blockIdx.y) * T, cols = min(int64_t(T), S - j0);
  loadTile(ks, kIn + bkv * S * D, j0, cols, T, D);
  loadTile(vs, vIn + bkv * S * D, j0, cols, T, D);
  for (int64_t e = threadIdx.x; e < T * D; e += blockDim.x) {
    dks[e] = 0.0f;
    dvs[e] = 0.0f;
  }
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    int64_t bh = b * heads + h;
    // Query tiles holding a row >= j0 (tiles of queries and keys align).
    for (int64_t i0 = j0; i0 < S; i0 += T) {
      int64_t rows = min(int64_t(T), S - i0);
      __syncthreads();
      loadTile(qs, q + bh * S * D, i0, rows, T, D);
      loadTile(dos, dout + bh * S * D, i0, rows, T, D);
      __syncthreads();
      rowStatistics(rowLse, rowDot, dos, out + bh * S * D, lse + bh * S, i0,
                    rows, T, D);
      __syncthreads();
      scoreGradientTile(ps, dss, qs, dos, ks, vs, rowLse, rowDot, i0, rows, j0,
                        cols, T, D, scale);
      __syncthreads();
      // dV_j += P^T dO_i; dK_j += dS^T Q_i.
      for (int64_t e = threadIdx.x; e < cols * D; e += blockDim.x) {
        int64_t c = e / D, d = e % D;
        float accV = 0.0f, accK = 0.0f;
        for (int r = 0; r < T; ++r) {
          accV += ps[r * T + c] * dos[r * D + d];
          accK += dss[r * T + c] * qs[r * D + d];
        }
        dvs[e] += accV;
        dks[e] += accK;
      }
    }
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < cols * D; e += blockDim.x) {
    dk[bkv * S * D + j0 * D + e] = dks[e];
    dv[bkv * S * D + j0 * D + e] = dvs[e];
  }
}

/// Raises the kernel's dynamic shared memory limit to `bytes`, or exits
/// naming the head width when the GPU cannot give that much to a block.
template <typename Kernel>
void reserveSharedMemory(Kernel kernel, size_t bytes, int64_t headDim) {
  int device = 0, limit = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                         device);
  if (bytes > size_t(limit)) {
    std::fprintf(stderr,
                 "strata: causal_attention on CUDA needs %zu bytes of shared "
                 "memory per block for head dim %lld, more than this GPU's "
                 "%d; use narrower heads or `attention: unfused`\n",
                 bytes, (long long)headDim, limit);
    std::exit(70);
  }
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       int(bytes));
}

dim3 attentionGrid(int64_t outer, int64_t seq, int T) {
  return dim3(unsigned(outer), unsigned((seq + T - 1) / T));
}

} // namespace

void causalAttentionFwd(const float *q, const float *k, const float *v,
                        float *out, float *lse, int64_t batch, int64_t heads,
                        int64_t kvHeads, int64_t seq, int64_t headDim,
                        float scale, Stream s) {
  int T = attentionTile(headDim);
  size_t bytes = sizeof(float) * size_t(4 * T * headDim + T * T + 3 * T);
  reserveSharedMemory(causalAttentionFwdKernel, bytes, headDim);
  causalAttentionFwdKernel<<<attentionGrid(batch * heads, seq, T),
                             kAttentionThreads, bytes, s>>>(
      q, k, v, out, lse, heads, kvHeads, seq, headDim, scale, T);
}

void causalAttentionBwd(const float *dout, const float *q, const float *k,
                        const float *v, const float *out, const float *lse,
                        float *dq, float *dk, float *dv, int64_t batch,
                        int64_t heads, int64_t kvHeads, int64_t seq,
                        int64_t headDim, float scale, Stream s) {
  int T = attentionTile(headDim);
  size_t queryBytes =
      sizeof(float) * size_t(5 * T * headDim + 2 * T * T + 2 * T);
  reserveSharedMemory(causalAttentionBwdQueryKernel, queryBytes, headDim);
  causalAttentionBwdQueryKernel<<<attentionGrid(batch * heads, seq, T),
                                  kAttentionThreads, queryBytes, s>>>(
      dout, q, k, v, out, lse, dq, heads, kvHeads, seq, headDim, scale, T);
  size_t keyBytes = sizeof(float) * size_t(6 * T * headDim + 2 * T * T + 2 * T);
  reserveSharedMemory(causalAttentionBwdKeyKernel, keyBytes, headDim);
  causalAttentionBwdKeyKernel<<<attentionGrid(batch * kvHeads, seq, T),
                                kAttentionThreads, keyBytes, s>>>(
      dout, q, k, v, out, lse, dk, dv, heads, kvHeads, seq, headDim, scale, T);
}

} // namespace strata::rt::cuda
