//===- CpuDevice.cpp - The CPU backend ------------------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuDevice.h"

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Threads.h"
#include "runtime/format/OpSchema.h"
#include "runtime/support/Error.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include <sys/mman.h>

namespace strata::rt {

std::unique_ptr<Device> createCpuDevice() {
  return std::make_unique<cpu::CpuDevice>();
}

namespace cpu {

namespace {

constexpr uint64_t kHugePageBytes = 2u << 20;

/// Rows of the profile: matmuls by shape (their cost differs by orders of
/// magnitude and by layout), everything else by opcode.
std::string profileKey(const Instruction &inst, double &flops) {
  flops = 0;
  if (inst.opcode != Opcode::Matmul)
    return getOpSchema(inst.opcode).name;
  const auto &a = inst.ints; // batch, m, n, k, transA, transB, broadcastB
  flops = 2.0 * double(a[0]) * double(a[1]) * double(a[2]) * double(a[3]);
  char buf[128];
  std::snprintf(buf, sizeof(buf), "matmul %lldx[%lld,%lld,%lld]%s%s%s",
                (long long)a[0], (long long)a[1], (long long)a[2],
                (long long)a[3], a[4] ? " tA" : "", a[5] ? " tB" : "",
                a[6] ? " bcastB" : "");
  return buf;
}

/// Instructions whose kernels read and write their bfloat16 buffers
/// themselves; every other kernel computes in float32 on staged copies of
/// its bf16 operands.
bool handlesBf16(Opcode op, const std::vector<DType> &dtypes) {
  // STRATA_BF16_STAGE=1 stages every kernel but matmul and convert (the
  // float32 kernels on widened copies: what the bf16 forms must equal);
  // STRATA_BF16_STAGE=name,name stages those opcodes only.
  static const std::string stage = [] {
    const char *env = std::getenv("STRATA_BF16_STAGE");
    return "," + std::string(env ? env : "") + ",";
  }();
  bool staged = stage == ",1," ||
                stage.find("," + std::string(getOpSchema(op).name) + ",") !=
                    std::string::npos;
  if (!staged && kernelTakesDtypes(op, dtypes))
    return true;
  switch (op) {
  case Opcode::Matmul:
  case Opcode::Convert:
  case Opcode::LoadBatch:
  case Opcode::AllReduce:
  case Opcode::ReduceScatter:
  case Opcode::AllGather:
  case Opcode::Send:
  case Opcode::Recv:
  case Opcode::Barrier:
  case Opcode::AllReduceStart:
  case Opcode::ReduceScatterStart:
  case Opcode::AllGatherStart:
  case Opcode::SendStart:
  case Opcode::RecvStart:
  case Opcode::Wait:
    return true;
  default:
    return false;
  }
}

} // namespace

// Single-threaded unless asked otherwise (--threads): oneDNN would
// otherwise spin up one OpenMP thread per core.
CpuDevice::CpuDevice() {
  setNumThreads(1);
  const char *env = std::getenv("STRATA_PROFILE");
  profiling_ = env && *env && std::strcmp(env, "0") != 0;
}

CpuDevice::~CpuDevice() {
  if (profiling_)
    printProfile();
  std::free(arena_);
}

void CpuDevice::printProfile() const {
  double total = 0;
  for (const ProfileRow &row : profile_)
    total += row.seconds;
  if (total <= 0)
    return;
  std::vector<const ProfileRow *> rows;
  for (const ProfileRow &row : profile_)
    if (row.calls)
      rows.push_back(&row);
  std::sort(rows.begin(), rows.end(),
            [](const ProfileRow *a, const ProfileRow *b) {
              return a->seconds > b->seconds;
            });
  std::fprintf(stderr,
               "strata: STRATA_PROFILE: time per instruction kind, all "
               "sequences (%.3f s)\n%-44s %8s %10s %6s %9s %8s\n",
               total, "instruction", "calls", "total_s", "%", "ms/call",
               "GFLOP/s");
  for (const ProfileRow *row : rows) {
    std::fprintf(stderr, "%-44s %8lld %10.4f %6.2f %9.3f", row->key.c_str(),
                 (long long)row->calls, row->seconds,
                 100.0 * row->seconds / total,
                 1e3 * row->seconds / double(row->calls));
    if (row->flopsPerCall > 0)
      std::fprintf(stderr, " %8.1f",
                   row->flopsPerCall * double(row->calls) / row->seconds / 1e9);
    std::fprintf(stderr, "\n");
  }
}

void CpuDevice::setThreads(int threads) { setNumThreads(threads); }

void CpuDevice::prepare(const RankProgram &rank) {
  std::free(arena_);
  arena_ = nullptr;
  arenaBytes_ = rank.arenaBytes;
  // Large arenas sit on 2 MiB boundaries and ask for transparent huge
  // pages: GEMM packing and the vocabulary-wide rows of the logits walk
  // hundreds of MB, and 4 KiB pages cost them TLB misses (THP is often in
  // `madvise` mode, so without the hint they get none).
  const uint64_t alignment =
      arenaBytes_ >= 2 * kHugePageBytes ? kHugePageBytes : kBufferAlignment;
  uint64_t rounded = (arenaBytes_ + alignment - 1) / alignment * alignment;
  if (rounded == 0)
    rounded = alignment;
  arena_ = static_cast<uint8_t *>(std::aligned_alloc(alignment, rounded));
  if (!arena_)
    fail("cannot allocate the ", arenaBytes_,
         "-byte arena; the plan needs more memory than this machine has");
#ifdef MADV_HUGEPAGE
  if (alignment == kHugePageBytes)
    ::madvise(arena_, rounded, MADV_HUGEPAGE); // A hint: failure is harmless.
#endif
  std::memset(arena_, 0, rounded);

  profile_.clear();
  std::map<std::string, uint32_t> slotOf;
  std::string stagedKinds; // for STRATA_PROFILE
  uint64_t stagingFloats = 0;
  for (int k = 0; k < kNumSequenceKinds; ++k) {
    auto &bound = sequences_[k];
    bound.clear();
    for (const Instruction &inst : rank.sequences[k]) {
      KernelFn kernel = lookupCpuKernel(inst.opcode);
      if (!kernel)
        fail("opcode ", getOpSchema(inst.opcode).name,
             " has no CPU kernel in this runtime");
      BoundInstruction b{&inst, {}, {}, {}};
      for (uint32_t id : inst.operands) {
        if (id == kNoBuffer) { // An optional operand given as none.
          b.operands.push_back(nullptr);
          b.elements.push_back(0);
          b.dtypes.push_back(DType::F32);
          continue;
        }
        const BufferDesc &buf = rank.buffers[id];
        b.operands.push_back(arena_ + buf.offset);
        b.elements.push_back(buf.numElements());
        b.dtypes.push_back(buf.dtype);
      }
      double flops = 0;
      std::string key = profileKey(inst, flops);
      auto [it, added] = slotOf.try_emplace(key, uint32_t(profile_.size()));
      if (added)
        profile_.push_back({key, flops, 0, 0.0});
      BoundStep step{kernel, std::move(b), it->second, {}, {}};
      if (!handlesBf16(inst.opcode, step.bound.dtypes)) {
        const OpSchema &schema = getOpSchema(inst.opcode);
        uint64_t floats = 0;
        for (size_t i = 0; i < step.bound.operands.size(); ++i) {
          if (step.bound.dtypes[i] != DType::BF16)
            continue;
          OperandRole role =
              schema.operands[std::min(i, schema.operands.size() - 1)].role;
          step.staged.push_back({uint32_t(i), role != OperandRole::Out,
                                 role != OperandRole::In, floats});
          // 16-float (64-byte) steps keep each copy aligned.
          floats += (uint64_t(step.bound.elements[i]) + 15) / 16 * 16;
        }
        stagingFloats = std::max(stagingFloats, floats);
        std::string kind = getOpSchema(inst.opcode).name;
        if (floats && (" " + stagedKinds + " ").find(" " + kind + " ") ==
                          std::string::npos)
          stagedKinds += (stagedKinds.empty() ? "" : " ") + kind;
      }
      bound.push_back(std::move(step));
    }
  }
  staging_.assign(stagingFloats, 0.0f);
  staging_.shrink_to_fit();
  bool bf16 = false;
  for (int k = 0; k < kNumSequenceKinds; ++k)
    for (BoundStep &step : sequences_[k]) {
      for (DType t : step.bound.dtypes)
        bf16 |= t == DType::BF16;
      if (step.staged.empty())
        continue;
      step.widened = step.bound;
      for (const StagedOperand &st : step.staged) {
        step.widened.operands[st.operand] = staging_.data() + st.offset;
        step.widened.dtypes[st.operand] = DType::F32;
      }
    }
  if (profiling_ && bf16)
    std::fprintf(stderr,
                 "strata: STRATA_PROFILE: arena %llu bytes; bf16 operands of "
                 "float32-only kernels staged outside it: %llu bytes%s%s\n",
                 (unsigned long long)arenaBytes_,
                 (unsigned long long)stagingBytes(),
                 stagedKinds.empty() ? "" : " (",
                 stagedKinds.empty() ? "" : (stagedKinds + ")").c_str());
  static bool told = false;
  if (bf16 && !hasBf16Gemm() && !told) {
    told = true;
    std::fprintf(stderr,
                 "strata: this CPU has no AVX512-BF16; bfloat16 matmuls "
                 "widen their operands and run in float32\n");
  }
}

void CpuDevice::runStep(const BoundStep &step, const ExecContext &ctx) {
  if (step.staged.empty()) {
    step.kernel(step.bound, ctx);
    return;
  }
  for (const StagedOperand &st : step.staged)
    if (st.read)
      widenBf16(static_cast<const uint16_t *>(step.bound.operands[st.operand]),
                step.widened.f32(st.operand), step.bound.elements[st.operand]);
  step.kernel(step.widened, ctx);
  for (const StagedOperand &st : step.staged)
    if (st.written)
      narrowToBf16(step.widened.f32(st.operand),
                   static_cast<uint16_t *>(step.bound.operands[st.operand]),
                   step.bound.elements[st.operand]);
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
  if (tracer_) {
    runTraced(kind, ctx);
    return;
  }
  StepServices *services = ctx.services;
  using Clock = std::chrono::steady_clock;
  for (const BoundStep &step : sequences_[static_cast<int>(kind)]) {
    if (profiling_) {
      auto start = Clock::now();
      runStep(step, ctx);
      ProfileRow &row = profile_[step.profileSlot];
      row.seconds +=
          std::chrono::duration<double>(Clock::now() - start).count();
      ++row.calls;
    } else {
      runStep(step, ctx);
    }
    // Outstanding non-blocking collectives only advance inside MPI calls
    // (no progress thread), so poke them between kernels.
    if (services && services->hasPending())
      services->progress();
  }
}

/// run() while a step is traced (--trace): every instruction timed into the
/// tracer, with the bytes a collective or transfer moves (its first operand).
void CpuDevice::runTraced(SequenceKind kind, const ExecContext &ctx) {
  StepServices *services = ctx.services;
  using Clock = std::chrono::steady_clock;
  for (const BoundStep &step : sequences_[static_cast<int>(kind)]) {
    auto start = Clock::now();
    runStep(step, ctx); // with bf16 staging, as run() does
    auto end = Clock::now();
    if (profiling_) {
      ProfileRow &row = profile_[step.profileSlot];
      row.seconds += std::chrono::duration<double>(end - start).count();
      ++row.calls;
    }
    const BoundInstruction &b = step.bound;
    uint16_t op = static_cast<uint16_t>(b.inst->opcode);
    uint64_t bytes = op >= 128 && op < 192 && !b.elements.empty()
                         ? uint64_t(b.elements[0]) * dtypeBytes(b.dtypes[0])
                         : 0;
    tracer_->record(*b.inst, kind, start, end, bytes);
    if (services && services->hasPending())
      services->progress();
  }
}

} // namespace cpu
} // namespace strata::rt
