//===- LrSchedule.h - Learning rate per step ------------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The runtime computes the learning rate of step i (0-based) in double, like
// a torch LambdaLR whose lambda is evaluated at i before the i-th
// optimizer.step(). With base = lr, W = warmup_steps, T = total_steps:
//
//   i < W:                     lr_i = base * (i + 1) / W
//   constant:                  lr_i = base
//   otherwise, p = clamp((i - W) / max(1, T - W), 0, 1)
//     cosine:                  lr_i = min_lr + (base - min_lr) * 0.5 * (1 +
//     cos(pi p)) linear:                  lr_i = base + (min_lr - base) * p
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CORE_LRSCHEDULE_H
#define STRATA_RUNTIME_CORE_LRSCHEDULE_H

#include "runtime/format/Program.h"

namespace strata::rt {

double learningRate(const TrainConfig &config, int64_t step);

} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_LRSCHEDULE_H
