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

#include "runtime/cpu/Element.h"
#include "runtime/cpu/FastMath.h"
#include "runtime/kernels/GeluMath.h"
#include "runtime/kernels/LayerNormMath.h"
#include "runtime/kernels/OptimizerMath.h"
#include "runtime/kernels/RotaryMath.h"
#include "runtime/kernels/SoftmaxMath.h"

#include <algorithm>
#include <cmath>
#ifdef __AVX512F__
#include <immintrin.h>
#endif
#include <cstring>
#include <limits>
#include <vector>

namespace strata::rt::cpu {

namespace k = strata::kernels;

void fill(float *out, int64_t n, float value) {
  std::fill(out, out + n, value);
}

void copy(const float *x, float *out, int64_t n) {
  if (x != out)
    std::memcpy(out, x, sizeof(float) * n);
}

namespace {
template <typename X, typename Y>
void accumulateT(const X *x, Y *y, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i)
    y[i] = store<Y>(load(y[i]) + load(x[i]));
}
} // namespace

void accumulate(const float *x, float *y, int64_t n) { accumulateT(x, y, n); }
void accumulate(const bf16_t *x, float *y, int64_t n) { accumulateT(x, y, n); }
void accumulate(const bf16_t *x, bf16_t *y, int64_t n) { accumulateT(x, y, n); }
void fill(bf16_t *out, int64_t n, float value) {
  std::fill(out, out + n, store<bf16_t>(value));
}
void copy(const bf16_t *x, bf16_t *out, int64_t n) {
  if (x != out)
    std::memcpy(out, x, sizeof(bf16_t) * n);
}

namespace {
template <typename T> void addT(const T *a, const T *b, T *out, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i)
    out[i] = store<T>(load(a[i]) + load(b[i]));
}
template <typename T> void mulT(const T *a, const T *b, T *out, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i)
    out[i] = store<T>(load(a[i]) * load(b[i]));
}
template <typename T> void scaleT(const T *x, T *out, int64_t n, float alpha) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i)
    out[i] = store<T>(alpha * load(x[i]));
}
} // namespace

void add(const float *a, const float *b, float *out, int64_t n) {
  addT(a, b, out, n);
}
void add(const bf16_t *a, const bf16_t *b, bf16_t *out, int64_t n) {
  addT(a, b, out, n);
}
void mul(const float *a, const float *b, float *out, int64_t n) {
  mulT(a, b, out, n);
}
void mul(const bf16_t *a, const bf16_t *b, bf16_t *out, int64_t n) {
  mulT(a, b, out, n);
}
void scale(const float *x, float *out, int64_t n, float alpha) {
  scaleT(x, out, n, alpha);
}
void scale(const bf16_t *x, bf16_t *out, int64_t n, float alpha) {
  scaleT(x, out, n, alpha);
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
    addT(x + r * n, bias, out + r * n, n);
}
void biasAdd(const bf16_t *x, const bf16_t *bias, bf16_t *out, int64_t rows,
             int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    addT(x + r * n, bias, out + r * n, n);
}

namespace {
template <typename T>
void biasGradT(const T *dout, float *dbias, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *row = dout + r * n;
    STRATA_ELEMENTWISE
    for (int64_t i = 0; i < n; ++i)
      dbias[i] += load(row[i]);
  }
}

/// A row of float32 sums of a bf16 destination: widened before the
/// kernel adds into it and rounded once after, as the column sums of a
/// float32 destination are (one row of the hidden size, not a copy of the
/// activations).
struct WideRow {
  explicit WideRow(bf16_t *dst, int64_t n)
      : dst(dst), n(n), storage(size_t(n)), wide(storage.data()) {
    for (int64_t i = 0; i < n; ++i)
      wide[i] = load(dst[i]);
  }
  ~WideRow() {
    for (int64_t i = 0; i < n; ++i)
      dst[i] = store<bf16_t>(wide[i]);
  }
  bf16_t *dst;
  int64_t n;
  std::vector<float> storage;
  float *wide;
};
} // namespace

void biasGrad(const float *dout, float *dbias, int64_t rows, int64_t n) {
  biasGradT(dout, dbias, rows, n);
}
void biasGrad(const bf16_t *dout, float *dbias, int64_t rows, int64_t n) {
  biasGradT(dout, dbias, rows, n);
}
void biasGrad(const bf16_t *dout, bf16_t *dbias, int64_t rows, int64_t n) {
  WideRow sums(dbias, n);
  biasGradT(dout, sums.wide, rows, n);
}

