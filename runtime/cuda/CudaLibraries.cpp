//===- CudaLibraries.cpp - CUDA libraries loaded at run time --------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaLibraries.h"

#include "runtime/core/Device.h"
#include "runtime/support/Error.h"

#include <dlfcn.h>
#include <cstdlib>
#include <unistd.h>

#include <mutex>
#include <vector>

namespace strata::rt {

std::string cudaUnavailableReason() { return cuda::cudaProbe(); }

namespace cuda {

namespace {

/// dlopen of the first name that loads: by the loader's search (rpath,
/// LD_LIBRARY_PATH, ldconfig), then beside the executable (libraries
/// carried with it), then in the toolkit's directories. `why` collects each
/// dlerror().
void *openLibrary(std::initializer_list<const char *> names, std::string &why) {
  std::vector<std::string> dirs;
  // STRATA_CUDA_LIBRARY_PATH (directories, ':'-separated) first: CUDA
  // libraries that live outside the loader's path, e.g. in a Python
  // environment's site-packages/nvidia/*/lib.
  if (const char *extra = std::getenv("STRATA_CUDA_LIBRARY_PATH")) {
    std::string list(extra);
    size_t start = 0;
    while (start <= list.size()) {
      size_t end = list.find(':', start);
      if (end == std::string::npos)
        end = list.size();
      if (end > start)
        dirs.push_back(list.substr(start, end - start) + "/");
      start = end + 1;
    }
  }
  dirs.push_back("");
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string exe(self, size_t(n));
    dirs.push_back(exe.substr(0, exe.rfind('/') + 1));
  }
  dirs.push_back("/usr/local/cuda/lib64/");
  dirs.push_back("/usr/local/cuda/lib/");
  for (const std::string &dir : dirs)
    for (const char *name : names) {
      std::string path = dir + name;
      if (void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))
        return handle;
      if (dir.empty()) { // The other directories' misses say nothing new.
        const char *err = ::dlerror();
        why += std::string(why.empty() ? "" : "; ") + (err ? err : name);
      }
    }
  return nullptr;
}

template <typename Fn>
bool resolve(void *handle, const char *symbol, Fn &slot, std::string &why) {
  slot = reinterpret_cast<Fn>(::dlsym(handle, symbol));
  if (!slot)
    why = std::string("symbol ") + symbol + " is missing";
  return slot != nullptr;
}

std::string probe() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorInsufficientDriver)
    return std::string("no usable NVIDIA driver (libcuda.so.1 is missing or "
                       "older than this CUDA ") +
           std::to_string(CUDART_VERSION / 1000) +
           " runtime: " + cudaGetErrorString(status) + ")";
  if (status == cudaErrorNoDevice || (status == cudaSuccess && count == 0))
    return "the NVIDIA driver reports no CUDA GPU (cudaGetDeviceCount: " +
           std::string(cudaGetErrorString(status)) + ")";
  if (status != cudaSuccess)
    return std::string("cudaGetDeviceCount failed: ") +
           cudaGetErrorString(status);
  std::string why;
  if (!openLibrary({"libcublasLt.so.13", "libcublasLt.so"}, why))
    return "cannot load cuBLASLt (" + why +
           "); install the CUDA 13 cuBLAS runtime or add its directory to "
           "LD_LIBRARY_PATH";
  return "";
}

} // namespace

const std::string &cudaProbe() {
  static const std::string reason = probe();
  return reason;
}

const CublasLtApi &cublasLt() {
  static CublasLtApi api;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string why;
    void *h = openLibrary({"libcublasLt.so.13", "libcublasLt.so"}, why);
    if (!h) {
      error = "cannot load cuBLASLt (" + why + ")";
      return;
    }
    bool ok =
        resolve(h, "cublasLtCreate", api.create, why) &&
        resolve(h, "cublasLtDestroy", api.destroy, why) &&
        resolve(h, "cublasLtGetStatusString", api.statusString, why) &&
        resolve(h, "cublasLtMatmul", api.matmul, why) &&
        resolve(h, "cublasLtMatmulDescCreate", api.descCreate, why) &&
        resolve(h, "cublasLtMatmulDescDestroy", api.descDestroy, why) &&
        resolve(h, "cublasLtMatmulDescSetAttribute", api.descSetAttribute,
                why) &&
        resolve(h, "cublasLtMatrixLayoutCreate", api.layoutCreate, why) &&
        resolve(h, "cublasLtMatrixLayoutDestroy", api.layoutDestroy, why) &&
        resolve(h, "cublasLtMatrixLayoutSetAttribute", api.layoutSetAttribute,
                why) &&
        resolve(h, "cublasLtMatmulPreferenceCreate", api.preferenceCreate,
                why) &&
        resolve(h, "cublasLtMatmulPreferenceDestroy", api.preferenceDestroy,
                why) &&
        resolve(h, "cublasLtMatmulPreferenceSetAttribute",
                api.preferenceSetAttribute, why) &&
        resolve(h, "cublasLtMatmulAlgoGetHeuristic", api.algoGetHeuristic, why);
    if (!ok)
      error = "libcublasLt: " + why;
  });
  if (!error.empty())
    fail(error);
  return api;
}

const NcclApi *nccl(std::string &why) {
  static NcclApi api;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string w;
    void *h = openLibrary({"libnccl.so.2", "libnccl.so"}, w);
    if (!h) {
      error = "cannot load NCCL (" + w + ")";
      return;
    }
    bool ok = resolve(h, "ncclGetUniqueId", api.getUniqueId, w) &&
              resolve(h, "ncclCommInitRank", api.commInitRank, w) &&
              resolve(h, "ncclCommDestroy", api.commDestroy, w) &&
              resolve(h, "ncclGetErrorString", api.errorString, w) &&
              resolve(h, "ncclAllReduce", api.allReduce, w) &&
              resolve(h, "ncclReduceScatter", api.reduceScatter, w) &&
              resolve(h, "ncclAllGather", api.allGather, w) &&
              resolve(h, "ncclSend", api.send, w) &&
              resolve(h, "ncclRecv", api.recv, w) &&
              resolve(h, "ncclGroupStart", api.groupStart, w) &&
              resolve(h, "ncclGroupEnd", api.groupEnd, w);
    if (!ok)
      error = "libnccl: " + w;
  });
  why = error;
  return error.empty() ? &api : nullptr;
}

void check(cudaError_t status, const char *what) {
  if (status != cudaSuccess)
    fail(what, ": ", cudaGetErrorString(status));
}

} // namespace cuda
} // namespace strata::rt
