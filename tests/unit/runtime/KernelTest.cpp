//===- KernelTest.cpp - CPU kernels vs double-precision references --------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace strata::rt;

namespace {

std::vector<float> randomVector(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

void expectNear(const std::vector<float> &got, const std::vector<double> &want,
                double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i])))
        << "at element " << i;
}

TEST(KernelTest, Elementwise) {
  auto a = randomVector(37, 1), b = randomVector(37, 2);
  std::vector<float> out(37);
  cpu::add(a.data(), b.data(), out.data(), 37);
  for (int i = 0; i < 37; ++i)
    EXPECT_FLOAT_EQ(out[i], a[i] + b[i]);
  cpu::mul(a.data(), b.data(), out.data(), 37);
  for (int i = 0; i < 37; ++i)
    EXPECT_FLOAT_EQ(out[i], a[i] * b[i]);
  cpu::scale(a.data(), out.data(), 37, -2.5f);
  for (int i = 0; i < 37; ++i)
    EXPECT_FLOAT_EQ(out[i], -2.5f * a[i]);
  std::vector<float> y = b;
  cpu::accumulate(a.data(), y.data(), 37);
  for (int i = 0; i < 37; ++i)
    EXPECT_FLOAT_EQ(y[i], a[i] + b[i]);
  cpu::copy(a.data(), out.data(), 37);
  EXPECT_EQ(out, a);
  cpu::fill(out.data(), 37, 3.0f);
  for (float v : out)
    EXPECT_EQ(v, 3.0f);
}

/// C = alpha op(A) op(B) + beta C in double, per batch entry.
std::vector<double> referenceMatmul(const std::vector<float> &a,
                                    const std::vector<float> &b,
                                    const std::vector<float> &c,
                                    const cpu::MatmulShape &s, double alpha,
                                    double beta) {
  std::vector<double> out(c.size());
  for (int64_t p = 0; p < s.batch; ++p) {
    const float *A = a.data() + p * s.m * s.k;
    const float *B = b.data() + (s.broadcastB ? 0 : p * s.k * s.n);
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = 0.0;
        for (int64_t l = 0; l < s.k; ++l) {
          double av = s.transA ? A[l * s.m + i] : A[i * s.k + l];
          double bv = s.transB ? B[j * s.k + l] : B[l * s.n + j];
          acc += av * bv;
        }
        int64_t idx = p * s.m * s.n + i * s.n + j;
        out[idx] = alpha * acc + (beta != 0.0 ? beta * c[idx] : 0.0);
      }
  }
  return out;
}

TEST(KernelTest, MatmulAllLayouts) {
  for (int transA = 0; transA < 2; ++transA)
    for (int transB = 0; transB < 2; ++transB)
      for (int broadcast = 0; broadcast < 2; ++broadcast)
        for (float beta : {0.0f, 1.0f}) {
          cpu::MatmulShape s;
          s.batch = 3;
          s.m = 5;
          s.n = 7;
          s.k = 9;
          s.transA = transA;
          s.transB = transB;
          s.broadcastB = broadcast;
          auto a = randomVector(s.batch * s.m * s.k, 3);
          auto b = randomVector((broadcast ? 1 : s.batch) * s.k * s.n, 4);
          auto c = randomVector(s.batch * s.m * s.n, 5);
          auto want = referenceMatmul(a, b, c, s, 0.5, beta);
          if (beta == 0.0f) // beta = 0 must ignore NaN in C.
            std::fill(c.begin(), c.end(), NAN);
          cpu::matmul(a.data(), b.data(), c.data(), s, 0.5f, beta);
          SCOPED_TRACE(testing::Message()
                       << "transA " << transA << " transB " << transB
                       << " broadcast " << broadcast << " beta " << beta);
          expectNear(c, want, 1e-5);
        }
}

