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

#include "runtime/cpu/FastMath.h"
#include "runtime/kernels/RmsNormMath.h"
#include "runtime/kernels/RotaryMath.h"
#include "runtime/kernels/SiluMath.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace strata::rt::cpu {

namespace k = strata::kernels;

void rmsNormFwd(const float *x, const float *weight, float *out, float *rstd,
                int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *__restrict xr = x + r * n;
    float *__restrict yr = out + r * n;
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j)
        acc[j] += xr[i + j] * xr[i + j];
    for (; i < n; ++i)
      acc[0] += xr[i] * xr[i];
    float rs = k::rmsNormRstd(sumLanes(acc), n, eps);
    for (int64_t i = 0; i < n; ++i)
      yr[i] = k::rmsNormForward(xr[i], rs, weight[i]);
    rstd[r] = rs;
  }
}

void rmsNormBwd(const float *dy, const float *x, const float *weight,
                const float *rstd, float *dx, float *dweight, int64_t rows,
                int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *__restrict xr = x + r * n;
    const float *__restrict gr = dy + r * n;
    float *__restrict dxr = dx + r * n;
    float rs = rstd[r];
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j)
        acc[j] += weight[i + j] * gr[i + j] * xr[i + j];
    for (; i < n; ++i)
      acc[0] += weight[i] * gr[i] * xr[i];
    float coeff = k::rmsNormGradCoefficient(sumLanes(acc), rs, n);
    for (int64_t i = 0; i < n; ++i) {
      dxr[i] = k::rmsNormInputGrad(gr[i], xr[i], weight[i], rs, coeff);
      dweight[i] += k::rmsNormWeightGrad(gr[i], xr[i], rs);
    }
  }
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

void rotary(const float *x, float *out, int64_t outer, int64_t seq, int64_t dim,
            double theta, bool inverse) {
  const RotaryTable &t = rotaryTable(seq, dim, theta);
  const int64_t half = dim / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t p = 0; p < seq; ++p) {
      const float *xr = x + (o * seq + p) * dim;
      float *yr = out + (o * seq + p) * dim;
      const float *c = t.cos.data() + p * half;
      const float *s = t.sin.data() + p * half;
      // Iteration i reads and writes elements i and i + half only, so
      // out == x is safe.
      STRATA_ELEMENTWISE
      for (int64_t i = 0; i < half; ++i)
        k::rotatePair(xr[i], xr[i + half], c[i], sign * s[i], yr[i],
                      yr[i + half]);
    }
}

void siluFwd(const float *x, float *out, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i)
    out[i] = k::silu(x[i], sigmoidApprox(x[i]));
}

void siluBwd(const float *x, const float *dy, float *dx, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i)
    dx[i] = dy[i] * k::siluDerivative(x[i], sigmoidApprox(x[i]));
}

void siluMulFwd(const float *gate, const float *up, float *out, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i)
    out[i] = k::siluMul(gate[i], sigmoidApprox(gate[i]), up[i]);
}

void siluMulBwd(const float *gate, const float *up, const float *dy,
                float *dgate, float *dup, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i], u = up[i], d = dy[i];
    k::siluMulGrad(g, sigmoidApprox(g), u, d, dgate[i], dup[i]);
  }
}

void repeatInterleave(const float *x, float *out, int64_t outer, int64_t n,
                      int64_t repeats, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j) {
      const float *src = x + (o * n + j) * inner;
      for (int64_t r = 0; r < repeats; ++r)
        std::memcpy(out + ((o * n + j) * repeats + r) * inner, src,
                    sizeof(float) * inner);
    }
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

} // namespace strata::rt::cpu
