//===- CudaBindPlan.h - How the CUDA device runs a rank program -----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The decisions the CUDA device makes when it binds a program, taken from
// the program alone (buffer ids, dtypes, arena offsets) so that they are
// plain C++: built and unit-tested without a GPU, and printed by
// `BIN --cuda-plan` on any machine. CudaDevice turns the plan into device
// pointers and launches.
//
//   - Staging: a bf16 operand of an opcode without a bf16 form
//     (rt::hasBf16Form) is widened into a float32 copy for the float32
//     kernel and rounded back if written; a matmul with one float32 and one
//     bf16 input narrows the float32 one (the CPU's rule).
//   - Fusion, each only when the values it stops writing are read by
//     nothing else in any sequence and every output it writes early is
//     clear of the operands it reads:
//       matmul -> [cast of the bias] -> bias_add [-> gelu_fwd]: a cuBLASLt
//         BIAS or (opt-in) GELU_AUX_BIAS epilogue (the bias_add's output is
//         GELU's aux input, kept for gelu_bwd);
//       matmul -> gelu_bwd: a DGELU epilogue;
//       add -> [casts] -> layernorm_fwd of the sum: the add inside the norm;
//       cross_entropy_fwd -> cross_entropy_bwd -> bf16 cast of the
//         gradient: one pass that writes the bf16 gradient.
//   - Wide classifiers: a matmul whose output rows are not 16-byte aligned
//     (a vocabulary like 50,257) writes rows padded to a multiple of 8
//     elements in a scratch buffer when a fused cross-entropy is its only
//     reader, and the matmuls that read that cross-entropy's bf16 gradient
//     read it padded too (cuBLASLt's fast kernels need aligned rows).
//   - Multi-tensor groups: a run of adamw_step (or sgd_step) instructions,
//     grad_sumsq and clip_grads each become one launch over a table.
//   - Segments: maximal runs of instructions that need no host work become
//     CUDA graphs.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_CUDABINDPLAN_H
#define STRATA_RUNTIME_CUDA_CUDABINDPLAN_H

#include "runtime/format/Program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace strata::rt::cuda {

/// The arena's base is aligned to this (cudaMalloc gives 256 bytes), so an
/// operand's alignment is its offset's.
constexpr uint64_t kArenaBaseAlignment = 256;

struct StagePlan {
  uint32_t operand = 0; ///< Index into the instruction's operands.
  DType to = DType::F32;
  bool read = false, written = false;
};

enum class EpilogueKind : uint8_t { None, Bias, BiasGeluAux, DGelu };

/// A padded scratch matrix standing in for a buffer: rows x ld elements.
struct PaddedView {
  int scratch = -1; ///< Index into BindPlan::scratch; -1: not padded.
  int64_t rows = 0, cols = 0, ld = 0;
};

struct InstructionPlan {
  std::vector<StagePlan> staged;
  bool skip = false;     ///< Fused into another instruction.
  bool hostWork = false; ///< Never inside a CUDA graph.
  /// Instructions fused into this one (their indices), and the one it
  /// runs first (a bias's cast moved ahead of the matmul), or -1.
  std::vector<size_t> absorbed;
  int runBefore = -1;
  /// matmul: epilogue, its buffers, and the buffer D is written to
  /// (kNoBuffer: the instruction's own C).
  EpilogueKind epilogue = EpilogueKind::None;
  uint32_t bias = kNoBuffer, aux = kNoBuffer, out = kNoBuffer;
  /// matmul: operands read or written padded (a = 0, b = 1, c = 2), and
  /// n or k widened to the padding (0: as the instruction says).
  PaddedView padded[3];
  int64_t n = 0, k = 0;
  /// convert: writes into this scratch buffer instead (-1: its own).
  int redirect = -1;
  /// layernorm_fwd fused with the add before it: the add's inputs.
  uint32_t residualA = kNoBuffer, residualB = kNoBuffer;
  /// cross_entropy_fwd fused with its backward: the bf16 gradient buffer
  /// (or a padded scratch), the backward's scale, and padded logits.
  uint32_t ceGrad = kNoBuffer;
  float ceScale = 0;
  bool ceDropLse = false; ///< The lse shares the cast's memory: not stored.
  bool ceZeroPadding = false; ///< Gradient columns past vocab written 0.
  PaddedView ceLogits, ceGradPadded;
  /// Multi-tensor group index, or -1.
  int group = -1;
};

struct GroupPlan {
  Opcode opcode = Opcode::AdamWStep;
  size_t first = 0, last = 0; ///< Instruction indices, inclusive.
};

struct SegmentPlan {
  size_t begin = 0, end = 0;
  bool device = false;
};

struct SequencePlan {
  std::vector<InstructionPlan> instructions;
  std::vector<GroupPlan> groups;
  std::vector<SegmentPlan> segments;
};

struct ScratchPlan {
  uint64_t bytes = 0;
  std::string what;
  bool zeroed = false; ///< Zero-filled once when allocated.
};

struct BindOptions {
  bool fuse = true;   ///< STRATA_CUDA_FUSE
  bool padWide = true;
  /// GELU_AUX_BIAS epilogues (STRATA_CUDA_GELU_EPILOGUE=1).
  bool geluEpilogue = false;
};

struct BindPlan {
  SequencePlan sequences[kNumSequenceKinds];
  /// Device buffers outside the arena (padded classifier matrices).
  std::vector<ScratchPlan> scratch;
  uint64_t stagingBytes = 0;
};

/// Whether the bf16 FlashAttention kernels take this attention instruction
/// (head dimension 16, 32, 64 or 128; operands 16-byte aligned).
bool flashAttentionTakes(const RankProgram &rank, const Instruction &inst);

/// The options the environment asks for: STRATA_CUDA_FUSE=0 turns every
/// fusion off, STRATA_CUDA_GELU_EPILOGUE=1 fuses GELU into matmuls;
/// values other than 0 and 1 are errors naming the variable.
BindOptions bindOptionsFromEnvironment();

/// The device's decisions for `rank` (see above).
BindPlan planCudaBinding(const RankProgram &rank, const BindOptions &options);

/// A human-readable account: fusions, staged instructions, groups, graph
/// segments, scratch (`BIN --cuda-plan`).
std::string describeCudaBinding(const RankProgram &rank, const BindPlan &plan);

} // namespace strata::rt::cuda

#endif // STRATA_RUNTIME_CUDA_CUDABINDPLAN_H