TEST(KernelTest, EmbeddingForwardBackwardWithShardedRows) {
  const int64_t rows = 4, hidden = 3, start = 2;
  std::vector<int32_t> ids = {2, 5, 0, 3, 2, 7};
  auto table = randomVector(rows * hidden, 6);
  std::vector<float> out(ids.size() * hidden);
  cpu::embeddingFwd(ids.data(), ids.size(), table.data(), rows, hidden, start,
                    out.data());
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t h = 0; h < hidden; ++h) {
      int64_t r = ids[i] - start;
      float want = (r >= 0 && r < rows) ? table[r * hidden + h] : 0.0f;
      EXPECT_EQ(out[i * hidden + h], want);
    }
  auto dout = randomVector(ids.size() * hidden, 7);
  std::vector<float> dtable(rows * hidden, 1.0f);
  cpu::embeddingBwd(ids.data(), ids.size(), dout.data(), rows, hidden, start,
                    dtable.data());
  std::vector<double> want(rows * hidden, 1.0);
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t r = ids[i] - start;
    if (r >= 0 && r < rows)
      for (int64_t h = 0; h < hidden; ++h)
        want[r * hidden + h] += dout[i * hidden + h];
  }
  expectNear(dtable, want, 1e-6);
}

TEST(KernelTest, BiasAddAndGrad) {
  auto x = randomVector(4 * 6, 8), bias = randomVector(6, 9);
  std::vector<float> out(24);
  cpu::biasAdd(x.data(), bias.data(), out.data(), 4, 6);
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 6; ++j)
      EXPECT_FLOAT_EQ(out[r * 6 + j], x[r * 6 + j] + bias[j]);
  std::vector<float> db(6, 0.5f);
  cpu::biasGrad(x.data(), db.data(), 4, 6);
  for (int j = 0; j < 6; ++j) {
    double sum = 0.5;
    for (int r = 0; r < 4; ++r)
      sum += x[r * 6 + j];
    EXPECT_NEAR(db[j], sum, 1e-5);
  }
}

TEST(KernelTest, GeluMatchesHuggingFaceGeluNew) {
  std::vector<float> x = randomVector(101, 10, 3.0f);
  std::vector<float> out(x.size());
  cpu::geluFwd(x.data(), out.data(), x.size());
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double v = x[i];
    want[i] = 0.5 * v *
              (1.0 + std::tanh(std::sqrt(2.0 / M_PI) *
                               (v + 0.044715 * std::pow(v, 3.0))));
  }
  expectNear(out, want, 2e-6);
  cpu::reluFwd(x.data(), out.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(out[i], x[i] > 0 ? x[i] : 0.0f);
}

TEST(KernelTest, LayerNormForward) {
  const int64_t rows = 5, n = 33;
  auto x = randomVector(rows * n, 11, 2.0f);
  for (float &v : x)
    v += 3.0f; // A mean far from zero exercises the two-pass variance.
  auto gamma = randomVector(n, 12), beta = randomVector(n, 13);
  std::vector<float> out(rows * n), mean(rows), rstd(rows);
  cpu::layerNormFwd(x.data(), gamma.data(), beta.data(), out.data(),
                    mean.data(), rstd.data(), rows, n, 1e-5f);
  std::vector<double> want(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < n; ++i)
      mu += x[r * n + i];
    mu /= n;
    for (int64_t i = 0; i < n; ++i)
      var += (x[r * n + i] - mu) * (x[r * n + i] - mu);
    var /= n;
    double rs = 1.0 / std::sqrt(var + 1e-5);
    EXPECT_NEAR(mean[r], mu, 1e-5);
    EXPECT_NEAR(rstd[r], rs, 1e-5 * rs);
    for (int64_t i = 0; i < n; ++i)
      want[r * n + i] = (x[r * n + i] - mu) * rs * gamma[i] + beta[i];
  }
  expectNear(out, want, 2e-5);
}

