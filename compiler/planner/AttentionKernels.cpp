//===- AttentionKernels.cpp - Measured fused-attention kernel rates -------===//
//
// Source: the FlashAttention-2 release's benchmark figures
// (github.com/Dao-AILab/flash-attention,
// assets/flash2_a100_fwd_bwd_benchmark.png and
// flash2_h100_fwd_bwd_benchmark.png, commit 4f285b35, 2023-07-17; the same
// plots as Dao, arXiv:2307.08691, Fig. 4): "Attention forward + backward
// speed", batch x sequence = 16k tokens, hidden 2048, panels (c) and (d), with
// causal mask, head dimension 64 and 128, in TFLOP/s counted as the kernels'
// own FLOPs (the masked half skipped, backward 2.5 x forward, the cost model's
// count). A100 80GB SXM4 (312 TFLOP/s dense bf16/fp16) and H100 80GB SXM5
// (989).
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/AttentionKernels.h"

#include <algorithm>
#include <cmath>

namespace strata::planner {
namespace {
struct Curve {
  const char *kernel, *gpu;
  int headDim;
  double peakTflops;
  /// TFLOP/s at sequence 512, 1k, 2k, 4k, 8k, 16k.
  double tflops[6];
};
constexpr double kSeqs[6] = {512, 1024, 2048, 4096, 8192, 16384};
constexpr Curve kCurves[] = {
    {"flash-attn-2", "A100", 64, 312, {88, 119, 140, 156, 165, 171}},
    {"flash-attn-2", "A100", 128, 312, {99, 133, 155, 173, 182, 189}},
    {"flash-attn-triton", "A100", 64, 312, {59, 75, 79, 76, 79, 80}},
    {"flash-attn-triton", "A100", 128, 312, {50, 61, 68, 74, 78, 80}},
    {"flash-attn-2", "H100", 64, 989, {141, 192, 232, 257, 273, 284}},
    {"flash-attn-2", "H100", 128, 989, {163, 221, 265, 294, 308, 328}},
};
} // namespace

const std::vector<std::string> &attentionKernelNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Curve &c : kCurves)
      if (std::find(out.begin(), out.end(), c.kernel) == out.end())
        out.push_back(c.kernel);
    return out;
  }();
  return names;
}

double measuredAttentionEfficiency(const std::string &kernel,
                                   const std::string &deviceName,
                                   double headDim, bool causal, double seq) {
  if (!causal || kernel.empty() || seq <= 0)
    return 0;
  int dim = headDim <= 96 ? 64 : 128;
  const Curve *curve = nullptr;
  for (const Curve &c : kCurves)
    if (kernel == c.kernel && c.headDim == dim &&
        deviceName.find(c.gpu) != std::string::npos)
      curve = &c;
  if (!curve)
    return 0;
  double tflops;
  if (seq <= kSeqs[0]) {
    tflops = curve->tflops[0];
  } else if (seq >= kSeqs[5]) {
    tflops = curve->tflops[5];
  } else {
    int i = 0;
    while (seq > kSeqs[i + 1])
      ++i;
    double t = std::log2(seq / kSeqs[i]); // kSeqs double each step
    tflops = curve->tflops[i] + t * (curve->tflops[i + 1] - curve->tflops[i]);
  }
  return tflops / curve->peakTflops;
}

} // namespace strata::planner
