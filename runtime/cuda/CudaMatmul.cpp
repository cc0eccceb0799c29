//===- CudaMatmul.cpp - Batched matmul on cuBLASLt ------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaMatmul.h"

#include "runtime/support/Error.h"

namespace strata::rt::cuda {

namespace {

void checkLt(cublasStatus_t status, const char *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt ", what, ": ", cublasLt().statusString(status));
}

/// A column-major layout of `rows` x `cols` (leading dimension `ld`), with
/// `batch` matrices `stride` elements apart.
cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols,
                              int64_t ld, int64_t batch, int64_t stride) {
  const CublasLtApi &lt = cublasLt();
  cublasLtMatrixLayout_t l = nullptr;
  checkLt(lt.layoutCreate(&l, type, uint64_t(rows), uint64_t(cols), ld),
          "matrix layout");
  if (batch > 1) {
    int32_t count = int32_t(batch);
    checkLt(lt.layoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                  sizeof(count)),
            "batch count");
    checkLt(lt.layoutSetAttribute(l,
                                  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                  &stride, sizeof(stride)),
            "batch stride");
  }
  return l;
}

/// The largest power of two (up to 256) that divides the address of every
/// matrix of the batch: the base and the batch stride in bytes.
uint32_t alignmentOf(const void *p, uint64_t strideBytes) {
  uint64_t bits = uint64_t(reinterpret_cast<uintptr_t>(p)) | strideBytes;
  uint32_t alignment = 256;
  while (alignment > 1 && bits % alignment != 0)
    alignment /= 2;
  return alignment;
}

uint64_t elementBytes(cudaDataType_t type) {
  return type == CUDA_R_16BF || type == CUDA_R_16F ? 2 : 4;
}

void setAlignment(cublasLtMatmulPreference_t pref,
                  cublasLtMatmulPreferenceAttributes_t attr, const void *p,
                  uint64_t strideBytes) {
  uint32_t alignment = alignmentOf(p, strideBytes);
  checkLt(cublasLt().preferenceSetAttribute(pref, attr, &alignment,
                                            sizeof(alignment)),
          "alignment preference");
}

} // namespace

MatmulPlan::MatmulPlan(const CublasLtContext &ctx, const GemmShape &shape,
                       const void *a, const void *b, const void *c,
                       GemmTypes types, const GemmEpilogue &epilogue)
    : ctx_(ctx) {
  const CublasLtApi &lt = cublasLt();
  GemmShape s = shape;
  // A shared B with untransposed A is one tall GEMM (the CPU does the same).
  if (s.broadcastB && !s.transA) {
    s.m *= s.batch;
    s.batch = 1;
  }
  checkLt(lt.descCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F),
          "matmul descriptor");
  cublasOperation_t opFirst = s.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opSecond = s.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  checkLt(lt.descSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &opFirst,
                              sizeof(opFirst)),
          "transa");
  checkLt(lt.descSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &opSecond,
                              sizeof(opSecond)),
          "transb");
  if (epilogue.kind != GemmEpilogue::None) {
    if (s.batch != 1)
      fail("internal error: a matmul epilogue on a batched matmul");
    cublasLtEpilogue_t kind =
        epilogue.kind == GemmEpilogue::Bias          ? CUBLASLT_EPILOGUE_BIAS
        : epilogue.kind == GemmEpilogue::BiasGeluAux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                     : CUBLASLT_EPILOGUE_DGELU;
    checkLt(lt.descSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &kind,
                                sizeof(kind)),
            "epilogue");
    if (epilogue.bias)
      checkLt(lt.descSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                  &epilogue.bias, sizeof(epilogue.bias)),
              "bias pointer");
    if (epilogue.aux) {
      checkLt(lt.descSetAttribute(desc_,
                                  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                  &epilogue.aux, sizeof(epilogue.aux)),
              "epilogue aux pointer");
      int64_t ld = s.ldc ? s.ldc : s.n; // the aux matrix is laid out like D
      checkLt(lt.descSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                  &ld, sizeof(ld)),
              "epilogue aux ld");
    }
  }
  // Column-major views of the row-major operands.
  int64_t strideB = s.broadcastB ? 0 : s.k * s.n;
  if ((s.lda || s.ldb || s.ldc) && s.batch != 1)
    fail("internal error: padded matmul operands on a batched matmul");
  int64_t ldb = s.ldb ? s.ldb : (s.transB ? s.k : s.n);
  int64_t lda = s.lda ? s.lda : (s.transA ? s.m : s.k);
  int64_t ldc = s.ldc ? s.ldc : s.n;
  layoutFirst_ = s.transB ? layout(types.b, s.k, s.n, ldb, s.batch, strideB)
                          : layout(types.b, s.n, s.k, ldb, s.batch, strideB);
  layoutSecond_ = s.transA ? layout(types.a, s.m, s.k, lda, s.batch, s.m * s.k)
                           : layout(types.a, s.k, s.m, lda, s.batch, s.m * s.k);
  layoutC_ = layout(types.c, s.n, s.m, ldc, s.batch, s.m * s.n);

  cublasLtMatmulPreference_t pref = nullptr;
  checkLt(lt.preferenceCreate(&pref), "preference");
  size_t workspace = ctx.workspaceBytes;
  checkLt(lt.preferenceSetAttribute(pref,
                                    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                    &workspace, sizeof(workspace)),
          "workspace preference");
  // cuBLASLt's A is Strata's B and vice versa (the operands are swapped).
  const uint64_t batched = s.batch > 1 ? 1 : 0;
  setAlignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, b,
               batched * uint64_t(strideB) * elementBytes(types.b));
  setAlignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, a,
               batched * uint64_t(s.m * s.k) * elementBytes(types.a));
  const uint64_t strideC =
      batched * uint64_t(s.m * s.n) * elementBytes(types.c);
  setAlignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c, strideC);
  setAlignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, c, strideC);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status =
      lt.algoGetHeuristic(ctx.handle, desc_, layoutFirst_, layoutSecond_,
                          layoutC_, layoutC_, pref, 1, &result, &found);
  lt.preferenceDestroy(pref);
  checkLt(status, "algorithm heuristic");
  if (found < 1)
    fail("cuBLASLt has no algorithm for the matmul ", shape.batch, "x[",
         shape.m, ",", shape.n, ",", shape.k, "]");
  algo_ = result.algo;
}

MatmulPlan::~MatmulPlan() {
  const CublasLtApi &lt = cublasLt();
  lt.layoutDestroy(layoutC_);
  lt.layoutDestroy(layoutSecond_);
  lt.layoutDestroy(layoutFirst_);
  lt.descDestroy(desc_);
}

void MatmulPlan::run(const void *a, const void *b, void *c, float alpha,
                     float beta, cudaStream_t stream) const {
  checkLt(cublasLt().matmul(ctx_.handle, desc_, &alpha, b, layoutFirst_, a,
                            layoutSecond_, &beta, c, layoutC_, c, layoutC_,
                            &algo_, ctx_.workspace, ctx_.workspaceBytes,
                            stream),
          "matmul");
}

} // namespace strata::rt::cuda