// The math is runtime/kernels/GeluMath.h's; the sigmoid is FastMath's.
namespace {
template <typename T> void geluFwdT(const T *x, T *out, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i) {
    float v = load(x[i]);
    out[i] = store<T>(k::geluForward(v, sigmoidApprox(k::geluSigmoidArg(v))));
  }
}
template <typename T> void geluBwdT(const T *x, const T *dy, T *dx, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i) {
    float v = load(x[i]);
    dx[i] = store<T>(
        k::geluBackward(v, sigmoidApprox(k::geluSigmoidArg(v)), load(dy[i])));
  }
}
} // namespace

void geluFwd(const float *x, float *out, int64_t n) { geluFwdT(x, out, n); }
void geluFwd(const bf16_t *x, bf16_t *out, int64_t n) { geluFwdT(x, out, n); }
void geluBwd(const float *x, const float *dy, float *dx, int64_t n) {
  geluBwdT(x, dy, dx, n);
}
void geluBwd(const bf16_t *x, const bf16_t *dy, bf16_t *dx, int64_t n) {
  geluBwdT(x, dy, dx, n);
}

void reluFwd(const float *x, float *out, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i)
    out[i] = k::reluForward(x[i]);
}

void reluBwd(const float *x, const float *dy, float *dx, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i)
    dx[i] = k::reluBackward(x[i], dy[i]);
}

namespace {
template <typename T>
void layerNormFwdT(const T *x, const T *gamma, const T *beta, T *out,
                   float *mean, float *rstd, int64_t rows, int64_t n,
                   float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *__restrict xr = x + r * n;
    T *__restrict yr = out + r * n;
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j)
        acc[j] += load(xr[i + j]);
    for (; i < n; ++i)
      acc[0] += load(xr[i]);
    float mu = sumLanes(acc) / float(n);
    // Two passes (the row is in L1): E[(x - mu)^2] keeps its precision when
    // the mean is large, unlike E[x^2] - mu^2.
    std::fill(acc, acc + kLanes, 0.0f);
    for (i = 0; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        float d = load(xr[i + j]) - mu;
        acc[j] += d * d;
      }
    for (; i < n; ++i)
      acc[0] += (load(xr[i]) - mu) * (load(xr[i]) - mu);
    float rs = k::layerNormRstd(sumLanes(acc), n, eps);
    STRATA_ELEMENTWISE
    for (int64_t i = 0; i < n; ++i)
      yr[i] = store<T>(k::layerNormForward(load(xr[i]), mu, rs, load(gamma[i]),
                                           load(beta[i])));
    mean[r] = mu;
    rstd[r] = rs;
  }
}

template <typename T>
void layerNormBwdT(const T *dy, const T *x, const T *gamma, const float *mean,
                   const float *rstd, T *dx, float *dgamma, float *dbeta,
                   int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *__restrict xr = x + r * n;
    const T *__restrict gr = dy + r * n;
    T *__restrict dxr = dx + r * n;
    float mu = mean[r], rs = rstd[r];
    // Sums of dxhat and dxhat * xhat, where dxhat = dy * gamma.
    float accD[kLanes] = {}, accDX[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        float xhat = k::layerNormNormalized(load(xr[i + j]), mu, rs);
        float d = load(gr[i + j]) * load(gamma[i + j]);
        accD[j] += d;
        accDX[j] += d * xhat;
      }
    for (; i < n; ++i) {
      float xhat = k::layerNormNormalized(load(xr[i]), mu, rs);
      float d = load(gr[i]) * load(gamma[i]);
      accD[0] += d;
      accDX[0] += d * xhat;
    }
    for (i = 0; i < n; ++i) {
      float xhat = k::layerNormNormalized(load(xr[i]), mu, rs);
      dgamma[i] += load(gr[i]) * xhat;
      dbeta[i] += load(gr[i]);
    }
    float meanD = sumLanes(accD) / float(n),
          meanDX = sumLanes(accDX) / float(n);
    STRATA_ELEMENTWISE
    for (int64_t i = 0; i < n; ++i) {
      float xhat = k::layerNormNormalized(load(xr[i]), mu, rs);
      dxr[i] = store<T>(k::layerNormInputGrad(load(gr[i]), load(gamma[i]), xhat,
                                              rs, meanD, meanDX));
    }
  }
}

} // namespace

