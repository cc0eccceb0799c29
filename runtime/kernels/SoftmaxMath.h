//===- SoftmaxMath.h - Softmax and cross-entropy, per element -------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Softmax over a row of scale · x: y = exp(scale x − m) / Σ, with m the
// row's maximum of scale · x (taken from the minimum of x when scale < 0);
// backward dx = scale y (dy − Σ y dy). Cross-entropy with lse = log Σ exp:
// loss = lse − x_target, dlogits = (exp(x − lse) − [j = target]) · scale.
// A backend evaluates exp its own way and computes the row reductions; these
// functions are everything else.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_KERNELS_SOFTMAXMATH_H
#define STRATA_RUNTIME_KERNELS_SOFTMAXMATH_H

#include "runtime/kernels/HostDevice.h"

#include <cstdint>

namespace strata::kernels {

/// Columns of row `r` that a (causal) softmax over rows of `n` keeps: row r
/// is row r mod n of an n × n block, columns j > r mod n are masked.
STRATA_HOST_DEVICE inline int64_t softmaxValidColumns(int64_t r, int64_t n,
                                                      bool causal) {
  return causal ? (r % n) + 1 : n;
}

/// max(scale · x) over a row from the row's max and min of x.
STRATA_HOST_DEVICE inline float softmaxShift(float rowMax, float rowMin,
                                             float scale) {
  return scale >= 0.0f ? scale * rowMax : scale * rowMin;
}

/// The argument of exp for one element.
STRATA_HOST_DEVICE inline float softmaxExpArg(float x, float scale,
                                              float shift) {
  return scale * x - shift;
}

STRATA_HOST_DEVICE inline float softmaxBackward(float y, float dy, float dot,
                                                float scale) {
  return scale * y * (dy - dot);
}

/// Whether a target id selects a column of [start, start + valid).
STRATA_HOST_DEVICE inline bool targetInShard(int64_t target, int64_t start,
                                             int64_t valid) {
  return target - start >= 0 && target - start < valid;
}

/// The gradient of one logit, p · scale with p = exp(x − lse) ...
STRATA_HOST_DEVICE inline float crossEntropyGrad(float p, float scale) {
  return p * scale;
}

/// ... less scale at the target column (applied to crossEntropyGrad's
/// value, as two roundings).
STRATA_HOST_DEVICE inline float crossEntropyTargetGrad(float grad,
                                                       float scale) {
  return grad - scale;
}

/// One row's loss term, lse − x_target, in double (the mean over rows is
/// observable).
STRATA_HOST_DEVICE inline double crossEntropyRowLoss(float lse,
                                                     float targetLogit) {
  return double(lse) - double(targetLogit);
}

} // namespace strata::kernels

#endif // STRATA_RUNTIME_KERNELS_SOFTMAXMATH_H
