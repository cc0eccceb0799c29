//===- Bf16.cpp - bfloat16 conversion and matmul on the CPU ---------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Matmuls with bfloat16 operands run oneDNN's gemm_bf16bf16f32, whose JIT
// kernel uses AVX512-BF16 (vdpbf16ps) where the core has it, and accumulate
// in float32: a float32 destination (a main gradient, beta = 1) is written
// directly; a bfloat16 one goes through a float32 staging area and is
// rounded once. On a core without AVX512-BF16 the operands are widened and
// the float32 GEMM runs instead (CpuDevice says so at start-up).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/kernels/Bf16Math.h"

#include <oneapi/dnnl/dnnl.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

// Exported by libdnnl (src/cpu/gemm/gemm.cpp) but absent from oneDNN 2.6's
// public header: row-major C = alpha op(A) op(B) + beta C, bf16 A and B
// (uint16_t bit patterns), f32 C.
extern "C" dnnl_status_t
dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                      dnnl_dim_t K, float alpha, const uint16_t *A,
                      dnnl_dim_t lda, const uint16_t *B, dnnl_dim_t ldb,
                      float beta, float *C, dnnl_dim_t ldc);

namespace strata::rt::cpu {

using kernels::bf16ToFloat;
using kernels::floatToBf16;

void widenBf16(const uint16_t *x, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = bf16ToFloat(x[i]);
}

void narrowToBf16(const float *x, uint16_t *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = floatToBf16(x[i]);
}

bool hasBf16Gemm() {
  static const bool has = [] {
    if (const char *env = std::getenv("STRATA_BF16_GEMM"))
      return env[0] != '0';
    // ISA values are capability bit sets.
    unsigned isa = unsigned(dnnl_get_effective_cpu_isa());
    unsigned bf16 = unsigned(dnnl_cpu_isa_avx512_core_bf16);
    return (isa & bf16) == bf16;
  }();
  return has;
}

namespace {

/// Grow-only scratch of one kind per thread (the runtime is
/// single-threaded between kernels; oneDNN threads inside a GEMM).
template <typename T> T *scratch(std::vector<T> &v, int64_t n) {
  if (int64_t(v.size()) < n)
    v.resize(size_t(n));
  return v.data();
}

void check(dnnl_status_t status, const char *what) {
  if (status != dnnl_success) {
    // Only reachable on an internal bug (shapes are verified at load).
    std::fprintf(stderr, "strata: oneDNN %s failed (status %d)\n", what,
                 int(status));
    std::exit(70);
  }
}

/// bf16 x bf16 -> f32, with matmul()'s batching rules.
void gemmBf16(const uint16_t *a, const uint16_t *b, float *c,
              const MatmulShape &s, float alpha, float beta) {
  auto one = [&](int64_t m, const uint16_t *A, const uint16_t *B, float *C) {
    check(dnnl_gemm_bf16bf16f32(s.transA ? 'T' : 'N', s.transB ? 'T' : 'N', m,
                                s.n, s.k, alpha, A, s.transA ? m : s.k, B,
                                s.transB ? s.k : s.n, beta, C, s.n),
          "gemm_bf16bf16f32");
  };
  if (s.broadcastB && !s.transA) {
    one(s.batch * s.m, a, b, c);
    return;
  }
  int64_t strideA = s.m * s.k, strideB = s.broadcastB ? 0 : s.k * s.n,
          strideC = s.m * s.n;
  for (int64_t i = 0; i < s.batch; ++i)
    one(s.m, a + i * strideA, b + i * strideB, c + i * strideC);
}

} // namespace

void matmulMixed(const void *a, DType ta, const void *b, DType tb, void *c,
                 DType tc, const MatmulShape &s, float alpha, float beta) {
  static thread_local std::vector<uint16_t> aLow, bLow;
  static thread_local std::vector<float> aWide, bWide, cWide;
  int64_t na = s.batch * s.m * s.k;
  int64_t nb = (s.broadcastB ? 1 : s.batch) * s.k * s.n;
  int64_t nc = s.batch * s.m * s.n;
  float *cf = static_cast<float *>(c);
  if (tc == DType::BF16) {
    cf = scratch(cWide, nc);
    if (beta != 0.0f)
      widenBf16(static_cast<const uint16_t *>(c), cf, nc);
  }
  bool lowPrecision = ta == DType::BF16 || tb == DType::BF16;
  if (lowPrecision && hasBf16Gemm()) {
    const uint16_t *al = static_cast<const uint16_t *>(a);
    const uint16_t *bl = static_cast<const uint16_t *>(b);
    if (ta != DType::BF16) {
      uint16_t *t = scratch(aLow, na);
      narrowToBf16(static_cast<const float *>(a), t, na);
      al = t;
    }
    if (tb != DType::BF16) {
      uint16_t *t = scratch(bLow, nb);
      narrowToBf16(static_cast<const float *>(b), t, nb);
      bl = t;
    }
    gemmBf16(al, bl, cf, s, alpha, beta);
  } else {
    const float *af = static_cast<const float *>(a);
    const float *bf = static_cast<const float *>(b);
    if (ta == DType::BF16) {
      float *t = scratch(aWide, na);
      widenBf16(static_cast<const uint16_t *>(a), t, na);
      af = t;
    }
    if (tb == DType::BF16) {
      float *t = scratch(bWide, nb);
      widenBf16(static_cast<const uint16_t *>(b), t, nb);
      bf = t;
    }
    matmul(af, bf, cf, s, alpha, beta);
  }
  if (tc == DType::BF16)
    narrowToBf16(cf, static_cast<uint16_t *>(c), nc);
}

} // namespace strata::rt::cpu
