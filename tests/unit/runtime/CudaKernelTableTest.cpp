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
#include "runtime/format/OpSchema.h"

#include <gtest/gtest.h>

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
