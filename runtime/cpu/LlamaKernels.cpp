//===- LlamaKernels.cpp - fp32 CPU kernels of the Llama family ------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// RMSNorm, rotary embeddings, SiLU / SwiGLU and grouped-query attention's
// kv-head repetition. The arithmetic per element is runtime/kernels/'s
// (shared with GPU backends); these loops only arrange it so GCC vectorises
// it (fixed-lane partial sums, the polynomial exp of FastMath.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"

#include "runtime/cpu/Element.h"
#include "runtime/cpu/FastMath.h"
#include "runtime/kernels/RmsNormMath.h"
#include "runtime/kernels/RotaryMath.h"
#include "runtime/kernels/SiluMath.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace strata::rt::cpu {

namespace k = strata::kernels;

namespace {
template <typename T>
void rmsNormFwdT(const T *x, const T *weight, T *out, float *rstd, int64_t rows,
                 int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *__restrict xr = x + r * n;
    T *__restrict yr = out + r * n;
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j)
        acc[j] += load(xr[i + j]) * load(xr[i + j]);
    for (; i < n; ++i)
      acc[0] += load(xr[i]) * load(xr[i]);
    float rs = k::rmsNormRstd(sumLanes(acc), n, eps);
    for (int64_t i = 0; i < n; ++i)
      yr[i] = store<T>(k::rmsNormForward(load(xr[i]), rs, load(weight[i])));
    rstd[r] = rs;
  }
}

template <typename T>
void rmsNormBwdT(const T *dy, const T *x, const T *weight, const float *rstd,
                 T *dx, float *dweight, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *__restrict xr = x + r * n;
    const T *__restrict gr = dy + r * n;
    T *__restrict dxr = dx + r * n;
    float rs = rstd[r];
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j)
        acc[j] += load(weight[i + j]) * load(gr[i + j]) * load(xr[i + j]);
    for (; i < n; ++i)
      acc[0] += load(weight[i]) * load(gr[i]) * load(xr[i]);
    float coeff = k::rmsNormGradCoefficient(sumLanes(acc), rs, n);
    for (int64_t i = 0; i < n; ++i) {
      float g = load(gr[i]), xv = load(xr[i]);
      dxr[i] = store<T>(k::rmsNormInputGrad(g, xv, load(weight[i]), rs, coeff));
      dweight[i] += k::rmsNormWeightGrad(g, xv, rs);
    }
  }
}

} // namespace

// The bf16 forms run their rows through the float32 bodies (Element.h's
// rowBuffer), which are therefore not inlined into them.
[[gnu::noinline]] void rmsNormFwd(const float *x, const float *weight,
                                  float *out, float *rstd, int64_t rows,
                                  int64_t n, float eps) {
  rmsNormFwdT(x, weight, out, rstd, rows, n, eps);
}
void rmsNormFwd(const bf16_t *x, const bf16_t *weight, bf16_t *out, float *rstd,
                int64_t rows, int64_t n, float eps) {
  static thread_local std::vector<float> xs, ys, ws;
  float *xw = rowBuffer(xs, n), *yw = rowBuffer(ys, n), *ww = rowBuffer(ws, n);
  widenRow(weight, ww, n);
  for (int64_t r = 0; r < rows; ++r) {
    widenRow(x + r * n, xw, n);
    rmsNormFwd(xw, ww, yw, rstd + r, 1, n, eps);
    narrowRow(yw, out + r * n, n);
  }
}
[[gnu::noinline]] void rmsNormBwd(const float *dy, const float *x,
                                  const float *weight, const float *rstd,
                                  float *dx, float *dweight, int64_t rows,
                                  int64_t n) {
  rmsNormBwdT(dy, x, weight, rstd, dx, dweight, rows, n);
}
void rmsNormBwd(const bf16_t *dy, const bf16_t *x, const bf16_t *weight,
                const float *rstd, bf16_t *dx, float *dweight, int64_t rows,
                int64_t n) {
  static thread_local std::vector<float> dys, xs, ws, dxs;
  float *dyw = rowBuffer(dys, n), *xw = rowBuffer(xs, n),
        *ww = rowBuffer(ws, n), *dxw = rowBuffer(dxs, n);
  widenRow(weight, ww, n);
  for (int64_t r = 0; r < rows; ++r) {
    widenRow(dy + r * n, dyw, n);
    widenRow(x + r * n, xw, n);
    rmsNormBwd(dyw, xw, ww, rstd + r, dxw, dweight, 1, n);
    narrowRow(dxw, dx + r * n, n);
  }
}
void rmsNormBwd(const bf16_t *dy, const bf16_t *x, const bf16_t *weight,
                const float *rstd, bf16_t *dx, bf16_t *dweight, int64_t rows,
                int64_t n) {
  std::vector<float> sums(static_cast<size_t>(n)); // one row, rounded once
  for (int64_t i = 0; i < n; ++i)
    sums[size_t(i)] = load(dweight[i]);
  rmsNormBwd(dy, x, weight, rstd, dx, sums.data(), rows, n);
  for (int64_t i = 0; i < n; ++i)
    dweight[i] = store<bf16_t>(sums[size_t(i)]);
}

