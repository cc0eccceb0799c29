//===- CpuDevice.cpp - The CPU backend ------------------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuDevice.h"

#include "runtime/cpu/Threads.h"
#include "runtime/format/OpSchema.h"
#include "runtime/support/Error.h"

#include <cstdlib>
#include <cstring>

namespace strata::rt {

std::unique_ptr<Device> createCpuDevice() {
  return std::make_unique<cpu::CpuDevice>();
}

namespace cpu {

// Single-threaded unless asked otherwise (--threads): oneDNN would
// otherwise spin up one OpenMP thread per core.
CpuDevice::CpuDevice() { setNumThreads(1); }

CpuDevice::~CpuDevice() { std::free(arena_); }

void CpuDevice::setThreads(int threads) { setNumThreads(threads); }

void CpuDevice::prepare(const RankProgram &rank) {
  std::free(arena_);
  arena_ = nullptr;
  arenaBytes_ = rank.arenaBytes;
  uint64_t rounded = (arenaBytes_ + kBufferAlignment - 1) / kBufferAlignment *
                     kBufferAlignment;
  if (rounded == 0)
    rounded = kBufferAlignment;
  arena_ =
      static_cast<uint8_t *>(std::aligned_alloc(kBufferAlignment, rounded));
  if (!arena_)
    fail("cannot allocate the ", arenaBytes_,
         "-byte arena; the plan needs more memory than this machine has");
  std::memset(arena_, 0, rounded);

  for (int k = 0; k < kNumSequenceKinds; ++k) {
    auto &bound = sequences_[k];
    bound.clear();
    for (const Instruction &inst : rank.sequences[k]) {
      KernelFn kernel = lookupCpuKernel(inst.opcode);
      if (!kernel)
        fail("opcode ", getOpSchema(inst.opcode).name,
             " has no CPU kernel in this runtime");
      BoundInstruction b{&inst, {}, {}};
      for (uint32_t id : inst.operands) {
        const BufferDesc &buf = rank.buffers[id];
        b.operands.push_back(arena_ + buf.offset);
        b.elements.push_back(buf.numElements());
      }
      bound.push_back({kernel, std::move(b)});
    }
  }
}

void CpuDevice::upload(uint64_t offset, const void *src, uint64_t bytes) {
  if (offset > arenaBytes_ || bytes > arenaBytes_ - offset)
    fail("internal error: upload outside the arena");
  std::memcpy(arena_ + offset, src, bytes);
}

void CpuDevice::download(uint64_t offset, void *dst, uint64_t bytes) const {
  if (offset > arenaBytes_ || bytes > arenaBytes_ - offset)
    fail("internal error: download outside the arena");
  std::memcpy(dst, arena_ + offset, bytes);
}

void CpuDevice::run(SequenceKind kind, const ExecContext &ctx) {
  for (const BoundStep &step : sequences_[static_cast<int>(kind)])
    step.kernel(step.bound, ctx);
}

} // namespace cpu
} // namespace strata::rt
