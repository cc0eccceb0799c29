//===- CudaMatmul.h - Batched matmul on cuBLASLt --------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// One plan per matmul instruction, built when the program is bound: the
// cuBLASLt descriptors and the heuristic's algorithm, so a step only calls
// cublasLtMatmul. Strata's tensors are row-major and cuBLASLt is
// column-major, so C = op(A) op(B) runs as Cᵀ = op(B)ᵀ op(A)ᵀ with the
// operands swapped. Inputs may be fp32 or bf16; accumulation is fp32
// (CUBLAS_COMPUTE_32F, no TF32: the fp32 target matches the CPU to 1e-4).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_CUDAMATMUL_H
#define STRATA_RUNTIME_CUDA_CUDAMATMUL_H

#include "runtime/cuda/CudaLibraries.h"

#include <cstdint>

namespace strata::rt::cuda {

/// The matmul opcode's attributes (runtime/cpu/Kernels.h's MatmulShape).
struct GemmShape {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool transA = false, transB = false, broadcastB = false;
  /// Row strides of the stored (row-major) operands when they are padded
  /// (0: dense, the natural width). Batch 1 only.
  int64_t lda = 0, ldb = 0, ldc = 0;
};

/// The element types of one matmul: inputs A and B, output C.
struct GemmTypes {
  cudaDataType_t a = CUDA_R_32F, b = CUDA_R_32F, c = CUDA_R_32F;
};

/// What cuBLASLt does to the product before it stores D (the device fuses
/// the instructions that follow a matmul into it): add a bias per output
/// column (Strata's row-major last dimension), then optionally GELU (the
/// tanh form, kernels::geluForward's) storing the pre-activation in `aux`;
/// or multiply by GELU's derivative at `aux` (the backward of a GELU).
struct GemmEpilogue {
  enum Kind { None, Bias, BiasGeluAux, DGelu } kind = None;
  const void *bias = nullptr;
  void *aux = nullptr;
};

/// The cuBLASLt handle and workspace of one device.
struct CublasLtContext {
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
};

class MatmulPlan {
public:
  /// `a`, `b`, `c` are the operands the plan will run on (bound once): the
  /// algorithm is chosen for their actual alignment, since buffers that
  /// alias part of another (q, k, v of one qkv) may sit off the 256-byte
  /// boundary cuBLASLt assumes by default.
  MatmulPlan(const CublasLtContext &ctx, const GemmShape &shape, const void *a,
             const void *b, const void *c, GemmTypes types = {},
             const GemmEpilogue &epilogue = {});
  ~MatmulPlan();
  MatmulPlan(const MatmulPlan &) = delete;
  MatmulPlan &operator=(const MatmulPlan &) = delete;

  /// C = alpha op(A) op(B) + beta C on `stream` (beta 0 ignores C).
  void run(const void *a, const void *b, void *c, float alpha, float beta,
           cudaStream_t stream) const;

private:
  const CublasLtContext &ctx_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t layoutFirst_ = nullptr;  ///< Strata's B.
  cublasLtMatrixLayout_t layoutSecond_ = nullptr; ///< Strata's A.
  cublasLtMatrixLayout_t layoutC_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

} // namespace strata::rt::cuda

#endif // STRATA_RUNTIME_CUDA_CUDAMATMUL_H
