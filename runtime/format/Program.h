//===- Program.h - The Strata program: schema shared with the compiler ----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The in-memory form of a program file (docs/program-format.md). The compiler
// includes this header (and ProgramBuilder.h) to emit programs; the runtime
// parses and verifies them. Nothing here depends on MLIR.
//
// A program holds model metadata and the training configuration once, plus a
// table of per-rank programs, each with its own arena, buffers, parameters and
// instruction sequences. Distributed plans add ranks and opcodes; they never
// change what is already here.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_FORMAT_PROGRAM_H
#define STRATA_RUNTIME_FORMAT_PROGRAM_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata::rt {

/// Bumped whenever the meaning of existing bytes changes. Readers reject other
/// versions; additive sections keep the version (readers skip unknown ones).
constexpr uint32_t kProgramFormatVersion = 1;
/// Programs for a target other than the CPU carry this version, so that a
/// runtime that does not know targets (and would skip the TARGET section
/// and run the program on its CPU) refuses them. This runtime reads both.
constexpr uint32_t kProgramFormatVersionTargets = 2;
constexpr char kProgramMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'P', 'G'};
constexpr size_t kProgramHeaderBytes = 32;
/// The arena base is aligned to this, and ProgramBuilder places buffers on
/// multiples of it. The verifier only requires dtype alignment, so that the
/// compiler may alias a buffer into part of another (q, k, v of one qkv).
constexpr uint64_t kBufferAlignment = 64;
/// Marks an optional buffer reference as absent.
constexpr uint32_t kNoBuffer = 0xFFFFFFFFu;

/// BF16: bfloat16, stored as uint16_t (the upper half of a float32).
enum class DType : uint8_t { F32 = 0, I32 = 1, F64 = 2, BF16 = 3 };
const char *dtypeName(DType dtype);
size_t dtypeBytes(DType dtype);

enum class Opcode : uint16_t {
#define STRATA_OPCODE(Enum, Name, Number) Enum = Number,
#include "runtime/format/Opcodes.def"
};

struct BufferDesc {
  std::string name;
  uint64_t offset = 0; ///< Byte offset in the arena.
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t numElements() const;
  uint64_t byteSize() const { return numElements() * dtypeBytes(dtype); }
};

enum class InitKind : uint8_t { Zeros = 0, Ones = 1, Normal = 2 };

struct ParamDesc {
  /// Checkpoint name, e.g. "h.0.attn.c_attn.weight".
  std::string name;
  uint32_t value = kNoBuffer;
  uint32_t grad = kNoBuffer;
  /// Optimizer state: {momentum} for SGD, {exp_avg, exp_avg_sq} for AdamW.
  std::vector<uint32_t> state;
  InitKind init = InitKind::Zeros;
  double initStd = 0.0;
  bool weightDecay = false;
  /// Shape of the whole (unsharded) tensor and where this rank's value buffer
  /// starts in it, per dimension. Empty means "the value buffer is the whole
  /// tensor". Initialisation is defined on the whole tensor's element indices.
  /// The box [shardStart, shardStart + local shape) may reach past
  /// globalShape (padding, e.g. a vocab split evenly): those elements are
  /// zero, never initialised from --init and never saved.
  std::vector<int64_t> globalShape;
  std::vector<int64_t> shardStart;
  /// Shape of the tensor in checkpoints and --init files when globalShape is
  /// a view of it (same row-major bytes, same element count), e.g. [768, 2304]
  /// viewed as [768, 3, 12, 64]. Empty: the checkpoint shape is globalShape
  /// (or the value's shape when that is empty too).
  std::vector<int64_t> checkpointShape;
  /// The optimizer-state buffers may cover only the flat range
  /// [stateOffset, stateOffset + n) of this rank's value buffer (ZeRO), where
  /// n is the state buffers' element count; 0 with n = value's count means
  /// the whole value. With valueSharded the range is of the local box.
  int64_t stateOffset = 0;
  /// ZeRO-3: the rank's persistent copy of the parameter is only the flat
  /// range [stateOffset, stateOffset + ns) of its local box (row-major), so
  /// the value buffer has exactly ns elements, the state buffers' count
  /// (ns may be 0: this rank holds none of it). The compiler gathers the
  /// box into other buffers where it needs it. The gradient buffer has the
  /// box's or ns elements. Every rank's ranges of one box, together, must
  /// cover the box (docs/program-format.md).
  bool valueSharded = false;
  /// The local box's shape when valueSharded (the value buffer no longer
  /// has it). Empty: the box is the whole tensor (globalShape, or
  /// checkpointShape when that is empty too). Must be empty otherwise.
  std::vector<int64_t> boxShape;
};

