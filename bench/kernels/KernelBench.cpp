//===- KernelBench.cpp - CPU matmul GFLOP/s, single thread ----------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Prints GFLOP/s of the runtime's matmul (oneDNN sgemm) for the GPT-2 small
// shapes of a 1024-token micro-batch, in the three layouts training uses
// (forward x W, backward dY W^T and X^T dY), beside a cached oneDNN matmul
// primitive on the same shape. Best of several repetitions.
//
//   strata-bench-kernels [--reps N] [--threads T]
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Threads.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace strata::rt;

namespace {

struct Case {
  const char *what;
  int64_t m, n, k;
  bool transA, transB;
};

template <typename Fn> double bestSeconds(int reps, Fn fn) {
  fn(); // warm-up: JIT, caches, page faults
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - t0)
                              .count());
  }
  return best;
}

/// The oneDNN matmul primitive for C = op(A) op(B), created once (cached).
double primitiveSeconds(const Case &c, const float *a, const float *b,
                        float *out, int reps) {
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  using tag = memory::format_tag;
  memory::desc aMd({c.m, c.k}, memory::data_type::f32,
                   c.transA ? tag::ba : tag::ab);
  memory::desc bMd({c.k, c.n}, memory::data_type::f32,
                   c.transB ? tag::ba : tag::ab);
  memory::desc cMd({c.m, c.n}, memory::data_type::f32, tag::ab);
  matmul::primitive_desc pd(matmul::desc(aMd, bMd, cMd), eng);
  matmul prim(pd);
  memory aMem(aMd, eng, const_cast<float *>(a)),
      bMem(bMd, eng, const_cast<float *>(b)), cMem(cMd, eng, out);
  return bestSeconds(reps, [&] {
    prim.execute(
        strm,
        {{DNNL_ARG_SRC, aMem}, {DNNL_ARG_WEIGHTS, bMem}, {DNNL_ARG_DST, cMem}});
    strm.wait();
  });
}

} // namespace

int main(int argc, char **argv) {
  int reps = 5, threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--reps"))
      reps = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--threads"))
      threads = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: %s [--reps N] [--threads T]\n", argv[0]);
      return 2;
    }
  }
  cpu::setNumThreads(threads);
  const Case cases[] = {
      {"attn c_attn  fwd  x W", 1024, 2304, 768, false, false},
      {"attn c_attn  bwd  dY W^T", 1024, 768, 2304, false, true},
      {"attn c_attn  bwd  X^T dY", 768, 2304, 1024, true, false},
      {"mlp c_proj   fwd  x W", 1024, 768, 3072, false, false},
      {"mlp c_proj   bwd  dY W^T", 1024, 3072, 768, false, true},
      {"mlp c_proj   bwd  X^T dY", 3072, 768, 1024, true, false},
      {"lm_head      fwd  x W", 1024, 50257, 768, false, false},
  };
  std::printf("single-precision matmul, %d thread(s), best of %d\n", threads,
              reps);
  std::printf("%-26s %6s %6s %6s  %12s  %14s  %6s\n", "case", "M", "N", "K",
              "strata GF/s", "dnnl prim GF/s", "ratio");
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (const Case &c : cases) {
    std::vector<float> a(c.m * c.k), b(c.k * c.n), out(c.m * c.n);
    for (float &v : a)
      v = dist(gen);
    for (float &v : b)
      v = dist(gen);
    cpu::MatmulShape s;
    s.m = c.m;
    s.n = c.n;
    s.k = c.k;
    s.transA = c.transA;
    s.transB = c.transB;
    double flops = 2.0 * c.m * c.n * c.k;
    double ours = bestSeconds(reps, [&] {
      cpu::matmul(a.data(), b.data(), out.data(), s, 1.0f, 0.0f);
    });
    double peer = primitiveSeconds(c, a.data(), b.data(), out.data(), reps);
    std::printf("%-26s %6lld %6lld %6lld  %12.1f  %14.1f  %6.2f\n", c.what,
                (long long)c.m, (long long)c.n, (long long)c.k,
                flops / ours * 1e-9, flops / peer * 1e-9, peer / ours);
  }
  return 0;
}
