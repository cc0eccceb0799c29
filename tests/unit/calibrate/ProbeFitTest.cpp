//===- ProbeFitTest.cpp - Fits of strata-calibrate-probe ------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The fits recover the parameters of synthetic timings exactly, stay sane on
// noisy or degenerate input, and use nccl-tests' bus factors.
//
//===----------------------------------------------------------------------===//

#include "runtime/calibrate/ProbeFit.h"

#include <gtest/gtest.h>

using namespace strata::rt::calibrate;

namespace {

std::vector<TimedSize> alphaBetaPoints(double alpha, double beta) {
  std::vector<TimedSize> pts;
  for (double bytes = 8; bytes <= (32 << 20); bytes *= 4)
    pts.push_back({bytes, alpha + bytes / beta});
  return pts;
}

TEST(ProbeFit, AlphaBetaRecoversExactLine) {
  AlphaBeta f = fitAlphaBeta(alphaBetaPoints(2e-6, 5e9));
  EXPECT_NEAR(f.alphaS, 2e-6, 1e-12);
  EXPECT_NEAR(f.betaBytesPerS, 5e9, 5e9 * 1e-9);
  EXPECT_LT(f.maxRelError, 1e-9);
}

TEST(ProbeFit, AlphaBetaWeighsSmallMessagesLikeLargeOnes) {
  // 10% noise on one large message must not swamp the latency: an absolute
  // least-squares fit would move alpha by ~100x here.
  std::vector<TimedSize> pts = alphaBetaPoints(1e-6, 1e10);
  pts.back().seconds *= 1.1;
  AlphaBeta f = fitAlphaBeta(pts);
  EXPECT_NEAR(f.alphaS, 1e-6, 0.2e-6);
  EXPECT_NEAR(f.betaBytesPerS, 1e10, 0.15e10);
}

TEST(ProbeFit, AlphaBetaNegativeInterceptRefitsThroughOrigin) {
  // Pure bandwidth with a faster-than-linear small end.
  std::vector<TimedSize> pts = {{1e3, 0.5e-7}, {1e6, 1e-4}, {1e7, 1e-3}};
  AlphaBeta f = fitAlphaBeta(pts);
  EXPECT_EQ(f.alphaS, 0.0);
  EXPECT_GT(f.betaBytesPerS, 0.0);
}

TEST(ProbeFit, AlphaBetaNeedsTwoSizes) {
  EXPECT_EQ(fitAlphaBeta({}).betaBytesPerS, 0.0);
  EXPECT_EQ(fitAlphaBeta({{1024, 1e-6}}).betaBytesPerS, 0.0);
  EXPECT_EQ(fitAlphaBeta({{1024, 1e-6}, {1024, 2e-6}}).betaBytesPerS, 0.0);
  // Times falling with size: no positive bandwidth explains them.
  EXPECT_EQ(fitAlphaBeta({{8, 1e-3}, {1 << 20, 1e-6}}).betaBytesPerS, 0.0);
}

TEST(ProbeFit, GemmDepthRecoversRateCurve) {
  std::vector<DepthRate> pts;
  for (double k : {64, 128, 256, 512, 1024, 2048})
    pts.push_back({k, 100e9 * k / (k + 96)});
  DepthFit f = fitGemmDepth(pts);
  EXPECT_NEAR(f.peakFlopsPerS, 100e9, 1e3);
  EXPECT_NEAR(f.depthHalf, 96, 1e-6);
}

TEST(ProbeFit, GemmDepthFlatRateHasNoPenalty) {
  DepthFit f = fitGemmDepth({{128, 80e9}, {512, 70e9}, {2048, 75e9}});
  EXPECT_EQ(f.depthHalf, 0.0);
  EXPECT_NEAR(f.peakFlopsPerS, 75e9, 1.0);
  EXPECT_EQ(fitGemmDepth({}).peakFlopsPerS, 0.0);
}

TEST(ProbeFit, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(busBandwidthFactor("all_reduce", 2), 1.0);
  EXPECT_DOUBLE_EQ(busBandwidthFactor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(busBandwidthFactor("reduce_scatter", 4), 0.75);
  EXPECT_DOUBLE_EQ(busBandwidthFactor("all_gather", 2), 0.5);
  EXPECT_DOUBLE_EQ(busBandwidthFactor("send_recv", 8), 1.0);
}

} // namespace
