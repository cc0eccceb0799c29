//===- UnaryKernels.cpp - strata.unary on the CPU -------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// unary_fwd / unary_bwd: one loop per kind (the kind a template argument, so
// the switch of UnaryMath.h folds away and the loop vectorises).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/FastMath.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/kernels/UnaryMath.h"

namespace strata::rt::cpu {

namespace k = strata::kernels;

namespace {

template <k::UnaryKind K>
void unaryFwdLoop(const float *x, float *out, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i)
    out[i] = k::unaryValue(K, x[i]);
}

template <k::UnaryKind K>
void unaryBwdLoop(const float *x, const float *dy, float *dx, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i)
    dx[i] = dy[i] * k::unaryDerivative(K, x[i]);
}

template <template <k::UnaryKind> class F, typename... Args>
void dispatch(int64_t kind, Args... args) {
  switch (k::UnaryKind(kind)) {
#define STRATA_UNARY_CASE(K)                                                   \
  case k::UnaryKind::K:                                                        \
    return F<k::UnaryKind::K>::run(args...);
    STRATA_UNARY_CASE(Sqrt)
    STRATA_UNARY_CASE(Reciprocal)
    STRATA_UNARY_CASE(Erf)
    STRATA_UNARY_CASE(Tanh)
    STRATA_UNARY_CASE(Sigmoid)
    STRATA_UNARY_CASE(Exp)
    STRATA_UNARY_CASE(Neg)
#undef STRATA_UNARY_CASE
  }
}

template <k::UnaryKind K> struct Fwd {
  static void run(const float *x, float *out, int64_t n) {
    unaryFwdLoop<K>(x, out, n);
  }
};
template <k::UnaryKind K> struct Bwd {
  static void run(const float *x, const float *dy, float *dx, int64_t n) {
    unaryBwdLoop<K>(x, dy, dx, n);
  }
};

} // namespace

void unaryFwd(int64_t kind, const float *x, float *out, int64_t n) {
  dispatch<Fwd>(kind, x, out, n);
}

void unaryBwd(int64_t kind, const float *x, const float *dy, float *dx,
              int64_t n) {
  dispatch<Bwd>(kind, x, dy, dx, n);
}

} // namespace strata::rt::cpu
