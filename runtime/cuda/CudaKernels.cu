//===- CudaKernels.cu - CUDA kernels of the Strata instruction set --------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// One file, so nvcc runs once per architecture. The per-element arithmetic
// is runtime/kernels/'s, the same functions the CPU backend runs; storage
// is float32 or bf16 (uint16_t, widened on load and rounded to nearest-even
// on store by Bf16Math.h, as on the CPU).
//
//   - Elementwise kernels are grid-stride loops over packs of 8 elements
//     (16-byte loads and stores of bf16, two of float32) when every operand
//     is 16-byte aligned, one element at a time otherwise.
//   - Row kernels (norms, softmax, cross-entropy) give a row to a block and
//     reduce in shared memory; the norms read 8-element packs.
//   - Column reductions (bias and norm weight gradients) run in two
//     deterministic stages: blocks of 32 columns x 8 row lanes sum chunks of
//     rows over every multiprocessor into float32 partials, then one thread
//     per column adds the chunks in order.
//   - The embedding gradient sorts the ids stably (CUB's radix sort) and
//     gives each distinct id a warp that sums its rows in token order.
//   - The optimizer runs over every tensor of the update in one launch
//     (a table of tensors and chunks built when the program is bound).
// Every result has a fixed summation order: runs are bitwise repeatable.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaKernels.h"

#include "runtime/kernels/BinaryMath.h"
#include "runtime/kernels/Bf16Math.h"
#include "runtime/kernels/GeluMath.h"
#include "runtime/kernels/LayerNormMath.h"
#include "runtime/kernels/OptimizerMath.h"
#include "runtime/kernels/RmsNormMath.h"
#include "runtime/kernels/RotaryMath.h"
#include "runtime/kernels/SiluMath.h"
#include "runtime/kernels/SoftmaxMath.h"
#include "runtime/kernels/UnaryMath.h"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <type_traits>

namespace strata::rt::cuda {

namespace k = strata::kernels;

namespace {

using bf16 = uint16_t;

constexpr int kThreads = 256;
constexpr int kRowThreads = 256;
constexpr int kPack = 8;

int gridFor(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return int(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks);
}

#define STRATA_GRID_STRIDE(i, n)                                               \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

__device__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

//===--- Storage ---------------------------------------------------------===//

__device__ __forceinline__ float widen(bf16 h) {
  return __uint_as_float(uint32_t(h) << 16);
}
__device__ __forceinline__ float ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16 *p, int64_t i) {
  return widen(p[i]);
}
__device__ __forceinline__ void st(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(bf16 *p, int64_t i, float v) {
  p[i] = k::floatToBf16(v);
}

__device__ __forceinline__ void load8(const float *p, float (&v)[kPack]) {
  float4 a = reinterpret_cast<const float4 *>(p)[0];
  float4 b = reinterpret_cast<const float4 *>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load8(const bf16 *p, float (&v)[kPack]) {
  uint4 u = *reinterpret_cast<const uint4 *>(p);
  uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void store8(float *p, const float (&v)[kPack]) {
  reinterpret_cast<float4 *>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4 *>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void store8(bf16 *p, const float (&v)[kPack]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = uint32_t(k::floatToBf16(v[2 * i])) |
           (uint32_t(k::floatToBf16(v[2 * i + 1])) << 16);
  *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

/// op over the block (of a multiple of 32 threads); every thread gets the
/// result. `identity` fills the lanes of the second stage that have no warp
/// partial (0 for sums, -FLT_MAX for maxima).
template <typename T, typename Op>
__device__ T blockReduce(T value, Op op, T identity, T *shared) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0)
    shared[warp] = value;
  __syncthreads();
  int warps = blockDim.x / 32;
  if (warp == 0) {
    value = lane < warps ? shared[lane] : identity;
    for (int offset = 16; offset > 0; offset /= 2)
      value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
    if (lane == 0)
      shared[0] = value;
  }
  __syncthreads();
  T result = shared[0];
  __syncthreads(); // shared may be reused by the next reduction.
  return result;
}

struct Sum {
  template <typename T> __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Min {
  __device__ float operator()(float a, float b) const { return fminf(a, b); }
};

//===--- Elementwise maps ------------------------------------------------===//

/// NI inputs of type TI and NO outputs of type TO, element by element:
/// f(const float (&in)[NI], float (&out)[NO]).
template <int NI, int NO> struct MapArgs {
  const void *in[NI];
  void *out[NO];
};

template <typename TI, typename TO, int NI, int NO, typename F>
__global__ void mapKernel(MapArgs<NI, NO> args, int64_t n, int64_t packs,
                          F f) {
  const TI *in[NI];
  TO *out[NO];
#pragma unroll
  for (int i = 0; i < NI; ++i)
    in[i] = static_cast<const TI *>(args.in[i]);
#pragma unroll
  for (int o = 0; o < NO; ++o)
    out[o] = static_cast<TO *>(args.out[o]);
  STRATA_GRID_STRIDE(p, packs) {
    float x[NI][kPack], y[NO][kPack];
#pragma unroll
    for (int i = 0; i < NI; ++i)
      load8(in[i] + p * kPack, x[i]);
#pragma unroll
    for (int e = 0; e < kPack; ++e) {
      float xi[NI], yo[NO];
#pragma unroll
      for (int i = 0; i < NI; ++i)
        xi[i] = x[i][e];
      f(xi, yo);
#pragma unroll
      for (int o = 0; o < NO; ++o)
        y[o][e] = yo[o];
    }
#pragma unroll
    for (int o = 0; o < NO; ++o)
      store8(out[o] + p * kPack, y[o]);
  }
  STRATA_GRID_STRIDE(r, n - packs * kPack) {
    int64_t e = packs * kPack + r;
    float xi[NI], yo[NO];
#pragma unroll
    for (int i = 0; i < NI; ++i)
      xi[i] = ld(in[i], e);
    f(xi, yo);
#pragma unroll
    for (int o = 0; o < NO; ++o)
      st(out[o], e, yo[o]);
  }
}

template <typename TI, typename TO, int NI, int NO, typename F>
void launchMapTyped(const MapArgs<NI, NO> &args, int64_t n, F f, Stream s) {
  bool vec = true;
  for (int i = 0; i < NI; ++i)
    vec = vec && aligned16(args.in[i]);
  for (int o = 0; o < NO; ++o)
    vec = vec && aligned16(args.out[o]);
  int64_t packs = vec ? n / kPack : 0;
  int64_t work = packs + (n - packs * kPack);
  mapKernel<TI, TO, NI, NO><<<gridFor(work), kThreads, 0, s>>>(args, n, packs,
                                                               f);
}

/// Inputs and outputs of one storage type.
template <int NI, int NO, typename F>
void launchMap(Elem t, const MapArgs<NI, NO> &args, int64_t n, F f, Stream s) {
  if (n <= 0)
    return;
  if (t == Elem::BF16)
    launchMapTyped<bf16, bf16>(args, n, f, s);
  else
    launchMapTyped<float, float>(args, n, f, s);
}

struct AddF {
  __device__ void operator()(const float (&x)[2], float (&y)[1]) const {
    y[0] = x[0] + x[1];
  }
};
struct MulF {
  __device__ void operator()(const float (&x)[2], float (&y)[1]) const {
    y[0] = x[0] * x[1];
  }
};
struct ScaleF {
  float alpha;
  __device__ void operator()(const float (&x)[1], float (&y)[1]) const {
    y[0] = alpha * x[0];
  }
};
struct CopyF {
  __device__ void operator()(const float (&x)[1], float (&y)[1]) const {
    y[0] = x[0];
  }
};
struct GeluFwdF {
  __device__ void operator()(const float (&x)[1], float (&y)[1]) const {
    y[0] = k::geluForward(x[0], sigmoid(k::geluSigmoidArg(x[0])));
  }
};
struct GeluBwdF { // x, dy -> dx
  __device__ void operator()(const float (&x)[2], float (&y)[1]) const {
    y[0] = k::geluBackward(x[0], sigmoid(k::geluSigmoidArg(x[0])), x[1]);
  }
};
struct ReluFwdF {
  __device__ void operator()(const float (&x)[1], float (&y)[1]) const {
    y[0] = k::reluForward(x[0]);
  }
};
struct ReluBwdF {
  __device__ void operator()(const float (&x)[2], float (&y)[1]) const {
    y[0] = k::reluBackward(x[0], x[1]);
  }
};
struct UnaryFwdF {
  int64_t kind;
  __device__ void operator()(const float (&x)[1], float (&y)[1]) const {
    y[0] = k::unaryValue(k::UnaryKind(kind), x[0]);
  }
};
struct UnaryBwdF {
  int64_t kind;
  __device__ void operator()(const float (&x)[2], float (&y)[1]) const {
    y[0] = x[1] * k::unaryDerivative(k::UnaryKind(kind), x[0]);
  }
};
struct SiluFwdF {
  __device__ void operator()(const float (&x)[1], float (&y)[1]) const {
    y[0] = k::silu(x[0], sigmoid(x[0]));
  }
};
struct SiluBwdF {
  __device__ void operator()(const float (&x)[2], float (&y)[1]) const {
    y[0] = x[1] * k::siluDerivative(x[0], sigmoid(x[0]));
  }
};
struct SiluMulFwdF {
  __device__ void operator()(const float (&x)[2], float (&y)[1]) const {
    y[0] = k::siluMul(x[0], sigmoid(x[0]), x[1]);
  }
};
struct SiluMulBwdF { // gate, up, dy -> dgate, dup
  __device__ void operator()(const float (&x)[3], float (&y)[2]) const {
    k::siluMulGrad(x[0], sigmoid(x[0]), x[1], x[2], y[0], y[1]);
  }
};

//===--- Other elementwise and data movement -----------------------------===//

template <typename T> __global__ void fillKernel(T *out, int64_t n, float v) {
  STRATA_GRID_STRIDE(i, n) st(out, i, v);
}
template <typename TX, typename TY>
__global__ void accumulateKernel(const TX *x, TY *y, int64_t n) {
  STRATA_GRID_STRIDE(i, n) st(y, i, ld(y, i) + ld(x, i));
}

struct TransposeShape {
  int rank;
  int64_t outDims[5];
  int64_t strideOf[5]; ///< Input stride of each output dimension.
};
template <typename T>
__global__ void transposeKernel(const T *x, T *out, int64_t n,
                                TransposeShape t) {
  STRATA_GRID_STRIDE(i, n) {
    int64_t rest = i, src = 0;
    for (int d = t.rank - 1; d >= 0; --d) {
      src += (rest % t.outDims[d]) * t.strideOf[d];
      rest /= t.outDims[d];
    }
    out[i] = x[src];
  }
}

/// A transpose that keeps the innermost dimension: `rows` describes the
/// other dimensions (output order, input strides in rows); each thread
/// moves 16-byte chunks.
__global__ void transposeRowsKernel(const uint4 *x, uint4 *out, int64_t n,
                                    int64_t chunksPerRow, TransposeShape rows) {
  STRATA_GRID_STRIDE(i, n) {
    int64_t row = i / chunksPerRow, chunk = i % chunksPerRow;
    int64_t rest = row, src = 0;
    for (int d = rows.rank - 1; d >= 0; --d) {
      src += (rest % rows.outDims[d]) * rows.strideOf[d];
      rest /= rows.outDims[d];
    }
    out[i] = x[src * chunksPerRow + chunk];
  }
}

/// The same in 32-bit index arithmetic with the dimensions unrolled (every
/// index below 2^31), two 16-byte chunks in flight per thread.
template <int R>
__global__ void transposeRows32Kernel(const uint4 *x, uint4 *out, uint32_t n,
                                      uint32_t chunksPerRow,
                                      TransposeShape rows) {
  uint32_t dims[R], strides[R];
#pragma unroll
  for (int d = 0; d < R; ++d) {
    dims[d] = uint32_t(rows.outDims[d]);
    strides[d] = uint32_t(rows.strideOf[d]);
  }
  uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += 2 * step) {
    uint4 v[2];
    uint32_t at[2] = {i, i + step};
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (at[u] >= n)
        continue;
      uint32_t row = at[u] / chunksPerRow, chunk = at[u] % chunksPerRow;
      uint32_t src = 0;
#pragma unroll
      for (int d = R - 1; d >= 0; --d) {
        src += (row % dims[d]) * strides[d];
        row /= dims[d];
      }
      v[u] = x[src * chunksPerRow + chunk];
    }
#pragma unroll
    for (int u = 0; u < 2; ++u)
      if (at[u] < n)
        out[at[u]] = v[u];
  }
}

/// [outer, rows, cols] -> [outer, cols, rows] through shared-memory tiles
/// (the swap of the last two dimensions, the common case: heads).
template <typename T>
__global__ void transposeLastTwoKernel(const T *x, T *out, int64_t rows,
                                       int64_t cols) {
  __shared__ T tile[32][33];
  int64_t o = blockIdx.z;
  int64_t r0 = int64_t(blockIdx.y) * 32, c0 = int64_t(blockIdx.x) * 32;
  const T *xs = x + o * rows * cols;
  T *os = out + o * rows * cols;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols)
      tile[i][threadIdx.x] = xs[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols)
      os[c * rows + r] = tile[threadIdx.x][i];
  }
}

template <typename T>
__global__ void sliceInsertAccumulateKernel(const T *x, T *out, int64_t outer,
                                            int64_t big, int64_t small,
                                            int64_t start, int64_t inner) {
  STRATA_GRID_STRIDE(i, outer * small * inner) {
    int64_t o = i / (small * inner), rest = i % (small * inner);
    int64_t dst = (o * big + start) * inner + rest;
    st(out, dst, ld(out, dst) + ld(x, i));
  }
}

__global__ void embeddingFwdKernel(const int32_t *ids, int64_t count,
                                   const float *table, int64_t rows,
                                   int64_t hidden, int64_t rowStart,
                                   float *out) {
  STRATA_GRID_STRIDE(i, count * hidden) {
    int64_t row = int64_t(ids[i / hidden]) - rowStart;
    out[i] = row >= 0 && row < rows ? table[row * hidden + i % hidden] : 0.0f;
  }
}

__global__ void iotaKernel(int32_t *out, int64_t n) {
  STRATA_GRID_STRIDE(i, n) out[i] = int32_t(i);
}
/// One warp per sorted position that starts a run of equal ids: sums the
/// run's dout rows in token order (the sort is stable) into the table row.
__global__ void embeddingBwdRunsKernel(const int32_t *sortedIds,
                                       const int32_t *order, int64_t count,
                                       const float *dout, int64_t rows,
                                       int64_t hidden, int64_t rowStart,
                                       float *dtable) {
  int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (i >= count || (i > 0 && sortedIds[i - 1] == sortedIds[i]))
    return;
  int64_t row = int64_t(sortedIds[i]) - rowStart;
  if (row < 0 || row >= rows)
    return;
  int64_t end = i + 1;
  while (end < count && sortedIds[end] == sortedIds[i])
    ++end;
  float *dst = dtable + row * hidden;
  for (int64_t c = lane; c < hidden; c += 32) {
    float acc = dst[c];
    for (int64_t j = i; j < end; ++j)
      acc += dout[int64_t(order[j]) * hidden + c];
    dst[c] = acc;
  }
}

template <typename T>
__global__ void biasAddKernel(const T *x, const T *bias, T *out, int64_t rows,
                              int64_t n) {
  STRATA_GRID_STRIDE(i, rows * n)
  st(out, i, ld(x, i) + ld(bias, i % n));
}

//===--- Column reductions -----------------------------------------------===//

constexpr int kColTile = 32, kColLanes = 8;
/// Columns per block of the packed (16-byte) column reduction.
constexpr int kColPackTile = kColTile * kPack;

/// Row chunks of a column reduction over `tile`-column blocks: enough
/// blocks for every multiprocessor, at least 32 rows each.
int64_t columnChunks(int64_t rows, int64_t n, int64_t tile = kColTile) {
  int64_t colBlocks = (n + tile - 1) / tile;
  int64_t want = (4 * 132 + colBlocks - 1) / colBlocks;
  int64_t most = (rows + 31) / 32;
  int64_t chunks = want < most ? want : most;
  return chunks < 1 ? 1 : chunks > 1024 ? 1024 : chunks;
}

/// partial[chunk][c] (and partial2 when the functor yields two values) over
/// rows [chunk * per, ...): g(row, col, v0, v1).
template <int NV, typename G>
__global__ void columnPartialsKernel(float *partials, int64_t rows, int64_t n,
                                     int64_t perChunk, G g) {
  __shared__ float acc[NV][kColLanes][kColTile];
  int64_t c = int64_t(blockIdx.x) * kColTile + threadIdx.x;
  int64_t chunk = blockIdx.y;
  int64_t begin = chunk * perChunk;
  int64_t end = begin + perChunk < rows ? begin + perChunk : rows;
  float sum[NV];
#pragma unroll
  for (int v = 0; v < NV; ++v)
    sum[v] = 0.0f;
  if (c < n)
    for (int64_t r = begin + threadIdx.y; r < end; r += kColLanes) {
      float v[NV];
      g(r, c, v);
#pragma unroll
      for (int j = 0; j < NV; ++j)
        sum[j] += v[j];
    }
#pragma unroll
  for (int v = 0; v < NV; ++v)
    acc[v][threadIdx.y][threadIdx.x] = sum[v];
  __syncthreads();
  if (threadIdx.y == 0 && c < n) {
    int64_t chunks = gridDim.y;
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      float total = 0.0f;
      for (int l = 0; l < kColLanes; ++l)
        total += acc[v][l][threadIdx.x];
      partials[(int64_t(v) * chunks + chunk) * n + c] = total;
    }
  }
}

