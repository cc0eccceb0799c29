//===- CudaKernelTableTest.cpp - The CUDA backend covers the CPU's --------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Built with STRATA_CUDA only; needs no GPU: the tables are host data.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuDevice.h"
#include "runtime/cuda/CudaDevice.h"
#include "runtime/cuda/CudaLibraries.h"
#include "runtime/format/OpSchema.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace strata::rt;

TEST(CudaKernelTable, EveryOpcodeTheCpuRunsHasACudaKernel) {
#define STRATA_OPCODE(Enum, Name, Number)                                      \
  if (cpu::lookupCpuKernel(Opcode::Enum))                                      \
    EXPECT_NE(cuda::lookupCudaKernel(Opcode::Enum), nullptr) << Name;
#include "runtime/format/Opcodes.def"
}

TEST(CudaKernelTable, TheProbeNeverAbortsAndExplainsItself) {
  // Here (CI, no GPU) it names what is missing; on a GPU machine it is
  // empty. Either way it returns, so the launcher can report it.
  std::string reason = cudaUnavailableReason();
  if (!reason.empty())
    EXPECT_GT(reason.size(), 10u) << reason;
}

// dlopen and dlsym need no GPU: with the toolkit's libraries present, every
// entry point the backend uses must resolve by the name it asks for.
TEST(CudaLibraries, CublasLtAndNcclResolveEveryEntryPoint) {
  namespace fs = std::filesystem;
  const fs::path dir = STRATA_CUDA_LIBRARY_DIR;
  auto present = [&](const char *name) { // The toolkit's lib or lib64.
    return fs::exists(dir / name) ||
           fs::exists(dir.parent_path() / "lib64" / name) ||
           fs::exists(dir.parent_path() / "lib" / name);
  };
  if (present("libcublasLt.so.13")) {
    const cuda::CublasLtApi &lt = cuda::cublasLt(); // Throws if it fails.
    EXPECT_TRUE(lt.create && lt.destroy && lt.statusString && lt.matmul &&
                lt.descCreate && lt.descDestroy && lt.descSetAttribute &&
                lt.layoutCreate && lt.layoutDestroy && lt.layoutSetAttribute &&
                lt.preferenceCreate && lt.preferenceDestroy &&
                lt.preferenceSetAttribute && lt.algoGetHeuristic);
  }
  if (present("libnccl.so.2")) {
    std::string why;
    const cuda::NcclApi *nccl = cuda::nccl(why);
    ASSERT_NE(nccl, nullptr) << why;
    EXPECT_TRUE(nccl->getUniqueId && nccl->commInitRank && nccl->commDestroy &&
                nccl->errorString && nccl->allReduce && nccl->reduceScatter &&
                nccl->allGather && nccl->send && nccl->recv &&
                nccl->groupStart && nccl->groupEnd);
  }
}
