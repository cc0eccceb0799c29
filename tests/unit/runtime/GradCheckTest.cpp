//===- GradCheckTest.cpp - Backward kernels vs finite differences ---------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Each backward kernel gets dy = R (random) and must match the central
// difference of L = sum(R * forward(x)), where forward is a double-precision
// reference, so the only float error is the kernel's own.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

using namespace strata::rt;

namespace {

using Vec = std::vector<double>;
using Forward = std::function<Vec(const Vec &)>;

std::vector<float> randomVector(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

Vec toDouble(const std::vector<float> &v) { return Vec(v.begin(), v.end()); }

/// Central differences of L(x) = sum(r * f(x)) for every element of x.
Vec numericGrad(const Forward &f, Vec x, const std::vector<float> &r,
                double h = 1e-5) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double keep = x[i];
    auto loss = [&](double v) {
      x[i] = v;
      Vec y = f(x);
      double l = 0;
      for (size_t j = 0; j < y.size(); ++j)
        l += r[j] * y[j];
      return l;
    };
    g[i] = (loss(keep + h) - loss(keep - h)) / (2 * h);
    x[i] = keep;
  }
  return g;
}

void expectGradNear(const std::vector<float> &got, const Vec &want,
                    double tol = 2e-3) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (double w : want)
    scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (scale + 1e-3)) << "element " << i;
}

double geluRef(double v) {
  return 0.5 * v *
         (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
}

TEST(GradCheckTest, Gelu) {
  auto x = randomVector(64, 1, 2.0f);
  auto r = randomVector(64, 2);
  std::vector<float> dx(64);
  cpu::geluBwd(x.data(), r.data(), dx.data(), 64);
  expectGradNear(dx, numericGrad(
                         [](const Vec &v) {
                           Vec y(v.size());
                           for (size_t i = 0; i < v.size(); ++i)
                             y[i] = geluRef(v[i]);
                           return y;
                         },
                         toDouble(x), r));
}

TEST(GradCheckTest, Relu) {
  auto x = randomVector(64, 3);
  for (float &v : x)
    if (std::fabs(v) < 0.05f)
      v = 0.3f; // Stay away from the kink.
  auto r = randomVector(64, 4);
  std::vector<float> dx(64);
  cpu::reluBwd(x.data(), r.data(), dx.data(), 64);
  expectGradNear(dx, numericGrad(
                         [](const Vec &v) {
                           Vec y(v.size());
                           for (size_t i = 0; i < v.size(); ++i)
                             y[i] = v[i] > 0 ? v[i] : 0;
                           return y;
                         },
                         toDouble(x), r));
}

Vec layerNormRef(const Vec &x, const Vec &g, const Vec &b, int64_t rows,
                 int64_t n) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < n; ++i)
      mu += x[r * n + i];
    mu /= n;
    for (int64_t i = 0; i < n; ++i)
      var += (x[r * n + i] - mu) * (x[r * n + i] - mu);
    double rs = 1 / std::sqrt(var / n + 1e-5);
    for (int64_t i = 0; i < n; ++i)
      y[r * n + i] = (x[r * n + i] - mu) * rs * g[i] + b[i];
  }
  return y;
}

TEST(GradCheckTest, LayerNorm) {
  const int64_t rows = 3, n = 8;
  auto x = randomVector(rows * n, 5), g = randomVector(n, 6),
       b = randomVector(n, 7), r = randomVector(rows * n, 8);
  std::vector<float> y(rows * n), mean(rows), rstd(rows), dx(rows * n);
  std::vector<float> dg(n, 0.25f), db(n, -0.5f); // They accumulate.
  cpu::layerNormFwd(x.data(), g.data(), b.data(), y.data(), mean.data(),
                    rstd.data(), rows, n, 1e-5f);
  cpu::layerNormBwd(r.data(), x.data(), g.data(), mean.data(), rstd.data(),
                    dx.data(), dg.data(), db.data(), rows, n);
  Vec xd = toDouble(x), gd = toDouble(g), bd = toDouble(b);
  expectGradNear(
      dx, numericGrad(
              [&](const Vec &v) { return layerNormRef(v, gd, bd, rows, n); },
              xd, r));
  Vec wantG = numericGrad(
      [&](const Vec &v) { return layerNormRef(xd, v, bd, rows, n); }, gd, r);
  Vec wantB = numericGrad(
      [&](const Vec &v) { return layerNormRef(xd, gd, v, rows, n); }, bd, r);
  for (int64_t i = 0; i < n; ++i) {
    wantG[i] += 0.25;
    wantB[i] -= 0.5;
  }
  expectGradNear(dg, wantG);
  expectGradNear(db, wantB);
}

