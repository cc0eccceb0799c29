//===- AttentionReference.cpp - float64 semantics of causal_attention -----===//

#include "tests/unit/autodiff/AttentionReference.h"

#include <algorithm>
#include <cmath>

namespace strata::reference {

namespace {

struct Dims {
  int64_t batch, heads, kvHeads, seq, dim;
};

Dims dimsOf(const Tensor &q, const Tensor &k) {
  return {q.shape[0], q.shape[1], k.shape[1], q.shape[2], q.shape[3]};
}

/// The probabilities of head (b, h): row i over keys 0..i.
std::vector<double> probabilities(const Tensor &q, const Tensor &k,
                                  const Dims &d, int64_t b, int64_t h,
                                  double scale, std::vector<double> *lse) {
  int64_t S = d.seq, D = d.dim, kvh = h / (d.heads / d.kvHeads);
  const double *qh = &q.data[(b * d.heads + h) * S * D];
  const double *kh = &k.data[(b * d.kvHeads + kvh) * S * D];
  std::vector<double> p(S * S, 0.0);
  for (int64_t i = 0; i < S; ++i) {
    double mx = -INFINITY;
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0;
      for (int64_t e = 0; e < D; ++e)
        s += qh[i * D + e] * kh[j * D + e];
      p[i * S + j] = scale * s;
      mx = std::max(mx, p[i * S + j]);
    }
    double sum = 0;
    for (int64_t j = 0; j <= i; ++j)
      sum += (p[i * S + j] = std::exp(p[i * S + j] - mx));
    for (int64_t j = 0; j <= i; ++j)
      p[i * S + j] /= sum;
    if (lse)
      (*lse)[i] = mx + std::log(sum);
  }
  return p;
}

} // namespace

void causalAttention(const Tensor &q, const Tensor &k, const Tensor &v,
                     double scale, Tensor &out, Tensor &lse) {
  Dims d = dimsOf(q, k);
  int64_t S = d.seq, D = d.dim;
  out = Tensor(q.shape);
  lse = Tensor({d.batch, d.heads, S});
  std::vector<double> rowLse(S);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      std::vector<double> p = probabilities(q, k, d, b, h, scale, &rowLse);
      int64_t kvh = h / (d.heads / d.kvHeads);
      const double *vh = &v.data[(b * d.kvHeads + kvh) * S * D];
      double *oh = &out.data[(b * d.heads + h) * S * D];
      for (int64_t i = 0; i < S; ++i) {
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < D; ++e)
            oh[i * D + e] += p[i * S + j] * vh[j * D + e];
        lse.data[(b * d.heads + h) * S + i] = rowLse[i];
      }
    }
}

void causalAttentionGrad(const Tensor &dout, const Tensor &q, const Tensor &k,
                         const Tensor &v, double scale, Tensor &dq, Tensor &dk,
                         Tensor &dv) {
  Dims d = dimsOf(q, k);
  int64_t S = d.seq, D = d.dim;
  dq = Tensor(q.shape);
  dk = Tensor(k.shape);
  dv = Tensor(v.shape);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      std::vector<double> p = probabilities(q, k, d, b, h, scale, nullptr);
      int64_t kvh = h / (d.heads / d.kvHeads);
      int64_t qo = (b * d.heads + h) * S * D,
              ko = (b * d.kvHeads + kvh) * S * D;
      for (int64_t i = 0; i < S; ++i) {
        // dP_ij = dO_i . v_j; softmax: dS_ij = P_ij (dP_ij - sum_l P_il dP_il).
        std::vector<double> dp(i + 1);
        double dot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t e = 0; e < D; ++e)
            dp[j] += dout.data[qo + i * D + e] * v.data[ko + j * D + e];
          dot += p[i * S + j] * dp[j];
        }
        for (int64_t j = 0; j <= i; ++j) {
          double ds = scale * p[i * S + j] * (dp[j] - dot);
          for (int64_t e = 0; e < D; ++e) {
            dv.data[ko + j * D + e] += p[i * S + j] * dout.data[qo + i * D + e];
            dq.data[qo + i * D + e] += ds * k.data[ko + j * D + e];
            dk.data[ko + j * D + e] += ds * q.data[qo + i * D + e];
          }
        }
      }
    }
}

} // namespace strata::reference
