//===- Kernels.h - fp32 CPU kernels of the Strata instruction set ---------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Plain functions over raw pointers and explicit sizes, so the unit tests can
// call them directly against reference implementations. Sizes were checked by
// the program verifier; kernels do not re-check them. Every kernel works on
// independent rows or elements, so a later multi-threaded version splits the
// outer loop.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CPU_KERNELS_H
#define STRATA_RUNTIME_CPU_KERNELS_H

#include "runtime/format/Program.h"
#include "runtime/kernels/Bf16Math.h"

#include <cstdint>

namespace strata::rt::cpu {

// Elementwise. `out` may be the same array as an input.
void fill(float *out, int64_t n, float value);
void copy(const float *x, float *out, int64_t n);
void accumulate(const float *x, float *y, int64_t n); ///< y += x
void add(const float *a, const float *b, float *out, int64_t n);
void mul(const float *a, const float *b, float *out, int64_t n);
void scale(const float *x, float *out, int64_t n, float alpha);

// bfloat16 forms of the kernels that have one (bf16_t: bfloat16 bits):
// float32 math on each element as it is loaded, rounded once as it is
// stored (runtime/cpu/Element.h): bit for bit the float32 kernel on widened
// copies, its outputs narrowed. Statistics (mean, rstd) stay float32;
// column sums (dbias, dgamma, dbeta) go to float32 or bf16.
using kernels::bf16_t;
void add(const bf16_t *a, const bf16_t *b, bf16_t *out, int64_t n);
void mul(const bf16_t *a, const bf16_t *b, bf16_t *out, int64_t n);
void scale(const bf16_t *x, bf16_t *out, int64_t n, float alpha);
void biasAdd(const bf16_t *x, const bf16_t *bias, bf16_t *out, int64_t rows,
             int64_t n);
void biasGrad(const bf16_t *dout, float *dbias, int64_t rows, int64_t n);
void biasGrad(const bf16_t *dout, bf16_t *dbias, int64_t rows, int64_t n);
void geluFwd(const bf16_t *x, bf16_t *out, int64_t n);
void geluBwd(const bf16_t *x, const bf16_t *dy, bf16_t *dx, int64_t n);
void layerNormFwd(const bf16_t *x, const bf16_t *gamma, const bf16_t *beta,
                  bf16_t *out, float *mean, float *rstd, int64_t rows,
                  int64_t n, float eps);
void layerNormBwd(const bf16_t *dy, const bf16_t *x, const bf16_t *gamma,
                  const float *mean, const float *rstd, bf16_t *dx,
                  float *dgamma, float *dbeta, int64_t rows, int64_t n);
void layerNormBwd(const bf16_t *dy, const bf16_t *x, const bf16_t *gamma,
                  const float *mean, const float *rstd, bf16_t *dx,
                  bf16_t *dgamma, bf16_t *dbeta, int64_t rows, int64_t n);
void softmaxFwd(const bf16_t *x, bf16_t *out, int64_t rows, int64_t n,
                bool causal, float scale);
void softmaxBwd(const bf16_t *y, const bf16_t *dy, bf16_t *dx, int64_t rows,
                int64_t n, float scale);
void fill(bf16_t *out, int64_t n, float value);
void copy(const bf16_t *x, bf16_t *out, int64_t n);
void accumulate(const bf16_t *x, float *y, int64_t n);
void accumulate(const bf16_t *x, bf16_t *y, int64_t n);
void transpose(const bf16_t *x, bf16_t *out, int rank, const int64_t *dims,
               const int64_t *perm);
void sliceCopy(const bf16_t *x, bf16_t *out, int64_t outer, int64_t big,
               int64_t small, int64_t start, int64_t inner);
void sliceInsert(const bf16_t *x, bf16_t *out, int64_t outer, int64_t big,
                 int64_t small, int64_t start, int64_t inner,
                 bool accumulateInto);

/// Whether the kernel of `op` reads and writes operands of these dtypes
/// itself; the device stages the bf16 operands of every other instruction
/// through float32 copies.
bool kernelTakesDtypes(Opcode op, const std::vector<DType> &dtypes);

struct MatmulShape {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool transA = false, transB = false;
  /// B has no batch dimension: every batch entry uses the same B.
  bool broadcastB = false;
};
/// C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b], row-major; op(A) is
/// [m, k] (A stored [k, m] when transA), op(B) is [k, n] (stored [n, k] when
/// transB). beta = 0 ignores the old C (it may hold NaN).
void matmul(const float *a, const float *b, float *c, const MatmulShape &s,
            float alpha, float beta);

/// out[i, :] = table[ids[i] - rowStart, :]; ids outside the table's rows
/// [rowStart, rowStart + rows) give zeros (a vocab-sharded table).
void embeddingFwd(const int32_t *ids, int64_t count, const float *table,
                  int64_t rows, int64_t hidden, int64_t rowStart, float *out);
/// dtable[ids[i] - rowStart, :] += dout[i, :], for ids inside the table.
void embeddingBwd(const int32_t *ids, int64_t count, const float *dout,
                  int64_t rows, int64_t hidden, int64_t rowStart,
                  float *dtable);

/// out[r, :] = x[r, :] + bias; dbias += column sums of dout.
void biasAdd(const float *x, const float *bias, float *out, int64_t rows,
             int64_t n);
void biasGrad(const float *dout, float *dbias, int64_t rows, int64_t n);

/// Hugging Face "gelu_new": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void geluFwd(const float *x, float *out, int64_t n);
void geluBwd(const float *x, const float *dy, float *dx, int64_t n);
void reluFwd(const float *x, float *out, int64_t n);
void reluBwd(const float *x, const float *dy, float *dx, int64_t n);

/// Over rows of length n: out = (x - mean) * rstd * gamma + beta, with the
/// biased variance and rstd = 1 / sqrt(var + eps). Saves mean and rstd.
void layerNormFwd(const float *x, const float *gamma, const float *beta,
                  float *out, float *mean, float *rstd, int64_t rows, int64_t n,
                  float eps);
/// dx is overwritten; dgamma and dbeta accumulate.
void layerNormBwd(const float *dy, const float *x, const float *gamma,
                  const float *mean, const float *rstd, float *dx,
                  float *dgamma, float *dbeta, int64_t rows, int64_t n);

/// One new position `pos` of cached causal attention: k and v ([batch,
/// kvHeads, headDim]) are written into row `pos` of the caches ([batch,
/// kvHeads, maxLen, headDim]); then for every query head h (q, out:
/// [batch, heads, headDim]) out = softmax(scale * q . K[0..pos]^T) .
/// V[0..pos] with K, V of head h / (heads / kvHeads). The softmax is
/// softmaxFwd's.
void kvAttention(const float *q, const float *k, const float *v, float *kCache,
                 float *vCache, float *out, int64_t batch, int64_t heads,
                 int64_t kvHeads, int64_t maxLen, int64_t headDim, int64_t pos,
                 float scale);

/// Rotary embedding of rows of `dim` features that all sit at position
/// `pos` (generation): pairs (i, i + dim/2) rotated by pos * theta^(-2i/dim),
/// with cos and sin rounded to float as the training kernel's table does.
void rotaryAtPosition(const float *x, float *out, int64_t rows, int64_t dim,
                      int64_t pos, double theta);

/// out = softmax(scale * x) over rows of length n. With `causal`, row r is
/// row i = r mod n of an n x n block and columns j > i are masked (out 0).
void softmaxFwd(const float *x, float *out, int64_t rows, int64_t n,
                bool causal, float scale);
/// dx = scale * y * (dy - sum(y * dy)) per row.
void softmaxBwd(const float *y, const float *dy, float *dx, int64_t rows,
                int64_t n, float scale);

/// Writes lse[r] = logsumexp(logits[r, :]) and returns the mean over rows of
/// lse[r] - logits[r, target[r]]. Targets outside [0, vocab) contribute 0.
double crossEntropyFwd(const float *logits, const int32_t *targets,
                       int64_t rows, int64_t vocab, float *lse);
/// dlogits = (softmax(logits) - onehot(target)) * scale.
void crossEntropyBwd(const float *logits, const int32_t *targets,
                     const float *lse, float *dlogits, int64_t rows,
                     int64_t vocab, float scale);

/// Vocabulary-parallel cross-entropy (Megatron-style). Each rank holds
/// logits [rows, n] for global columns [vocabStart, vocabStart + valid);
/// columns >= valid pad the vocabulary to a multiple of the group size and
/// are ignored. Per rank: ceVpMax, all-reduce(max) of rowmax, ceVpSumExp,
/// all-reduce(sum) of stats, ceVpLoss; in backward ceVpBwd.
///
/// rowmax[r] = max_{c < valid} logits[r, c]; -FLT_MAX when valid == 0, so
/// the max-reduce over ranks ignores an all-padding shard.
void ceVpMax(const float *logits, float *rowmax, int64_t rows, int64_t n,
             int64_t valid);
/// With the global rowmax: stats[r] = sum_{c < valid} exp(logits[r, c] -
/// rowmax[r]) and stats[rows + r] = the target's logit when this shard holds
/// it, else 0, so one sum-reduce over ranks combines both halves.
void ceVpSumExp(const float *logits, const int32_t *targets,
                const float *rowmax, float *stats, int64_t rows, int64_t n,
                int64_t vocabStart, int64_t valid);
/// From the reduced stats: lse[r] = rowmax[r] + log(stats[r]); returns
/// mean_r (lse[r] - stats[rows + r]), accumulated in double.
double ceVpLoss(const float *rowmax, const float *stats, float *lse,
                int64_t rows);
/// dlogits[r, c] = (exp(logits[r, c] - lse[r]) - [target[r] == vocabStart +
/// c]) * scale for c < valid, and 0 in the padding columns.
void ceVpBwd(const float *logits, const int32_t *targets, const float *lse,
             float *dlogits, int64_t rows, int64_t n, int64_t vocabStart,
             int64_t valid, float scale);

/// out = x.permute(perm) made contiguous; x has dims[0..rank).
void transpose(const float *x, float *out, int rank, const int64_t *dims,
               const int64_t *perm);
/// Views x as [outer, big, inner]: out[outer, small, inner] =
/// x[:, start:start+small, :].
void sliceCopy(const float *x, float *out, int64_t outer, int64_t big,
               int64_t small, int64_t start, int64_t inner);
/// out[:, start:start+small, :] (=|+=) x, out viewed as [outer, big, inner].
void sliceInsert(const float *x, float *out, int64_t outer, int64_t big,
                 int64_t small, int64_t start, int64_t inner, bool accumulate);

/// Sum of squares accumulated in double.
double sumSquares(const float *x, int64_t n);

/// torch.optim.SGD (dampening 0, no nesterov): g' = g + wd p;
/// buf = momentum buf + g'; p -= lr buf. A zero buf on the first step gives
/// torch's buf = g'.
void sgdStep(float *param, const float *grad, float *buf, int64_t n, double lr,
             double momentum, double weightDecay);
/// torch.optim.AdamW, step counted from 1, in torch's operation order.
void adamwStep(float *param, const float *grad, float *expAvg, float *expAvgSq,
               int64_t n, double lr, double beta1, double beta2, double eps,
               double weightDecay, int64_t step);

// Llama family (LlamaKernels.cpp; the per-element math is in
// runtime/kernels/, shared with GPU backends).

/// Over rows of length n: rstd = 1 / sqrt(mean(x^2) + eps), out = x * rstd *
/// weight. Saves rstd.
void rmsNormFwd(const float *x, const float *weight, float *out, float *rstd,
                int64_t rows, int64_t n, float eps);
/// dx is overwritten; dweight accumulates.
void rmsNormBwd(const float *dy, const float *x, const float *weight,
                const float *rstd, float *dx, float *dweight, int64_t rows,
                int64_t n);

/// x viewed as [outer, seq, dim]: feature pairs (i, i + dim/2) at position p
/// rotated by +-p * theta^(-2i/dim) (`inverse` negates the angle: the
/// backward pass). `out` may be the same array as `x`.
void rotary(const float *x, float *out, int64_t outer, int64_t seq, int64_t dim,
            double theta, bool inverse);

/// out = x * sigmoid(x); dx = dy * silu'(x).
void siluFwd(const float *x, float *out, int64_t n);
void siluBwd(const float *x, const float *dy, float *dx, int64_t n);
/// out = silu(gate) * up; dgate = dy * up * silu'(gate), dup = dy *
/// silu(gate).
void siluMulFwd(const float *gate, const float *up, float *out, int64_t n);
void siluMulBwd(const float *gate, const float *up, const float *dy,
                float *dgate, float *dup, int64_t n);

/// strata.unary (kind: a kernels::UnaryKind code): out = f(x); dx = dy *
/// f'(x). `out` may be `x`.
void unaryFwd(int64_t kind, const float *x, float *out, int64_t n);
void unaryBwd(int64_t kind, const float *x, const float *dy, float *dx,
              int64_t n);

/// strata.binary (kind: a kernels::BinaryKind code): out[l, o, m, i] =
/// x[l, o, m, i] op y[o, i] for x, out of n elements, [n / (outer * mid *
/// inner), outer, mid, inner], and y [outer, inner]. `out` may be `x`.
void binaryFwd(int64_t kind, const float *x, const float *y, float *out,
               int64_t n, int64_t outer, int64_t mid, int64_t inner);

/// x as [outer, n, inner] -> out [outer, n * repeats, inner], each of the n
/// entries repeated in place; the backward sums each group of repeats.
void repeatInterleave(const float *x, float *out, int64_t outer, int64_t n,
                      int64_t repeats, int64_t inner);
void repeatInterleaveBwd(const float *dy, float *dx, int64_t outer, int64_t n,
                         int64_t repeats, int64_t inner);
// Their bfloat16 forms (see add's): statistics float32; dweight float32 or
// bf16 (summed in float32, rounded once).
void rmsNormFwd(const bf16_t *x, const bf16_t *weight, bf16_t *out, float *rstd,
                int64_t rows, int64_t n, float eps);
void rmsNormBwd(const bf16_t *dy, const bf16_t *x, const bf16_t *weight,
                const float *rstd, bf16_t *dx, float *dweight, int64_t rows,
                int64_t n);
void rmsNormBwd(const bf16_t *dy, const bf16_t *x, const bf16_t *weight,
                const float *rstd, bf16_t *dx, bf16_t *dweight, int64_t rows,
                int64_t n);
void rotary(const bf16_t *x, bf16_t *out, int64_t outer, int64_t seq,
            int64_t dim, double theta, bool inverse);
void siluFwd(const bf16_t *x, bf16_t *out, int64_t n);
void siluBwd(const bf16_t *x, const bf16_t *dy, bf16_t *dx, int64_t n);
void siluMulFwd(const bf16_t *gate, const bf16_t *up, bf16_t *out, int64_t n);
void siluMulBwd(const bf16_t *gate, const bf16_t *up, const bf16_t *dy,
                bf16_t *dgate, bf16_t *dup, int64_t n);
void repeatInterleave(const bf16_t *x, bf16_t *out, int64_t outer, int64_t n,
                      int64_t repeats, int64_t inner);
void repeatInterleaveBwd(const bf16_t *dy, bf16_t *dx, int64_t outer, int64_t n,
                         int64_t repeats, int64_t inner);

// bfloat16 (Bf16.cpp): buffers of DType::BF16 hold uint16_t bit patterns.

/// out = float(x); exact.
void widenBf16(const uint16_t *x, float *out, int64_t n);
/// out = bf16(x), round to nearest even.
void narrowToBf16(const float *x, uint16_t *out, int64_t n);
/// Whether bf16 GEMMs run on AVX512-BF16 (else they widen to fp32). The
/// environment variable STRATA_BF16_GEMM=0 forces the fallback (tests).
bool hasBf16Gemm();
/// matmul() over operands of any mix of f32 and bf16, accumulating in f32;
/// bf16 x bf16 runs the bf16 GEMM.
void matmulMixed(const void *a, DType ta, const void *b, DType tb, void *c,
                 DType tc, const MatmulShape &s, float alpha, float beta);

} // namespace strata::rt::cpu

#endif // STRATA_RUNTIME_CPU_KERNELS_H