/// A process group: `ranks` are global rank ids in group order, so a
/// member's index in the list is its rank within the group.
struct ProcessGroup {
  std::string name; ///< e.g. "world", "dp0", "tp1".
  std::vector<uint32_t> ranks;
  /// The member index of `globalRank`, or -1.
  int indexOf(uint32_t globalRank) const;
};

/// Collective reduction operators (the `op` int of all_reduce).
enum class ReduceOp : uint8_t { Sum = 0, Max = 1 };

/// Non-blocking collectives park their request in one of this many slots
/// per rank until `wait` completes it.
constexpr int64_t kNumRequestSlots = 64;

struct Instruction {
  Opcode opcode = Opcode::Fill;
  std::vector<uint32_t> operands; ///< Buffer indices of the rank program.
  std::vector<int64_t> ints;
  std::vector<double> floats;
};

/// When each instruction sequence runs within one training step.
enum class SequenceKind : uint8_t {
  StepBegin = 0,  ///< Once per step, first (e.g. zero the gradients).
  Microbatch = 1, ///< numMicrobatches times: forward + backward, grads add up.
  Update = 2,     ///< Once per step, last: grad norm, clipping, optimizer.
  /// Replaces Microbatch for the last micro-batch of a step when non-empty
  /// (e.g. with the data-parallel gradient all-reduce starts interleaved
  /// into the last backward).
  LastMicrobatch = 3,
  /// When non-empty the step is StepBegin, Schedule once, Update: the
  /// program interleaves its micro-batches itself (pipeline schedules) and
  /// loads their inputs with load_batch.
  Schedule = 4,
  /// Evaluation, forward only (no gradient, no update): run per
  /// micro-batch like Microbatch, with the inputs loaded the same way; the
  /// loss buffer holds the micro-batch loss afterwards. The training
  /// forward's instructions, so eval losses have training's numerics.
  Eval = 5,
  /// Evaluation of a pipeline rank: run once per batch instead of Eval,
  /// loading inputs with load_batch; the loss buffer holds the mean over
  /// the micro-batches afterwards.
  EvalSchedule = 6,
};
constexpr int kNumSequenceKinds = 7;
const char *sequenceName(SequenceKind kind);

struct RankProgram {
  uint32_t rank = 0;
  uint64_t arenaBytes = 0;
  std::vector<BufferDesc> buffers;
  std::vector<ParamDesc> params;
  /// i32 [microBatch, seqLen] buffers the executor fills before each
  /// micro-batch, and the f32 scalar the loss is read from after it.
  uint32_t tokens = kNoBuffer;
  uint32_t targets = kNoBuffer;
  uint32_t loss = kNoBuffer;
  /// Optional f64 scalar holding the global sum of squared gradients after
  /// `update`; the executor logs sqrt of it as grad_norm.
  uint32_t gradSumSq = kNoBuffer;
  /// Optional i32 [microBatch, seqLen] buffer the executor fills with each
  /// token's position in its sequence (0 .. seqLen-1), for learned position
  /// embeddings.
  uint32_t positions = kNoBuffer;
  /// Row of the step's global-batch row list where this rank's data starts:
  /// micro-batch m reads rows dataRowStart + m*microBatch ... (data-parallel
  /// replica d of D: d * globalBatch / D).
  int64_t dataRowStart = 0;
  /// Inference (decode) programs only: the f32 [1, vocab] buffer holding
  /// the next-token logits after each run.
  uint32_t logits = kNoBuffer;
  std::vector<Instruction> sequences[kNumSequenceKinds];

  const std::vector<Instruction> &sequence(SequenceKind kind) const {
    return sequences[static_cast<int>(kind)];
  }
  std::vector<Instruction> &sequence(SequenceKind kind) {
    return sequences[static_cast<int>(kind)];
  }
  /// Index of the buffer called `name`, or kNoBuffer.
  uint32_t findBuffer(const std::string &name) const;
};

/// The shape of `param`'s local box on `rank`: the value buffer's shape, or
/// with valueSharded boxShape or its default.
const std::vector<int64_t> &paramBoxShape(const RankProgram &rank,
                                          const ParamDesc &param);