TEST(GradCheckTest, SoftmaxCausalScaled) {
  const int64_t n = 5, rows = 2 * n;
  const float scale = 0.6f;
  auto x = randomVector(rows * n, 9, 2.0f), r = randomVector(rows * n, 10);
  std::vector<float> y(rows * n), dx(rows * n);
  cpu::softmaxFwd(x.data(), y.data(), rows, n, true, scale);
  cpu::softmaxBwd(y.data(), r.data(), dx.data(), rows, n, scale);
  auto ref = [&](const Vec &v) {
    Vec out(v.size(), 0.0);
    for (int64_t row = 0; row < rows; ++row) {
      int64_t valid = row % n + 1;
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < valid; ++j)
        mx = std::max(mx, scale * v[row * n + j]);
      for (int64_t j = 0; j < valid; ++j)
        sum += std::exp(scale * v[row * n + j] - mx);
      for (int64_t j = 0; j < valid; ++j)
        out[row * n + j] = std::exp(scale * v[row * n + j] - mx) / sum;
    }
    return out;
  };
  expectGradNear(dx, numericGrad(ref, toDouble(x), r));
}

TEST(GradCheckTest, CrossEntropy) {
  const int64_t rows = 4, vocab = 9;
  auto logits = randomVector(rows * vocab, 11, 2.0f);
  std::vector<int32_t> targets = {3, 0, 8, 3};
  std::vector<float> lse(rows), dlogits(rows * vocab);
  cpu::crossEntropyFwd(logits.data(), targets.data(), rows, vocab, lse.data());
  // scale = 1/rows is the gradient of the mean the forward returns.
  cpu::crossEntropyBwd(logits.data(), targets.data(), lse.data(),
                       dlogits.data(), rows, vocab, 1.0f / rows);
  auto meanLoss = [&](const Vec &v) {
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t j = 0; j < vocab; ++j)
        sum += std::exp(v[r * vocab + j]);
      total += std::log(sum) - v[r * vocab + targets[r]];
    }
    return Vec{total / rows};
  };
  expectGradNear(dlogits, numericGrad(meanLoss, toDouble(logits), {1.0f}));
}

TEST(GradCheckTest, MatmulGradientsViaTransposedMatmuls) {
  // C[m,n] = A[m,k] B[k,n]: dA = dC B^T, dB = A^T dC (beta = 1 accumulates).
  const int64_t m = 4, n = 5, k = 3;
  auto a = randomVector(m * k, 12), b = randomVector(k * n, 13),
       r = randomVector(m * n, 14);
  std::vector<float> da(m * k, 0.0f), db(k * n, 1.0f);
  cpu::MatmulShape sA{1, m, k, n, false, true, false};
  cpu::matmul(r.data(), b.data(), da.data(), sA, 1.0f, 0.0f);
  cpu::MatmulShape sB{1, k, n, m, true, false, false};
  cpu::matmul(a.data(), r.data(), db.data(), sB, 1.0f, 1.0f);
  auto ref = [&](const Vec &av, const Vec &bv) {
    Vec c(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t l = 0; l < k; ++l)
          c[i * n + j] += av[i * k + l] * bv[l * n + j];
    return c;
  };
  Vec ad = toDouble(a), bd = toDouble(b);
  expectGradNear(da,
                 numericGrad([&](const Vec &v) { return ref(v, bd); }, ad, r));
  Vec wantB = numericGrad([&](const Vec &v) { return ref(ad, v); }, bd, r);
  for (double &w : wantB)
    w += 1.0;
  expectGradNear(db, wantB);
}

