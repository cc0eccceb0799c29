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

#include "runtime/format/Program.h"

#include <cstdint>
#include <memory>

namespace strata::rt {

/// Per-step values instructions read besides their operands.
struct ExecContext {
  int64_t step = 0; ///< 0-based index of the current optimizer step.
  double lr = 0.0;  ///< Learning rate of this step (from the LR schedule).
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
};

std::unique_ptr<Device> createCpuDevice();

} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_DEVICE_H
