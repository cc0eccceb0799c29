//===- FastMath.h - Vectorisable exp, sigmoid and reductions --------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// libm's expf/tanhf are scalar calls that stop GCC from vectorising the
// softmax, cross-entropy and GELU loops (they were ~80% of the non-matmul
// time of a GPT step). These are branch-free, call-free inline functions
// that the compiler turns into AVX-512/AVX2 code inside a loop.
//
// expApprox is Cephes' expf (Cody-Waite range reduction, degree-5 minimax
// polynomial): within 2 ulp of the exact value on [-87.3, 88.0]. Inputs
// outside are clamped, so exp of a very negative number is 1.2e-38 instead
// of a denormal or 0; every caller adds it to 1 or to a sum of at least 1.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CPU_FASTMATH_H
#define STRATA_RUNTIME_CPU_FASTMATH_H

#include <algorithm>
#include <cstdint>
#include <cstring>

/// Before an elementwise loop whose output may be the same array as an
/// input (the memory plan reuses buffers in place). Without it the compiler
/// guards the vector loop with an overlap test that in-place calls fail, and
/// they run the scalar fallback (2-4x slower). Exact aliasing is safe: each
/// iteration reads element i before it writes element i.
#if defined(__clang__)
#define STRATA_ELEMENTWISE _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define STRATA_ELEMENTWISE _Pragma("GCC ivdep")
#else
#define STRATA_ELEMENTWISE
#endif

namespace strata::rt::cpu {

inline float expApprox(float x) {
  x = std::min(std::max(x, -87.33654f), 88.02969f);
  // n = round(x / ln 2) by the 1.5 * 2^23 trick: plain arithmetic, so it
  // vectorises without SSE4.1 rounding intrinsics or errno concerns.
  constexpr float kRound = 12582912.0f;
  float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

/// 1 / (1 + exp(-x)); 0.5 (1 + tanh(u)) is sigmoid(2u), which is how GELU
/// uses it (no cancellation near 0, unlike 1 - 2 / (exp(2u) + 1)).
inline float sigmoidApprox(float x) { return 1.0f / (1.0f + expApprox(-x)); }

/// Lanes of the partial sums/maxima below: one AVX-512 register of floats.
/// Fixed, so a result never depends on the machine that computed it.
constexpr int kLanes = 16;

/// max over x[0..n), -inf for n == 0.
inline float rowMax(const float *__restrict x, int64_t n) {
  float acc[kLanes];
  std::fill(acc, acc + kLanes, -__builtin_inff());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j)
      acc[j] = std::max(acc[j], x[i + j]);
  for (; i < n; ++i)
    acc[0] = std::max(acc[0], x[i]);
  return *std::max_element(acc, acc + kLanes);
}

/// Combines kLanes partial sums pairwise (a fixed order).
inline float sumLanes(float *acc) {
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int j = 0; j < width; ++j)
      acc[j] += acc[j + width];
  return acc[0];
}

} // namespace strata::rt::cpu

#endif // STRATA_RUNTIME_CPU_FASTMATH_H