TEST(GradCheckTest, EmbeddingAndBias) {
  const int64_t rows = 5, hidden = 3;
  std::vector<int32_t> ids = {1, 4, 1, 0};
  auto table = randomVector(rows * hidden, 15),
       r = randomVector(4 * hidden, 16);
  std::vector<float> dtable(rows * hidden, 0.0f);
  cpu::embeddingBwd(ids.data(), 4, r.data(), rows, hidden, 0, dtable.data());
  expectGradNear(dtable, numericGrad(
                             [&](const Vec &t) {
                               Vec out(4 * hidden);
                               for (int i = 0; i < 4; ++i)
                                 for (int64_t h = 0; h < hidden; ++h)
                                   out[i * hidden + h] = t[ids[i] * hidden + h];
                               return out;
                             },
                             toDouble(table), r));
  auto x = randomVector(4 * hidden, 17);
  std::vector<float> dbias(hidden, 0.0f);
  cpu::biasGrad(r.data(), dbias.data(), 4, hidden);
  expectGradNear(dbias, numericGrad(
                            [&](const Vec &bv) {
                              Vec out(4 * hidden);
                              for (int i = 0; i < 4; ++i)
                                for (int64_t h = 0; h < hidden; ++h)
                                  out[i * hidden + h] =
                                      x[i * hidden + h] + bv[h];
                              return out;
                            },
                            Vec(hidden, 0.1), r));
}

TEST(GradCheckTest, TransposeAndSliceBackward) {
  // Backward of transpose is the inverse permutation; backward of
  // slice_copy is slice_insert with accumulation into a zeroed gradient.
  const int64_t dims[3] = {2, 3, 4}, perm[3] = {2, 0, 1};
  const int64_t outDims[3] = {4, 2, 3}, inverse[3] = {1, 2, 0};
  auto x = randomVector(24, 18), r = randomVector(24, 19);
  std::vector<float> dx(24);
  cpu::transpose(r.data(), dx.data(), 3, outDims, inverse);
  expectGradNear(dx, numericGrad(
                         [&](const Vec &v) {
                           std::vector<float> f(v.begin(), v.end()), out(24);
                           cpu::transpose(f.data(), out.data(), 3, dims, perm);
                           return toDouble(out);
                         },
                         toDouble(x), r, 1e-2));
  auto rs = randomVector(2 * 2 * 4, 20);
  std::vector<float> dbig(24, 0.0f);
  cpu::sliceInsert(rs.data(), dbig.data(), 2, 3, 2, 1, 4, true);
  expectGradNear(dbig, numericGrad(
                           [&](const Vec &v) {
                             std::vector<float> f(v.begin(), v.end()), out(16);
                             cpu::sliceCopy(f.data(), out.data(), 2, 3, 2, 1,
                                            4);
                             return toDouble(out);
                           },
                           toDouble(x), rs, 1e-2));
}

} // namespace

//===----------------------------------------------------------------------===//
// Llama family: forward kernels against double-precision references written
// from Hugging Face Llama's definitions, backward kernels against finite
// differences of those references.
//===----------------------------------------------------------------------===//

namespace {

void expectForwardNear(const std::vector<float> &got, const Vec &want,
                       double tol = 2e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i])))
        << "element " << i;
}

Vec rmsNormRef(const Vec &x, const Vec &w, int64_t rows, int64_t n) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < n; ++i)
      ms += x[r * n + i] * x[r * n + i];
    double inv = 1 / std::sqrt(ms / n + 1e-5);
    for (int64_t i = 0; i < n; ++i)
      y[r * n + i] = w[i] * (x[r * n + i] * inv);
  }
  return y;
}

/// HF's apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, with
/// cos/sin of pos * inv_freq repeated over both halves.
Vec rotaryRef(const Vec &x, int64_t rows, int64_t seq, int64_t dim,
              double theta) {
  Vec y(x.size());
  int64_t half = dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    double pos = double(r % seq);
    for (int64_t j = 0; j < dim; ++j) {
      double invFreq = 1.0 / std::pow(theta, double(2 * (j % half)) / dim);
      double rotated =
          j < half ? -x[r * dim + j + half] : x[r * dim + j - half];
      y[r * dim + j] = x[r * dim + j] * std::cos(pos * invFreq) +
                       rotated * std::sin(pos * invFreq);
    }
  }
  return y;
}

