//===- CudaKernels.h - Launchers of the CUDA kernels ----------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Host functions that launch one opcode's kernel(s) on `stream`, over device
// pointers, with the same arguments as the CPU kernels of
// runtime/cpu/Kernels.h (whose comments define the semantics). The
// per-element math is runtime/kernels/'s, shared with the CPU backend.
// Nothing here synchronises the host. `scratch` is device memory of at
// least scratchBytes(...) for the kernels that reduce to a scalar.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_CUDAKERNELS_H
#define STRATA_RUNTIME_CUDA_CUDAKERNELS_H

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::rt::cuda {

using Stream = cudaStream_t;

/// Blocks of the two-stage reductions (grad_sumsq); the scratch of one
/// grad_sumsq holds kReduceBlocks doubles per operand.
constexpr int kReduceBlocks = 256;

void fill(float *out, int64_t n, float value, Stream s);
void accumulate(const float *x, float *y, int64_t n, Stream s);
void add(const float *a, const float *b, float *out, int64_t n, Stream s);
void mul(const float *a, const float *b, float *out, int64_t n, Stream s);
void scale(const float *x, float *out, int64_t n, float alpha, Stream s);
void transpose(const float *x, float *out, int rank, const int64_t *dims,
               const int64_t *perm, Stream s);
void sliceInsertAccumulate(const float *x, float *out, int64_t outer,
                           int64_t big, int64_t small, int64_t start,
                           int64_t inner, Stream s);

void embeddingFwd(const int32_t *ids, int64_t count, const float *table,
                  int64_t rows, int64_t hidden, int64_t rowStart, float *out,
                  Stream s);
void embeddingBwd(const int32_t *ids, int64_t count, const float *dout,
                  int64_t rows, int64_t hidden, int64_t rowStart, float *dtable,
                  Stream s);
void biasAdd(const float *x, const float *bias, float *out, int64_t rows,
             int64_t n, Stream s);
void biasGrad(const float *dout, float *dbias, int64_t rows, int64_t n,
              Stream s);

void geluFwd(const float *x, float *out, int64_t n, Stream s);
void geluBwd(const float *x, const float *dy, float *dx, int64_t n, Stream s);
void reluFwd(const float *x, float *out, int64_t n, Stream s);
void reluBwd(const float *x, const float *dy, float *dx, int64_t n, Stream s);
/// strata.unary, kind a kernels::UnaryKind code (runtime/kernels/UnaryMath.h).
void unaryFwd(int64_t kind, const float *x, float *out, int64_t n, Stream s);
void unaryBwd(int64_t kind, const float *x, const float *dy, float *dx,
              int64_t n, Stream s);
/// strata.binary, kind a kernels::BinaryKind code (BinaryMath.h): x, out
/// of n elements [n / (outer * mid * inner), outer, mid, inner], y [outer,
/// inner].
void binaryFwd(int64_t kind, const float *x, const float *y, float *out,
               int64_t n, int64_t outer, int64_t mid, int64_t inner, Stream s);
void siluFwd(const float *x, float *out, int64_t n, Stream s);
void siluBwd(const float *x, const float *dy, float *dx, int64_t n, Stream s);
void siluMulFwd(const float *gate, const float *up, float *out, int64_t n,
                Stream s);
void siluMulBwd(const float *gate, const float *up, const float *dy,
                float *dgate, float *dup, int64_t n, Stream s);

void layerNormFwd(const float *x, const float *gamma, const float *beta,
                  float *out, float *mean, float *rstd, int64_t rows, int64_t n,
                  float eps, Stream s);
void layerNormBwd(const float *dy, const float *x, const float *gamma,
                  const float *mean, const float *rstd, float *dx,
                  float *dgamma, float *dbeta, int64_t rows, int64_t n,
                  Stream s);
void rmsNormFwd(const float *x, const float *weight, float *out, float *rstd,
                int64_t rows, int64_t n, float eps, Stream s);
void rmsNormBwd(const float *dy, const float *x, const float *weight,
                const float *rstd, float *dx, float *dweight, int64_t rows,
                int64_t n, Stream s);

void softmaxFwd(const float *x, float *out, int64_t rows, int64_t n,
                bool causal, float scale, Stream s);
void softmaxBwd(const float *y, const float *dy, float *dx, int64_t rows,
                int64_t n, float scale, Stream s);
/// Writes lse per row and the mean loss to `loss` (one float); `scratch`
/// holds `rows` doubles.
void crossEntropyFwd(const float *logits, const int32_t *targets, int64_t rows,
                     int64_t vocab, float *lse, float *loss, double *scratch,
                     Stream s);
void crossEntropyBwd(const float *logits, const int32_t *targets,
                     const float *lse, float *dlogits, int64_t rows,
                     int64_t vocab, float scale, Stream s);
void ceVpMax(const float *logits, float *rowmax, int64_t rows, int64_t n,
             int64_t valid, Stream s);
void ceVpSumExp(const float *logits, const int32_t *targets,
                const float *rowmax, float *stats, int64_t rows, int64_t n,
                int64_t vocabStart, int64_t valid, Stream s);
/// Writes lse and the mean loss to `loss`; `scratch` holds `rows` doubles.
void ceVpLoss(const float *rowmax, const float *stats, float *lse, float *loss,
              int64_t rows, double *scratch, Stream s);
void ceVpBwd(const float *logits, const int32_t *targets, const float *lse,
             float *dlogits, int64_t rows, int64_t n, int64_t vocabStart,
             int64_t valid, float scale, Stream s);

void rotary(const float *x, float *out, int64_t outer, int64_t seq, int64_t dim,
            double theta, bool inverse, Stream s);
void rotaryAtPosition(const float *x, float *out, int64_t rows, int64_t dim,
                      int64_t pos, double theta, Stream s);
void repeatInterleave(const float *x, float *out, int64_t outer, int64_t n,
                      int64_t repeats, int64_t inner, Stream s);
void repeatInterleaveBwd(const float *dy, float *dx, int64_t outer, int64_t n,
                         int64_t repeats, int64_t inner, Stream s);
void kvAttention(const float *q, const float *k, const float *v, float *kCache,
                 float *vCache, float *out, int64_t batch, int64_t heads,
                 int64_t kvHeads, int64_t maxLen, int64_t headDim, int64_t pos,
                 float scale, Stream s);

/// Fused causal attention (CudaAttention.cu): the semantics and layouts of
/// runtime/cpu/AttentionKernels.h; the backward overwrites dq, dk, dv.
void causalAttentionFwd(const float *q, const float *k, const float *v,
                        float *out, float *lse, int64_t batch, int64_t heads,
                        int64_t kvHeads, int64_t seq, int64_t headDim,
                        float scale, Stream s);
void causalAttentionBwd(const float *dout, const float *q, const float *k,
                        const float *v, const float *out, const float *lse,
                        float *dq, float *dk, float *dv, int64_t batch,
                        int64_t heads, int64_t kvHeads, int64_t seq,
                        int64_t headDim, float scale, Stream s);

/// Adds the sum of squares of x (in double, fixed reduction order) into
/// partials[0 .. kReduceBlocks).
void sumSquaresPartials(const float *x, int64_t n, double *partials, Stream s);
/// out = the sum of `count` partials, in order.
void sumPartials(const double *partials, int64_t count, double *out, Stream s);
/// x *= clip coefficient of the sum of squares `sumSq` (device scalar) when
/// it is < 1 (torch.nn.utils.clip_grad_norm_).
void clipGrads(float *x, int64_t n, const double *sumSq, double maxNorm,
               Stream s);
void sgdStep(float *param, const float *grad, float *buf, int64_t n, double lr,
             double momentum, double weightDecay, Stream s);
void adamwStep(float *param, const float *grad, float *expAvg, float *expAvgSq,
               int64_t n, double lr, double beta1, double beta2, double eps,
               double weightDecay, int64_t step, Stream s);

} // namespace strata::rt::cuda

#endif // STRATA_RUNTIME_CUDA_CUDAKERNELS_H
