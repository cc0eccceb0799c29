//===- RotaryMath.h - Rotary position embeddings, per feature pair --------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Hugging Face Llama's rotate_half convention: for head dim D, feature i
// (< D/2) pairs with feature i + D/2, and at position p both are rotated by
// the angle p · theta^(−2i/D):
//   y_i       = x_i cos − x_{i+D/2} sin
//   y_{i+D/2} = x_{i+D/2} cos + x_i sin
// The backward pass is the transpose, the rotation by −angle (sin negated).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_KERNELS_ROTARYMATH_H
#define STRATA_RUNTIME_KERNELS_ROTARYMATH_H

#include "runtime/kernels/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace strata::kernels {

/// The rotation angle of pair `i` at `position` for head dim `dim`, in
/// double (tables are rounded to float once, after the angle).
STRATA_HOST_DEVICE inline double rotaryAngle(int64_t position, int64_t i,
                                             int64_t dim, double theta) {
  return double(position) * pow(theta, -2.0 * double(i) / double(dim));
}

/// Rotates (x1, x2) by the angle whose cosine and sine are c and s.
STRATA_HOST_DEVICE inline void rotatePair(float x1, float x2, float c, float s,
                                          float &y1, float &y2) {
  y1 = x1 * c - x2 * s;
  y2 = x2 * c + x1 * s;
}

} // namespace strata::kernels

#endif // STRATA_RUNTIME_KERNELS_ROTARYMATH_H