/// The packed form: each thread sums 8 adjacent columns read as 16-byte
/// packs (a warp covers 256 columns of a row), g.pack(row, col, v[NV][8]).
template <int NV, typename G>
__global__ void columnPartialsPackedKernel(float *partials, int64_t rows,
                                           int64_t n, int64_t perChunk, G g) {
  __shared__ float acc[NV][kColLanes][kColPackTile];
  int64_t c = (int64_t(blockIdx.x) * kColTile + threadIdx.x) * kPack;
  int64_t chunk = blockIdx.y;
  int64_t begin = chunk * perChunk;
  int64_t end = begin + perChunk < rows ? begin + perChunk : rows;
  float sum[NV][kPack];
#pragma unroll
  for (int v = 0; v < NV; ++v)
#pragma unroll
    for (int e = 0; e < kPack; ++e)
      sum[v][e] = 0.0f;
  if (c < n)
    for (int64_t r = begin + threadIdx.y; r < end; r += kColLanes) {
      float v[NV][kPack];
      g.pack(r, c, v);
#pragma unroll
      for (int j = 0; j < NV; ++j)
#pragma unroll
        for (int e = 0; e < kPack; ++e)
          sum[j][e] += v[j][e];
    }
#pragma unroll
  for (int v = 0; v < NV; ++v)
#pragma unroll
    for (int e = 0; e < kPack; ++e)
      acc[v][threadIdx.y][threadIdx.x * kPack + e] = sum[v][e];
  __syncthreads();
  // Each thread of the block finishes one column of the tile, lanes in
  // order.
  int t = threadIdx.y * kColTile + threadIdx.x;
  int64_t col = int64_t(blockIdx.x) * kColPackTile + t;
  if (col < n) {
    int64_t chunks = gridDim.y;
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      float total = 0.0f;
      for (int l = 0; l < kColLanes; ++l)
        total += acc[v][l][t];
      partials[(int64_t(v) * chunks + chunk) * n + col] = total;
    }
  }
}

/// dst_v[c] += sum over chunks of partials_v[chunk][c], chunks in order.
template <typename T>
__global__ void columnFinishKernel(const float *partials, int64_t chunks,
                                   int64_t n, T *dst0, T *dst1) {
  STRATA_GRID_STRIDE(c, n) {
    float a = 0.0f, b = 0.0f;
    for (int64_t ch = 0; ch < chunks; ++ch) {
      a += partials[ch * n + c];
      if (dst1)
        b += partials[(chunks + ch) * n + c];
    }
    st(dst0, c, ld(dst0, c) + a);
    if (dst1)
      st(dst1, c, ld(dst1, c) + b);
  }
}

