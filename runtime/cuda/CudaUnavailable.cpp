//===- CudaUnavailable.cpp - The CUDA entry points without CUDA -----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Built instead of the CUDA backend when STRATA_CUDA is OFF (no nvcc): the
// launcher still reads CUDA programs (`--info`) and says why it cannot run
// them.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Device.h"
#include "runtime/support/Error.h"

namespace strata::rt {

std::string cudaUnavailableReason() {
  return "this runtime was built without CUDA (STRATA_CUDA=OFF: CMake found "
         "no nvcc); rebuild Strata with the CUDA toolkit installed";
}

std::unique_ptr<Device> createCudaDevice(const TargetDesc &) {
  fail(cudaUnavailableReason());
}

std::shared_ptr<CommBackend>
createCudaCommBackend(std::shared_ptr<CommBackend> mpi, std::string &why) {
  why = "this runtime was built without CUDA";
  return mpi;
}

} // namespace strata::rt
