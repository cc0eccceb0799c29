//===- OpSchema.h - Operand and attribute schema of every opcode ----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// One table entry per opcode declares its operands (name, role, dtype), its
// integer and float attributes by name, and a verifier for the element counts
// the kernel will touch. The program verifier, the ProgramBuilder, the
// disassembler in error messages and docs/program-format.md all follow it.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_FORMAT_OPSCHEMA_H
#define STRATA_RUNTIME_FORMAT_OPSCHEMA_H

#include "runtime/format/Program.h"

#include <string>
#include <vector>

namespace strata::rt {

enum class OperandRole : uint8_t {
  In,    ///< Read only.
  Out,   ///< Overwritten.
  InOut, ///< Read and written (accumulated into, or updated in place).
};

/// Operand flags beyond the single dtype.
enum OperandFlags : uint8_t {
  kOperandOptional = 1, ///< May be kNoBuffer ("none").
  kOperandAnyFloat = 2, ///< f32 or f64 (collectives).
  kOperandAnyDType = 4, ///< f32, f64 or i32 (point-to-point transfers).
  kOperandAny32 = 8,    ///< f32 or i32 (data movement of 4-byte elements).
};

struct OperandSpec {
  const char *name;
  OperandRole role;
  DType dtype;
  uint8_t flags = 0;
};

/// What instructions may refer to besides their own operands: the program's
/// metadata and process groups, and the rank being verified. Instructions
/// that need it (collectives, load_batch) fail to verify without it.
struct VerifyEnv {
  const ModelMeta *meta = nullptr;
  const std::vector<ProcessGroup> *groups = nullptr;
  uint32_t rank = 0;
};

/// What an op-specific verifier sees: the instruction and its operand buffers
/// (nullptr for an optional operand given as none).
struct VerifyContext {
  const Instruction &inst;
  std::vector<const BufferDesc *> operands;
  /// Set by the verifier on failure.
  std::string error;
  const VerifyEnv *env = nullptr;

  /// Checks that operand `index` holds exactly `elements` elements.
  bool expectElements(size_t index, int64_t elements);
  /// Checks that int attribute `index` lies in [lo, hi].
  bool expectIntRange(size_t index, int64_t lo, int64_t hi);
};

struct OpSchema {
  Opcode opcode;
  const char *name;
  std::vector<OperandSpec> operands;
  /// The last operand may repeat (one or more times), e.g. the gradients of
  /// grad_sumsq.
  bool variadicLastOperand = false;
  std::vector<const char *> ints;
  /// When set, `ints` names the leading attributes only and the verifier
  /// checks the count (transpose: rank, dims..., perm...).
  bool variadicInts = false;
  std::vector<const char *> floats;
  /// Outputs may be the very same buffer as an input (elementwise ops).
  /// Partial overlaps are always rejected.
  bool allowsExactAlias = false;
  /// Checks element counts and attribute values; returns false with
  /// ctx.error set when the kernel could not run safely.
  bool (*verify)(VerifyContext &ctx) = nullptr;
};

/// nullptr for an unknown opcode number.
const OpSchema *lookupOpSchema(uint16_t opcode);
const OpSchema &getOpSchema(Opcode opcode);
/// nullptr for an unknown name.
const OpSchema *lookupOpSchema(const std::string &name);
const std::vector<OpSchema> &allOpSchemas();

/// Verifies one instruction against a rank's buffer table. Returns an empty
/// string when it is valid, otherwise what is wrong.
std::string verifyInstruction(const Instruction &inst,
                              const std::vector<BufferDesc> &buffers,
                              const VerifyEnv *env = nullptr);

/// How an instruction uses the request slots of its rank.
enum class SlotUse { None, Start, Wait };
/// The slot use of `inst` and the slot index (its last int attribute).
SlotUse slotUse(const Instruction &inst, int64_t *slot = nullptr);
/// Collectives and transfers (opcodes 128..191).
bool isCommunication(Opcode opcode);

/// "matmul(a=x, b=w, c=y; batch=1, ...; alpha=1, beta=0)" for messages.
std::string describeInstruction(const Instruction &inst,
                                const std::vector<BufferDesc> &buffers);

/// Whether the kernels of `op` read and write operands of these dtypes
/// themselves (their bf16 forms: activations bf16, statistics float32, a
/// gradient accumulated into float32 or bf16). Every backend implements
/// exactly these forms, so a bf16 program computes the same on each; the
/// device stages the bf16 operands of every other instruction through
/// float32 copies (matmul, convert, load_batch and collectives take any
/// dtype on their own).
bool hasBf16Form(Opcode op, const std::vector<DType> &dtypes);

} // namespace strata::rt

#endif // STRATA_RUNTIME_FORMAT_OPSCHEMA_H
