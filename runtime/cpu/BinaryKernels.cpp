//===- BinaryKernels.cpp - strata.binary on the CPU -----------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// binary_fwd: one loop per kind (the kind a template argument, so the switch
// of BinaryMath.h folds away and the inner loop vectorises).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/FastMath.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/kernels/BinaryMath.h"

namespace strata::rt::cpu {

namespace k = strata::kernels;

namespace {

template <k::BinaryKind K>
void binaryLoop(const float *x, const float *y, float *out, int64_t lead,
                int64_t outer, int64_t mid, int64_t inner) {
  for (int64_t l = 0; l < lead; ++l)
    for (int64_t o = 0; o < outer; ++o) {
      const float *yr = y + o * inner;
      int64_t base = (l * outer + o) * mid * inner;
      if (inner == 1) {
        const float *xr = x + base;
        float *r = out + base, b = yr[0];
        STRATA_ELEMENTWISE
        for (int64_t m = 0; m < mid; ++m)
          r[m] = k::binaryValue(K, xr[m], b);
        continue;
      }
      for (int64_t m = 0; m < mid; ++m) {
        const float *xr = x + base + m * inner;
        float *r = out + base + m * inner;
        STRATA_ELEMENTWISE
        for (int64_t i = 0; i < inner; ++i)
          r[i] = k::binaryValue(K, xr[i], yr[i]);
      }
    }
}

} // namespace

void binaryFwd(int64_t kind, const float *x, const float *y, float *out,
               int64_t n, int64_t outer, int64_t mid, int64_t inner) {
  int64_t lead = n / (outer * mid * inner);
  switch (k::BinaryKind(kind)) {
  case k::BinaryKind::Add:
    return binaryLoop<k::BinaryKind::Add>(x, y, out, lead, outer, mid, inner);
  case k::BinaryKind::Sub:
    return binaryLoop<k::BinaryKind::Sub>(x, y, out, lead, outer, mid, inner);
  case k::BinaryKind::Mul:
    return binaryLoop<k::BinaryKind::Mul>(x, y, out, lead, outer, mid, inner);
  case k::BinaryKind::Div:
    return binaryLoop<k::BinaryKind::Div>(x, y, out, lead, outer, mid, inner);
  }
}

} // namespace strata::rt::cpu
