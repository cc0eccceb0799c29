//===- Matmul.cpp - Batched fp32 matmul on oneDNN -------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// oneDNN's sgemm picks the JIT kernel for the host ISA (AVX-512 here) and
// honours BLAS beta semantics, which the gradient accumulation relies on
// (beta = 1 adds into a gradient buffer; beta = 0 ignores its contents).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Threads.h"

#include <oneapi/dnnl/dnnl.h>

#include <cstdio>
#include <cstdlib>

namespace strata::rt::cpu {

namespace {

void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
          float alpha, const float *a, const float *b, float beta, float *c) {
  dnnl_status_t status =
      dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', m, n, k, alpha, a,
                 transA ? m : k, b, transB ? k : n, beta, c, n);
  if (status != dnnl_success) {
    // Only reachable on an internal bug (shapes are verified at load).
    std::fprintf(stderr, "strata: oneDNN sgemm failed (status %d)\n",
                 int(status));
    std::exit(70);
  }
}

} // namespace

void matmul(const float *a, const float *b, float *c, const MatmulShape &s,
            float alpha, float beta) {
  // A shared B with untransposed A is one tall GEMM: far better blocking
  // than `batch` small ones (the x @ W of a linear layer).
  if (s.broadcastB && !s.transA) {
    gemm(false, s.transB, s.batch * s.m, s.n, s.k, alpha, a, b, beta, c);
    return;
  }
  int64_t strideA = s.m * s.k, strideB = s.broadcastB ? 0 : s.k * s.n,
          strideC = s.m * s.n;
  for (int64_t i = 0; i < s.batch; ++i)
    gemm(s.transA, s.transB, s.m, s.n, s.k, alpha, a + i * strideA,
         b + i * strideB, beta, c + i * strideC);
}

} // namespace strata::rt::cpu
