//===- CudaLibraries.h - CUDA libraries loaded at run time ----------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// One launcher serves every target, so it must start on machines without
// CUDA. The CUDA runtime is linked statically (libcudart_static loads the
// driver, libcuda.so.1, itself when first called); cuBLASLt and NCCL are
// opened with dlopen and their entry points resolved by name, as IREE does
// for NCCL. The declarations come from the toolkit's headers, so a
// signature change is a compile error, not a crash.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_CUDALIBRARIES_H
#define STRATA_RUNTIME_CUDA_CUDALIBRARIES_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

namespace strata::rt::cuda {

/// cuBLASLt's entry points that the matmul kernel uses.
struct CublasLtApi {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtGetStatusString) statusString = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  decltype(&cublasLtMatmulDescCreate) descCreate = nullptr;
  decltype(&cublasLtMatmulDescDestroy) descDestroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) descSetAttribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layoutDestroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) layoutSetAttribute = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) preferenceCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) preferenceDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preferenceSetAttribute =
      nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algoGetHeuristic = nullptr;
};

/// NCCL's entry points that the NCCL communicator uses.
struct NcclApi {
  decltype(&ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&ncclCommInitRank) commInitRank = nullptr;
  decltype(&ncclCommDestroy) commDestroy = nullptr;
  decltype(&ncclGetErrorString) errorString = nullptr;
  decltype(&ncclAllReduce) allReduce = nullptr;
  decltype(&ncclReduceScatter) reduceScatter = nullptr;
  decltype(&ncclAllGather) allGather = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) groupStart = nullptr;
  decltype(&ncclGroupEnd) groupEnd = nullptr;
};

/// Why CUDA programs cannot run in this process (no driver, no GPU, no
/// cuBLASLt), or empty. Probes once and remembers.
const std::string &cudaProbe();

/// cuBLASLt, loaded on first use; throws RuntimeError naming the library
/// and dlerror() when it cannot be loaded.
const CublasLtApi &cublasLt();

/// NCCL, loaded on first use; nullptr with `why` set when libnccl.so.2 is
/// missing (the caller then stages collectives through MPI).
const NcclApi *nccl(std::string &why);

/// Throws RuntimeError "what: <CUDA error string>" unless `status` is
/// cudaSuccess.
void check(cudaError_t status, const char *what);

} // namespace strata::rt::cuda

#endif // STRATA_RUNTIME_CUDA_CUDALIBRARIES_H
