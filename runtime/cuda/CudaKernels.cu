//===- CudaKernels.cu - CUDA kernels of the Strata instruction set --------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// One file, so nvcc runs once per architecture. Elementwise kernels are
// grid-stride loops; row kernels (norms, softmax, cross-entropy) give a row
// to a block of kRowThreads and reduce in shared memory; column reductions
// (bias, norm weight gradients) give a column to a thread and walk the rows
// in order, so every result is deterministic. The per-element arithmetic is
// runtime/kernels/'s, the same functions the CPU backend runs.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaKernels.h"

#include "runtime/kernels/BinaryMath.h"
#include "runtime/kernels/GeluMath.h"
#include "runtime/kernels/LayerNormMath.h"
#include "runtime/kernels/OptimizerMath.h"
#include "runtime/kernels/RmsNormMath.h"
#include "runtime/kernels/RotaryMath.h"
#include "runtime/kernels/SiluMath.h"
#include "runtime/kernels/SoftmaxMath.h"
#include "runtime/kernels/UnaryMath.h"

#include <cfloat>

namespace strata::rt::cuda {

namespace k = strata::kernels;

namespace {

constexpr int kThreads = 256;
constexpr int kRowThreads = 256;

int gridFor(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return int(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks);
}

#define STRATA_GRID_STRIDE(i, n)                                               \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

__device__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

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

//===--- Elementwise -----------------------------------------------------===//

__global__ void fillKernel(float *out, int64_t n, float value) {
  STRATA_GRID_STRIDE(i, n) out[i] = value;
}
__global__ void accumulateKernel(const float *x, float *y, int64_t n) {
  STRATA_GRID_STRIDE(i, n) y[i] += x[i];
}
__global__ void addKernel(const float *a, const float *b, float *out,
                          int64_t n) {
  STRATA_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
__global__ void mulKernel(const float *a, const float *b, float *out,
                          int64_t n) {
  STRATA_GRID_STRIDE(i, n) out[i] = a[i] * b[i];
}
__global__ void scaleKernel(const float *x, float *out, int64_t n,
                            float alpha) {
  STRATA_GRID_STRIDE(i, n) out[i] = alpha * x[i];
}

struct TransposeShape {
  int rank;
  int64_t outDims[5];
  int64_t strideOf[5]; ///< Input stride of each output dimension.
};
__global__ void transposeKernel(const float *x, float *out, int64_t n,
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

__global__ void sliceInsertAccumulateKernel(const float *x, float *out,
                                            int64_t outer, int64_t big,
                                            int64_t small, int64_t start,
                                            int64_t inner) {
  STRATA_GRID_STRIDE(i, outer * small * inner) {
    int64_t o = i / (small * inner), rest = i % (small * inner);
    out[(o * big + start) * inner + rest] += x[i];
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
// One thread per column walks the tokens in order: deterministic, unlike
// atomics, and the ids of one micro-batch are few.
__global__ void embeddingBwdKernel(const int32_t *ids, int64_t count,
                                   const float *dout, int64_t rows,
                                   int64_t hidden, int64_t rowStart,
                                   float *dtable) {
  STRATA_GRID_STRIDE(c, hidden) {
    for (int64_t i = 0; i < count; ++i) {
      int64_t row = int64_t(ids[i]) - rowStart;
      if (row >= 0 && row < rows)
        dtable[row * hidden + c] += dout[i * hidden + c];
    }
  }
}

__global__ void biasAddKernel(const float *x, const float *bias, float *out,
                              int64_t rows, int64_t n) {
  STRATA_GRID_STRIDE(i, rows * n) out[i] = x[i] + bias[i % n];
}
__global__ void biasGradKernel(const float *dout, float *dbias, int64_t rows,
                               int64_t n) {
  STRATA_GRID_STRIDE(c, n) {
    float acc = dbias[c];
    for (int64_t r = 0; r < rows; ++r)
      acc += dout[r * n + c];
    dbias[c] = acc;
  }
}

__global__ void geluFwdKernel(const float *x, float *out, int64_t n) {
  STRATA_GRID_STRIDE(i, n) {
    float v = x[i];
    out[i] = k::geluForward(v, sigmoid(k::geluSigmoidArg(v)));
  }
}
__global__ void geluBwdKernel(const float *x, const float *dy, float *dx,
                              int64_t n) {
  STRATA_GRID_STRIDE(i, n) {
    float v = x[i];
    dx[i] = k::geluBackward(v, sigmoid(k::geluSigmoidArg(v)), dy[i]);
  }
}
__global__ void reluFwdKernel(const float *x, float *out, int64_t n) {
  STRATA_GRID_STRIDE(i, n) out[i] = k::reluForward(x[i]);
}
__global__ void reluBwdKernel(const float *x, const float *dy, float *dx,
                              int64_t n) {
  STRATA_GRID_STRIDE(i, n) dx[i] = k::reluBackward(x[i], dy[i]);
}
__global__ void siluFwdKernel(const float *x, float *out, int64_t n) {
  STRATA_GRID_STRIDE(i, n) out[i] = k::silu(x[i], sigmoid(x[i]));
}
__global__ void siluBwdKernel(const float *x, const float *dy, float *dx,
                              int64_t n) {
  STRATA_GRID_STRIDE(i, n)
  dx[i] = dy[i] * k::siluDerivative(x[i], sigmoid(x[i]));
}
__global__ void unaryFwdKernel(int64_t kind, const float *x, float *out,
                               int64_t n) {
  STRATA_GRID_STRIDE(i, n) out[i] = k::unaryValue(k::UnaryKind(kind), x[i]);
}
__global__ void unaryBwdKernel(int64_t kind, const float *x, const float *dy,
                               float *dx, int64_t n) {
  STRATA_GRID_STRIDE(i, n)
  dx[i] = dy[i] * k::unaryDerivative(k::UnaryKind(kind), x[i]);
}
__global__ void binaryFwdKernel(int64_t kind, const float *x, const float *y,
                                float *out, int64_t outer, int64_t mid,
                                int64_t inner, int64_t n) {
  STRATA_GRID_STRIDE(i, n)
  out[i] = k::binaryValue(k::BinaryKind(kind), x[i],
                          y[i / (mid * inner) % outer * inner + i % inner]);
}
__global__ void siluMulFwdKernel(const float *gate, const float *up, float *out,
                                 int64_t n) {
  STRATA_GRID_STRIDE(i, n)
  out[i] = k::siluMul(gate[i], sigmoid(gate[i]), up[i]);
}
__global__ void siluMulBwdKernel(const float *gate, const float *up,
                                 const float *dy, float *dgate, float *dup,
                                 int64_t n) {
  STRATA_GRID_STRIDE(i, n) {
    float g = gate[i], u = up[i], d = dy[i], dg, du;
    k::siluMulGrad(g, sigmoid(g), u, d, dg, du);
    dgate[i] = dg;
    dup[i] = du;
  }
}

//===--- Normalisation ---------------------------------------------------===//

__global__ void layerNormFwdKernel(const float *x, const float *gamma,
                                   const float *beta, float *out, float *mean,
                                   float *rstd, int64_t n, float eps) {
  __shared__ float shared[32];
  const float *xr = x + int64_t(blockIdx.x) * n;
  float *yr = out + int64_t(blockIdx.x) * n;
  float acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc += xr[i];
  float mu = blockReduce(acc, Sum(), 0.0f, shared) / float(n);
  acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc += (xr[i] - mu) * (xr[i] - mu);
  float rs = k::layerNormRstd(blockReduce(acc, Sum(), 0.0f, shared), n, eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = k::layerNormForward(xr[i], mu, rs, gamma[i], beta[i]);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = rs;
  }
}
__global__ void layerNormBwdRowKernel(const float *dy, const float *x,
                                      const float *gamma, const float *mean,
                                      const float *rstd, float *dx, int64_t n) {
  __shared__ float shared[32];
  int64_t r = blockIdx.x;
  const float *xr = x + r * n, *gr = dy + r * n;
  float *dxr = dx + r * n;
  float mu = mean[r], rs = rstd[r], accD = 0, accDX = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float d = gr[i] * gamma[i];
    accD += d;
    accDX += d * k::layerNormNormalized(xr[i], mu, rs);
  }
  float meanD = blockReduce(accD, Sum(), 0.0f, shared) / float(n);
  float meanDX = blockReduce(accDX, Sum(), 0.0f, shared) / float(n);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    dxr[i] = k::layerNormInputGrad(gr[i], gamma[i],
                                   k::layerNormNormalized(xr[i], mu, rs), rs,
                                   meanD, meanDX);
}
__global__ void layerNormBwdColumnKernel(const float *dy, const float *x,
                                         const float *mean, const float *rstd,
                                         float *dgamma, float *dbeta,
                                         int64_t rows, int64_t n) {
  STRATA_GRID_STRIDE(c, n) {
    float g = dgamma[c], b = dbeta[c];
    for (int64_t r = 0; r < rows; ++r) {
      float d = dy[r * n + c];
      g += d * k::layerNormNormalized(x[r * n + c], mean[r], rstd[r]);
      b += d;
    }
    dgamma[c] = g;
    dbeta[c] = b;
  }
}

__global__ void rmsNormFwdKernel(const float *x, const float *weight,
                                 float *out, float *rstd, int64_t n,
                                 float eps) {
  __shared__ float shared[32];
  const float *xr = x + int64_t(blockIdx.x) * n;
  float *yr = out + int64_t(blockIdx.x) * n;
  float acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc += xr[i] * xr[i];
  float rs = k::rmsNormRstd(blockReduce(acc, Sum(), 0.0f, shared), n, eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = k::rmsNormForward(xr[i], rs, weight[i]);
  if (threadIdx.x == 0)
    rstd[blockIdx.x] = rs;
}
__global__ void rmsNormBwdRowKernel(const float *dy, const float *x,
                                    const float *weight, const float *rstd,
                                    float *dx, int64_t n) {
  __shared__ float shared[32];
  int64_t r = blockIdx.x;
  const float *xr = x + r * n, *gr = dy + r * n;
  float rs = rstd[r], acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc += weight[i] * gr[i] * xr[i];
  float coeff =
      k::rmsNormGradCoefficient(blockReduce(acc, Sum(), 0.0f, shared), rs, n);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    dx[r * n + i] = k::rmsNormInputGrad(gr[i], xr[i], weight[i], rs, coeff);
}
__global__ void rmsNormBwdColumnKernel(const float *dy, const float *x,
                                       const float *rstd, float *dweight,
                                       int64_t rows, int64_t n) {
  STRATA_GRID_STRIDE(c, n) {
    float acc = dweight[c];
    for (int64_t r = 0; r < rows; ++r)
      acc += k::rmsNormWeightGrad(dy[r * n + c], x[r * n + c], rstd[r]);
    dweight[c] = acc;
  }
}

//===--- Softmax and cross-entropy ---------------------------------------===//

__global__ void softmaxFwdKernel(const float *x, float *out, int64_t n,
                                 bool causal, float scale) {
  __shared__ float shared[32];
  int64_t r = blockIdx.x;
  const float *xr = x + r * n;
  float *yr = out + r * n;
  int64_t valid = k::softmaxValidColumns(r, n, causal);
  float mx = -FLT_MAX, mn = FLT_MAX;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) {
    mx = fmaxf(mx, xr[j]);
    mn = fminf(mn, xr[j]);
  }
  mx = blockReduce(mx, Max(), -FLT_MAX, shared);
  mn = blockReduce(mn, Min(), FLT_MAX, shared);
  float shift = k::softmaxShift(mx, mn, scale), acc = 0;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
    acc += expf(k::softmaxExpArg(xr[j], scale, shift));
  float inv = 1.0f / blockReduce(acc, Sum(), 0.0f, shared);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    yr[j] =
        j < valid ? expf(k::softmaxExpArg(xr[j], scale, shift)) * inv : 0.0f;
}
__global__ void softmaxBwdKernel(const float *y, const float *dy, float *dx,
                                 int64_t n, float scale) {
  __shared__ float shared[32];
  int64_t r = blockIdx.x;
  const float *yr = y + r * n, *gr = dy + r * n;
  float acc = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    acc += yr[j] * gr[j];
  float dot = blockReduce(acc, Sum(), 0.0f, shared);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    dx[r * n + j] = k::softmaxBackward(yr[j], gr[j], dot, scale);
}

/// Row maximum over the first `valid` columns (-FLT_MAX when none).
__device__ float rowMax(const float *xr, int64_t valid, float *shared) {
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
    mx = fmaxf(mx, xr[j]);
  return blockReduce(mx, Max(), -FLT_MAX, shared);
}

__global__ void crossEntropyFwdKernel(const float *logits,
                                      const int32_t *targets, int64_t vocab,
                                      float *lse, double *rowLoss) {
  __shared__ float shared[32];
  int64_t r = blockIdx.x;
  const float *xr = logits + r * vocab;
  float mx = rowMax(xr, vocab, shared), acc = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
    acc += expf(xr[j] - mx);
  float l = mx + logf(blockReduce(acc, Sum(), 0.0f, shared));
  if (threadIdx.x == 0) {
    lse[r] = l;
    int64_t t = targets[r];
    rowLoss[r] =
        k::targetInShard(t, 0, vocab) ? k::crossEntropyRowLoss(l, xr[t]) : 0.0;
  }
}
/// loss = mean of rowLoss, summed in row order by one thread.
__global__ void meanLossKernel(const double *rowLoss, int64_t rows,
                               float *loss) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r)
    total += rowLoss[r];
  *loss = float(total / double(rows));
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

__global__ void rotaryKernel(const float *x, float *out, int64_t outer,
                             int64_t seq, int64_t dim, double theta,
                             float sign) {
  int64_t half = dim / 2;
  STRATA_GRID_STRIDE(idx, outer * seq * half) {
    int64_t i = idx % half, row = idx / half, p = row % seq;
    double angle = k::rotaryAngle(p, i, dim, theta);
    float c = float(cos(angle)), s = float(sin(angle));
    const float *xr = x + row * dim;
    float *yr = out + row * dim;
    float y1, y2;
    k::rotatePair(xr[i], xr[i + half], c, sign * s, y1, y2);
    yr[i] = y1;
    yr[i + half] = y2;
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
__global__ void repeatInterleaveKernel(const float *x, float *out,
                                       int64_t outer, int64_t n,
                                       int64_t repeats, int64_t inner) {
  STRATA_GRID_STRIDE(i, outer * n * repeats * inner) {
    int64_t c = i % inner, row = i / inner; // row = (o * n + j) * repeats + r
    out[i] = x[(row / repeats) * inner + c];
  }
}
__global__ void repeatInterleaveBwdKernel(const float *dy, float *dx,
                                          int64_t outer, int64_t n,
                                          int64_t repeats, int64_t inner) {
  STRATA_GRID_STRIDE(i, outer * n * inner) {
    int64_t c = i % inner, row = i / inner;
    float acc = dy[(row * repeats) * inner + c];
    for (int64_t r = 1; r < repeats; ++r)
      acc += dy[(row * repeats + r) * inner + c];
    dx[i] = acc;
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
__global__ void sumPartialsKernel(const double *partials, int64_t count,
                                  double *out) {
  double total = 0;
  for (int64_t i = 0; i < count; ++i)
    total += partials[i];
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
__global__ void sgdKernel(float *param, const float *grad, float *buf,
                          int64_t n, k::SgdCoefficients c) {
  STRATA_GRID_STRIDE(i, n) {
    float p = param[i], b = buf[i];
    k::sgdUpdate(p, grad[i], b, c);
    param[i] = p;
    buf[i] = b;
  }
}
__global__ void adamwKernel(float *param, const float *grad, float *expAvg,
                            float *expAvgSq, int64_t n,
                            k::AdamWCoefficients c) {
  STRATA_GRID_STRIDE(i, n) {
    float p = param[i], m = expAvg[i], v = expAvgSq[i];
    k::adamwUpdate(p, grad[i], m, v, c);
    param[i] = p;
    expAvg[i] = m;
    expAvgSq[i] = v;
  }
}

} // namespace

#define STRATA_LAUNCH(kernel, n, s) kernel<<<gridFor(n), kThreads, 0, s>>>
#define STRATA_LAUNCH_ROWS(kernel, rows, s)                                    \
  kernel<<<unsigned(rows), kRowThreads, 0, s>>>

void fill(float *out, int64_t n, float value, Stream s) {
  STRATA_LAUNCH(fillKernel, n, s)(out, n, value);
}
void accumulate(const float *x, float *y, int64_t n, Stream s) {
  STRATA_LAUNCH(accumulateKernel, n, s)(x, y, n);
}
void add(const float *a, const float *b, float *out, int64_t n, Stream s) {
  STRATA_LAUNCH(addKernel, n, s)(a, b, out, n);
}
void mul(const float *a, const float *b, float *out, int64_t n, Stream s) {
  STRATA_LAUNCH(mulKernel, n, s)(a, b, out, n);
}
void scale(const float *x, float *out, int64_t n, float alpha, Stream s) {
  STRATA_LAUNCH(scaleKernel, n, s)(x, out, n, alpha);
}
void transpose(const float *x, float *out, int rank, const int64_t *dims,
               const int64_t *perm, Stream s) {
  TransposeShape t{};
  t.rank = rank;
  int64_t inStride[5], stride = 1, n = 1;
  for (int i = rank - 1; i >= 0; --i) {
    inStride[i] = stride;
    stride *= dims[i];
  }
  for (int i = 0; i < rank; ++i) {
    t.outDims[i] = dims[perm[i]];
    t.strideOf[i] = inStride[perm[i]];
    n *= dims[i];
  }
  STRATA_LAUNCH(transposeKernel, n, s)(x, out, n, t);
}
void sliceInsertAccumulate(const float *x, float *out, int64_t outer,
                           int64_t big, int64_t small, int64_t start,
                           int64_t inner, Stream s) {
  STRATA_LAUNCH(sliceInsertAccumulateKernel, outer * small * inner, s)
  (x, out, outer, big, small, start, inner);
}
void embeddingFwd(const int32_t *ids, int64_t count, const float *table,
                  int64_t rows, int64_t hidden, int64_t rowStart, float *out,
                  Stream s) {
  STRATA_LAUNCH(embeddingFwdKernel, count * hidden, s)
  (ids, count, table, rows, hidden, rowStart, out);
}
void embeddingBwd(const int32_t *ids, int64_t count, const float *dout,
                  int64_t rows, int64_t hidden, int64_t rowStart, float *dtable,
                  Stream s) {
  STRATA_LAUNCH(embeddingBwdKernel, hidden, s)
  (ids, count, dout, rows, hidden, rowStart, dtable);
}
void biasAdd(const float *x, const float *bias, float *out, int64_t rows,
             int64_t n, Stream s) {
  STRATA_LAUNCH(biasAddKernel, rows * n, s)(x, bias, out, rows, n);
}
void biasGrad(const float *dout, float *dbias, int64_t rows, int64_t n,
              Stream s) {
  STRATA_LAUNCH(biasGradKernel, n, s)(dout, dbias, rows, n);
}
void geluFwd(const float *x, float *out, int64_t n, Stream s) {
  STRATA_LAUNCH(geluFwdKernel, n, s)(x, out, n);
}
void geluBwd(const float *x, const float *dy, float *dx, int64_t n, Stream s) {
  STRATA_LAUNCH(geluBwdKernel, n, s)(x, dy, dx, n);
}
void reluFwd(const float *x, float *out, int64_t n, Stream s) {
  STRATA_LAUNCH(reluFwdKernel, n, s)(x, out, n);
}
void reluBwd(const float *x, const float *dy, float *dx, int64_t n, Stream s) {
  STRATA_LAUNCH(reluBwdKernel, n, s)(x, dy, dx, n);
}
void unaryFwd(int64_t kind, const float *x, float *out, int64_t n, Stream s) {
  STRATA_LAUNCH(unaryFwdKernel, n, s)(kind, x, out, n);
}
void unaryBwd(int64_t kind, const float *x, const float *dy, float *dx,
              int64_t n, Stream s) {
  STRATA_LAUNCH(unaryBwdKernel, n, s)(kind, x, dy, dx, n);
}
void binaryFwd(int64_t kind, const float *x, const float *y, float *out,
               int64_t n, int64_t outer, int64_t mid, int64_t inner, Stream s) {
  STRATA_LAUNCH(binaryFwdKernel, n, s)(kind, x, y, out, outer, mid, inner, n);
}
void siluFwd(const float *x, float *out, int64_t n, Stream s) {
  STRATA_LAUNCH(siluFwdKernel, n, s)(x, out, n);
}
void siluBwd(const float *x, const float *dy, float *dx, int64_t n, Stream s) {
  STRATA_LAUNCH(siluBwdKernel, n, s)(x, dy, dx, n);
}
void siluMulFwd(const float *gate, const float *up, float *out, int64_t n,
                Stream s) {
  STRATA_LAUNCH(siluMulFwdKernel, n, s)(gate, up, out, n);
}
void siluMulBwd(const float *gate, const float *up, const float *dy,
                float *dgate, float *dup, int64_t n, Stream s) {
  STRATA_LAUNCH(siluMulBwdKernel, n, s)(gate, up, dy, dgate, dup, n);
}
void layerNormFwd(const float *x, const float *gamma, const float *beta,
                  float *out, float *mean, float *rstd, int64_t rows, int64_t n,
                  float eps, Stream s) {
  STRATA_LAUNCH_ROWS(layerNormFwdKernel, rows, s)
  (x, gamma, beta, out, mean, rstd, n, eps);
}
void layerNormBwd(const float *dy, const float *x, const float *gamma,
                  const float *mean, const float *rstd, float *dx,
                  float *dgamma, float *dbeta, int64_t rows, int64_t n,
                  Stream s) {
  // The column pass reads x before the row pass may overwrite it in place
  // (dx may alias dy, never x).
  STRATA_LAUNCH(layerNormBwdColumnKernel, n, s)
  (dy, x, mean, rstd, dgamma, dbeta, rows, n);
  STRATA_LAUNCH_ROWS(layerNormBwdRowKernel, rows, s)
  (dy, x, gamma, mean, rstd, dx, n);
}
void rmsNormFwd(const float *x, const float *weight, float *out, float *rstd,
                int64_t rows, int64_t n, float eps, Stream s) {
  STRATA_LAUNCH_ROWS(rmsNormFwdKernel, rows, s)(x, weight, out, rstd, n, eps);
}
void rmsNormBwd(const float *dy, const float *x, const float *weight,
                const float *rstd, float *dx, float *dweight, int64_t rows,
                int64_t n, Stream s) {
  STRATA_LAUNCH(rmsNormBwdColumnKernel, n, s)(dy, x, rstd, dweight, rows, n);
  STRATA_LAUNCH_ROWS(rmsNormBwdRowKernel, rows, s)(dy, x, weight, rstd, dx, n);
}
void softmaxFwd(const float *x, float *out, int64_t rows, int64_t n,
                bool causal, float scale, Stream s) {
  STRATA_LAUNCH_ROWS(softmaxFwdKernel, rows, s)(x, out, n, causal, scale);
}
void softmaxBwd(const float *y, const float *dy, float *dx, int64_t rows,
                int64_t n, float scale, Stream s) {
  STRATA_LAUNCH_ROWS(softmaxBwdKernel, rows, s)(y, dy, dx, n, scale);
}
void crossEntropyFwd(const float *logits, const int32_t *targets, int64_t rows,
                     int64_t vocab, float *lse, float *loss, double *scratch,
                     Stream s) {
  STRATA_LAUNCH_ROWS(crossEntropyFwdKernel, rows, s)
  (logits, targets, vocab, lse, scratch);
  meanLossKernel<<<1, 1, 0, s>>>(scratch, rows, loss);
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
  meanLossKernel<<<1, 1, 0, s>>>(scratch, rows, loss);
}
void ceVpBwd(const float *logits, const int32_t *targets, const float *lse,
             float *dlogits, int64_t rows, int64_t n, int64_t vocabStart,
             int64_t valid, float scale, Stream s) {
  STRATA_LAUNCH_ROWS(crossEntropyBwdKernel, rows, s)
  (logits, targets, lse, dlogits, n, vocabStart, valid, scale);
}
void rotary(const float *x, float *out, int64_t outer, int64_t seq, int64_t dim,
            double theta, bool inverse, Stream s) {
  STRATA_LAUNCH(rotaryKernel, outer * seq * (dim / 2), s)
  (x, out, outer, seq, dim, theta, inverse ? -1.0f : 1.0f);
}
void rotaryAtPosition(const float *x, float *out, int64_t rows, int64_t dim,
                      int64_t pos, double theta, Stream s) {
  STRATA_LAUNCH(rotaryAtPositionKernel, rows * (dim / 2), s)
  (x, out, rows, dim, pos, theta);
}
void repeatInterleave(const float *x, float *out, int64_t outer, int64_t n,
                      int64_t repeats, int64_t inner, Stream s) {
  STRATA_LAUNCH(repeatInterleaveKernel, outer * n * repeats * inner, s)
  (x, out, outer, n, repeats, inner);
}
void repeatInterleaveBwd(const float *dy, float *dx, int64_t outer, int64_t n,
                         int64_t repeats, int64_t inner, Stream s) {
  STRATA_LAUNCH(repeatInterleaveBwdKernel, outer * n * inner, s)
  (dy, dx, outer, n, repeats, inner);
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
void sumSquaresPartials(const float *x, int64_t n, double *partials, Stream s) {
  sumSquaresKernel<<<kReduceBlocks, kThreads, 0, s>>>(x, n, partials);
}
void sumPartials(const double *partials, int64_t count, double *out, Stream s) {
  sumPartialsKernel<<<1, 1, 0, s>>>(partials, count, out);
}
void clipGrads(float *x, int64_t n, const double *sumSq, double maxNorm,
               Stream s) {
  STRATA_LAUNCH(clipGradsKernel, n, s)(x, n, sumSq, maxNorm);
}
void sgdStep(float *param, const float *grad, float *buf, int64_t n, double lr,
             double momentum, double weightDecay, Stream s) {
  STRATA_LAUNCH(sgdKernel, n, s)
  (param, grad, buf, n, k::sgdCoefficients(lr, momentum, weightDecay));
}
void adamwStep(float *param, const float *grad, float *expAvg, float *expAvgSq,
               int64_t n, double lr, double beta1, double beta2, double eps,
               double weightDecay, int64_t step, Stream s) {
  STRATA_LAUNCH(adamwKernel, n, s)
  (param, grad, expAvg, expAvgSq, n,
   k::adamwCoefficients(lr, beta1, beta2, eps, weightDecay, step));
}

} // namespace strata::rt::cuda