/// Packed when every row starts 16-byte aligned (n a multiple of 8, the
/// functor's arrays aligned): see columnPartialsPackedKernel.
template <int NV, typename G, typename TD>
void columnReduce(int64_t rows, int64_t n, G g, TD *dst0, TD *dst1,
                  float *scratch, Stream s) {
  bool packed = n % kPack == 0 && g.aligned();
  int64_t tile = packed ? kColPackTile : kColTile;
  int64_t chunks = columnChunks(rows, n, tile);
  int64_t per = (rows + chunks - 1) / chunks;
  dim3 grid(unsigned((n + tile - 1) / tile), unsigned(chunks));
  if (packed)
    columnPartialsPackedKernel<NV><<<grid, dim3(kColTile, kColLanes), 0, s>>>(
        scratch, rows, n, per, g);
  else
    columnPartialsKernel<NV><<<grid, dim3(kColTile, kColLanes), 0, s>>>(
        scratch, rows, n, per, g);
  columnFinishKernel<<<gridFor(n), kThreads, 0, s>>>(scratch, chunks, n, dst0,
                                                     dst1);
}

template <typename T> struct ColumnOf {
  const T *x;
  int64_t n;
  bool aligned() const { return aligned16(x); }
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const {
    v[0] = ld(x, r * n + c);
  }
  __device__ void pack(int64_t r, int64_t c, float (&v)[1][kPack]) const {
    load8(x + r * n + c, v[0]);
  }
};
template <typename T> struct LayerNormColumns {
  const T *dy, *x;
  const float *mean, *rstd;
  int64_t n;
  bool aligned() const { return aligned16(dy) && aligned16(x); }
  __device__ void operator()(int64_t r, int64_t c, float (&v)[2]) const {
    float d = ld(dy, r * n + c);
    v[0] = d * k::layerNormNormalized(ld(x, r * n + c), mean[r], rstd[r]);
    v[1] = d;
  }
  __device__ void pack(int64_t r, int64_t c, float (&v)[2][kPack]) const {
    float d[kPack], xs[kPack];
    load8(dy + r * n + c, d);
    load8(x + r * n + c, xs);
    float mu = mean[r], rs = rstd[r];
#pragma unroll
    for (int e = 0; e < kPack; ++e) {
      v[0][e] = d[e] * k::layerNormNormalized(xs[e], mu, rs);
      v[1][e] = d[e];
    }
  }
};
template <typename T> struct RmsNormColumns {
  const T *dy, *x;
  const float *rstd;
  int64_t n;
  bool aligned() const { return aligned16(dy) && aligned16(x); }
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const {
    v[0] = k::rmsNormWeightGrad(ld(dy, r * n + c), ld(x, r * n + c), rstd[r]);
  }
  __device__ void pack(int64_t r, int64_t c, float (&v)[1][kPack]) const {
    float d[kPack], xs[kPack];
    load8(dy + r * n + c, d);
    load8(x + r * n + c, xs);
    float rs = rstd[r];
#pragma unroll
    for (int e = 0; e < kPack; ++e)
      v[0][e] = k::rmsNormWeightGrad(d[e], xs[e], rs);
  }
};

//===--- Normalisation ---------------------------------------------------===//

/// Threads of a row block: 8-element packs over the row, 32 to 256.
int rowThreads(int64_t n, bool vec) {
  int64_t work = vec ? (n + kPack - 1) / kPack : n;
  int64_t t = (work + 31) / 32 * 32;
  return int(t < 32 ? 32 : t > kRowThreads ? kRowThreads : t);
}

template <typename T>
__global__ void layerNormFwdKernel(const T *x, const T *gamma, const T *beta,
                                   T *out, float *mean, float *rstd, int64_t n,
                                   float eps, bool vec, const T *residual,
                                   T *sum) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T *xr = x + r * n;
  T *yr = out + r * n;
  // The fused residual add: the row becomes x + residual, stored in sum,
  // then normalised from there (reads of sum hit this block's writes).
  if (residual) {
    const T *rr = residual + r * n;
    T *sr = sum + r * n;
    if (vec)
      for (int64_t p = threadIdx.x; p < n / kPack; p += blockDim.x) {
        float a[kPack], b[kPack];
        load8(xr + p * kPack, a);
        load8(rr + p * kPack, b);
#pragma unroll
        for (int e = 0; e < kPack; ++e)
          a[e] += b[e];
        store8(sr + p * kPack, a);
      }
    else
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        st(sr, i, ld(xr, i) + ld(rr, i));
    __syncthreads();
    xr = sr;
  }
  float acc = 0;
  if (vec)
    for (int64_t p = threadIdx.x; p < n / kPack; p += blockDim.x) {
      float a[kPack];
      load8(xr + p * kPack, a);
#pragma unroll
      for (int e = 0; e < kPack; ++e)
        acc += a[e];
    }
  else
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      acc += ld(xr, i);
  float mu = blockReduce(acc, Sum(), 0.0f, shared) / float(n);
  acc = 0;
  if (vec)
    for (int64_t p = threadIdx.x; p < n / kPack; p += blockDim.x) {
      float a[kPack];
      load8(xr + p * kPack, a);
#pragma unroll
      for (int e = 0; e < kPack; ++e)
        acc += (a[e] - mu) * (a[e] - mu);
    }
  else
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      acc += (ld(xr, i) - mu) * (ld(xr, i) - mu);
  float rs = k::layerNormRstd(blockReduce(acc, Sum(), 0.0f, shared), n, eps);
  if (vec)
    for (int64_t p = threadIdx.x; p < n / kPack; p += blockDim.x) {
      float a[kPack], g[kPack], b[kPack];
      load8(xr + p * kPack, a);
      load8(gamma + p * kPack, g);
      load8(beta + p * kPack, b);
#pragma unroll
      for (int e = 0; e < kPack; ++e)
        a[e] = k::layerNormForward(a[e], mu, rs, g[e], b[e]);
      store8(yr + p * kPack, a);
    }
  else
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      st(yr, i,
         k::layerNormForward(ld(xr, i), mu, rs, ld(gamma, i), ld(beta, i)));
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

template <typename T>
__global__ void layerNormBwdRowKernel(const T *dy, const T *x, const T *gamma,
                                      const float *mean, const float *rstd,
                                      T *dx, int64_t n, bool vec) {
  __shared__ float shared[32];
  int64_t r = blockIdx.x;
  const T *xr = x + r * n, *gr = dy + r * n;
  T *dxr = dx + r * n;
  float mu = mean[r], rs = rstd[r], accD = 0, accDX = 0;
  if (vec)
    for (int64_t p = threadIdx.x; p < n / kPack; p += blockDim.x) {
      float a[kPack], g[kPack], w[kPack];
      load8(xr + p * kPack, a);
      load8(gr + p * kPack, g);
      load8(gamma + p * kPack, w);
#pragma unroll
      for (int e = 0; e < kPack; ++e) {
        float d = g[e] * w[e];
        accD += d;
        accDX += d * k::layerNormNormalized(a[e], mu, rs);
      }
    }
  else
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float d = ld(gr, i) * ld(gamma, i);
      accD += d;
      accDX += d * k::layerNormNormalized(ld(xr, i), mu, rs);
    }
  float meanD = blockReduce(accD, Sum(), 0.0f, shared) / float(n);
  float meanDX = blockReduce(accDX, Sum(), 0.0f, shared) / float(n);
  if (vec)
    for (int64_t p = threadIdx.x; p < n / kPack; p += blockDim.x) {
      float a[kPack], g[kPack], w[kPack];
      load8(xr + p * kPack, a);
      load8(gr + p * kPack, g);
      load8(gamma + p * kPack, w);
#pragma unroll
      for (int e = 0; e < kPack; ++e)
        a[e] = k::layerNormInputGrad(g[e], w[e],
                                     k::layerNormNormalized(a[e], mu, rs), rs,
                                     meanD, meanDX);
      store8(dxr + p * kPack, a);
    }
  else
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      st(dxr, i,
         k::layerNormInputGrad(ld(gr, i), ld(gamma, i),
                               k::layerNormNormalized(ld(xr, i), mu, rs), rs,
                               meanD, meanDX));
}

/// Warp-per-row layer norms for rows of up to 32·P 16-byte packs (n ≤
/// 256·P, a multiple of 8): the row lives in registers, so each operand is
/// read from device memory once.
constexpr int kWarpRowMaxPacks = 4; // rows up to 1024 elements

template <typename T, int P>
__global__ void layerNormFwdWarpKernel(const T *x, const T *gamma,
                                       const T *beta, T *out, float *mean,
                                       float *rstd, int64_t rows, int64_t n,
                                       float eps, const T *residual, T *sum) {
  const int lane = threadIdx.x % 32;
  const int64_t packs = n / kPack;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       r < rows; r += warps) {
    float v[P][kPack];
    float acc = 0;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      int64_t p = lane + 32 * j;
      if (p >= packs)
        continue;
      load8(x + r * n + p * kPack, v[j]);
      if (residual) {
        float b[kPack];
        load8(residual + r * n + p * kPack, b);
#pragma unroll
        for (int e = 0; e < kPack; ++e)
          v[j][e] += b[e];
        store8(sum + r * n + p * kPack, v[j]);
        // The norm reads the sum as stored (rounded to T), as the unfused
        // add then layernorm_fwd would.
        load8(sum + r * n + p * kPack, v[j]);
      }
#pragma unroll
      for (int e = 0; e < kPack; ++e)
        acc += v[j][e];
    }
    for (int off = 16; off > 0; off /= 2)
      acc += __shfl_xor_sync(0xffffffffu, acc, off);
    float mu = acc / float(n);
    acc = 0;
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (lane + 32 * j < packs)
#pragma unroll
        for (int e = 0; e < kPack; ++e)
          acc += (v[j][e] - mu) * (v[j][e] - mu);
    for (int off = 16; off > 0; off /= 2)
      acc += __shfl_xor_sync(0xffffffffu, acc, off);
    float rs = k::layerNormRstd(acc, n, eps);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      int64_t p = lane + 32 * j;
      if (p >= packs)
        continue;
      float g[kPack], b[kPack];
      load8(gamma + p * kPack, g);
      load8(beta + p * kPack, b);
#pragma unroll
      for (int e = 0; e < kPack; ++e)
        v[j][e] = k::layerNormForward(v[j][e], mu, rs, g[e], b[e]);
      store8(out + r * n + p * kPack, v[j]);
    }
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