// The float32 bodies are not inlined into the bf16 forms, which run their
// rows through them (Element.h's rowBuffer).
[[gnu::noinline]] void layerNormFwd(const float *x, const float *gamma,
                                    const float *beta, float *out, float *mean,
                                    float *rstd, int64_t rows, int64_t n,
                                    float eps) {
  layerNormFwdT(x, gamma, beta, out, mean, rstd, rows, n, eps);
}
void layerNormFwd(const bf16_t *x, const bf16_t *gamma, const bf16_t *beta,
                  bf16_t *out, float *mean, float *rstd, int64_t rows,
                  int64_t n, float eps) {
  static thread_local std::vector<float> xs, ys, gs, bs;
  float *xw = rowBuffer(xs, n), *yw = rowBuffer(ys, n), *gw = rowBuffer(gs, n),
        *bw = rowBuffer(bs, n);
  widenRow(gamma, gw, n);
  widenRow(beta, bw, n);
  for (int64_t r = 0; r < rows; ++r) {
    widenRow(x + r * n, xw, n);
    layerNormFwd(xw, gw, bw, yw, mean + r, rstd + r, 1, n, eps);
    narrowRow(yw, out + r * n, n);
  }
}
[[gnu::noinline]] void layerNormBwd(const float *dy, const float *x,
                                    const float *gamma, const float *mean,
                                    const float *rstd, float *dx, float *dgamma,
                                    float *dbeta, int64_t rows, int64_t n) {
  layerNormBwdT(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, rows, n);
}
void layerNormBwd(const bf16_t *dy, const bf16_t *x, const bf16_t *gamma,
                  const float *mean, const float *rstd, bf16_t *dx,
                  float *dgamma, float *dbeta, int64_t rows, int64_t n) {
  static thread_local std::vector<float> dys, xs, gs, dxs;
  float *dyw = rowBuffer(dys, n), *xw = rowBuffer(xs, n),
        *gw = rowBuffer(gs, n), *dxw = rowBuffer(dxs, n);
  widenRow(gamma, gw, n);
  for (int64_t r = 0; r < rows; ++r) {
    widenRow(dy + r * n, dyw, n);
    widenRow(x + r * n, xw, n);
    layerNormBwd(dyw, xw, gw, mean + r, rstd + r, dxw, dgamma, dbeta, 1, n);
    narrowRow(dxw, dx + r * n, n);
  }
}
void layerNormBwd(const bf16_t *dy, const bf16_t *x, const bf16_t *gamma,
                  const float *mean, const float *rstd, bf16_t *dx,
                  bf16_t *dgamma, bf16_t *dbeta, int64_t rows, int64_t n) {
  WideRow g(dgamma, n), b(dbeta, n);
  layerNormBwd(dy, x, gamma, mean, rstd, dx, g.wide, b.wide, rows, n);
}

namespace {
/// One row of softmaxFwd: its first `valid` columns, zeros after.
void softmaxFwdRow(const float *xr, float *yr, int64_t valid, int64_t n,
                   float scale) {
  {
    // max(scale * x) from max or min of x, as the sign of scale says.
    float mx;
    if (scale >= 0.0f) {
      mx = k::softmaxShift(rowMax(xr, valid), 0.0f, scale);
    } else {
      float mn = xr[0];
      for (int64_t j = 1; j < valid; ++j)
        mn = std::min(mn, xr[j]);
      mx = k::softmaxShift(0.0f, mn, scale);
    }
    float acc[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= valid; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        float e = expApprox(k::softmaxExpArg(xr[j + l], scale, mx));
        yr[j + l] = e;
        acc[l] += e;
      }
    for (; j < valid; ++j) {
      float e = expApprox(k::softmaxExpArg(xr[j], scale, mx));
      yr[j] = e;
      acc[0] += e;
    }
    float inv = 1.0f / sumLanes(acc);
    for (int64_t j = 0; j < valid; ++j)
      yr[j] *= inv;
    for (int64_t j = valid; j < n; ++j)
      yr[j] = 0.0f;
  }
}

/// Float32 rows for the bf16 forms (one row of each operand, in L1).
float *wideRow(std::vector<float> &row, int64_t n) {
  if (int64_t(row.size()) < n)
    row.resize(size_t(n));
  return row.data();
}
} // namespace

