//===- Kernels.cpp - fp32 CPU kernels (everything but matmul) -------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Inner loops are written so GCC/Clang vectorise them at -O3 (contiguous,
// no aliasing surprises through __restrict where arrays are distinct).
// Reductions whose result is observable (loss, grad norm) accumulate in
// double; per-row statistics use float, like PyTorch's CPU kernels.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace strata::rt::cpu {

void fill(float *out, int64_t n, float value) {
  std::fill(out, out + n, value);
}

void copy(const float *x, float *out, int64_t n) {
  if (x != out)
    std::memcpy(out, x, sizeof(float) * n);
}

void accumulate(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] += x[i];
}

void add(const float *a, const float *b, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = a[i] + b[i];
}

void mul(const float *a, const float *b, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = a[i] * b[i];
}

void scale(const float *x, float *out, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = alpha * x[i];
}

void embeddingFwd(const int32_t *ids, int64_t count, const float *table,
                  int64_t rows, int64_t hidden, int64_t rowStart, float *out) {
  for (int64_t i = 0; i < count; ++i) {
    int64_t row = int64_t(ids[i]) - rowStart;
    float *dst = out + i * hidden;
    if (row >= 0 && row < rows)
      std::memcpy(dst, table + row * hidden, sizeof(float) * hidden);
    else
      std::fill(dst, dst + hidden, 0.0f);
  }
}

void embeddingBwd(const int32_t *ids, int64_t count, const float *dout,
                  int64_t rows, int64_t hidden, int64_t rowStart,
                  float *dtable) {
  for (int64_t i = 0; i < count; ++i) {
    int64_t row = int64_t(ids[i]) - rowStart;
    if (row >= 0 && row < rows)
      accumulate(dout + i * hidden, dtable + row * hidden, hidden);
  }
}

void biasAdd(const float *x, const float *bias, float *out, int64_t rows,
             int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    add(x + r * n, bias, out + r * n, n);
}

void biasGrad(const float *dout, float *dbias, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    accumulate(dout + r * n, dbias, n);
}

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
} // namespace

void geluFwd(const float *x, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
    out[i] = 0.5f * v * (1.0f + std::tanh(u));
  }
}

void geluBwd(const float *x, const float *dy, float *dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
    float t = std::tanh(u);
    float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

void reluFwd(const float *x, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void reluBwd(const float *x, const float *dy, float *dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

void layerNormFwd(const float *x, const float *gamma, const float *beta,
                  float *out, float *mean, float *rstd, int64_t rows, int64_t n,
                  float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *__restrict xr = x + r * n;
    float *__restrict yr = out + r * n;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i)
      sum += xr[i];
    float mu = sum / float(n);
    float sq = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      float d = xr[i] - mu;
      sq += d * d;
    }
    float rs = 1.0f / std::sqrt(sq / float(n) + eps);
    for (int64_t i = 0; i < n; ++i)
      yr[i] = (xr[i] - mu) * rs * gamma[i] + beta[i];
    mean[r] = mu;
    rstd[r] = rs;
  }
}

void layerNormBwd(const float *dy, const float *x, const float *gamma,
                  const float *mean, const float *rstd, float *dx,
                  float *dgamma, float *dbeta, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *__restrict xr = x + r * n;
    const float *__restrict gr = dy + r * n;
    float *__restrict dxr = dx + r * n;
    float mu = mean[r], rs = rstd[r];
    // Sums of dxhat and dxhat * xhat, where dxhat = dy * gamma.
    float sumD = 0.0f, sumDX = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      float xhat = (xr[i] - mu) * rs;
      float d = gr[i] * gamma[i];
      sumD += d;
      sumDX += d * xhat;
      dgamma[i] += gr[i] * xhat;
      dbeta[i] += gr[i];
    }
    float meanD = sumD / float(n), meanDX = sumDX / float(n);
    for (int64_t i = 0; i < n; ++i) {
      float xhat = (xr[i] - mu) * rs;
      dxr[i] = rs * (gr[i] * gamma[i] - meanD - xhat * meanDX);
    }
  }
}

void softmaxFwd(const float *x, float *out, int64_t rows, int64_t n,
                bool causal, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * n;
    float *yr = out + r * n;
    int64_t valid = causal ? (r % n) + 1 : n;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < valid; ++j)
      mx = std::max(mx, scale * xr[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < valid; ++j) {
      float e = std::exp(scale * xr[j] - mx);
      yr[j] = e;
      sum += e;
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < valid; ++j)
      yr[j] *= inv;
    for (int64_t j = valid; j < n; ++j)
      yr[j] = 0.0f;
  }
}

void softmaxBwd(const float *y, const float *dy, float *dx, int64_t rows,
                int64_t n, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *yr = y + r * n, *gr = dy + r * n;
    float *dr = dx + r * n;
    float dot = 0.0f;
    for (int64_t j = 0; j < n; ++j)
      dot += yr[j] * gr[j];
    for (int64_t j = 0; j < n; ++j)
      dr[j] = scale * yr[j] * (gr[j] - dot);
  }
}

