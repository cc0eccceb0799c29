//===- KernelMathTest.cpp - The shared host+device kernel bodies ----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// runtime/kernels/ holds the per-element arithmetic that the CPU backend and
// the CUDA backend both run. These tests check each body on the host against
// an independent double-precision formula (torch's definitions), so the math
// a GPU runs is tested on every machine.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/GeluMath.h"
#include "runtime/kernels/LayerNormMath.h"
#include "runtime/kernels/OptimizerMath.h"
#include "runtime/kernels/RmsNormMath.h"
#include "runtime/kernels/RotaryMath.h"
#include "runtime/kernels/SiluMath.h"
#include "runtime/kernels/SoftmaxMath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace strata::kernels;

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
float sigmoidF(float x) { return float(sigmoid(x)); }

const float kInputs[] = {-6.0f, -2.5f, -1.0f, -0.3f, 0.0f,
                         0.2f,  0.7f,  1.5f,  3.0f,  8.0f};

} // namespace

TEST(KernelMath, GeluMatchesTanhFormAndItsDerivative) {
  for (float x : kInputs) {
    double xd = x;
    double u = std::sqrt(2.0 / M_PI) * (xd + 0.044715 * xd * xd * xd);
    double ref = 0.5 * xd * (1.0 + std::tanh(u));
    float s = sigmoidF(geluSigmoidArg(x));
    EXPECT_NEAR(geluForward(x, s), ref, 1e-6 * (1 + std::fabs(ref))) << x;
    // Central difference of the double reference.
    auto f = [](double v) {
      double w = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
      return 0.5 * v * (1.0 + std::tanh(w));
    };
    double h = 1e-5, dref = (f(xd + h) - f(xd - h)) / (2 * h);
    EXPECT_NEAR(geluBackward(x, s, 2.0f), 2.0 * dref, 1e-5) << x;
  }
}

TEST(KernelMath, Relu) {
  EXPECT_EQ(reluForward(-1.5f), 0.0f);
  EXPECT_EQ(reluForward(2.5f), 2.5f);
  EXPECT_EQ(reluBackward(-1.5f, 3.0f), 0.0f);
  EXPECT_EQ(reluBackward(0.5f, 3.0f), 3.0f);
}

TEST(KernelMath, LayerNormRowMatchesDefinitionAndGradient) {
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f};
  const std::vector<float> gamma = {1.0f, 0.5f, -1.5f, 2.0f, 0.75f};
  const std::vector<float> beta = {0.1f, -0.2f, 0.0f, 0.3f, 0.05f};
  const std::vector<float> dy = {0.3f, -0.1f, 0.7f, -0.4f, 0.2f};
  const int64_t n = x.size();
  const float eps = 1e-5f;
  auto forward = [&](const std::vector<double> &xs) {
    double mean = 0, var = 0;
    for (double v : xs)
      mean += v / n;
    for (double v : xs)
      var += (v - mean) * (v - mean) / n;
    std::vector<double> y(n);
    for (int64_t i = 0; i < n; ++i)
      y[i] = (xs[i] - mean) / std::sqrt(var + eps) * gamma[i] + beta[i];
    return y;
  };
  std::vector<double> xd(x.begin(), x.end());
  std::vector<double> ref = forward(xd);
  float mean = 0, sq = 0;
  for (float v : x)
    mean += v / float(n);
  for (float v : x)
    sq += (v - mean) * (v - mean);
  float rstd = layerNormRstd(sq, n, eps);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(layerNormForward(x[i], mean, rstd, gamma[i], beta[i]), ref[i],
                1e-5);
  // Input gradient against finite differences of sum(dy * y).
  float sumD = 0, sumDX = 0;
  for (int64_t i = 0; i < n; ++i) {
    float xhat = layerNormNormalized(x[i], mean, rstd);
    sumD += dy[i] * gamma[i];
    sumDX += dy[i] * gamma[i] * xhat;
  }
  for (int64_t j = 0; j < n; ++j) {
    std::vector<double> xp = xd, xm = xd;
    double h = 1e-5;
    xp[j] += h;
    xm[j] -= h;
    std::vector<double> yp = forward(xp), ym = forward(xm);
    double num = 0;
    for (int64_t i = 0; i < n; ++i)
      num += dy[i] * (yp[i] - ym[i]) / (2 * h);
    float xhat = layerNormNormalized(x[j], mean, rstd);
    EXPECT_NEAR(layerNormInputGrad(dy[j], gamma[j], xhat, rstd, sumD / float(n),
                                   sumDX / float(n)),
                num, 1e-4)
        << j;
  }
}

