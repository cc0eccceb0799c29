//===- ProbeFit.h - Fits of the calibration probe's timings -----*- C++ -*-===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The two models the cost model (docs/cost-model.md) puts on measured times:
// a collective takes `alpha + bytes / beta`, and a GEMM of depth K runs at
// `rate(K) = R * K / (K + Khalf)`. Both are fitted in relative error, so a
// 16-byte message weighs as much as a 32 MiB one: alpha comes from the small
// messages and beta from the large ones, as nccl-tests readers expect.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CALIBRATE_PROBEFIT_H
#define STRATA_RUNTIME_CALIBRATE_PROBEFIT_H

#include <vector>

namespace strata::rt::calibrate {

/// One timed size of a collective.
struct TimedSize {
  double bytes = 0;
  double seconds = 0;
};

/// time = alphaS + bytes / betaBytesPerS.
struct AlphaBeta {
  double alphaS = 0;
  double betaBytesPerS = 0;
  /// Largest |fit − measured| / measured over the points.
  double maxRelError = 0;
};

/// Least squares of (t − alpha − bytes/beta)/t over `points`, with alpha ≥ 0
/// and beta > 0 (a negative alpha refits with alpha = 0). Needs ≥ 2 points
/// with positive times and at least two distinct sizes; otherwise returns a
/// fit with betaBytesPerS = 0.
AlphaBeta fitAlphaBeta(const std::vector<TimedSize> &points);

/// One timed GEMM depth: FLOP/s achieved at depth K.
struct DepthRate {
  double k = 0;
  double flopsPerS = 0;
};

/// rate(K) = peakFlopsPerS · K / (K + depthHalf).
struct DepthFit {
  double peakFlopsPerS = 0;
  double depthHalf = 0;
};

/// Fits 1/rate = 1/R + (Khalf/R)·(1/K) by least squares in relative error.
/// A rate that does not grow with K gives depthHalf = 0 and R = the mean
/// rate. Empty input gives zeros.
DepthFit fitGemmDepth(const std::vector<DepthRate> &points);

/// nccl-tests bus-bandwidth factor for `op` over `ranks`: all_reduce
/// 2(n−1)/n, reduce_scatter and all_gather (n−1)/n, send_recv 1.
double busBandwidthFactor(const char *op, int ranks);

} // namespace strata::rt::calibrate

#endif // STRATA_RUNTIME_CALIBRATE_PROBEFIT_H
