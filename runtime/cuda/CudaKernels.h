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
// Nothing here synchronises the host.
//
// Kernels that have a bfloat16 form (the opcodes and operand dtypes
// rt::hasBf16Form lists, the same as the CPU's) take `const void *` operands
// and an Elem saying how they are stored; bf16 values are read into float32,
// computed on and rounded to nearest-even when stored, as on the CPU.
// Float32-only kernels take float pointers; CudaDevice stages their bf16
// operands. `scratch` arguments are device memory the device sizes with the
// *ScratchBytes functions.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_CUDAKERNELS_H
#define STRATA_RUNTIME_CUDA_CUDAKERNELS_H

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace strata::kernels {
struct AdamWCoefficients;
struct SgdCoefficients;
} // namespace strata::kernels

namespace strata::rt::cuda {

using Stream = cudaStream_t;

/// How a kernel's operand is stored.
enum class Elem : uint8_t { F32, BF16 };

/// Blocks of the two-stage reductions (grad_sumsq); the scratch of one
/// grad_sumsq holds kReduceBlocks doubles per operand.
constexpr int kReduceBlocks = 256;

/// Throws RuntimeError "what: <CUDA error string>" unless `status` is
/// cudaSuccess (CudaLibraries.cpp).
void check(cudaError_t status, const char *what);

//===--- Elementwise and data movement -----------------------------------===//

void fill(void *out, Elem t, int64_t n, float value, Stream s);
/// y += x.
void accumulate(const void *x, Elem tx, void *y, Elem ty, int64_t n, Stream s);
void add(const void *a, const void *b, void *out, Elem t, int64_t n, Stream s);
void mul(const void *a, const void *b, void *out, Elem t, int64_t n, Stream s);
void scale(const void *x, void *out, Elem t, int64_t n, float alpha, Stream s);
/// out = x converted (float32 <-> bf16, round to nearest-even).
void convert(const void *x, Elem from, void *out, Elem to, int64_t n, Stream s);
void transpose(const void *x, void *out, Elem t, int rank, const int64_t *dims,
               const int64_t *perm, Stream s);
void sliceInsertAccumulate(const void *x, void *out, Elem t, int64_t outer,
                           int64_t big, int64_t small, int64_t start,
                           int64_t inner, Stream s);

void embeddingFwd(const int32_t *ids, int64_t count, const float *table,
                  int64_t rows, int64_t hidden, int64_t rowStart, float *out,
                  Stream s);
/// Scratch of embeddingBwd for `count` ids (a stable sort of the ids).
size_t embeddingBwdScratchBytes(int64_t count);
/// dtable rows += the dout rows of their ids, each row's sum in token order
/// (deterministic): the ids are sorted stably, then one warp per distinct id.
void embeddingBwd(const int32_t *ids, int64_t count, const float *dout,
                  int64_t rows, int64_t hidden, int64_t rowStart, float *dtable,
                  void *scratch, size_t scratchBytes, Stream s);
void biasAdd(const void *x, const void *bias, void *out, Elem t, int64_t rows,
             int64_t n, Stream s);

/// Scratch of the column reductions (bias, norm weight gradients) over a
/// [rows, n] gradient: float32 partial sums of row chunks.
size_t columnScratchBytes(int64_t rows, int64_t n);
/// dbias += column sums of dout, in two deterministic stages (row chunks
/// over every multiprocessor, then the chunks in order).
void biasGrad(const void *dout, Elem tdout, void *dbias, Elem tbias,
              int64_t rows, int64_t n, float *scratch, Stream s);

void geluFwd(const void *x, void *out, Elem t, int64_t n, Stream s);
void geluBwd(const void *x, const void *dy, void *dx, Elem t, int64_t n,
             Stream s);
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
void siluFwd(const void *x, void *out, Elem t, int64_t n, Stream s);
void siluBwd(const void *x, const void *dy, void *dx, Elem t, int64_t n,
             Stream s);
void siluMulFwd(const void *gate, const void *up, void *out, Elem t, int64_t n,
                Stream s);
void siluMulBwd(const void *gate, const void *up, const void *dy, void *dgate,
                void *dup, Elem t, int64_t n, Stream s);

//===--- Normalisation ---------------------------------------------------===//

/// x, gamma, beta, out stored as `t`; mean, rstd float32 per row. With
/// `residual` (then `sum` too), x is first replaced by x + residual, which
/// is stored in `sum` (the residual add fused into the norm).
void layerNormFwd(const void *x, const void *gamma, const void *beta,
                  void *out, Elem t, float *mean, float *rstd, int64_t rows,
                  int64_t n, float eps, Stream s,
                  const void *residual = nullptr, void *sum = nullptr);
/// dy, x, gamma, dx stored as `t`; dgamma, dbeta (accumulated) as `tg`.
void layerNormBwd(const void *dy, const void *x, const void *gamma,
                  const float *mean, const float *rstd, void *dx, Elem t,
                  void *dgamma, void *dbeta, Elem tg, int64_t rows, int64_t n,
                  float *scratch, Stream s);
void rmsNormFwd(const void *x, const void *weight, void *out, Elem t,
                float *rstd, int64_t rows, int64_t n, float eps, Stream s);
void rmsNormBwd(const void *dy, const void *x, const void *weight,
                const float *rstd, void *dx, Elem t, void *dweight, Elem tw,
                int64_t rows, int64_t n, float *scratch, Stream s);

//===--- Softmax and cross-entropy ---------------------------------------===//

void softmaxFwd(const void *x, void *out, Elem t, int64_t rows, int64_t n,
                bool causal, float scale, Stream s);
void softmaxBwd(const void *y, const void *dy, void *dx, Elem t, int64_t rows,
                int64_t n, float scale, Stream s);
/// Writes lse per row and the mean loss to `loss` (one float); `scratch`
/// holds `rows` doubles.
void crossEntropyFwd(const float *logits, const int32_t *targets, int64_t rows,
                     int64_t vocab, float *lse, float *loss, double *scratch,
                     Stream s);
/// crossEntropyFwd and crossEntropyBwd in one pass over the logits, the
/// gradient stored as bf16 (`dlogits`): for a backward whose float32
/// gradient is only ever narrowed (the logits' bf16 cast).
/// Rows of logits and dlogits are `ldLogits` / `ldGrad` elements apart
/// (padded rows for aligned matmuls); `zeroPadding` writes zeros into the
/// gradient's columns past `vocab`.
void crossEntropyFwdBwd(const float *logits, int64_t ldLogits,
                        const int32_t *targets, int64_t rows, int64_t vocab,
                        float *lse, float *loss, double *scratch,
                        uint16_t *dlogits, int64_t ldGrad, float scale,
                        bool zeroPadding, Stream s);
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

//===--- Llama family and generation -------------------------------------===//

void rotary(const void *x, void *out, Elem t, int64_t outer, int64_t seq,
            int64_t dim, double theta, bool inverse, Stream s);
void rotaryAtPosition(const float *x, float *out, int64_t rows, int64_t dim,
                      int64_t pos, double theta, Stream s);
void repeatInterleave(const void *x, void *out, Elem t, int64_t outer,
                      int64_t n, int64_t repeats, int64_t inner, Stream s);
void repeatInterleaveBwd(const void *dy, void *dx, Elem t, int64_t outer,
                         int64_t n, int64_t repeats, int64_t inner, Stream s);
void kvAttention(const float *q, const float *k, const float *v, float *kCache,
                 float *vCache, float *out, int64_t batch, int64_t heads,
                 int64_t kvHeads, int64_t maxLen, int64_t headDim, int64_t pos,
                 float scale, Stream s);

//===--- Fused causal attention ------------------------------------------===//

/// float32 (CudaAttention.cu): the semantics and layouts of
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

/// bf16 on tensor cores (CudaFlashAttention.cu): whether a head dimension
/// and these operand addresses have a kernel (else the device stages the
/// float32 kernel).
bool flashAttentionSupports(int64_t headDim, const void *const *operands,
                            int count);
/// Scratch of flashAttentionBwd: one float per query row.
size_t flashAttentionScratchBytes(int64_t batch, int64_t heads, int64_t seq);
void flashAttentionFwd(const uint16_t *q, const uint16_t *k, const uint16_t *v,
                       uint16_t *out, float *lse, int64_t batch, int64_t heads,
                       int64_t kvHeads, int64_t seq, int64_t headDim,
                       float scale, Stream s);
void flashAttentionBwd(const uint16_t *dout, const uint16_t *q,
                       const uint16_t *k, const uint16_t *v,
                       const uint16_t *out, const float *lse, uint16_t *dq,
                       uint16_t *dk, uint16_t *dv, float *scratch,
                       int64_t batch, int64_t heads, int64_t kvHeads,
                       int64_t seq, int64_t headDim, float scale, Stream s);

/// Copies `bytes` from host memory to device memory with kernels whose
/// arguments carry the bytes (2 KiB a launch): ordered on the stream like any
/// kernel, never waiting for the host, and outside any captured graph.
void writeSmall(void *dst, const void *src, size_t bytes, Stream s);

//===--- Optimizer -------------------------------------------------------===//

/// Adds the sum of squares of x (in double, fixed reduction order) into
/// partials[0 .. kReduceBlocks).
void sumSquaresPartials(const float *x, int64_t n, double *partials, Stream s);
/// out = the sum of `count` partials, in order.
void sumPartials(const double *partials, int64_t count, double *out, Stream s);
/// x *= clip coefficient of the sum of squares `sumSq` (device scalar) when
/// it is < 1 (torch.nn.utils.clip_grad_norm_).
void clipGrads(float *x, int64_t n, const double *sumSq, double maxNorm,
               Stream s);

/// One tensor of a multi-tensor optimizer launch: the pointers of one
/// sgd_step / adamw_step / clip instruction and the index of its
/// coefficients in the per-step coefficient table.
struct TensorSlot {
  float *param = nullptr, *grad = nullptr, *state0 = nullptr,
        *state1 = nullptr;
  int64_t n = 0;
  int32_t coefficients = 0;
};
/// A chunk of a multi-tensor launch: elements [start, start + kChunk) of
/// tensor `slot`.
struct TensorChunk {
  int32_t slot = 0;
  int64_t start = 0;
};
constexpr int64_t kOptimizerChunk = 16384;

/// AdamW (or SGD) over every slot, one block per chunk; the coefficients
/// live in device memory (written before each step: the launch is the
/// same every step, so it can be replayed from a CUDA graph).
void adamwMulti(const TensorSlot *slots, const TensorChunk *chunks,
                int64_t numChunks, const kernels::AdamWCoefficients *coeffs,
                Stream s);
void sgdMulti(const TensorSlot *slots, const TensorChunk *chunks,
              int64_t numChunks, const kernels::SgdCoefficients *coeffs,
              Stream s);
/// grad = value over every slot (a run of float32 fills: zeroing the
/// gradients at the start of a step).
void fillMulti(const TensorSlot *slots, const TensorChunk *chunks,
               int64_t numChunks, float value, Stream s);
/// grad *= clip coefficient over every slot (param unused).
void clipMulti(const TensorSlot *slots, const TensorChunk *chunks,
               int64_t numChunks, const double *sumSq, double maxNorm,
               Stream s);
/// partials[chunk] = sum of squares of the chunk's grad elements (double),
/// then out = their sum in chunk order: grad_sumsq in two launches.
void sumSquaresMulti(const TensorSlot *slots, const TensorChunk *chunks,
                     int64_t numChunks, double *partials, double *out,
                     Stream s);

} // namespace strata::rt::cuda

#endif // STRATA_RUNTIME_CUDA_CUDAKERNELS_H