double siluRef(double v) { return v / (1 + std::exp(-v)); }

} // namespace

TEST(GradCheckTest, RmsNorm) {
  const int64_t rows = 3, n = 40; // n > 16: the lane loop and its tail
  auto x = randomVector(rows * n, 31), w = randomVector(n, 32),
       r = randomVector(rows * n, 33);
  std::vector<float> y(rows * n), rstd(rows), dx(rows * n);
  std::vector<float> dw(n, 0.25f); // It accumulates.
  cpu::rmsNormFwd(x.data(), w.data(), y.data(), rstd.data(), rows, n, 1e-5f);
  Vec xd = toDouble(x), wd = toDouble(w);
  expectForwardNear(y, rmsNormRef(xd, wd, rows, n));
  cpu::rmsNormBwd(r.data(), x.data(), w.data(), rstd.data(), dx.data(),
                  dw.data(), rows, n);
  expectGradNear(
      dx, numericGrad([&](const Vec &v) { return rmsNormRef(v, wd, rows, n); },
                      xd, r));
  Vec wantW = numericGrad(
      [&](const Vec &v) { return rmsNormRef(xd, v, rows, n); }, wd, r);
  for (double &v : wantW)
    v += 0.25;
  expectGradNear(dw, wantW);
}

TEST(GradCheckTest, RotaryForwardBackwardAndInPlace) {
  // [outer 3, seq 5, dim 40]: 20 pairs, so the vector loop and its tail run.
  const int64_t outer = 3, seq = 5, dim = 40, n = outer * seq * dim;
  for (double theta : {10000.0, 3.0}) {
    SCOPED_TRACE(theta);
    auto x = randomVector(n, 34), r = randomVector(n, 35);
    std::vector<float> y(n), dx(n);
    cpu::rotary(x.data(), y.data(), outer, seq, dim, theta, false);
    auto ref = [&](const Vec &v) {
      return rotaryRef(v, outer * seq, seq, dim, theta);
    };
    expectForwardNear(y, ref(toDouble(x)));
    // The backward is the transpose of the (linear) forward.
    cpu::rotary(r.data(), dx.data(), outer, seq, dim, theta, true);
    expectGradNear(dx, numericGrad(ref, toDouble(x), r));
    // out == x.
    std::vector<float> inPlace = x;
    cpu::rotary(inPlace.data(), inPlace.data(), outer, seq, dim, theta, false);
    EXPECT_EQ(inPlace, y);
  }
}