namespace {

/// cos/sin of every (position, pair) for one (seq, dim, theta): computed in
/// double once per shape and kept, since every layer asks for the same one.
struct RotaryTable {
  int64_t seq = 0, dim = 0;
  double theta = 0;
  std::vector<float> cos, sin; // [seq, dim / 2]
};

const RotaryTable &rotaryTable(int64_t seq, int64_t dim, double theta) {
  thread_local RotaryTable table;
  if (table.seq == seq && table.dim == dim && table.theta == theta)
    return table;
  int64_t half = dim / 2;
  table.cos.resize(seq * half);
  table.sin.resize(seq * half);
  for (int64_t p = 0; p < seq; ++p)
    for (int64_t i = 0; i < half; ++i) {
      double angle = k::rotaryAngle(p, i, dim, theta);
      table.cos[p * half + i] = float(std::cos(angle));
      table.sin[p * half + i] = float(std::sin(angle));
    }
  table.seq = seq;
  table.dim = dim;
  table.theta = theta;
  return table;
}

} // namespace

namespace {
template <typename T>
void rotaryT(const T *x, T *out, int64_t outer, int64_t seq, int64_t dim,
             double theta, bool inverse) {
  const RotaryTable &t = rotaryTable(seq, dim, theta);
  const int64_t half = dim / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t p = 0; p < seq; ++p) {
      const T *xr = x + (o * seq + p) * dim;
      T *yr = out + (o * seq + p) * dim;
      const float *c = t.cos.data() + p * half;
      const float *s = t.sin.data() + p * half;
      // Iteration i reads and writes elements i and i + half only, so
      // out == x is safe.
      STRATA_ELEMENTWISE
      for (int64_t i = 0; i < half; ++i) {
        float lo, hi;
        k::rotatePair(load(xr[i]), load(xr[i + half]), c[i], sign * s[i], lo,
                      hi);
        yr[i] = store<T>(lo);
        yr[i + half] = store<T>(hi);
      }
    }
}
} // namespace

void rotary(const float *x, float *out, int64_t outer, int64_t seq, int64_t dim,
            double theta, bool inverse) {
  rotaryT(x, out, outer, seq, dim, theta, inverse);
}
void rotary(const bf16_t *x, bf16_t *out, int64_t outer, int64_t seq,
            int64_t dim, double theta, bool inverse) {
  rotaryT(x, out, outer, seq, dim, theta, inverse);
}