void softmaxFwd(const float *x, float *out, int64_t rows, int64_t n,
                bool causal, float scale) {
  for (int64_t r = 0; r < rows; ++r)
    softmaxFwdRow(x + r * n, out + r * n, k::softmaxValidColumns(r, n, causal),
                  n, scale);
}
void softmaxFwd(const bf16_t *x, bf16_t *out, int64_t rows, int64_t n,
                bool causal, float scale) {
  static thread_local std::vector<float> xs, ys;
  float *xw = wideRow(xs, n), *yw = wideRow(ys, n);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j)
      xw[j] = load(x[r * n + j]);
    softmaxFwdRow(xw, yw, k::softmaxValidColumns(r, n, causal), n, scale);
    for (int64_t j = 0; j < n; ++j)
      out[r * n + j] = store<bf16_t>(yw[j]);
  }
}

void rotaryAtPosition(const float *x, float *out, int64_t rows, int64_t dim,
                      int64_t pos, double theta) {
  const int64_t half = dim / 2;
  static thread_local std::vector<float> c, s;
  c.resize(half);
  s.resize(half);
  for (int64_t i = 0; i < half; ++i) {
    double angle = kernels::rotaryAngle(pos, i, dim, theta);
    c[i] = float(std::cos(angle));
    s[i] = float(std::sin(angle));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * dim;
    float *yr = out + r * dim;
    for (int64_t i = 0; i < half; ++i)
      kernels::rotatePair(xr[i], xr[i + half], c[i], s[i], yr[i], yr[i + half]);
  }
}

void kvAttention(const float *q, const float *k, const float *v, float *kCache,
                 float *vCache, float *out, int64_t batch, int64_t heads,
                 int64_t kvHeads, int64_t maxLen, int64_t headDim, int64_t pos,
                 float scale) {
  const int64_t D = headDim, group = heads / kvHeads, n = pos + 1;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < kvHeads; ++h) {
      int64_t row = ((b * kvHeads + h) * maxLen + pos) * D;
      std::copy(k + (b * kvHeads + h) * D, k + (b * kvHeads + h + 1) * D,
                kCache + row);
      std::copy(v + (b * kvHeads + h) * D, v + (b * kvHeads + h + 1) * D,
                vCache + row);
    }
  static thread_local std::vector<float> scores, probs;
  scores.resize(n);
  probs.resize(n);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const float *qh = q + (b * heads + h) * D;
      const float *keys = kCache + (b * kvHeads + h / group) * maxLen * D;
      const float *values = vCache + (b * kvHeads + h / group) * maxLen * D;
      for (int64_t t = 0; t < n; ++t) {
        float dot = 0.0f;
        for (int64_t d = 0; d < D; ++d)
          dot += qh[d] * keys[t * D + d];
        scores[t] = dot;
      }
      softmaxFwd(scores.data(), probs.data(), 1, n, false, scale);
      float *o = out + (b * heads + h) * D;
      std::fill(o, o + D, 0.0f);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t d = 0; d < D; ++d)
          o[d] += probs[t] * values[t * D + d];
    }
}

namespace {
void softmaxBwdRow(const float *yr, const float *gr, float *dr, int64_t n,
                   float scale) {
  {
    float acc[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
      for (int l = 0; l < kLanes; ++l)
        acc[l] += yr[j + l] * gr[j + l];
    for (; j < n; ++j)
      acc[0] += yr[j] * gr[j];
    float dot = sumLanes(acc);
    STRATA_ELEMENTWISE
    for (j = 0; j < n; ++j)
      dr[j] = k::softmaxBackward(yr[j], gr[j], dot, scale);
  }
}
} // namespace

void softmaxBwd(const float *y, const float *dy, float *dx, int64_t rows,
                int64_t n, float scale) {
  for (int64_t r = 0; r < rows; ++r)
    softmaxBwdRow(y + r * n, dy + r * n, dx + r * n, n, scale);
}
void softmaxBwd(const bf16_t *y, const bf16_t *dy, bf16_t *dx, int64_t rows,
                int64_t n, float scale) {
  static thread_local std::vector<float> ys, gs, ds;
  float *yw = wideRow(ys, n), *gw = wideRow(gs, n), *dw = wideRow(ds, n);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      yw[j] = load(y[r * n + j]);
      gw[j] = load(dy[r * n + j]);
    }
    softmaxBwdRow(yw, gw, dw, n, scale);
    for (int64_t j = 0; j < n; ++j)
      dx[r * n + j] = store<bf16_t>(dw[j]);
  }
}