/// The whole layer-norm backward in one pass: warp w takes rows
/// [w·per, (w+1)·per), writes their dx, and sums its rows' dgamma and dbeta
/// contributions in registers into partials[(v·warps + w)·n + c] for
/// columnFinishKernel (the warps in order: deterministic).
template <typename T, int P>
__global__ void layerNormBwdWarpKernel(const T *dy, const T *x, const T *gamma,
                                       const float *mean, const float *rstd,
                                       T *dx, int64_t rows, int64_t n,
                                       int64_t perWarp, int64_t warps,
                                       float *partials) {
  const int lane = threadIdx.x % 32;
  const int64_t w = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (w >= warps)
    return;
  const int64_t packs = n / kPack;
  float g[P][kPack], accG[P][kPack], accB[P][kPack];
#pragma unroll
  for (int j = 0; j < P; ++j) {
    int64_t p = lane + 32 * j;
#pragma unroll
    for (int e = 0; e < kPack; ++e)
      accG[j][e] = accB[j][e] = 0.0f;
    if (p < packs)
      load8(gamma + p * kPack, g[j]);
  }
  int64_t end = (w + 1) * perWarp < rows ? (w + 1) * perWarp : rows;
  for (int64_t r = w * perWarp; r < end; ++r) {
    float d[P][kPack], xh[P][kPack];
    float mu = mean[r], rs = rstd[r], sumD = 0, sumDX = 0;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      int64_t p = lane + 32 * j;
      if (p >= packs)
        continue;
      load8(dy + r * n + p * kPack, d[j]);
      load8(x + r * n + p * kPack, xh[j]);
#pragma unroll
      for (int e = 0; e < kPack; ++e) {
        xh[j][e] = k::layerNormNormalized(xh[j][e], mu, rs);
        float dd = d[j][e] * g[j][e];
        sumD += dd;
        sumDX += dd * xh[j][e];
        accG[j][e] += d[j][e] * xh[j][e];
        accB[j][e] += d[j][e];
      }
    }
    for (int off = 16; off > 0; off /= 2) {
      sumD += __shfl_xor_sync(0xffffffffu, sumD, off);
      sumDX += __shfl_xor_sync(0xffffffffu, sumDX, off);
    }
    float meanD = sumD / float(n), meanDX = sumDX / float(n);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      int64_t p = lane + 32 * j;
      if (p >= packs)
        continue;
#pragma unroll
      for (int e = 0; e < kPack; ++e)
        d[j][e] = k::layerNormInputGrad(d[j][e], g[j][e], xh[j][e], rs, meanD,
                                        meanDX);
      store8(dx + r * n + p * kPack, d[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < P; ++j) {
    int64_t p = lane + 32 * j;
    if (p >= packs)
      continue;
#pragma unroll
    for (int e = 0; e < kPack; ++e) {
      partials[w * n + p * kPack + e] = accG[j][e];
      partials[(warps + w) * n + p * kPack + e] = accB[j][e];
    }
  }
}

/// Warps of the one-pass layer-norm backward: up to 1024, at least 4 rows
/// each (the partials stay small beside the gradients they sum).
int64_t layerNormWarps(int64_t rows) {
  int64_t warps = std::min<int64_t>(1024, (rows + 3) / 4);
  int64_t per = (rows + warps - 1) / warps;
  return (rows + per - 1) / per;
}

template <typename T>
__global__ void rmsNormFwdKernel(const T *x, const T *weight, T *out,
                                 float *rstd, int64_t n, float eps, bool vec) {
  __shared__ float shared[32];
  const T *xr = x + int64_t(blockIdx.x) * n;
  T *yr = out + int64_t(blockIdx.x) * n;
  float acc = 0;
  if (vec)
    for (int64_t p = threadIdx.x; p < n / kPack; p += blockDim.x) {
      float a[kPack];
      load8(xr + p * kPack, a);
#pragma unroll
      for (int e = 0; e < kPack; ++e)
        acc += a[e] * a[e];
    }
  else
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      acc += ld(xr, i) * ld(xr, i);
  float rs = k::rmsNormRstd(blockReduce(acc, Sum(), 0.0f, shared), n, eps);
  if (vec)
    for (int64_t p = threadIdx.x; p < n / kPack; p += blockDim.x) {
      float a[kPack], w[kPack];
      load8(xr + p * kPack, a);
      load8(weight + p * kPack, w);
#pragma unroll
      for (int e = 0; e < kPack; ++e)
        a[e] = k::rmsNormForward(a[e], rs, w[e]);
      store8(yr + p * kPack, a);
    }
  else
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      st(yr, i, k::rmsNormForward(ld(xr, i), rs, ld(weight, i)));
  if (threadIdx.x == 0)
    rstd[blockIdx.x] = rs;
}

template <typename T>
__global__ void rmsNormBwdRowKernel(const T *dy, const T *x, const T *weight,
                                    const float *rstd, T *dx, int64_t n) {
  __shared__ float shared[32];
  int64_t r = blockIdx.x;
  const T *xr = x + r * n, *gr = dy + r * n;
  float rs = rstd[r], acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc += ld(weight, i) * ld(gr, i) * ld(xr, i);
  float coeff =
      k::rmsNormGradCoefficient(blockReduce(acc, Sum(), 0.0f, shared), rs, n);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    st(dx, r * n + i,
       k::rmsNormInputGrad(ld(gr, i), ld(xr, i), ld(weight, i), rs, coeff));
}

//===--- Softmax and cross-entropy ---------------------------------------===//

template <typename T>
__global__ void softmaxFwdKernel(const T *x, T *out, int64_t n, bool causal,
                                 float scale) {
  __shared__ float shared[32];
  int64_t r = blockIdx.x;
  const T *xr = x + r * n;
  T *yr = out + r * n;
  int64_t valid = k::softmaxValidColumns(r, n, causal);
  float mx = -FLT_MAX, mn = FLT_MAX;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) {
    mx = fmaxf(mx, ld(xr, j));
    mn = fminf(mn, ld(xr, j));
  }
  mx = blockReduce(mx, Max(), -FLT_MAX, shared);
  mn = blockReduce(mn, Min(), FLT_MAX, shared);
  float shift = k::softmaxShift(mx, mn, scale), acc = 0;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
    acc += expf(k::softmaxExpArg(ld(xr, j), scale, shift));
  float inv = 1.0f / blockReduce(acc, Sum(), 0.0f, shared);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    st(yr, j,
       j < valid ? expf(k::softmaxExpArg(ld(xr, j), scale, shift)) * inv
                 : 0.0f);
}
template <typename T>
__global__ void softmaxBwdKernel(const T *y, const T *dy, T *dx, int64_t n,
                                 float scale) {
  __shared__ float shared[32];
  int64_t r = blockIdx.x;
  const T *yr = y + r * n, *gr = dy + r * n;
  float acc = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    acc += ld(yr, j) * ld(gr, j);
  float dot = blockReduce(acc, Sum(), 0.0f, shared);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    st(dx, r * n + j, k::softmaxBackward(ld(yr, j), ld(gr, j), dot, scale));
}

/// Row maximum over the first `valid` columns (-FLT_MAX when none).
__device__ float rowMax(const float *xr, int64_t valid, float *shared) {
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
    mx = fmaxf(mx, xr[j]);
  return blockReduce(mx, Max(), -FLT_MAX, shared);
}

/// One pass over a row of logits: each thread keeps a running maximum and
/// the sum of exponentials below it (rescaled when the maximum moves), then
/// the block combines the pairs.
__device__ float rowLogSumExp(const float *xr, int64_t n, float *sharedMax,
                              float *sharedSum) {
  float m = -FLT_MAX, sum = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float x = xr[j];
    if (x > m) {
      sum = sum * expf(m - x) + 1.0f;
      m = x;
    } else {
      sum += expf(x - m);
    }
  }
  float rowM = blockReduce(m, Max(), -FLT_MAX, sharedMax);
  float part = sum * expf(m - rowM);
  float total = blockReduce(part, Sum(), 0.0f, sharedSum);
  return rowM + logf(total);
}

__global__ void crossEntropyFwdKernel(const float *logits,
                                      const int32_t *targets, int64_t vocab,
                                      float *lse, double *rowLoss) {
  __shared__ float sharedMax[32], sharedSum[32];
  int64_t r = blockIdx.x;
  const float *xr = logits + r * vocab;
  float l = rowLogSumExp(xr, vocab, sharedMax, sharedSum);
  if (threadIdx.x == 0) {
    lse[r] = l;
    int64_t t = targets[r];
    rowLoss[r] =
        k::targetInShard(t, 0, vocab) ? k::crossEntropyRowLoss(l, xr[t]) : 0.0;
  }
}
/// The forward's statistics, then the gradient of the same row written as
/// bf16 (the second read of the row mostly hits L2).
__global__ void crossEntropyFwdBwdKernel(const float *logits, int64_t ldLogits,
                                         const int32_t *targets,
                                         int64_t vocab, float *lse,
                                         double *rowLoss, bf16 *dlogits,
                                         int64_t ldGrad, float scale,
                                         bool zeroPadding) {
  __shared__ float sharedMax[32], sharedSum[32];
  int64_t r = blockIdx.x;
  const float *xr = logits + r * ldLogits;
  float l = rowLogSumExp(xr, vocab, sharedMax, sharedSum);
  int64_t t = targets[r];
  bool inShard = k::targetInShard(t, 0, vocab);
  if (threadIdx.x == 0) {
    if (lse)
      lse[r] = l;
    rowLoss[r] = inShard ? k::crossEntropyRowLoss(l, xr[t]) : 0.0;
  }
  bf16 *dr = dlogits + r * ldGrad;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    float g = k::crossEntropyGrad(expf(xr[j] - l), scale);
    dr[j] = k::floatToBf16(inShard && j == t ? k::crossEntropyTargetGrad(g, scale)
                                             : g);
  }
  if (zeroPadding)
    for (int64_t j = vocab + threadIdx.x; j < ldGrad; j += blockDim.x)
      dr[j] = 0;
}