TEST(GradCheckTest, SiluAndSiluMul) {
  const int64_t n = 70;
  auto g = randomVector(n, 36, 3.0f), u = randomVector(n, 37),
       r = randomVector(n, 38);
  std::vector<float> y(n), dx(n), du(n);
  cpu::siluFwd(g.data(), y.data(), n);
  auto silu = [&](const Vec &v) {
    Vec out(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      out[i] = siluRef(v[i]);
    return out;
  };
  expectForwardNear(y, silu(toDouble(g)), 1e-5);
  cpu::siluBwd(g.data(), r.data(), dx.data(), n);
  expectGradNear(dx, numericGrad(silu, toDouble(g), r));

  Vec gd = toDouble(g), ud = toDouble(u);
  auto swiglu = [&](const Vec &gate, const Vec &up) {
    Vec out(gate.size());
    for (size_t i = 0; i < gate.size(); ++i)
      out[i] = siluRef(gate[i]) * up[i];
    return out;
  };
  cpu::siluMulFwd(g.data(), u.data(), y.data(), n);
  expectForwardNear(y, swiglu(gd, ud), 1e-5);
  cpu::siluMulBwd(g.data(), u.data(), r.data(), dx.data(), du.data(), n);
  expectGradNear(
      dx, numericGrad([&](const Vec &v) { return swiglu(v, ud); }, gd, r));
  expectGradNear(
      du, numericGrad([&](const Vec &v) { return swiglu(gd, v); }, ud, r));
}

TEST(GradCheckTest, UnaryOfEveryKind) {
  const int64_t n = 70;
  auto x = randomVector(n, 41, 2.0f), r = randomVector(n, 42);
  std::vector<float> positive(n), y(n), dx(n);
  for (int64_t i = 0; i < n; ++i)
    positive[i] = 0.2f + std::fabs(x[i]);
  const std::pair<const char *, double (*)(double)> kinds[] = {
      {"sqrt", [](double v) { return std::sqrt(v); }},
      {"reciprocal", [](double v) { return 1.0 / v; }},
      {"erf", [](double v) { return std::erf(v); }},
      {"tanh", [](double v) { return std::tanh(v); }},
      {"sigmoid", [](double v) { return 1.0 / (1.0 + std::exp(-v)); }},
      {"exp", [](double v) { return std::exp(v); }},
      {"neg", [](double v) { return -v; }}};
  for (int64_t kind = 0; kind < 7; ++kind) {
    SCOPED_TRACE(kinds[kind].first);
    const std::vector<float> &in = kind < 2 ? positive : x;
    auto f = [&](const Vec &v) {
      Vec out(v.size());
      for (size_t i = 0; i < v.size(); ++i)
        out[i] = kinds[kind].second(v[i]);
      return out;
    };
    cpu::unaryFwd(kind, in.data(), y.data(), n);
    expectForwardNear(y, f(toDouble(in)), 1e-5);
    cpu::unaryBwd(kind, in.data(), r.data(), dx.data(), n);
    expectGradNear(dx, numericGrad(f, toDouble(in), r));
  }
}

TEST(GradCheckTest, RepeatInterleave) {
  // [outer 2, n 3, inner 4] -> [2, 6, 4], each entry twice in a row.
  const int64_t outer = 2, n = 3, reps = 2, inner = 4;
  auto x = randomVector(outer * n * inner, 39);
  auto r = randomVector(outer * n * reps * inner, 40);
  std::vector<float> y(outer * n * reps * inner), dx(x.size());
  cpu::repeatInterleave(x.data(), y.data(), outer, n, reps, inner);
  auto ref = [&](const Vec &v) {
    Vec out(outer * n * reps * inner);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < n * reps; ++j)
        for (int64_t i = 0; i < inner; ++i)
          out[(o * n * reps + j) * inner + i] =
              v[(o * n + j / reps) * inner + i];
    return out;
  };
  expectForwardNear(y, ref(toDouble(x)), 0.0);
  cpu::repeatInterleaveBwd(r.data(), dx.data(), outer, n, reps, inner);
  expectGradNear(dx, numericGrad(ref, toDouble(x), r));
}

TEST(GradCheckTest, BinaryOfEveryKindIsOneFloatOperation) {
  // x [7, 10] op y [10] (repeated over the rows) and x [7, 10] op y [7, 1]
  // (over the columns): each element the float32 x op y (bit-identical to
  // torch's x op y), y repeated; div by |y| + 0.5.
  const int64_t rows = 7, cols = 10;
  auto x = randomVector(rows * cols, 43, 2.0f),
       y = randomVector(rows * cols, 44);
  for (float &v : y)
    v = 0.5f + std::fabs(v);
  std::vector<float> out(rows * cols);
  for (bool perRow : {false, true})
    for (int64_t kind = 0; kind < 4; ++kind) {
      SCOPED_TRACE(std::to_string(kind) +
                   (perRow ? " per row" : " per column"));
      if (perRow) // outer rows, mid cols, inner 1
        cpu::binaryFwd(kind, x.data(), y.data(), out.data(), rows * cols, rows,
                       cols, 1);
      else // lead rows, outer 1, mid 1, inner cols
        cpu::binaryFwd(kind, x.data(), y.data(), out.data(), rows * cols, 1, 1,
                       cols);
      for (int64_t i = 0; i < rows * cols; ++i) {
        float a = x[i], b = y[perRow ? i / cols : i % cols];
        float want = kind == 0   ? a + b
                     : kind == 1 ? a - b
                     : kind == 2 ? a * b
                                 : a / b;
        ASSERT_EQ(out[i], want) << "element " << i;
      }
    }
}