TEST(KernelTest, SoftmaxCausalAndScaled) {
  const int64_t blocks = 2, n = 6;
  auto x = randomVector(blocks * n * n, 14, 3.0f);
  std::vector<float> out(x.size());
  cpu::softmaxFwd(x.data(), out.data(), blocks * n, n, true, 0.7f);
  for (int64_t r = 0; r < blocks * n; ++r) {
    int64_t i = r % n;
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j <= i; ++j)
      mx = std::max(mx, 0.7 * x[r * n + j]);
    for (int64_t j = 0; j <= i; ++j)
      sum += std::exp(0.7 * x[r * n + j] - mx);
    for (int64_t j = 0; j < n; ++j) {
      double want = j <= i ? std::exp(0.7 * x[r * n + j] - mx) / sum : 0.0;
      EXPECT_NEAR(out[r * n + j], want, 1e-6) << r << "," << j;
    }
  }
}

TEST(KernelTest, CrossEntropyForward) {
  const int64_t rows = 7, vocab = 11;
  auto logits = randomVector(rows * vocab, 15, 4.0f);
  std::vector<int32_t> targets = {0, 10, 3, 3, 7, 1, 9};
  std::vector<float> lse(rows);
  double loss = cpu::crossEntropyFwd(logits.data(), targets.data(), rows, vocab,
                                     lse.data());
  double want = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j)
      sum += std::exp(double(logits[r * vocab + j]));
    EXPECT_NEAR(lse[r], std::log(sum), 1e-5);
    want += std::log(sum) - logits[r * vocab + targets[r]];
  }
  EXPECT_NEAR(loss, want / rows, 1e-5);
}

TEST(KernelTest, TransposeRank5QkvLayout) {
  // [B, S, 3, nh, hd] -> [3, B, nh, S, hd], the attention split.
  const int64_t dims[5] = {2, 3, 3, 2, 4};
  const int64_t perm[5] = {2, 0, 3, 1, 4};
  int64_t total = 2 * 3 * 3 * 2 * 4;
  std::vector<float> x(total);
  for (int64_t i = 0; i < total; ++i)
    x[i] = float(i);
  std::vector<float> out(total);
  cpu::transpose(x.data(), out.data(), 5, dims, perm);
  int64_t o = 0;
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t s = 0; s < 3; ++s)
          for (int64_t d = 0; d < 4; ++d)
            ASSERT_EQ(out[o++], x[(((b * 3 + s) * 3 + t) * 2 + h) * 4 + d]);
  // A permutation that moves the last axis takes the strided path.
  const int64_t dims2[2] = {3, 5}, perm2[2] = {1, 0};
  std::vector<float> t2(15);
  cpu::transpose(x.data(), t2.data(), 2, dims2, perm2);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_EQ(t2[i * 3 + j], x[j * 5 + i]);
}

TEST(KernelTest, SliceCopyAndInsert) {
  // x [2, 5, 3]; take [:, 1:4, :].
  std::vector<float> x(30);
  for (int i = 0; i < 30; ++i)
    x[i] = float(i);
  std::vector<float> part(2 * 3 * 3);
  cpu::sliceCopy(x.data(), part.data(), 2, 5, 3, 1, 3);
  for (int o = 0; o < 2; ++o)
    for (int a = 0; a < 3; ++a)
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(part[(o * 3 + a) * 3 + i], x[(o * 5 + a + 1) * 3 + i]);
  std::vector<float> big(30, 1.0f);
  cpu::sliceInsert(part.data(), big.data(), 2, 5, 3, 1, 3, false);
  for (int o = 0; o < 2; ++o)
    for (int a = 0; a < 5; ++a)
      for (int i = 0; i < 3; ++i) {
        float want = (a >= 1 && a < 4) ? x[(o * 5 + a) * 3 + i] : 1.0f;
        EXPECT_EQ(big[(o * 5 + a) * 3 + i], want);
      }
  cpu::sliceInsert(part.data(), big.data(), 2, 5, 3, 1, 3, true);
  EXPECT_EQ(big[(0 * 5 + 1) * 3 + 0], 2 * x[3]);
  EXPECT_EQ(big[0], 1.0f);
}

TEST(KernelTest, SumSquaresInDouble) {
  auto x = randomVector(1003, 16);
  double want = 0;
  for (float v : x)
    want += double(v) * double(v);
  EXPECT_NEAR(cpu::sumSquares(x.data(), x.size()), want, 1e-9 * want);
}

} // namespace