/// crossEntropyFwdBwdKernel with the row held in shared memory (rows up
/// to kCeSharedFloats): the logits are read from device memory once.
constexpr int64_t kCeSharedFloats = 54 * 1024;
constexpr int kCeSharedThreads = 1024;
__global__ void __launch_bounds__(kCeSharedThreads)
    crossEntropySharedKernel(const float *logits, int64_t ldLogits,
                             const int32_t *targets, int64_t vocab,
                             float *lse, double *rowLoss, bf16 *dlogits,
                             int64_t ldGrad, float scale, bool zeroPadding,
                             bool vec) {
  extern __shared__ __align__(16) float row[];
  __shared__ float sharedMax[32], sharedSum[32];
  int64_t r = blockIdx.x;
  const float *xr = logits + r * ldLogits;
  if (vec)
    for (int64_t p = threadIdx.x; p < vocab / 4; p += blockDim.x)
      reinterpret_cast<float4 *>(row)[p] =
          reinterpret_cast<const float4 *>(xr)[p];
  for (int64_t j = (vec ? vocab / 4 * 4 : 0) + threadIdx.x; j < vocab;
       j += blockDim.x)
    row[j] = xr[j];
  __syncthreads();
  float l = rowLogSumExp(row, vocab, sharedMax, sharedSum);
  int64_t t = targets[r];
  bool inShard = k::targetInShard(t, 0, vocab);
  if (threadIdx.x == 0) {
    if (lse)
      lse[r] = l;
    rowLoss[r] = inShard ? k::crossEntropyRowLoss(l, row[t]) : 0.0;
  }
  bf16 *dr = dlogits + r * ldGrad;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    float g = k::crossEntropyGrad(expf(row[j] - l), scale);
    dr[j] = k::floatToBf16(inShard && j == t ? k::crossEntropyTargetGrad(g, scale)
                                             : g);
  }
  if (zeroPadding)
    for (int64_t j = vocab + threadIdx.x; j < ldGrad; j += blockDim.x)
      dr[j] = 0;
}

/// loss = mean of rowLoss: one block sums fixed strided partials, then
/// combines them in a fixed tree (deterministic).
__global__ void meanLossKernel(const double *rowLoss, int64_t rows,
                               float *loss) {
  __shared__ double shared[32];
  double acc = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    acc += rowLoss[r];
  acc = blockReduce(acc, Sum(), 0.0, shared);
  if (threadIdx.x == 0)
    *loss = float(acc / double(rows));
}
__global__ void crossEntropyBwdKernel(const float *logits,
                                      const int32_t *targets, const float *lse,
                                      float *dlogits, int64_t n,
                                      int64_t vocabStart, int64_t valid,
                                      float scale) {
  int64_t r = blockIdx.x;
  const float *xr = logits + r * n;
  float *dr = dlogits + r * n;
  float l = lse[r];
  int64_t t = targets[r];
  bool inShard = k::targetInShard(t, vocabStart, valid);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    if (j >= valid) {
      dr[j] = 0.0f;
      continue;
    }
    float g = k::crossEntropyGrad(expf(xr[j] - l), scale);
    dr[j] = inShard && j == t - vocabStart ? k::crossEntropyTargetGrad(g, scale)
                                           : g;
  }
}
__global__ void ceVpMaxKernel(const float *logits, float *rowmax, int64_t n,
                              int64_t valid) {
  __shared__ float shared[32];
  float mx = rowMax(logits + int64_t(blockIdx.x) * n, valid, shared);
  if (threadIdx.x == 0)
    rowmax[blockIdx.x] = mx;
}
__global__ void ceVpSumExpKernel(const float *logits, const int32_t *targets,
                                 const float *rowmax, float *stats,
                                 int64_t rows, int64_t n, int64_t vocabStart,
                                 int64_t valid) {
  __shared__ float shared[32];
  int64_t r = blockIdx.x;
  const float *xr = logits + r * n;
  float mx = rowmax[r], acc = 0;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
    acc += expf(xr[j] - mx);
  float sum = blockReduce(acc, Sum(), 0.0f, shared);
  if (threadIdx.x == 0) {
    stats[r] = sum;
    int64_t t = targets[r];
    stats[rows + r] =
        k::targetInShard(t, vocabStart, valid) ? xr[t - vocabStart] : 0.0f;
  }
}
__global__ void ceVpLossKernel(const float *rowmax, const float *stats,
                               float *lse, int64_t rows, double *rowLoss) {
  STRATA_GRID_STRIDE(r, rows) {
    lse[r] = rowmax[r] + logf(stats[r]);
    rowLoss[r] = k::crossEntropyRowLoss(lse[r], stats[rows + r]);
  }
}

//===--- Llama family and generation -------------------------------------===//

template <typename T>
__global__ void rotaryKernel(const T *x, T *out, int64_t outer, int64_t seq,
                             int64_t dim, double theta, float sign) {
  int64_t half = dim / 2;
  STRATA_GRID_STRIDE(idx, outer * seq * half) {
    int64_t i = idx % half, row = idx / half, p = row % seq;
    double angle = k::rotaryAngle(p, i, dim, theta);
    float c = float(cos(angle)), s = float(sin(angle));
    const T *xr = x + row * dim;
    T *yr = out + row * dim;
    float y1, y2;
    k::rotatePair(ld(xr, i), ld(xr, i + half), c, sign * s, y1, y2);
    st(yr, i, y1);
    st(yr, i + half, y2);
  }
}
__global__ void rotaryAtPositionKernel(const float *x, float *out, int64_t rows,
                                       int64_t dim, int64_t pos, double theta) {
  int64_t half = dim / 2;
  STRATA_GRID_STRIDE(idx, rows * half) {
    int64_t i = idx % half, row = idx / half;
    double angle = k::rotaryAngle(pos, i, dim, theta);
    float y1, y2;
    k::rotatePair(x[row * dim + i], x[row * dim + i + half], float(cos(angle)),
                  float(sin(angle)), y1, y2);
    out[row * dim + i] = y1;
    out[row * dim + i + half] = y2;
  }
}
template <typename T>
__global__ void repeatInterleaveKernel(const T *x, T *out, int64_t outer,
                                       int64_t n, int64_t repeats,
                                       int64_t inner) {
  STRATA_GRID_STRIDE(i, outer * n * repeats * inner) {
    int64_t c = i % inner, row = i / inner; // row = (o * n + j) * repeats + r
    out[i] = x[(row / repeats) * inner + c];
  }
}
template <typename T>
__global__ void repeatInterleaveBwdKernel(const T *dy, T *dx, int64_t outer,
                                          int64_t n, int64_t repeats,
                                          int64_t inner) {
  STRATA_GRID_STRIDE(i, outer * n * inner) {
    int64_t c = i % inner, row = i / inner;
    float acc = ld(dy, (row * repeats) * inner + c);
    for (int64_t r = 1; r < repeats; ++r)
      acc += ld(dy, (row * repeats + r) * inner + c);
    st(dx, i, acc);
  }
}
/// One block per (batch, head); the scores live in dynamic shared memory.
__global__ void kvAttentionKernel(const float *q, const float *kNew,
                                  const float *vNew, float *kCache,
                                  float *vCache, float *out, int64_t heads,
                                  int64_t kvHeads, int64_t maxLen, int64_t D,
                                  int64_t pos, float scale) {
  extern __shared__ float scores[];
  __shared__ float shared[32];
  int64_t b = blockIdx.x / heads, h = blockIdx.x % heads;
  int64_t group = heads / kvHeads, kvh = h / group, n = pos + 1;
  // The head's k, v rows enter the caches first (every head of a group
  // writes the same values, so the race is benign), then all threads see
  // them after the barrier.
  int64_t cacheRow = ((b * kvHeads + kvh) * maxLen + pos) * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    kCache[cacheRow + d] = kNew[(b * kvHeads + kvh) * D + d];
    vCache[cacheRow + d] = vNew[(b * kvHeads + kvh) * D + d];
  }
  __syncthreads();
  const float *qh = q + (b * heads + h) * D;
  const float *keys = kCache + (b * kvHeads + kvh) * maxLen * D;
  const float *values = vCache + (b * kvHeads + kvh) * maxLen * D;
  for (int64_t t = threadIdx.x; t < n; t += blockDim.x) {
    float dot = 0;
    for (int64_t d = 0; d < D; ++d)
      dot += qh[d] * keys[t * D + d];
    scores[t] = dot;
  }
  __syncthreads();
  float mx = -FLT_MAX, mn = FLT_MAX;
  for (int64_t t = threadIdx.x; t < n; t += blockDim.x) {
    mx = fmaxf(mx, scores[t]);
    mn = fminf(mn, scores[t]);
  }
  mx = blockReduce(mx, Max(), -FLT_MAX, shared);
  mn = blockReduce(mn, Min(), FLT_MAX, shared);
  float shift = k::softmaxShift(mx, mn, scale), acc = 0;
  for (int64_t t = threadIdx.x; t < n; t += blockDim.x) {
    float e = expf(k::softmaxExpArg(scores[t], scale, shift));
    scores[t] = e;
    acc += e;
  }
  float inv = 1.0f / blockReduce(acc, Sum(), 0.0f, shared);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0;
    for (int64_t t = 0; t < n; ++t)
      o += scores[t] * inv * values[t * D + d];
    out[(b * heads + h) * D + d] = o;
  }
}

//===--- Optimizer -------------------------------------------------------===//

__global__ void sumSquaresKernel(const float *x, int64_t n, double *partials) {
  __shared__ double shared[32];
  double acc = 0;
  STRATA_GRID_STRIDE(i, n) acc += double(x[i]) * double(x[i]);
  acc = blockReduce(acc, Sum(), 0.0, shared);
  if (threadIdx.x == 0)
    partials[blockIdx.x] += acc;
}
/// The partials in order, by one thread (kReduceBlocks of them, or one per
/// optimizer chunk).
__global__ void sumPartialsKernel(const double *partials, int64_t count,
                                  double *out) {
  // One block: each thread sums a fixed stride, then a fixed tree.
  __shared__ double shared[32];
  double total = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
    total += partials[i];
  total = blockReduce(total, Sum(), 0.0, shared);
  if (threadIdx.x == 0)
    *out = total;
}
__global__ void clipGradsKernel(float *x, int64_t n, const double *sumSq,
                                double maxNorm) {
  double coef = k::clipCoefficient(*sumSq, maxNorm);
  if (!(coef < 1.0))
    return;
  float c = float(coef);
  STRATA_GRID_STRIDE(i, n) x[i] = c * x[i];
}