double crossEntropyFwd(const float *logits, const int32_t *targets,
                       int64_t rows, int64_t vocab, float *lse) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    // Two passes over the row, which stays in L2 (200 KB at GPT-2's
    // vocabulary): cheaper than an online max that rescales the sum.
    const float *xr = logits + r * vocab;
    float mx = rowMax(xr, vocab);
    float acc[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= vocab; j += kLanes)
      for (int l = 0; l < kLanes; ++l)
        acc[l] += expApprox(xr[j + l] - mx);
    for (; j < vocab; ++j)
      acc[0] += expApprox(xr[j] - mx);
    lse[r] = mx + std::log(sumLanes(acc));
    int64_t t = targets[r];
    if (k::targetInShard(t, 0, vocab))
      total += k::crossEntropyRowLoss(lse[r], xr[t]);
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
    STRATA_ELEMENTWISE
    for (int64_t j = 0; j < vocab; ++j)
      dr[j] = k::crossEntropyGrad(expApprox(xr[j] - l), scale);
    int64_t t = targets[r];
    if (k::targetInShard(t, 0, vocab))
      dr[t] = k::crossEntropyTargetGrad(dr[t], scale);
  }
}

void ceVpMax(const float *logits, float *rowmax, int64_t rows, int64_t n,
             int64_t valid) {
  for (int64_t r = 0; r < rows; ++r)
    rowmax[r] = valid > 0 ? rowMax(logits + r * n, valid)
                          : -std::numeric_limits<float>::max();
}

void ceVpSumExp(const float *logits, const int32_t *targets,
                const float *rowmax, float *stats, int64_t rows, int64_t n,
                int64_t vocabStart, int64_t valid) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = logits + r * n;
    float mx = rowmax[r];
    float acc[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= valid; j += kLanes)
      for (int l = 0; l < kLanes; ++l)
        acc[l] += expApprox(xr[j + l] - mx);
    for (; j < valid; ++j)
      acc[0] += expApprox(xr[j] - mx);
    stats[r] = sumLanes(acc);
    int64_t t = int64_t(targets[r]);
    stats[rows + r] =
        k::targetInShard(t, vocabStart, valid) ? xr[t - vocabStart] : 0.0f;
  }
}

double ceVpLoss(const float *rowmax, const float *stats, float *lse,
                int64_t rows) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    lse[r] = rowmax[r] + std::log(stats[r]);
    total += k::crossEntropyRowLoss(lse[r], stats[rows + r]);
  }
  return total / double(rows);
}

void ceVpBwd(const float *logits, const int32_t *targets, const float *lse,
             float *dlogits, int64_t rows, int64_t n, int64_t vocabStart,
             int64_t valid, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = logits + r * n;
    float *dr = dlogits + r * n;
    float l = lse[r];
    STRATA_ELEMENTWISE
    for (int64_t j = 0; j < valid; ++j)
      dr[j] = k::crossEntropyGrad(expApprox(xr[j] - l), scale);
    for (int64_t j = valid; j < n; ++j)
      dr[j] = 0.0f;
    int64_t t = int64_t(targets[r]);
    if (k::targetInShard(t, vocabStart, valid))
      dr[t - vocabStart] = k::crossEntropyTargetGrad(dr[t - vocabStart], scale);
  }
}