namespace {
template <typename T> void siluFwdT(const T *x, T *out, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i) {
    float v = load(x[i]);
    out[i] = store<T>(k::silu(v, sigmoidApprox(v)));
  }
}
template <typename T> void siluBwdT(const T *x, const T *dy, T *dx, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i) {
    float v = load(x[i]);
    dx[i] = store<T>(load(dy[i]) * k::siluDerivative(v, sigmoidApprox(v)));
  }
}
template <typename T>
void siluMulFwdT(const T *gate, const T *up, T *out, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i) {
    float g = load(gate[i]);
    out[i] = store<T>(k::siluMul(g, sigmoidApprox(g), load(up[i])));
  }
}
template <typename T>
void siluMulBwdT(const T *gate, const T *up, const T *dy, T *dgate, T *dup,
                 int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i) {
    float g = load(gate[i]), u = load(up[i]), d = load(dy[i]), dg, du;
    k::siluMulGrad(g, sigmoidApprox(g), u, d, dg, du);
    dgate[i] = store<T>(dg);
    dup[i] = store<T>(du);
  }
}
} // namespace

void siluFwd(const float *x, float *out, int64_t n) { siluFwdT(x, out, n); }
void siluFwd(const bf16_t *x, bf16_t *out, int64_t n) { siluFwdT(x, out, n); }
void siluBwd(const float *x, const float *dy, float *dx, int64_t n) {
  siluBwdT(x, dy, dx, n);
}
void siluBwd(const bf16_t *x, const bf16_t *dy, bf16_t *dx, int64_t n) {
  siluBwdT(x, dy, dx, n);
}
void siluMulFwd(const float *gate, const float *up, float *out, int64_t n) {
  siluMulFwdT(gate, up, out, n);
}
void siluMulFwd(const bf16_t *gate, const bf16_t *up, bf16_t *out, int64_t n) {
  siluMulFwdT(gate, up, out, n);
}
void siluMulBwd(const float *gate, const float *up, const float *dy,
                float *dgate, float *dup, int64_t n) {
  siluMulBwdT(gate, up, dy, dgate, dup, n);
}
void siluMulBwd(const bf16_t *gate, const bf16_t *up, const bf16_t *dy,
                bf16_t *dgate, bf16_t *dup, int64_t n) {
  siluMulBwdT(gate, up, dy, dgate, dup, n);
}

namespace {
template <typename T>
void repeatInterleaveT(const T *x, T *out, int64_t outer, int64_t n,
                       int64_t repeats, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j) {
      const T *src = x + (o * n + j) * inner;
      for (int64_t r = 0; r < repeats; ++r)
        std::memcpy(out + ((o * n + j) * repeats + r) * inner, src,
                    sizeof(T) * inner);
    }
}
} // namespace

void repeatInterleave(const float *x, float *out, int64_t outer, int64_t n,
                      int64_t repeats, int64_t inner) {
  repeatInterleaveT(x, out, outer, n, repeats, inner);
}
void repeatInterleave(const bf16_t *x, bf16_t *out, int64_t outer, int64_t n,
                      int64_t repeats, int64_t inner) {
  repeatInterleaveT(x, out, outer, n, repeats, inner);
}

void repeatInterleaveBwd(const float *dy, float *dx, int64_t outer, int64_t n,
                         int64_t repeats, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j) {
      float *dst = dx + (o * n + j) * inner;
      const float *src = dy + (o * n + j) * repeats * inner;
      std::memcpy(dst, src, sizeof(float) * inner);
      for (int64_t r = 1; r < repeats; ++r)
        accumulate(src + r * inner, dst, inner);
    }
}

/// The repeats are summed in float32 in one row and rounded once.
void repeatInterleaveBwd(const bf16_t *dy, bf16_t *dx, int64_t outer, int64_t n,
                         int64_t repeats, int64_t inner) {
  std::vector<float> sum(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j) {
      const bf16_t *src = dy + (o * n + j) * repeats * inner;
      for (int64_t i = 0; i < inner; ++i)
        sum[size_t(i)] = load(src[i]);
      for (int64_t r = 1; r < repeats; ++r)
        accumulate(src + r * inner, sum.data(), inner);
      bf16_t *dst = dx + (o * n + j) * inner;
      for (int64_t i = 0; i < inner; ++i)
        dst[i] = store<bf16_t>(sum[size_t(i)]);
    }
}

} // namespace strata::rt::cpu