__global__ void adamwMultiKernel(const TensorSlot *slots,
                                 const TensorChunk *chunks,
                                 const k::AdamWCoefficients *coeffs) {
  TensorChunk ch = chunks[blockIdx.x];
  TensorSlot t = slots[ch.slot];
  k::AdamWCoefficients c = coeffs[t.coefficients];
  int64_t end = ch.start + kOptimizerChunk < t.n ? ch.start + kOptimizerChunk
                                                 : t.n;
  for (int64_t i = ch.start + threadIdx.x; i < end; i += blockDim.x) {
    float p = t.param[i], m = t.state0[i], v = t.state1[i];
    k::adamwUpdate(p, t.grad[i], m, v, c);
    t.param[i] = p;
    t.state0[i] = m;
    t.state1[i] = v;
  }
}
__global__ void sgdMultiKernel(const TensorSlot *slots,
                               const TensorChunk *chunks,
                               const k::SgdCoefficients *coeffs) {
  TensorChunk ch = chunks[blockIdx.x];
  TensorSlot t = slots[ch.slot];
  k::SgdCoefficients c = coeffs[t.coefficients];
  int64_t end = ch.start + kOptimizerChunk < t.n ? ch.start + kOptimizerChunk
                                                 : t.n;
  for (int64_t i = ch.start + threadIdx.x; i < end; i += blockDim.x) {
    float p = t.param[i], b = t.state0[i];
    k::sgdUpdate(p, t.grad[i], b, c);
    t.param[i] = p;
    t.state0[i] = b;
  }
}
__global__ void clipMultiKernel(const TensorSlot *slots,
                                const TensorChunk *chunks, const double *sumSq,
                                double maxNorm) {
  double coef = k::clipCoefficient(*sumSq, maxNorm);
  if (!(coef < 1.0))
    return;
  float c = float(coef);
  TensorChunk ch = chunks[blockIdx.x];
  TensorSlot t = slots[ch.slot];
  int64_t end = ch.start + kOptimizerChunk < t.n ? ch.start + kOptimizerChunk
                                                 : t.n;
  for (int64_t i = ch.start + threadIdx.x; i < end; i += blockDim.x)
    t.grad[i] = c * t.grad[i];
}
__global__ void fillMultiKernel(const TensorSlot *slots,
                                const TensorChunk *chunks, float value) {
  TensorChunk ch = chunks[blockIdx.x];
  TensorSlot t = slots[ch.slot];
  int64_t end = ch.start + kOptimizerChunk < t.n ? ch.start + kOptimizerChunk
                                                 : t.n;
  for (int64_t i = ch.start + threadIdx.x; i < end; i += blockDim.x)
    t.grad[i] = value;
}
__global__ void sumSquaresMultiKernel(const TensorSlot *slots,
                                      const TensorChunk *chunks,
                                      double *partials) {
  __shared__ double shared[32];
  TensorChunk ch = chunks[blockIdx.x];
  TensorSlot t = slots[ch.slot];
  int64_t end = ch.start + kOptimizerChunk < t.n ? ch.start + kOptimizerChunk
                                                 : t.n;
  double acc = 0;
  for (int64_t i = ch.start + threadIdx.x; i < end; i += blockDim.x)
    acc += double(t.grad[i]) * double(t.grad[i]);
  acc = blockReduce(acc, Sum(), 0.0, shared);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = acc;
}

} // namespace

#define STRATA_LAUNCH(kernel, n, s) kernel<<<gridFor(n), kThreads, 0, s>>>
#define STRATA_LAUNCH_ROWS(kernel, rows, s)                                    \
  kernel<<<unsigned(rows), kRowThreads, 0, s>>>

/// Calls `body` with the storage type of `t` as a null pointer of it.
template <typename Body> void dispatch(Elem t, Body body) {
  if (t == Elem::BF16)
    body(static_cast<bf16 *>(nullptr));
  else
    body(static_cast<float *>(nullptr));
}
template <typename T> T *as(void *p, T *) { return static_cast<T *>(p); }
template <typename T> const T *as(const void *p, T *) {
  return static_cast<const T *>(p);
}

void fill(void *out, Elem t, int64_t n, float value, Stream s) {
  dispatch(t, [&](auto tag) {
    STRATA_LAUNCH(fillKernel, n, s)(as(out, tag), n, value);
  });
}
void accumulate(const void *x, Elem tx, void *y, Elem ty, int64_t n,
                Stream s) {
  if (tx == ty) {
    launchMap(tx, MapArgs<2, 1>{{y, x}, {y}}, n, AddF(), s);
    return;
  }
  dispatch(tx, [&](auto xt) {
    dispatch(ty, [&](auto yt) {
      STRATA_LAUNCH(accumulateKernel, n, s)(as(x, xt), as(y, yt), n);
    });
  });
}
void add(const void *a, const void *b, void *out, Elem t, int64_t n,
         Stream s) {
  launchMap(t, MapArgs<2, 1>{{a, b}, {out}}, n, AddF(), s);
}
void mul(const void *a, const void *b, void *out, Elem t, int64_t n,
         Stream s) {
  launchMap(t, MapArgs<2, 1>{{a, b}, {out}}, n, MulF(), s);
}
void scale(const void *x, void *out, Elem t, int64_t n, float alpha,
           Stream s) {
  launchMap(t, MapArgs<1, 1>{{x}, {out}}, n, ScaleF{alpha}, s);
}
void convert(const void *x, Elem from, void *out, Elem to, int64_t n,
             Stream s) {
  if (n <= 0)
    return;
  MapArgs<1, 1> args{{x}, {out}};
  if (from == Elem::BF16 && to == Elem::F32)
    launchMapTyped<bf16, float>(args, n, CopyF(), s);
  else if (from == Elem::F32 && to == Elem::BF16)
    launchMapTyped<float, bf16>(args, n, CopyF(), s);
  else if (x != out)
    check(cudaMemcpyAsync(out, x, size_t(n) * (to == Elem::BF16 ? 2 : 4),
                          cudaMemcpyDeviceToDevice, s),
          "convert");
}
void transpose(const void *x, void *out, Elem t, int rank, const int64_t *dims,
               const int64_t *perm, Stream s) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i)
    n *= dims[i];
  if (n <= 0)
    return;
  // A swap of the last two dimensions (the rest in order) through tiles.
  bool lastTwo = rank >= 2 && perm[rank - 1] == rank - 2 &&
                 perm[rank - 2] == rank - 1;
  for (int i = 0; i + 2 < rank && lastTwo; ++i)
    lastTwo = perm[i] == i;
  if (lastTwo) {
    int64_t rows = dims[rank - 2], cols = dims[rank - 1], outer = n / (rows * cols);
    if (outer <= 65535) {
      dim3 grid(unsigned((cols + 31) / 32), unsigned((rows + 31) / 32),
                unsigned(outer));
      dispatch(t, [&](auto tag) {
        transposeLastTwoKernel<<<grid, dim3(32, 8), 0, s>>>(
            as(x, tag), as(out, tag), rows, cols);
      });
      return;
    }
  }
  // The innermost dimension stays innermost (heads moving around whole
  // rows of head_dim): 16-byte chunks of rows, one index computation each.
  size_t elem = t == Elem::BF16 ? 2 : 4;
  int64_t rowBytes = dims[rank - 1] * int64_t(elem);
  if (perm[rank - 1] == rank - 1 && rowBytes % 16 == 0 && aligned16(x) &&
      aligned16(out)) {
    TransposeShape rows{};
    rows.rank = rank - 1;
    int64_t inStride[5], stride = 1;
    for (int i = rank - 2; i >= 0; --i) {
      inStride[i] = stride;
      stride *= dims[i];
    }
    for (int i = 0; i < rank - 1; ++i) {
      rows.outDims[i] = dims[perm[i]];
      rows.strideOf[i] = inStride[perm[i]];
    }
    int64_t chunksPerRow = rowBytes / 16, chunks = n * int64_t(elem) / 16;
    const uint4 *src = static_cast<const uint4 *>(x);
    uint4 *dst = static_cast<uint4 *>(out);
    if (chunks < (int64_t(1) << 31) && rows.rank >= 1 && rows.rank <= 4) {
      int blocks = gridFor((chunks + 1) / 2);
      uint32_t c32 = uint32_t(chunks), per = uint32_t(chunksPerRow);
      switch (rows.rank) {
      case 1:
        transposeRows32Kernel<1><<<blocks, kThreads, 0, s>>>(src, dst, c32,
                                                             per, rows);
        break;
      case 2:
        transposeRows32Kernel<2><<<blocks, kThreads, 0, s>>>(src, dst, c32,
                                                             per, rows);
        break;
      case 3:
        transposeRows32Kernel<3><<<blocks, kThreads, 0, s>>>(src, dst, c32,
                                                             per, rows);
        break;
      default:
        transposeRows32Kernel<4><<<blocks, kThreads, 0, s>>>(src, dst, c32,
                                                             per, rows);
        break;
      }
      return;
    }
    transposeRowsKernel<<<gridFor(chunks), kThreads, 0, s>>>(
        src, dst, chunks, chunksPerRow, rows);
    return;
  }
  TransposeShape shape{};
  shape.rank = rank;
  int64_t inStride[5], stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    inStride[i] = stride;
    stride *= dims[i];
  }
  for (int i = 0; i < rank; ++i) {
    shape.outDims[i] = dims[perm[i]];
    shape.strideOf[i] = inStride[perm[i]];
  }
  dispatch(t, [&](auto tag) {
    STRATA_LAUNCH(transposeKernel, n, s)(as(x, tag), as(out, tag), n, shape);
  });
}
void sliceInsertAccumulate(const void *x, void *out, Elem t, int64_t outer,
                           int64_t big, int64_t small, int64_t start,
                           int64_t inner, Stream s) {
  dispatch(t, [&](auto tag) {
    STRATA_LAUNCH(sliceInsertAccumulateKernel, outer * small * inner, s)
    (as(x, tag), as(out, tag), outer, big, small, start, inner);
  });
}
void embeddingFwd(const int32_t *ids, int64_t count, const float *table,
                  int64_t rows, int64_t hidden, int64_t rowStart, float *out,
                  Stream s) {
  STRATA_LAUNCH(embeddingFwdKernel, count * hidden, s)
  (ids, count, table, rows, hidden, rowStart, out);
}

namespace {
/// The sort's temporary storage for `count` keys (queried once per size).
size_t sortTempBytes(int64_t count) {
  size_t bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(
            nullptr, bytes, static_cast<const int32_t *>(nullptr),
            static_cast<int32_t *>(nullptr),
            static_cast<const int32_t *>(nullptr),
            static_cast<int32_t *>(nullptr), int(count)),
        "sizing the embedding gradient's sort");
  return bytes;
}
size_t roundUp256(size_t n) { return (n + 255) / 256 * 256; }
} // namespace

