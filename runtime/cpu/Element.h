//===- Element.h - Loads and stores of float32 or bfloat16 elements -------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The elementwise and row kernels are templates over their storage type:
// `float`, or `bf16_t` (bfloat16 bits). They compute in float32 either way:
// an element is widened as it is loaded and rounded once as it is stored
// (runtime/kernels/Bf16Math.h's rule, branch-free), so that a bf16 kernel
// gives bit for bit what the float32 kernel gives on widened copies of its
// operands with its results narrowed, without the copies. Both conversions
// are shifts, adds and a select that -O3 vectorises with the float math
// (AVX-512 under -march=native; plain scalar code without it).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CPU_ELEMENT_H
#define STRATA_RUNTIME_CPU_ELEMENT_H

#include "runtime/kernels/Bf16Math.h"

#include <vector>

namespace strata::rt::cpu {

using kernels::bf16_t;

inline float load(float x) { return x; }
inline float load(bf16_t x) { return kernels::bf16ToFloat(x); }

template <typename T> T store(float x);
template <> inline float store<float>(float x) { return x; }
template <> inline bf16_t store<bf16_t>(float x) {
  return kernels::floatToBf16(x);
}

/// Row kernels whose float32 code has cross-element reductions (the norms,
/// softmax) run bf16 rows through that same compiled float32 code: one row
/// widened into a float32 row (in L1), the results narrowed. (Compiling the
/// reduction loops again for bf16 loads lets the compiler vectorise and
/// contract them differently, which moves the last bit of a statistic.)
inline float *rowBuffer(std::vector<float> &row, int64_t n) {
  if (int64_t(row.size()) < n)
    row.resize(size_t(n));
  return row.data();
}
inline void widenRow(const bf16_t *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = load(src[i]);
}
inline void narrowRow(const float *src, bf16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = store<bf16_t>(src[i]);
}

} // namespace strata::rt::cpu

#endif // STRATA_RUNTIME_CPU_ELEMENT_H
