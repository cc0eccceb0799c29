//===- ProbeFit.cpp - Fits of the calibration probe's timings -------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/calibrate/ProbeFit.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace strata::rt::calibrate {

namespace {

/// Weighted least squares of y = a + c·x; false if x has no spread.
bool weightedLine(const std::vector<double> &x, const std::vector<double> &y,
                  const std::vector<double> &w, double &a, double &c) {
  double s = 0, sx = 0, sxx = 0, sy = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    s += w[i];
    sx += w[i] * x[i];
    sxx += w[i] * x[i] * x[i];
    sy += w[i] * y[i];
    sxy += w[i] * x[i] * y[i];
  }
  double det = s * sxx - sx * sx;
  if (!(det > 1e-300 * std::max(1.0, s * sxx)))
    return false;
  a = (sy * sxx - sx * sxy) / det;
  c = (s * sxy - sx * sy) / det;
  return true;
}

} // namespace

AlphaBeta fitAlphaBeta(const std::vector<TimedSize> &points) {
  std::vector<double> x, y, w;
  for (const TimedSize &p : points)
    if (p.seconds > 0 && p.bytes >= 0) {
      x.push_back(p.bytes);
      y.push_back(p.seconds);
      w.push_back(1.0 / (p.seconds * p.seconds));
    }
  AlphaBeta fit;
  double a = 0, c = 0;
  if (x.size() < 2 || !weightedLine(x, y, w, a, c))
    return fit;
  if (a < 0) {
    // Through the origin: minimise sum w (y - c x)^2.
    double sxx = 0, sxy = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      sxx += w[i] * x[i] * x[i];
      sxy += w[i] * x[i] * y[i];
    }
    a = 0;
    c = sxx > 0 ? sxy / sxx : 0;
  }
  if (!(c > 0))
    return fit;
  fit.alphaS = a;
  fit.betaBytesPerS = 1.0 / c;
  for (size_t i = 0; i < x.size(); ++i)
    fit.maxRelError =
        std::max(fit.maxRelError, std::fabs(a + c * x[i] - y[i]) / y[i]);
  return fit;
}

DepthFit fitGemmDepth(const std::vector<DepthRate> &points) {
  std::vector<double> x, y, w;
  double meanRate = 0;
  for (const DepthRate &p : points)
    if (p.k > 0 && p.flopsPerS > 0) {
      x.push_back(1.0 / p.k);
      y.push_back(1.0 / p.flopsPerS);
      w.push_back(p.flopsPerS * p.flopsPerS);
      meanRate += p.flopsPerS;
    }
  DepthFit fit;
  if (x.empty())
    return fit;
  meanRate /= double(x.size());
  double u = 0, v = 0;
  if (x.size() >= 2 && weightedLine(x, y, w, u, v) && u > 0 && v > 0) {
    fit.peakFlopsPerS = 1.0 / u;
    fit.depthHalf = v / u;
    return fit;
  }
  // Rate flat (or falling) in K: no depth penalty to model.
  fit.peakFlopsPerS = meanRate;
  fit.depthHalf = 0;
  return fit;
}

double busBandwidthFactor(const char *op, int ranks) {
  double n = ranks;
  if (std::strcmp(op, "all_reduce") == 0)
    return 2.0 * (n - 1) / n;
  if (std::strcmp(op, "reduce_scatter") == 0 ||
      std::strcmp(op, "all_gather") == 0)
    return (n - 1) / n;
  return 1.0;
}

} // namespace strata::rt::calibrate