size_t embeddingBwdScratchBytes(int64_t count) {
  return 3 * roundUp256(sizeof(int32_t) * size_t(count)) +
         roundUp256(sortTempBytes(count));
}
void embeddingBwd(const int32_t *ids, int64_t count, const float *dout,
                  int64_t rows, int64_t hidden, int64_t rowStart, float *dtable,
                  void *scratch, size_t scratchBytes, Stream s) {
  if (count <= 0)
    return;
  char *base = static_cast<char *>(scratch);
  size_t idBytes = roundUp256(sizeof(int32_t) * size_t(count));
  int32_t *sortedIds = reinterpret_cast<int32_t *>(base);
  int32_t *positions = reinterpret_cast<int32_t *>(base + idBytes);
  int32_t *order = reinterpret_cast<int32_t *>(base + 2 * idBytes);
  void *temp = base + 3 * idBytes;
  size_t tempBytes = scratchBytes - 3 * idBytes;
  STRATA_LAUNCH(iotaKernel, count, s)(positions, count);
  check(cub::DeviceRadixSort::SortPairs(temp, tempBytes, ids, sortedIds,
                                        positions, order, int(count), 0,
                                        int(sizeof(int32_t) * 8), s),
        "sorting the embedding gradient's ids");
  int64_t threads = count * 32;
  embeddingBwdRunsKernel<<<unsigned((threads + kThreads - 1) / kThreads),
                           kThreads, 0, s>>>(sortedIds, order, count, dout,
                                             rows, hidden, rowStart, dtable);
}

void biasAdd(const void *x, const void *bias, void *out, Elem t, int64_t rows,
             int64_t n, Stream s) {
  dispatch(t, [&](auto tag) {
    STRATA_LAUNCH(biasAddKernel, rows * n, s)
    (as(x, tag), as(bias, tag), as(out, tag), rows, n);
  });
}

size_t columnScratchBytes(int64_t rows, int64_t n) {
  int64_t chunks = std::max({columnChunks(rows, n, kColTile),
                             columnChunks(rows, n, kColPackTile),
                             layerNormWarps(rows)});
  return 2 * sizeof(float) * size_t(chunks) * size_t(n);
}

void biasGrad(const void *dout, Elem tdout, void *dbias, Elem tbias,
              int64_t rows, int64_t n, float *scratch, Stream s) {
  dispatch(tdout, [&](auto dt) {
    dispatch(tbias, [&](auto bt) {
      auto *dst = as(dbias, bt);
      decltype(dst) none = nullptr;
      columnReduce<1>(rows, n, ColumnOf<std::remove_pointer_t<decltype(dt)>>{
                                   as(dout, dt), n},
                      dst, none, scratch, s);
    });
  });
}

void geluFwd(const void *x, void *out, Elem t, int64_t n, Stream s) {
  launchMap(t, MapArgs<1, 1>{{x}, {out}}, n, GeluFwdF(), s);
}
void geluBwd(const void *x, const void *dy, void *dx, Elem t, int64_t n,
             Stream s) {
  launchMap(t, MapArgs<2, 1>{{x, dy}, {dx}}, n, GeluBwdF(), s);
}
void reluFwd(const float *x, float *out, int64_t n, Stream s) {
  launchMap(Elem::F32, MapArgs<1, 1>{{x}, {out}}, n, ReluFwdF(), s);
}
void reluBwd(const float *x, const float *dy, float *dx, int64_t n, Stream s) {
  launchMap(Elem::F32, MapArgs<2, 1>{{x, dy}, {dx}}, n, ReluBwdF(), s);
}
void unaryFwd(int64_t kind, const float *x, float *out, int64_t n, Stream s) {
  launchMap(Elem::F32, MapArgs<1, 1>{{x}, {out}}, n, UnaryFwdF{kind}, s);
}
void unaryBwd(int64_t kind, const float *x, const float *dy, float *dx,
              int64_t n, Stream s) {
  launchMap(Elem::F32, MapArgs<2, 1>{{x, dy}, {dx}}, n, UnaryBwdF{kind}, s);
}
namespace {
__global__ void binaryFwdKernel(int64_t kind, const float *x, const float *y,
                                float *out, int64_t outer, int64_t mid,
                                int64_t inner, int64_t n) {
  STRATA_GRID_STRIDE(i, n)
  out[i] = k::binaryValue(k::BinaryKind(kind), x[i],
                          y[i / (mid * inner) % outer * inner + i % inner]);
}
} // namespace
void binaryFwd(int64_t kind, const float *x, const float *y, float *out,
               int64_t n, int64_t outer, int64_t mid, int64_t inner, Stream s) {
  STRATA_LAUNCH(binaryFwdKernel, n, s)(kind, x, y, out, outer, mid, inner, n);
}
void siluFwd(const void *x, void *out, Elem t, int64_t n, Stream s) {
  launchMap(t, MapArgs<1, 1>{{x}, {out}}, n, SiluFwdF(), s);
}
void siluBwd(const void *x, const void *dy, void *dx, Elem t, int64_t n,
             Stream s) {
  launchMap(t, MapArgs<2, 1>{{x, dy}, {dx}}, n, SiluBwdF(), s);
}
void siluMulFwd(const void *gate, const void *up, void *out, Elem t, int64_t n,
                Stream s) {
  launchMap(t, MapArgs<2, 1>{{gate, up}, {out}}, n, SiluMulFwdF(), s);
}
void siluMulBwd(const void *gate, const void *up, const void *dy, void *dgate,
                void *dup, Elem t, int64_t n, Stream s) {
  launchMap(t, MapArgs<3, 2>{{gate, up, dy}, {dgate, dup}}, n, SiluMulBwdF(),
            s);
}

