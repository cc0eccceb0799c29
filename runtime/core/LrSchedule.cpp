//===- LrSchedule.cpp - Learning rate per step ----------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/LrSchedule.h"

#include <algorithm>
#include <cmath>

namespace strata::rt {

double learningRate(const TrainConfig &c, int64_t step) {
  if (step < c.warmupSteps)
    return c.lr * double(step + 1) / double(c.warmupSteps);
  if (c.schedule == LrScheduleKind::Constant)
    return c.lr;
  double progress =
      std::clamp(double(step - c.warmupSteps) /
                     double(std::max<int64_t>(1, c.totalSteps - c.warmupSteps)),
                 0.0, 1.0);
  if (c.schedule == LrScheduleKind::Cosine)
    return c.minLr + (c.lr - c.minLr) * 0.5 * (1.0 + std::cos(M_PI * progress));
  return c.lr + (c.minLr - c.lr) * progress;
}

} // namespace strata::rt
