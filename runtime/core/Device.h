//===- Device.h - Backend interface: memory and kernels -------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// A Device owns one rank's arena and runs instruction sequences on it. The
// executor never touches device memory except through upload/download, so a
// CUDA backend slots in behind the same interface.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CORE_DEVICE_H
#define STRATA_RUNTIME_CORE_DEVICE_H

#include "runtime/core/Communicator.h"
#include "runtime/format/Program.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace strata::rt {

/// What collective and load_batch kernels need from the executor: the
/// rank's communicators, its request slots and its input rows. Abstract so
/// that backends do not link the executor.
class StepServices {
public:
  virtual ~StepServices() = default;
  /// The communicator of program group `index` (the verifier guarantees
  /// membership).
  virtual Communicator &group(int64_t index) = 0;
  /// Point-to-point transfers use the world, peers are global ranks.
  virtual Communicator &world() = 0;
  /// Parks a started request in `slot` (which must be free).
  virtual void park(int64_t slot, std::unique_ptr<CommRequest> request) = 0;
  /// Completes and frees the request in `slot`.
  virtual void wait(int64_t slot) = 0;
  /// Whether any slot holds an outstanding request.
  virtual bool hasPending() const = 0;
  /// Lets outstanding requests progress (MPI_Test); called between
  /// instructions while any is pending.
  virtual void progress() = 0;
  /// Fills micro-batch `microbatch`'s rows of this rank (any pointer may be
  /// null): token ids, next-token targets, positions 0 .. seqLen-1.
  virtual void loadBatch(int64_t microbatch, int32_t *tokens, int32_t *targets,
                         int32_t *positions) = 0;
};

/// Per-step values instructions read besides their operands.
struct ExecContext {
  int64_t step = 0; ///< 0-based index of the current optimizer step.
  double lr = 0.0;  ///< Learning rate of this step (from the LR schedule).
  /// Needed by collectives and load_batch only; null otherwise.
  StepServices *services = nullptr;
};

/// Receives every instruction's start and end while a step is traced
/// (`--trace`, runtime/core/StepTrace.h). `bytes` is what a collective or
/// transfer moves (its first operand); 0 for kernels.
class InstructionTracer {
public:
  using Clock = std::chrono::steady_clock;
  virtual ~InstructionTracer() = default;
  virtual void record(const Instruction &inst, SequenceKind kind,
                      Clock::time_point start, Clock::time_point end,
                      uint64_t bytes) = 0;
};

class Device {
public:
  virtual ~Device() = default;
  virtual const char *name() const = 0;
  virtual void setThreads(int threads) = 0;
  /// Allocates the rank's arena (zero-filled) once and binds every
  /// instruction to it. The program must have been verified.
  virtual void prepare(const RankProgram &rank) = 0;
  virtual void upload(uint64_t offset, const void *src, uint64_t bytes) = 0;
  virtual void download(uint64_t offset, void *dst, uint64_t bytes) const = 0;
  virtual void run(SequenceKind kind, const ExecContext &ctx) = 0;
  /// Times every instruction into `tracer` until set back to null (the
  /// default: run() then reads no clock).
  virtual void setTracer(InstructionTracer *tracer) { (void)tracer; }
};

std::unique_ptr<Device> createCpuDevice();

/// The CUDA backend (runtime/cuda/) on this process's GPU. Throws
/// RuntimeError with cudaUnavailableReason() when it cannot run.
std::unique_ptr<Device> createCudaDevice(const TargetDesc &target);

/// Why this process cannot run a CUDA program (a runtime built without
/// CUDA, no driver, no GPU), or empty when it can. Loads the CUDA libraries
/// on first use; never aborts.
std::string cudaUnavailableReason();

/// The device a program's target names.
std::unique_ptr<Device> createDevice(const TargetDesc &target);

} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_DEVICE_H
