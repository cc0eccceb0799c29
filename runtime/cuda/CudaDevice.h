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
// Binding a program (prepare) decides, per instruction, how it runs:
//   - bf16 operands are read by the kernel itself where rt::hasBf16Form
//     says the opcode has a bf16 form (the CPU's forms), else staged: the
//     float32 kernel runs on widened copies in a staging area, and written
//     operands are rounded back (matmul inputs of mixed dtypes are narrowed
//     to bf16 instead, as the CPU does);
//   - a residual add whose sum a layer norm reads next runs inside the
//     norm's kernel;
//   - runs of optimizer updates, the gradient norm and clipping run as
//     multi-tensor launches over tables built here, their per-step
//     coefficients written to device memory before each update;
//   - maximal runs of instructions without host work (load_batch,
//     collectives, waits, generation's position-dependent kernels) become
//     CUDA graphs: captured on a sequence's second run, replayed after.
// STRATA_CUDA_GRAPHS=0 runs everything eagerly; STRATA_PROFILE=1 runs
// eagerly and prints the device time per instruction kind at exit.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_CUDADEVICE_H
#define STRATA_RUNTIME_CUDA_CUDADEVICE_H

#include "runtime/core/Device.h"
#include "runtime/core/HostStaging.h"
#include "runtime/cuda/CudaBindPlan.h"
#include "runtime/cuda/CudaKernels.h"
#include "runtime/cuda/CudaMatmul.h"

#include <memory>
#include <utility>
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

/// One operand staged for a kernel without a form for its dtype: `arena`
/// holds the program's value, `staged` the kernel's copy.
struct StagedOperand {
  uint32_t operand = 0;
  void *arena = nullptr, *staged = nullptr;
  DType arenaType = DType::BF16, stagedType = DType::F32;
  int64_t elements = 0;
  bool read = false, written = false;
};

/// A multi-tensor optimizer launch (runs of adamw_step / sgd_step, the
/// operands of grad_sumsq or clip_grads): device tables of tensors and
/// chunks, and the distinct coefficient sets of its instructions.
struct TensorGroup {
  TensorSlot *slots = nullptr;   ///< Device table.
  TensorChunk *chunks = nullptr; ///< Device table.
  int64_t numChunks = 0;
  void *coefficients = nullptr; ///< Device table, one entry per key.
  /// Per distinct coefficient set: the instruction that defines it.
  std::vector<const Instruction *> keys;
};

/// An instruction with device operand pointers.
struct Bound {
  const Instruction *inst = nullptr;
  std::vector<void *> operands; ///< As the kernel sees them (staged or not).
  std::vector<int64_t> elements;
  std::vector<DType> dtypes; ///< As the kernel sees them.
  std::unique_ptr<MatmulPlan> matmul; ///< Matmul instructions only.
  std::vector<StagedOperand> staged;
  const InstructionPlan *plan = nullptr; ///< The binding decisions.
  /// Fused into a neighbour (its work runs in that kernel).
  bool skip = false;
  /// The plan's epilogue had no cuBLASLt algorithm: the fused instructions
  /// run on their own.
  bool unfuse = false;
  /// Layer norm fused with the residual add before it: its two inputs.
  const void *residualA = nullptr, *residualB = nullptr;
  int group = -1; ///< Index into the device's tensor groups.
  /// A matmul's fused epilogue (bias, GELU) and the instruction it runs
  /// first (the bias's cast, moved ahead of the product).
  GemmEpilogue epilogue;
  int runBefore = -1;
  /// cross_entropy_fwd fused with its backward and the bf16 cast of the
  /// gradient: where the gradient goes, the backward's scale, and the row
  /// strides of padded logits and gradient (0: dense).
  void *ceGrad = nullptr;
  float ceScale = 0;
  int64_t ceLogitsLd = 0, ceGradLd = 0;
  /// The instructions fused into this one (skipped), by index.
  std::vector<size_t> absorbed;

  float *f32(size_t i) const { return static_cast<float *>(operands[i]); }
  int32_t *i32(size_t i) const { return static_cast<int32_t *>(operands[i]); }
  double *f64(size_t i) const { return static_cast<double *>(operands[i]); }
  uint16_t *bf16(size_t i) const {
    return static_cast<uint16_t *>(operands[i]);
  }
  Elem elem(size_t i) const {
    return dtypes[i] == DType::BF16 ? Elem::BF16 : Elem::F32;
  }
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
  /// Device doubles for reductions to a scalar (the losses' rows, the
  /// gradient norm's partials).
  double *scratch() const { return scratch_; }
  /// Device memory for column partials, the embedding gradient's sort and
  /// attention statistics (workBytes() of it), reused instruction by
  /// instruction in stream order.
  void *work() const { return work_; }
  size_t workBytes() const { return workBytes_; }
  const TensorGroup &group(int index) const { return groups_[size_t(index)]; }
  DeviceCopier &copier() { return copier_; }

private:
  struct ProfileRow {
    std::string key;
    double flopsPerCall = 0;
    int64_t calls = 0;
    double seconds = 0;
  };

  void release();
  void runInstruction(size_t i, int kind, const ExecContext &ctx);
  void runEager(int kind, const ExecContext &ctx, size_t begin, size_t end);
  void writeCoefficients(int kind, const ExecContext &ctx);
  void capture(int kind, const ExecContext &ctx);
  void printProfile() const;

  uint8_t *arena_ = nullptr;
  uint64_t arenaBytes_ = 0;
  double *scratch_ = nullptr;
  void *work_ = nullptr;
  size_t workBytes_ = 0;
  uint8_t *staging_ = nullptr;
  void *tables_ = nullptr; ///< Every tensor group's device tables.
  CublasLtContext lt_;
  CudaCopier copier_;
  std::vector<Bound> sequences_[kNumSequenceKinds];
  std::vector<CudaKernelFn> kernels_[kNumSequenceKinds];
  BindPlan plan_;
  std::vector<cudaGraphExec_t> graphs_[kNumSequenceKinds];
  std::vector<void *> extra_; ///< The plan's scratch buffers.
  std::vector<int> groupsOf_[kNumSequenceKinds];
  std::vector<TensorGroup> groups_;
  int runs_[kNumSequenceKinds] = {};
  bool useGraphs_ = true;
  bool profiling_ = false;
  std::vector<ProfileRow> profile_;
  std::vector<int> profileRowOf_[kNumSequenceKinds];
};

} // namespace strata::rt::cuda

#endif // STRATA_RUNTIME_CUDA_CUDADEVICE_H
