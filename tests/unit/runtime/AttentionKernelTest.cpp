//===- AttentionKernelTest.cpp - FlashAttention kernels vs float64 --------===//
//
// The CPU's tiled causal attention (forward: output and log-sum-exp;
// backward: dq, dk, dv) against a plain double-precision transcription that
// builds each head's whole probability matrix. Sequences that are not a
// multiple of the tile, shorter than one tile, and grouped-query heads.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/AttentionKernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace strata::rt::cpu;

namespace {

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference reference(const std::vector<float> &q, const std::vector<float> &k,
                    const std::vector<float> &v, const std::vector<float> &dout,
                    const AttentionShape &s, double scale) {
  int64_t S = s.seq, D = s.headDim, group = s.heads / s.kvHeads;
  Reference r;
  r.out.assign(q.size(), 0.0);
  r.dq.assign(q.size(), 0.0);
  r.lse.assign(s.batch * s.heads * S, 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(k.size(), 0.0);
  std::vector<double> p(S * S);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      int64_t qo = (b * s.heads + h) * S * D,
              ko = (b * s.kvHeads + h / group) * S * D;
      for (int64_t i = 0; i < S; ++i) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < D; ++e)
            dot += double(q[qo + i * D + e]) * k[ko + j * D + e];
          p[i * S + j] = scale * dot;
          mx = std::max(mx, p[i * S + j]);
        }
        for (int64_t j = 0; j <= i; ++j)
          sum += (p[i * S + j] = std::exp(p[i * S + j] - mx));
        r.lse[(b * s.heads + h) * S + i] = mx + std::log(sum);
        for (int64_t j = 0; j <= i; ++j) {
          p[i * S + j] /= sum;
          for (int64_t e = 0; e < D; ++e)
            r.out[qo + i * D + e] += p[i * S + j] * v[ko + j * D + e];
        }
      }
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> dp(i + 1, 0.0);
        double rowDot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t e = 0; e < D; ++e)
            dp[j] += double(dout[qo + i * D + e]) * v[ko + j * D + e];
          rowDot += p[i * S + j] * dp[j];
        }
        for (int64_t j = 0; j <= i; ++j) {
          double ds = scale * p[i * S + j] * (dp[j] - rowDot);
          for (int64_t e = 0; e < D; ++e) {
            r.dv[ko + j * D + e] += p[i * S + j] * dout[qo + i * D + e];
            r.dq[qo + i * D + e] += ds * k[ko + j * D + e];
            r.dk[ko + j * D + e] += ds * q[qo + i * D + e];
          }
        }
      }
    }
  return r;
}

std::vector<float> randomVector(size_t n, std::mt19937 &rng, float spread) {
  std::uniform_real_distribution<float> dist(-spread, spread);
  std::vector<float> x(n);
  for (float &e : x)
    e = dist(rng);
  return x;
}

/// max |got - want| / (1 + |want|).
double worst(const std::vector<float> &got, const std::vector<double> &want) {
  double w = 0;
  for (size_t i = 0; i < got.size(); ++i)
    w = std::max(w, std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i])));
  return w;
}

void check(const AttentionShape &s, float spread) {
  SCOPED_TRACE(testing::Message()
               << "batch " << s.batch << " heads " << s.heads << " kv "
               << s.kvHeads << " seq " << s.seq << " dim " << s.headDim);
  std::mt19937 rng(42 + s.seq);
  size_t nq = s.batch * s.heads * s.seq * s.headDim,
         nk = s.batch * s.kvHeads * s.seq * s.headDim;
  std::vector<float> q = randomVector(nq, rng, spread),
                     k = randomVector(nk, rng, spread),
                     v = randomVector(nk, rng, 1.0f),
                     dout = randomVector(nq, rng, 1.0f);
  float scale = 1.0f / std::sqrt(float(s.headDim));
  Reference want = reference(q, k, v, dout, s, scale);

  // NaN-filled outputs: every element must be written.
  const float nan = std::nanf("");
  std::vector<float> out(nq, nan), lse(s.batch * s.heads * s.seq, nan);
  causalAttentionFwd(q.data(), k.data(), v.data(), out.data(), lse.data(), s,
                     scale);
  EXPECT_LT(worst(out, want.out), 2e-5);
  EXPECT_LT(worst(lse, want.lse), 2e-5);

  std::vector<float> dq(nq, nan), dk(nk, nan), dv(nk, nan);
  causalAttentionBwd(dout.data(), q.data(), k.data(), v.data(), out.data(),
                     lse.data(), dq.data(), dk.data(), dv.data(), s, scale);
  EXPECT_LT(worst(dq, want.dq), 5e-5);
  EXPECT_LT(worst(dk, want.dk), 5e-5);
  EXPECT_LT(worst(dv, want.dv), 5e-5);
}

TEST(AttentionKernel, MultiHeadAcrossSeveralTiles) {
  check({2, 3, 3, 150, 16}, 1.0f); // 150 = 2 full tiles + 22 rows
}

TEST(AttentionKernel, GroupedQueryHeads) {
  check({1, 4, 2, kRowTile + 1, 8}, 1.0f);
  check({1, 4, 1, 2 * kRowTile, 32}, 1.0f);
}

TEST(AttentionKernel, ShorterThanOneTile) {
  check({3, 2, 2, 1, 4}, 1.0f);
  check({1, 2, 1, 7, 64}, 1.0f);
}

TEST(AttentionKernel, LargeScoresStayFinite) {
  // Scores up to ~100: the online maximum must keep exp in range.
  check({1, 2, 2, 130, 16}, 4.0f);
}

} // namespace