TEST(KernelMath, RmsNormRowMatchesDefinitionAndGradient) {
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.25f};
  const std::vector<float> w = {1.0f, 0.5f, -1.5f, 2.0f};
  const std::vector<float> dy = {0.3f, -0.1f, 0.7f, -0.4f};
  const int64_t n = x.size();
  const float eps = 1e-6f;
  auto forward = [&](const std::vector<double> &xs) {
    double ms = 0;
    for (double v : xs)
      ms += v * v / n;
    std::vector<double> y(n);
    for (int64_t i = 0; i < n; ++i)
      y[i] = xs[i] / std::sqrt(ms + eps) * w[i];
    return y;
  };
  std::vector<double> xd(x.begin(), x.end());
  float sq = 0, dot = 0;
  for (int64_t i = 0; i < n; ++i)
    sq += x[i] * x[i];
  float rstd = rmsNormRstd(sq, n, eps);
  std::vector<double> ref = forward(xd);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(rmsNormForward(x[i], rstd, w[i]), ref[i], 1e-5);
    dot += w[i] * dy[i] * x[i];
  }
  float coeff = rmsNormGradCoefficient(dot, rstd, n);
  for (int64_t j = 0; j < n; ++j) {
    std::vector<double> xp = xd, xm = xd;
    double h = 1e-5;
    xp[j] += h;
    xm[j] -= h;
    std::vector<double> yp = forward(xp), ym = forward(xm);
    double num = 0;
    for (int64_t i = 0; i < n; ++i)
      num += dy[i] * (yp[i] - ym[i]) / (2 * h);
    EXPECT_NEAR(rmsNormInputGrad(dy[j], x[j], w[j], rstd, coeff), num, 1e-4);
    EXPECT_NEAR(rmsNormWeightGrad(dy[j], x[j], rstd), dy[j] * x[j] * rstd,
                1e-7);
  }
}

TEST(KernelMath, SoftmaxRowAndItsBackward) {
  const std::vector<float> x = {1.0f, -0.5f, 2.0f, 0.0f};
  for (float scale : {0.5f, -2.0f}) {
    float mx = x[0], mn = x[0];
    for (float v : x)
      mx = std::max(mx, v), mn = std::min(mn, v);
    float shift = softmaxShift(mx, mn, scale);
    double sum = 0, refSum = 0;
    std::vector<double> y(x.size());
    for (size_t j = 0; j < x.size(); ++j) {
      float arg = softmaxExpArg(x[j], scale, shift);
      EXPECT_LE(arg, 0.0f); // The shift is the row's maximum.
      y[j] = std::exp(arg);
      sum += y[j];
      refSum += std::exp(double(scale) * x[j]);
    }
    for (size_t j = 0; j < x.size(); ++j)
      EXPECT_NEAR(y[j] / sum, std::exp(double(scale) * x[j]) / refSum, 1e-6);
    // dx = scale y (dy - y.dy).
    const float dy[] = {0.1f, 0.2f, -0.3f, 0.4f};
    double dot = 0;
    for (size_t j = 0; j < x.size(); ++j)
      dot += y[j] / sum * dy[j];
    for (size_t j = 0; j < x.size(); ++j)
      EXPECT_NEAR(softmaxBackward(float(y[j] / sum), dy[j], float(dot), scale),
                  scale * y[j] / sum * (dy[j] - dot), 1e-6);
  }
  EXPECT_EQ(softmaxValidColumns(0, 4, true), 1);
  EXPECT_EQ(softmaxValidColumns(6, 4, true), 3);
  EXPECT_EQ(softmaxValidColumns(6, 4, false), 4);
}

TEST(KernelMath, CrossEntropyGradientAndLoss) {
  const std::vector<float> x = {1.0f, -0.5f, 2.0f};
  double lse = std::log(std::exp(1.0) + std::exp(-0.5) + std::exp(2.0));
  const int target = 2;
  const float scale = 0.25f;
  for (int j = 0; j < 3; ++j) {
    float p = float(std::exp(x[j] - lse));
    float g = crossEntropyGrad(p, scale);
    if (targetInShard(target, 0, 3) && j == target)
      g = crossEntropyTargetGrad(g, scale);
    double ref = (std::exp(x[j] - lse) - (j == target ? 1.0 : 0.0)) * scale;
    EXPECT_NEAR(g, ref, 1e-6) << j;
  }
  EXPECT_NEAR(crossEntropyRowLoss(float(lse), x[target]), lse - 2.0, 1e-6);
  // A vocabulary shard [4, 7) holds targets 4..6 only.
  EXPECT_FALSE(targetInShard(3, 4, 3));
  EXPECT_TRUE(targetInShard(4, 4, 3));
  EXPECT_TRUE(targetInShard(6, 4, 3));
  EXPECT_FALSE(targetInShard(7, 4, 3));
  EXPECT_FALSE(targetInShard(-1, 0, 3));
}

