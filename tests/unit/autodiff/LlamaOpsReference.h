//===- LlamaOpsReference.h - float64 semantics of the Llama ops -*- C++ -*-===//
//
// The reference interpreter's transcription of the Llama family's ops
// (StrataOps.td): RMSNorm, rotary embeddings, SiLU / SwiGLU and
// repeat_interleave, forward and gradient, in double precision and written
// independently of the runtime's kernels (no shared math header).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TESTS_UNIT_AUTODIFF_LLAMAOPSREFERENCE_H
#define STRATA_TESTS_UNIT_AUTODIFF_LLAMAOPSREFERENCE_H

#include "tests/unit/autodiff/Interpreter.h"

namespace strata::reference {

/// y = x / sqrt(mean(x^2) + eps) * w over the last dimension.
Tensor rmsNorm(const Tensor &x, const Tensor &w, double eps);
/// Gradients of rmsNorm with respect to x and w, from the result gradient.
void rmsNormGrad(const Tensor &dy, const Tensor &x, const Tensor &w, double eps,
                 Tensor &dx, Tensor &dw);

/// x [..., S, D]: pairs (i, i + D/2) at position p rotated by
/// `sign` * p * theta^(-2i/D) (sign -1: the gradient).
Tensor rotary(const Tensor &x, double theta, double sign);

double silu(double x);
double siluDerivative(double x);

/// out[..., i, ...] = x[..., i / repeats, ...] along `axis`, and the sum of
/// each group of `repeats` for the gradient.
Tensor repeatInterleave(const Tensor &x, int64_t axis, int64_t repeats);
Tensor repeatInterleaveGrad(const Tensor &dy, int64_t axis, int64_t repeats);

} // namespace strata::reference

#endif // STRATA_TESTS_UNIT_AUTODIFF_LLAMAOPSREFERENCE_H