double crossEntropyFwd(const float *logits, const int32_t *targets,
                       int64_t rows, int64_t vocab, float *lse) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = logits + r * vocab;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < vocab; ++j)
      mx = std::max(mx, xr[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < vocab; ++j)
      sum += std::exp(xr[j] - mx);
    lse[r] = mx + std::log(sum);
    int64_t t = targets[r];
    if (t >= 0 && t < vocab)
      total += double(lse[r]) - double(xr[t]);
  }
  return total / double(rows);
}

void crossEntropyBwd(const float *logits, const int32_t *targets,
                     const float *lse, float *dlogits, int64_t rows,
                     int64_t vocab, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = logits + r * vocab;
    float *dr = dlogits + r * vocab;
    float l = lse[r];
    for (int64_t j = 0; j < vocab; ++j)
      dr[j] = std::exp(xr[j] - l) * scale;
    int64_t t = targets[r];
    if (t >= 0 && t < vocab)
      dr[t] -= scale;
  }
}

void transpose(const float *x, float *out, int rank, const int64_t *dims,
               const int64_t *perm) {
  int64_t inStride[5], outDims[5], strideOf[5];
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    inStride[i] = s;
    s *= dims[i];
  }
  for (int i = 0; i < rank; ++i) {
    outDims[i] = dims[perm[i]];
    strideOf[i] = inStride[perm[i]];
  }
  int64_t inner = outDims[rank - 1], innerStride = strideOf[rank - 1];
  int64_t outerCount = s / inner;
  int64_t idx[5] = {0, 0, 0, 0, 0};
  int64_t base = 0;
  for (int64_t o = 0; o < outerCount; ++o) {
    float *dst = out + o * inner;
    const float *src = x + base;
    if (innerStride == 1)
      std::memcpy(dst, src, sizeof(float) * inner);
    else
      for (int64_t j = 0; j < inner; ++j)
        dst[j] = src[j * innerStride];
    // Odometer over the outer output dimensions.
    for (int d = rank - 2; d >= 0; --d) {
      base += strideOf[d];
      if (++idx[d] < outDims[d])
        break;
      base -= strideOf[d] * outDims[d];
      idx[d] = 0;
    }
  }
}

void sliceCopy(const float *x, float *out, int64_t outer, int64_t big,
               int64_t small, int64_t start, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(out + o * small * inner, x + (o * big + start) * inner,
                sizeof(float) * small * inner);
}

void sliceInsert(const float *x, float *out, int64_t outer, int64_t big,
                 int64_t small, int64_t start, int64_t inner,
                 bool accumulateInto) {
  for (int64_t o = 0; o < outer; ++o) {
    const float *src = x + o * small * inner;
    float *dst = out + (o * big + start) * inner;
    if (accumulateInto)
      accumulate(src, dst, small * inner);
    else
      std::memcpy(dst, src, sizeof(float) * small * inner);
  }
}

double sumSquares(const float *x, int64_t n) {
  // Independent partial sums keep the loop vectorisable without
  // reassociation flags.
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j)
      acc[j] += double(x[i + j]) * double(x[i + j]);
  for (; i < n; ++i)
    acc[0] += double(x[i]) * double(x[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
         ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

void sgdStep(float *param, const float *grad, float *buf, int64_t n, double lr,
             double momentum, double weightDecay) {
  // torch turns Python scalars into the tensor's dtype before the math.
  const float wd = float(weightDecay), mom = float(momentum),
              negLr = float(-lr);
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] + wd * param[i];
    float b = buf[i] * mom + g;
    buf[i] = b;
    param[i] = param[i] + negLr * b;
  }
}

void adamwStep(float *param, const float *grad, float *expAvg, float *expAvgSq,
               int64_t n, double lr, double beta1, double beta2, double eps,
               double weightDecay, int64_t step) {
  const float decay = float(1.0 - lr * weightDecay);
  const float b1 = float(beta1), oneMinusB1 = float(1.0 - beta1);
  const float b2 = float(beta2), oneMinusB2 = float(1.0 - beta2);
  double biasCorrection1 = 1.0 - std::pow(beta1, double(step));
  double biasCorrection2 = 1.0 - std::pow(beta2, double(step));
  const float negStepSize = float(-(lr / biasCorrection1));
  const float bc2Sqrt = float(std::sqrt(biasCorrection2));
  const float epsF = float(eps);
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i] * decay;
    float g = grad[i];
    float m = expAvg[i] * b1 + oneMinusB1 * g;
    float v = expAvgSq[i] * b2 + oneMinusB2 * g * g;
    float denom = std::sqrt(v) / bc2Sqrt + epsF;
    expAvg[i] = m;
    expAvgSq[i] = v;
    param[i] = p + negStepSize * m / denom;
  }
}

} // namespace strata::rt::cpu
