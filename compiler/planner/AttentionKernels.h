//===- AttentionKernels.h - Measured attention kernel rates ---*- C++ -*-===//
//
// Whole-kernel rates (forward + backward, softmax included) that a fused
// attention kernel was measured at, as a function of sequence length, on a
// GPU generation. A device names its kernel (DeviceSpec::attentionKernel);
// the cost model interpolates the curve (docs/cost-model.md, "Fused
// attention").
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_ATTENTIONKERNELS_H
#define STRATA_COMPILER_PLANNER_ATTENTIONKERNELS_H

#include <string>
#include <vector>

namespace strata::planner {

/// The kernels with measurements: "flash-attn-2" (Dao's FlashAttention-2
/// CUDA kernels) and "flash-attn-triton" (the Triton FlashAttention that
/// llm-foundry's `attn_impl: triton` runs).
const std::vector<std::string> &attentionKernelNames();

/// Measured fraction of the dense 16-bit peak the kernel sustains forward
/// and backward together on the GPU `deviceName` names ("A100..."), for a
/// causal mask with head dimension `headDim` (the nearer of 64 and 128) at
/// sequence `seq` (log-linear between measured lengths, clamped at the
/// ends). 0 when there is no measurement: another kernel, device or mask.
double measuredAttentionEfficiency(const std::string &kernel,
                                   const std::string &deviceName,
                                   double headDim, bool causal, double seq);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_ATTENTIONKERNELS_H