namespace {
template <typename T>
void transposeT(const T *x, T *out, int rank, const int64_t *dims,
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
    T *dst = out + o * inner;
    const T *src = x + base;
    if (innerStride == 1)
      std::memcpy(dst, src, sizeof(T) * inner);
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

template <typename T>
void sliceCopyT(const T *x, T *out, int64_t outer, int64_t big, int64_t small,
                int64_t start, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(out + o * small * inner, x + (o * big + start) * inner,
                sizeof(T) * small * inner);
}

template <typename T>
void sliceInsertT(const T *x, T *out, int64_t outer, int64_t big, int64_t small,
                  int64_t start, int64_t inner, bool accumulateInto) {
  for (int64_t o = 0; o < outer; ++o) {
    const T *src = x + o * small * inner;
    T *dst = out + (o * big + start) * inner;
    if (accumulateInto)
      accumulateT(src, dst, small * inner);
    else
      std::memcpy(dst, src, sizeof(T) * small * inner);
  }
}
} // namespace

void transpose(const float *x, float *out, int rank, const int64_t *dims,
               const int64_t *perm) {
  transposeT(x, out, rank, dims, perm);
}
void transpose(const bf16_t *x, bf16_t *out, int rank, const int64_t *dims,
               const int64_t *perm) {
  transposeT(x, out, rank, dims, perm);
}
void sliceCopy(const float *x, float *out, int64_t outer, int64_t big,
               int64_t small, int64_t start, int64_t inner) {
  sliceCopyT(x, out, outer, big, small, start, inner);
}
void sliceCopy(const bf16_t *x, bf16_t *out, int64_t outer, int64_t big,
               int64_t small, int64_t start, int64_t inner) {
  sliceCopyT(x, out, outer, big, small, start, inner);
}
void sliceInsert(const float *x, float *out, int64_t outer, int64_t big,
                 int64_t small, int64_t start, int64_t inner,
                 bool accumulateInto) {
  sliceInsertT(x, out, outer, big, small, start, inner, accumulateInto);
}
void sliceInsert(const bf16_t *x, bf16_t *out, int64_t outer, int64_t big,
                 int64_t small, int64_t start, int64_t inner,
                 bool accumulateInto) {
  sliceInsertT(x, out, outer, big, small, start, inner, accumulateInto);
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
  const k::SgdCoefficients c = k::sgdCoefficients(lr, momentum, weightDecay);
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i)
    k::sgdUpdate(param[i], grad[i], buf[i], c);
}

void adamwStep(float *param, const float *grad, float *expAvg, float *expAvgSq,
               int64_t n, double lr, double beta1, double beta2, double eps,
               double weightDecay, int64_t step) {
  const k::AdamWCoefficients c =
      k::adamwCoefficients(lr, beta1, beta2, eps, weightDecay, step);
  int64_t i = 0;
#ifdef __AVX512F__
  // GCC will not vectorise a loop calling sqrt while errno semantics are on
  // (the default), and this loop streams four arrays of every parameter:
  // the same operations, 16 lanes at a time (sqrt and division are
  // correctly rounded in both forms).
  // The operations of kernels::adamwUpdate, in its order.
  const __m512 vDecay = _mm512_set1_ps(c.decay), vB1 = _mm512_set1_ps(c.beta1),
               vOneMinusB1 = _mm512_set1_ps(c.oneMinusBeta1),
               vB2 = _mm512_set1_ps(c.beta2),
               vOneMinusB2 = _mm512_set1_ps(c.oneMinusBeta2),
               vNegStep = _mm512_set1_ps(c.negStepSize),
               vBc2Sqrt = _mm512_set1_ps(c.bc2Sqrt),
               vEps = _mm512_set1_ps(c.eps);
  for (; i + 16 <= n; i += 16) {
    __m512 p = _mm512_mul_ps(_mm512_loadu_ps(param + i), vDecay);
    __m512 g = _mm512_loadu_ps(grad + i);
    __m512 m = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(expAvg + i), vB1),
                             _mm512_mul_ps(vOneMinusB1, g));
    __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(expAvgSq + i), vB2),
                             _mm512_mul_ps(_mm512_mul_ps(vOneMinusB2, g), g));
    __m512 denom =
        _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), vBc2Sqrt), vEps);
    _mm512_storeu_ps(expAvg + i, m);
    _mm512_storeu_ps(expAvgSq + i, v);
    _mm512_storeu_ps(
        param + i,
        _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(vNegStep, m), denom)));
  }
#endif
  for (; i < n; ++i)
    k::adamwUpdate(param[i], grad[i], expAvg[i], expAvgSq[i], c);
}

} // namespace strata::rt::cpu
