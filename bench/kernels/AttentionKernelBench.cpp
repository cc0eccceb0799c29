//===- AttentionKernelBench.cpp - Fused vs unfused attention kernels ------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Times the runtime's kernels for one causal attention, forward and
// backward, single thread: the fused FlashAttention-2 kernels
// (causal_attention_fwd/bwd) beside the unfused sequence the `attention:
// unfused` graph lowers to (matmul q k^T, causal softmax, matmul p v; and
// their gradients: two matmuls for dP and dV, softmax_bwd, two matmuls for
// dQ and dK), on the same q, k, v. Reports the time, GFLOP/s of the
// full-square attention FLOPs (4 S^2 D per head forward, 8 S^2 D backward:
// the same count for both, so the rates compare times) and the bytes of
// [S, S] buffers each needs. Best of several repetitions.
//
//   strata-bench-attention [--reps N] [--heads H] [--dim D]
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/AttentionKernels.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Threads.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using namespace strata::rt;

namespace {

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

struct Timing {
  double fwd, bwd;
};

Timing fused(const cpu::AttentionShape &s, float scale, int reps,
             const std::vector<float> &q, const std::vector<float> &k,
             const std::vector<float> &v, const std::vector<float> &dout) {
  std::vector<float> out(q.size()), lse(s.batch * s.heads * s.seq),
      dq(q.size()), dk(k.size()), dv(v.size());
  Timing t;
  t.fwd = bestSeconds(reps, [&] {
    cpu::causalAttentionFwd(q.data(), k.data(), v.data(), out.data(),
                            lse.data(), s, scale);
  });
  t.bwd = bestSeconds(reps, [&] {
    cpu::causalAttentionBwd(dout.data(), q.data(), k.data(), v.data(),
                            out.data(), lse.data(), dq.data(), dk.data(),
                            dv.data(), s, scale);
  });
  return t;
}

Timing unfused(const cpu::AttentionShape &s, float scale, int reps,
               const std::vector<float> &q, const std::vector<float> &k,
               const std::vector<float> &v, const std::vector<float> &dout) {
  const int64_t S = s.seq, D = s.headDim, B = s.batch * s.heads;
  std::vector<float> scores(B * S * S), probs(B * S * S), dprobs(B * S * S),
      out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  auto shape = [&](int64_t m, int64_t n, int64_t kk, bool ta, bool tb) {
    cpu::MatmulShape ms;
    ms.batch = B, ms.m = m, ms.n = n, ms.k = kk, ms.transA = ta, ms.transB = tb;
    return ms;
  };
  Timing t;
  t.fwd = bestSeconds(reps, [&] {
    cpu::matmul(q.data(), k.data(), scores.data(), shape(S, S, D, false, true),
                1.0f, 0.0f);
    cpu::softmaxFwd(scores.data(), probs.data(), B * S, S, true, scale);
    cpu::matmul(probs.data(), v.data(), out.data(),
                shape(S, D, S, false, false), 1.0f, 0.0f);
  });
  t.bwd = bestSeconds(reps, [&] {
    cpu::matmul(dout.data(), v.data(), dprobs.data(),
                shape(S, S, D, false, true), 1.0f, 0.0f);
    cpu::matmul(probs.data(), dout.data(), dv.data(),
                shape(S, D, S, true, false), 1.0f, 0.0f);
    cpu::softmaxBwd(probs.data(), dprobs.data(), scores.data(), B * S, S,
                    scale);
    cpu::matmul(scores.data(), k.data(), dq.data(),
                shape(S, D, S, false, false), 1.0f, 0.0f);
    cpu::matmul(scores.data(), q.data(), dk.data(), shape(S, D, S, true, false),
                1.0f, 0.0f);
  });
  return t;
}

} // namespace

int main(int argc, char **argv) {
  int reps = 3, heads = 4, dim = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--reps"))
      reps = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--heads"))
      heads = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--dim"))
      dim = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: %s [--reps N] [--heads H] [--dim D]\n",
                   argv[0]);
      return 2;
    }
  }
  cpu::setNumThreads(1);
  std::printf("causal attention, batch 1, %d heads, head dim %d, 1 thread, "
              "best of %d; tiles %lld x %lld\n",
              heads, dim, reps, (long long)cpu::kRowTile,
              (long long)cpu::kKeyTile);
  std::printf("%6s  %-8s  %9s  %9s  %9s  %9s  %12s\n", "seq", "kernels",
              "fwd s", "fwd GF/s", "bwd s", "bwd GF/s", "[S,S] MiB");
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (int64_t seq : {1024, 4096}) {
    cpu::AttentionShape s{1, heads, heads, seq, dim};
    size_t n = size_t(heads) * seq * dim;
    std::vector<float> q(n), k(n), v(n), dout(n);
    for (std::vector<float> *x : {&q, &k, &v, &dout})
      for (float &e : *x)
        e = dist(gen);
    float scale = 1.0f / std::sqrt(float(dim));
    double square = double(heads) * seq * seq * dim;
    double scoreMiB = 3.0 * heads * seq * seq * 4 / 1048576.0;
    for (bool isFused : {true, false}) {
      Timing t = isFused ? fused(s, scale, reps, q, k, v, dout)
                         : unfused(s, scale, reps, q, k, v, dout);
      std::printf("%6lld  %-8s  %9.4f  %9.1f  %9.4f  %9.1f  %12.1f\n",
                  (long long)seq, isFused ? "fused" : "unfused", t.fwd,
                  4 * square / t.fwd * 1e-9, t.bwd, 8 * square / t.bwd * 1e-9,
                  isFused ? 0.0 : scoreMiB);
    }
  }
  return 0;
}
