//===- CpuDevice.h - The CPU backend --------------------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CPU_CPUDEVICE_H
#define STRATA_RUNTIME_CPU_CPUDEVICE_H

#include "runtime/core/Device.h"

#include <string>
#include <vector>

namespace strata::rt::cpu {

/// An instruction with its operand pointers resolved against the arena.
struct BoundInstruction {
  const Instruction *inst;
  std::vector<void *> operands;
  std::vector<int64_t> elements; ///< Element count of each operand.
  std::vector<DType> dtypes;     ///< Element type of each operand.

  float *f32(size_t i) const { return static_cast<float *>(operands[i]); }
  uint16_t *bf16(size_t i) const {
    return static_cast<uint16_t *>(operands[i]);
  }
  bool isBf16(size_t i) const { return dtypes[i] == DType::BF16; }
  int32_t *i32(size_t i) const { return static_cast<int32_t *>(operands[i]); }
  double *f64(size_t i) const { return static_cast<double *>(operands[i]); }
  int64_t attr(size_t i) const { return inst->ints[i]; }
  double fattr(size_t i) const { return inst->floats[i]; }
};

using KernelFn = void (*)(const BoundInstruction &, const ExecContext &);

/// The CPU kernel of an opcode, or nullptr (CpuKernelTable.cpp).
KernelFn lookupCpuKernel(Opcode opcode);

class CpuDevice final : public Device {
public:
  CpuDevice();
  ~CpuDevice() override;
  const char *name() const override { return "cpu"; }
  void setThreads(int threads) override;
  void prepare(const RankProgram &rank) override;
  void upload(uint64_t offset, const void *src, uint64_t bytes) override;
  void download(uint64_t offset, void *dst, uint64_t bytes) const override;
  void setTracer(InstructionTracer *tracer) override { tracer_ = tracer; }
  void run(SequenceKind kind, const ExecContext &ctx) override;
  /// Bytes of float32 staging outside the arena: copies of the bf16
  /// operands of the largest instruction whose kernel has no bf16 form.
  uint64_t stagingBytes() const { return staging_.size() * sizeof(float); }

private:
  /// A bfloat16 operand of a kernel that computes on float32: widened into
  /// the staging area before the kernel (when read) and narrowed back after
  /// it (when written).
  struct StagedOperand {
    uint32_t operand;
    bool read, written;
    uint64_t offset; ///< In floats, within staging_.
  };
  struct BoundStep {
    KernelFn kernel;
    BoundInstruction bound;
    uint32_t profileSlot; ///< Row of profile_ this instruction adds to.
    std::vector<StagedOperand> staged;
    BoundInstruction widened; ///< `bound` with staged operands in f32.
  };
  void runStep(const BoundStep &step, const ExecContext &ctx);
  /// One row of the STRATA_PROFILE=1 table: an opcode, or a matmul shape.
  struct ProfileRow {
    std::string key;
    double flopsPerCall = 0; ///< Counted for matmuls only.
    int64_t calls = 0;
    double seconds = 0;
  };
  void printProfile() const;
  void runTraced(SequenceKind kind, const ExecContext &ctx);

  uint8_t *arena_ = nullptr;
  uint64_t arenaBytes_ = 0;
  InstructionTracer *tracer_ = nullptr; ///< --trace; null when off
  std::vector<BoundStep> sequences_[kNumSequenceKinds];
  bool profiling_ = false;
  /// Float32 copies of the bfloat16 operands of one instruction (sized for
  /// the largest); outside the arena, see docs/runtime.md.
  std::vector<float> staging_;
  std::vector<ProfileRow> profile_;
};

} // namespace strata::rt::cpu

#endif // STRATA_RUNTIME_CPU_CPUDEVICE_H