struct ModelMeta {
  std::string family; ///< e.g. "gpt", "mlp".
  int64_t vocab = 0;
  int64_t seqLen = 0;
  int64_t microBatch = 0;      ///< Rows (sequences) per micro-batch.
  int64_t numMicrobatches = 1; ///< Gradient accumulation steps per step.
  int64_t globalBatch = 0;     ///< Rows per optimizer step, all ranks.
  uint64_t seed = 0;
  std::string planDescription; ///< Free text from the compiler.
  uint32_t worldSize = 1;
  /// Model FLOPs of one optimizer step over all ranks (3x the forward, no
  /// recomputation) and one rank's peak FLOP/s in the cluster's device
  /// model: the runtime's MFU is flopsPerStep / step time / (world x peak).
  /// 0 when unknown.
  double flopsPerStep = 0.0;
  double peakFlops = 0.0;
  /// The model's Hugging Face config (config.json) as JSON text, for the
  /// families that have one (gpt, llama); empty otherwise.
  std::string hfConfig;
};

/// Where a program runs (`strata compile --target`).
enum class TargetKind : uint8_t { Cpu = 0, Cuda = 1 };
const char *targetName(TargetKind target);

/// The target and the device model the planner planned for: the runtime
/// runs the program on that kind of device and reports what it found.
struct TargetDesc {
  TargetKind kind = TargetKind::Cpu;
  std::string deviceModel; ///< The cluster's device, e.g. "H100-SXM5-80GB".
  std::string cluster;     ///< The cluster it was planned for, e.g.
                           ///< "dgx-h100:1"; empty when unknown.
};

enum class OptimizerKind : uint8_t { Sgd = 0, AdamW = 1 };
enum class LrScheduleKind : uint8_t { Constant = 0, Cosine = 1, Linear = 2 };

struct TrainConfig {
  OptimizerKind optimizer = OptimizerKind::AdamW;
  double lr = 1e-3;
  double momentum = 0.0;                         ///< SGD only.
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8; ///< AdamW only.
  double weightDecay = 0.0;
  LrScheduleKind schedule = LrScheduleKind::Constant;
  int64_t warmupSteps = 0;
  double minLr = 0.0;
  int64_t totalSteps = 0; ///< Where cosine/linear decay reaches minLr.
  double gradClip = 0.0;  ///< Max global grad norm; 0 disables clipping.
  int64_t defaultSteps = 1;
};

struct Program {
  ModelMeta meta;
  TrainConfig train;
  /// Absent from older programs: the CPU, no device model.
  TargetDesc target;
  std::vector<RankProgram> ranks; ///< ranks[r].rank == r.
  /// Process groups; collectives name one by its index in this table.
  std::vector<ProcessGroup> groups;
  /// Ranks whose loss buffer carries the step loss (one per data-parallel
  /// replica, at the last pipeline stage). Empty: every rank with a loss
  /// buffer.
  std::vector<uint32_t> lossRanks;

  /// lossRanks, or its default when empty.
  std::vector<uint32_t> effectiveLossRanks() const;

  /// The inference program for generation, when the model has one: one
  /// rank, whole (unsharded) parameters by checkpoint name without
  /// gradients or optimizer state, `tokens` and `positions` i32 [1, 1]
  /// inputs, `logits` output, and a Microbatch sequence that runs the
  /// forward for one new position (ExecContext::step = that position),
  /// reading and extending the key/value caches kept in its arena.
  std::optional<RankProgram> decode;
};

/// Serialises to the versioned file format, header and checksum included.
std::vector<uint8_t> serializeProgram(const Program &program);

/// Parses and verifies (verifyProgram) a program file image. `source` names
/// the file in error messages. Throws RuntimeError on any problem: bad magic,
/// version, checksum, truncation, or a program that does not verify.
Program parseProgram(const uint8_t *data, size_t size,
                     const std::string &source);

/// Reads a whole program file from disk and parses it.
Program loadProgramFile(const std::string &path);

/// Checks everything the executor and kernels rely on: buffers inside the
/// arena and aligned, operand counts, dtypes, attribute counts and element
/// counts of every instruction, parameter and input tables, process groups,
/// collective group membership and sizes. Throws RuntimeError naming the
/// rank, sequence and instruction.
void verifyProgram(const Program &program, const std::string &source);

/// Number of elements of a shape (1 for a scalar), -1 on overflow.
int64_t shapeElements(const std::vector<int64_t> &shape);

/// 64-bit FNV-1a, the payload checksum.
uint64_t fnv1a64(const uint8_t *data, size_t size,
                 uint64_t hash = 0xcbf29ce484222325ULL);

} // namespace strata::rt

#endif // STRATA_RUNTIME_FORMAT_PROGRAM_H
