//===- CudaDevice.h - The CUDA backend ------------------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// A Device whose arena is one cudaMalloc on this process's GPU. Kernels run
// in instruction order on the compute stream; the host only waits where the
// schedule needs a value on the host (upload, download, a collective that
// is staged through host memory for MPI). Collectives on a communicator that
// accepts device memory (NCCL) run on the communication stream, ordered
// against the compute stream with events (runtime/nccl/).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_CUDADEVICE_H
#define STRATA_RUNTIME_CUDA_CUDADEVICE_H

#include "runtime/core/Device.h"
#include "runtime/core/HostStaging.h"
#include "runtime/cuda/CudaMatmul.h"

#include <memory>
#include <string>
#include <vector>

namespace strata::rt::cuda {

/// The compute and communication streams of this process (created on the
/// selected GPU on first use; shared by the device and NCCL).
struct Streams {
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
};
const Streams &streams();

/// Makes the GPU of this process current: local rank (from the launcher's
/// environment: Open MPI, Slurm, MPICH) modulo the GPU count. Returns its
/// index; idempotent.
int selectGpu();

/// How many processes of this job share this node, from the launcher's
/// environment (1 when unknown).
int localRanks();

/// An instruction with device operand pointers.
struct Bound {
  const Instruction *inst = nullptr;
  std::vector<void *> operands;
  std::vector<int64_t> elements;
  std::vector<DType> dtypes;
  std::unique_ptr<MatmulPlan> matmul; ///< Matmul instructions only.

  float *f32(size_t i) const { return static_cast<float *>(operands[i]); }
  int32_t *i32(size_t i) const { return static_cast<int32_t *>(operands[i]); }
  double *f64(size_t i) const { return static_cast<double *>(operands[i]); }
  int64_t attr(size_t i) const { return inst->ints[i]; }
  double fattr(size_t i) const { return inst->floats[i]; }
};

/// Synchronous copies on the compute stream (after the work issued so far),
/// for staging collectives through host memory.
class CudaCopier final : public DeviceCopier {
public:
  void toHost(void *host, const void *device, size_t bytes) override;
  void toDevice(void *device, const void *host, size_t bytes) override;
};

class CudaDevice;
using CudaKernelFn = void (*)(const Bound &, const ExecContext &, CudaDevice &);

/// The CUDA kernel of an opcode, or nullptr (CudaDevice.cpp).
CudaKernelFn lookupCudaKernel(Opcode opcode);

class CudaDevice final : public Device {
public:
  explicit CudaDevice(const TargetDesc &target);
  ~CudaDevice() override;
  const char *name() const override { return "cuda"; }
  void setThreads(int) override {}
  void prepare(const RankProgram &rank) override;
  void upload(uint64_t offset, const void *src, uint64_t bytes) override;
  void download(uint64_t offset, void *dst, uint64_t bytes) const override;
  void run(SequenceKind kind, const ExecContext &ctx) override;

  cudaStream_t stream() const { return streams().compute; }
  /// Device memory for reductions to a scalar (scratchBytes_ of it).
  double *scratch() const { return scratch_; }
  DeviceCopier &copier() { return copier_; }

private:
  void release();

  uint8_t *arena_ = nullptr;
  uint64_t arenaBytes_ = 0;
  double *scratch_ = nullptr;
  CublasLtContext lt_;
  CudaCopier copier_;
  std::vector<Bound> sequences_[kNumSequenceKinds];
  std::vector<CudaKernelFn> kernels_[kNumSequenceKinds];
};

} // namespace strata::rt::cuda

#endif // STRATA_RUNTIME_CUDA_CUDADEVICE_H