void layerNormFwd(const void *x, const void *gamma, const void *beta,
                  void *out, Elem t, float *mean, float *rstd, int64_t rows,
                  int64_t n, float eps, Stream s, const void *residual,
                  void *sum) {
  if (rows <= 0)
    return;
  bool vec = n % kPack == 0 && aligned16(x) && aligned16(gamma) &&
             aligned16(beta) && aligned16(out) &&
             (!residual || (aligned16(residual) && aligned16(sum)));
  if (vec && n <= 32 * kPack * kWarpRowMaxPacks) {
    int64_t packsPerLane = (n / kPack + 31) / 32;
    int blocks = int(std::min<int64_t>((rows + 7) / 8, 65535));
    dispatch(t, [&](auto tag) {
      auto launch = [&](auto kernel) {
        kernel<<<blocks, 256, 0, s>>>(as(x, tag), as(gamma, tag),
                                      as(beta, tag), as(out, tag), mean, rstd,
                                      rows, n, eps, as(residual, tag),
                                      as(sum, tag));
      };
      using T = std::remove_pointer_t<decltype(tag)>;
      if (packsPerLane <= 1)
        launch(layerNormFwdWarpKernel<T, 1>);
      else if (packsPerLane <= 2)
        launch(layerNormFwdWarpKernel<T, 2>);
      else if (packsPerLane <= 3)
        launch(layerNormFwdWarpKernel<T, 3>);
      else
        launch(layerNormFwdWarpKernel<T, 4>);
    });
    return;
  }
  dispatch(t, [&](auto tag) {
    layerNormFwdKernel<<<unsigned(rows), rowThreads(n, vec), 0, s>>>(
        as(x, tag), as(gamma, tag), as(beta, tag), as(out, tag), mean, rstd, n,
        eps, vec, as(residual, tag), as(sum, tag));
  });
}
void layerNormBwd(const void *dy, const void *x, const void *gamma,
                  const float *mean, const float *rstd, void *dx, Elem t,
                  void *dgamma, void *dbeta, Elem tg, int64_t rows, int64_t n,
                  float *scratch, Stream s) {
  if (rows <= 0)
    return;
  bool vec = n % kPack == 0 && aligned16(dy) && aligned16(x) &&
             aligned16(gamma) && aligned16(dx);
  if (vec && n <= 32 * kPack * kWarpRowMaxPacks) {
    // One pass (each row read once, dx may alias dy: a warp reads its row
    // whole before it writes), then the warps' column partials in order.
    int64_t warps = layerNormWarps(rows), per = (rows + warps - 1) / warps;
    int64_t packsPerLane = (n / kPack + 31) / 32;
    int blocks = int((warps + 7) / 8);
    dispatch(t, [&](auto tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      auto launch = [&](auto kernel) {
        kernel<<<blocks, 256, 0, s>>>(as(dy, tag), as(x, tag), as(gamma, tag),
                                      mean, rstd, as(dx, tag), rows, n, per,
                                      warps, scratch);
      };
      if (packsPerLane <= 1)
        launch(layerNormBwdWarpKernel<T, 1>);
      else if (packsPerLane <= 2)
        launch(layerNormBwdWarpKernel<T, 2>);
      else if (packsPerLane <= 3)
        launch(layerNormBwdWarpKernel<T, 3>);
      else
        launch(layerNormBwdWarpKernel<T, 4>);
      dispatch(tg, [&](auto gt) {
        columnFinishKernel<<<gridFor(n), kThreads, 0, s>>>(
            scratch, warps, n, as(dgamma, gt), as(dbeta, gt));
      });
    });
    return;
  }
  // The column pass reads x before the row pass may overwrite it in place
  // (dx may alias dy, never x).
  dispatch(t, [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    dispatch(tg, [&](auto gt) {
      columnReduce<2>(rows, n,
                      LayerNormColumns<T>{as(dy, tag), as(x, tag), mean, rstd,
                                          n},
                      as(dgamma, gt), as(dbeta, gt), scratch, s);
    });
    layerNormBwdRowKernel<<<unsigned(rows), rowThreads(n, vec), 0, s>>>(
        as(dy, tag), as(x, tag), as(gamma, tag), mean, rstd, as(dx, tag), n,
        vec);
  });
}
void rmsNormFwd(const void *x, const void *weight, void *out, Elem t,
                float *rstd, int64_t rows, int64_t n, float eps, Stream s) {
  if (rows <= 0)
    return;
  bool vec = n % kPack == 0 && aligned16(x) && aligned16(weight) &&
             aligned16(out);
  dispatch(t, [&](auto tag) {
    rmsNormFwdKernel<<<unsigned(rows), rowThreads(n, vec), 0, s>>>(
        as(x, tag), as(weight, tag), as(out, tag), rstd, n, eps, vec);
  });
}
void rmsNormBwd(const void *dy, const void *x, const void *weight,
                const float *rstd, void *dx, Elem t, void *dweight, Elem tw,
                int64_t rows, int64_t n, float *scratch, Stream s) {
  if (rows <= 0)
    return;
  dispatch(t, [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    dispatch(tw, [&](auto wt) {
      auto *dst = as(dweight, wt);
      decltype(dst) none = nullptr;
      columnReduce<1>(rows, n,
                      RmsNormColumns<T>{as(dy, tag), as(x, tag), rstd, n}, dst,
                      none, scratch, s);
    });
    rmsNormBwdRowKernel<<<unsigned(rows), rowThreads(n, false), 0, s>>>(
        as(dy, tag), as(x, tag), as(weight, tag), rstd, as(dx, tag), n);
  });
}
void softmaxFwd(const void *x, void *out, Elem t, int64_t rows, int64_t n,
                bool causal, float scale, Stream s) {
  if (rows <= 0)
    return;
  dispatch(t, [&](auto tag) {
    STRATA_LAUNCH_ROWS(softmaxFwdKernel, rows, s)
    (as(x, tag), as(out, tag), n, causal, scale);
  });
}
void softmaxBwd(const void *y, const void *dy, void *dx, Elem t, int64_t rows,
                int64_t n, float scale, Stream s) {
  if (rows <= 0)
    return;
  dispatch(t, [&](auto tag) {
    STRATA_LAUNCH_ROWS(softmaxBwdKernel, rows, s)
    (as(y, tag), as(dy, tag), as(dx, tag), n, scale);
  });
}
void crossEntropyFwd(const float *logits, const int32_t *targets, int64_t rows,
                     int64_t vocab, float *lse, float *loss, double *scratch,
                     Stream s) {
  STRATA_LAUNCH_ROWS(crossEntropyFwdKernel, rows, s)
  (logits, targets, vocab, lse, scratch);
  meanLossKernel<<<1, 1024, 0, s>>>(scratch, rows, loss);
}
void crossEntropyFwdBwd(const float *logits, int64_t ldLogits,
                        const int32_t *targets, int64_t rows, int64_t vocab,
                        float *lse, float *loss, double *scratch,
                        uint16_t *dlogits, int64_t ldGrad, float scale,
                        bool zeroPadding, Stream s) {
  if (vocab <= kCeSharedFloats) {
    size_t shared = sizeof(float) * size_t(vocab);
    static bool raised = false;
    if (!raised) {
      check(cudaFuncSetAttribute(crossEntropySharedKernel,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 int(sizeof(float) * kCeSharedFloats)),
            "raising the loss kernel's shared-memory limit");
      raised = true;
    }
    bool vec = aligned16(logits) && ldLogits % 4 == 0;
    crossEntropySharedKernel<<<unsigned(rows), kCeSharedThreads, shared, s>>>(
        logits, ldLogits, targets, vocab, lse, scratch, dlogits, ldGrad, scale,
        zeroPadding, vec);
  } else {
    crossEntropyFwdBwdKernel<<<unsigned(rows), kRowThreads, 0, s>>>(
        logits, ldLogits, targets, vocab, lse, scratch, dlogits, ldGrad, scale,
        zeroPadding);
  }
  meanLossKernel<<<1, 1024, 0, s>>>(scratch, rows, loss);
}
void crossEntropyBwd(const float *logits, const int32_t *targets,
                     const float *lse, float *dlogits, int64_t rows,
                     int64_t vocab, float scale, Stream s) {
  STRATA_LAUNCH_ROWS(crossEntropyBwdKernel, rows, s)
  (logits, targets, lse, dlogits, vocab, 0, vocab, scale);
}
void ceVpMax(const float *logits, float *rowmax, int64_t rows, int64_t n,
             int64_t valid, Stream s) {
  STRATA_LAUNCH_ROWS(ceVpMaxKernel, rows, s)(logits, rowmax, n, valid);
}
void ceVpSumExp(const float *logits, const int32_t *targets,
                const float *rowmax, float *stats, int64_t rows, int64_t n,
                int64_t vocabStart, int64_t valid, Stream s) {
  STRATA_LAUNCH_ROWS(ceVpSumExpKernel, rows, s)
  (logits, targets, rowmax, stats, rows, n, vocabStart, valid);
}
void ceVpLoss(const float *rowmax, const float *stats, float *lse, float *loss,
              int64_t rows, double *scratch, Stream s) {
  STRATA_LAUNCH(ceVpLossKernel, rows, s)(rowmax, stats, lse, rows, scratch);
  meanLossKernel<<<1, 1024, 0, s>>>(scratch, rows, loss);
}
void ceVpBwd(const float *logits, const int32_t *targets, const float *lse,
             float *dlogits, int64_t rows, int64_t n, int64_t vocabStart,
             int64_t valid, float scale, Stream s) {
  STRATA_LAUNCH_ROWS(crossEntropyBwdKernel, rows, s)
  (logits, targets, lse, dlogits, n, vocabStart, valid, scale);
}
void rotary(const void *x, void *out, Elem t, int64_t outer, int64_t seq,
            int64_t dim, double theta, bool inverse, Stream s) {
  dispatch(t, [&](auto tag) {
    STRATA_LAUNCH(rotaryKernel, outer * seq * (dim / 2), s)
    (as(x, tag), as(out, tag), outer, seq, dim, theta, inverse ? -1.0f : 1.0f);
  });
}
void rotaryAtPosition(const float *x, float *out, int64_t rows, int64_t dim,
                      int64_t pos, double theta, Stream s) {
  STRATA_LAUNCH(rotaryAtPositionKernel, rows * (dim / 2), s)
  (x, out, rows, dim, pos, theta);
}
void repeatInterleave(const void *x, void *out, Elem t, int64_t outer,
                      int64_t n, int64_t repeats, int64_t inner, Stream s) {
  dispatch(t, [&](auto tag) {
    STRATA_LAUNCH(repeatInterleaveKernel, outer * n * repeats * inner, s)
    (as(x, tag), as(out, tag), outer, n, repeats, inner);
  });
}
void repeatInterleaveBwd(const void *dy, void *dx, Elem t, int64_t outer,
                         int64_t n, int64_t repeats, int64_t inner, Stream s) {
  dispatch(t, [&](auto tag) {
    STRATA_LAUNCH(repeatInterleaveBwdKernel, outer * n * inner, s)
    (as(dy, tag), as(dx, tag), outer, n, repeats, inner);
  });
}
void kvAttention(const float *q, const float *k, const float *v, float *kCache,
                 float *vCache, float *out, int64_t batch, int64_t heads,
                 int64_t kvHeads, int64_t maxLen, int64_t headDim, int64_t pos,
                 float scale, Stream s) {
  size_t shared = sizeof(float) * size_t(pos + 1);
  kvAttentionKernel<<<unsigned(batch * heads), kRowThreads, shared, s>>>(
      q, k, v, kCache, vCache, out, heads, kvHeads, maxLen, headDim, pos,
      scale);
}
namespace {
struct SmallBlob {
  unsigned char bytes[2048];
};
__global__ void writeSmallKernel(SmallBlob blob, size_t n, unsigned char *dst) {
  for (size_t i = threadIdx.x; i < n; i += blockDim.x)
    dst[i] = blob.bytes[i];
}
} // namespace
void writeSmall(void *dst, const void *src, size_t bytes, Stream s) {
  const unsigned char *from = static_cast<const unsigned char *>(src);
  unsigned char *to = static_cast<unsigned char *>(dst);
  for (size_t done = 0; done < bytes; done += sizeof(SmallBlob)) {
    SmallBlob blob;
    size_t n = std::min(bytes - done, sizeof(SmallBlob));
    std::memcpy(blob.bytes, from + done, n);
    writeSmallKernel<<<1, 256, 0, s>>>(blob, n, to + done);
  }
}

void sumSquaresPartials(const float *x, int64_t n, double *partials, Stream s) {
  sumSquaresKernel<<<kReduceBlocks, kThreads, 0, s>>>(x, n, partials);
}
void sumPartials(const double *partials, int64_t count, double *out, Stream s) {
  sumPartialsKernel<<<1, kThreads, 0, s>>>(partials, count, out);
}
void clipGrads(float *x, int64_t n, const double *sumSq, double maxNorm,
               Stream s) {
  STRATA_LAUNCH(clipGradsKernel, n, s)(x, n, sumSq, maxNorm);
}
void adamwMulti(const TensorSlot *slots, const TensorChunk *chunks,
                int64_t numChunks, const k::AdamWCoefficients *coeffs,
                Stream s) {
  if (numChunks > 0)
    adamwMultiKernel<<<unsigned(numChunks), kThreads, 0, s>>>(slots, chunks,
                                                              coeffs);
}
void sgdMulti(const TensorSlot *slots, const TensorChunk *chunks,
              int64_t numChunks, const k::SgdCoefficients *coeffs, Stream s) {
  if (numChunks > 0)
    sgdMultiKernel<<<unsigned(numChunks), kThreads, 0, s>>>(slots, chunks,
                                                            coeffs);
}
void fillMulti(const TensorSlot *slots, const TensorChunk *chunks,
               int64_t numChunks, float value, Stream s) {
  if (numChunks > 0)
    fillMultiKernel<<<unsigned(numChunks), kThreads, 0, s>>>(slots, chunks,
                                                             value);
}
void clipMulti(const TensorSlot *slots, const TensorChunk *chunks,
               int64_t numChunks, const double *sumSq, double maxNorm,
               Stream s) {
  if (numChunks > 0)
    clipMultiKernel<<<unsigned(numChunks), kThreads, 0, s>>>(slots, chunks,
                                                             sumSq, maxNorm);
}
void sumSquaresMulti(const TensorSlot *slots, const TensorChunk *chunks,
                     int64_t numChunks, double *partials, double *out,
                     Stream s) {
  if (numChunks > 0)
    sumSquaresMultiKernel<<<unsigned(numChunks), kThreads, 0, s>>>(
        slots, chunks, partials);
  sumPartialsKernel<<<1, kThreads, 0, s>>>(partials, numChunks, out);
}

} // namespace strata::rt::cuda