TEST(KernelMath, SiluAndSwiGlu) {
  for (float x : kInputs) {
    float s = sigmoidF(x);
    EXPECT_NEAR(silu(x, s), x * sigmoid(x), 1e-5);
    double h = 1e-5;
    auto f = [](double v) { return v * sigmoid(v); };
    double d = (f(double(x) + h) - f(double(x) - h)) / (2 * h);
    EXPECT_NEAR(siluDerivative(x, s), d, 1e-5);
    float dg, du;
    siluMulGrad(x, s, 1.5f, 2.0f, dg, du);
    EXPECT_NEAR(siluMul(x, s, 1.5f), 1.5 * f(x), 1e-5);
    EXPECT_NEAR(dg, 2.0 * 1.5 * d, 1e-4);
    EXPECT_NEAR(du, 2.0 * f(x), 1e-5);
  }
}

TEST(KernelMath, RotaryRotatesByTheAngleAndBack) {
  double angle = rotaryAngle(3, 1, 8, 10000.0);
  EXPECT_NEAR(angle, 3.0 * std::pow(10000.0, -2.0 / 8.0), 1e-12);
  float c = float(std::cos(angle)), s = float(std::sin(angle));
  float y1, y2, z1, z2;
  rotatePair(0.6f, -0.8f, c, s, y1, y2);
  EXPECT_NEAR(y1, 0.6 * std::cos(angle) + 0.8 * std::sin(angle), 1e-6);
  EXPECT_NEAR(y2, -0.8 * std::cos(angle) + 0.6 * std::sin(angle), 1e-6);
  rotatePair(y1, y2, c, -s, z1, z2); // The backward pass: the inverse.
  EXPECT_NEAR(z1, 0.6f, 1e-6);
  EXPECT_NEAR(z2, -0.8f, 1e-6);
}

TEST(KernelMath, AdamWMatchesTorchUpdateRule) {
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  double p = 0.5, m = 0, v = 0;
  float pf = 0.5f, mf = 0, vf = 0;
  const float grads[] = {0.3f, -0.2f, 0.05f, 1.0f};
  for (int step = 1; step <= 4; ++step) {
    double g = grads[step - 1];
    // torch.optim.AdamW (decoupled weight decay).
    p *= 1 - lr * wd;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    double mhat = m / (1 - std::pow(b1, step)),
           vhat = v / (1 - std::pow(b2, step));
    p -= lr * mhat / (std::sqrt(vhat) + eps);
    AdamWCoefficients c = adamwCoefficients(lr, b1, b2, eps, wd, step);
    adamwUpdate(pf, grads[step - 1], mf, vf, c);
    EXPECT_NEAR(pf, p, 1e-6) << step;
    EXPECT_NEAR(mf, m, 1e-7) << step;
    EXPECT_NEAR(vf, v, 1e-8) << step;
  }
}

TEST(KernelMath, SgdWithMomentumAndWeightDecay) {
  const double lr = 0.1, mom = 0.9, wd = 0.01;
  double p = 1.0, buf = 0;
  float pf = 1.0f, buff = 0;
  const float grads[] = {0.5f, -0.25f, 0.125f};
  SgdCoefficients c = sgdCoefficients(lr, mom, wd);
  for (float g : grads) {
    double gd = g + wd * p;
    buf = mom * buf + gd;
    p -= lr * buf;
    sgdUpdate(pf, g, buff, c);
    EXPECT_NEAR(pf, p, 1e-6);
    EXPECT_NEAR(buff, buf, 1e-6);
  }
}

TEST(KernelMath, ClipCoefficientIsTorchs) {
  EXPECT_NEAR(clipCoefficient(16.0, 1.0), 1.0 / (4.0 + 1e-6), 1e-12);
  EXPECT_GT(clipCoefficient(0.25, 1.0), 1.0); // No clipping below max_norm.
}
