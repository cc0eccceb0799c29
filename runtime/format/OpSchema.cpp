//===- OpSchema.cpp - Operand and attribute schema of every opcode --------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/format/OpSchema.h"
#include "runtime/kernels/BinaryMath.h"
#include "runtime/kernels/UnaryMath.h"

#include <algorithm>
#include <sstream>

namespace strata::rt {

namespace {

constexpr int64_t kMaxDim = int64_t(1) << 40;
constexpr int64_t kMaxElements = int64_t(1) << 56;
constexpr int64_t kUnaryKinds = kernels::kNumUnaryKinds;

/// Product of dims, or -1 on overflow (so it never matches a buffer size).
int64_t product(std::initializer_list<int64_t> dims) {
  __int128 p = 1;
  for (int64_t d : dims) {
    if (d < 0 || d > kMaxDim)
      return -1;
    p *= d;
    if (p > kMaxElements)
      return -1;
  }
  return static_cast<int64_t>(p);
}

int64_t attr(VerifyContext &ctx, size_t i) { return ctx.inst.ints[i]; }

/// All operands hold the same number of elements (elementwise ops).
bool verifySameSize(VerifyContext &ctx) {
  int64_t n = ctx.operands[0]->numElements();
  for (size_t i = 1; i < ctx.operands.size(); ++i)
    if (!ctx.expectElements(i, n))
      return false;
  return true;
}

bool verifyAny(VerifyContext &) { return true; }

/// unary_fwd / unary_bwd: elementwise, and a kind the kernels know.
bool verifyUnary(VerifyContext &ctx) {
  if (attr(ctx, 0) < 0 || attr(ctx, 0) >= kUnaryKinds) {
    ctx.error = "kind " + std::to_string(attr(ctx, 0)) +
                " is not a unary function (expected 0.." +
                std::to_string(kUnaryKinds - 1) + ")";
    return false;
  }
  return verifySameSize(ctx);
}

/// binary_fwd: x and out [lead, outer, mid, inner] (lead the rest), y
/// [outer, inner], a kind the kernels know.
bool verifyBinary(VerifyContext &ctx) {
  if (attr(ctx, 0) < 0 || attr(ctx, 0) >= kernels::kNumBinaryKinds) {
    ctx.error = "kind " + std::to_string(attr(ctx, 0)) +
                " is not a binary function (expected 0.." +
                std::to_string(kernels::kNumBinaryKinds - 1) + ")";
    return false;
  }
  for (size_t i = 1; i < 4; ++i)
    if (!ctx.expectIntRange(i, 1, kMaxDim))
      return false;
  int64_t block = product({attr(ctx, 1), attr(ctx, 2), attr(ctx, 3)});
  int64_t n = ctx.operands[0]->numElements();
  if (block < 0 || n % block != 0) {
    ctx.error = "binary_fwd's x has " + std::to_string(n) +
                " elements, not a multiple of outer * mid * inner";
    return false;
  }
  return ctx.expectElements(1, product({attr(ctx, 1), attr(ctx, 3)})) &&
         ctx.expectElements(2, n);
}

/// convert: float32 <-> bfloat16 (or a copy within one of them).
bool verifyConvert(VerifyContext &ctx) {
  for (size_t i = 0; i < 2; ++i)
    if (ctx.operands[i]->dtype != DType::F32 &&
        ctx.operands[i]->dtype != DType::BF16) {
      ctx.error = "operand '" + ctx.operands[i]->name +
                  "' must be f32 or bf16, not " +
                  dtypeName(ctx.operands[i]->dtype);
      return false;
    }
  return verifySameSize(ctx);
}

bool verifyScalarFirst(VerifyContext &ctx) { return ctx.expectElements(0, 1); }

bool verifyMatmul(VerifyContext &ctx) {
  for (size_t i = 0; i < 4; ++i)
    if (!ctx.expectIntRange(i, 1, kMaxDim))
      return false;
  for (size_t i = 4; i < 7; ++i)
    if (!ctx.expectIntRange(i, 0, 1))
      return false;
  int64_t batch = attr(ctx, 0), m = attr(ctx, 1), n = attr(ctx, 2),
          k = attr(ctx, 3);
  bool broadcastB = attr(ctx, 6);
  return ctx.expectElements(0, product({batch, m, k})) &&
         ctx.expectElements(1, product({broadcastB ? 1 : batch, k, n})) &&
         ctx.expectElements(2, product({batch, m, n}));
}

/// embedding_fwd: ids, table[rows, hidden], out[ids, hidden].
bool verifyEmbeddingFwd(VerifyContext &ctx) {
  if (!ctx.expectIntRange(0, 1, kMaxDim) ||
      !ctx.expectIntRange(1, 1, kMaxDim) || !ctx.expectIntRange(2, 0, kMaxDim))
    return false;
  int64_t ids = ctx.operands[0]->numElements();
  return ctx.expectElements(1, product({attr(ctx, 0), attr(ctx, 1)})) &&
         ctx.expectElements(2, product({ids, attr(ctx, 1)}));
}

/// embedding_bwd: ids, dout[ids, hidden], dtable[rows, hidden].
bool verifyEmbeddingBwd(VerifyContext &ctx) {
  if (!ctx.expectIntRange(0, 1, kMaxDim) ||
      !ctx.expectIntRange(1, 1, kMaxDim) || !ctx.expectIntRange(2, 0, kMaxDim))
    return false;
  int64_t ids = ctx.operands[0]->numElements();
  return ctx.expectElements(1, product({ids, attr(ctx, 1)})) &&
         ctx.expectElements(2, product({attr(ctx, 0), attr(ctx, 1)}));
}

/// Ops over rows of length ints[0]: operand 0 decides the row count; the
/// operands in `rowShaped` hold rows*n elements, those in `perRow` rows, and
/// those in `perColumn` n.
bool verifyRows(VerifyContext &ctx, std::initializer_list<size_t> rowShaped,
                std::initializer_list<size_t> perRow,
                std::initializer_list<size_t> perColumn) {
  if (!ctx.expectIntRange(0, 1, kMaxDim))
    return false;
  int64_t n = attr(ctx, 0);
  int64_t total = ctx.operands[0]->numElements();
  if (total % n != 0) {
    ctx.error =
        "operand '" + ctx.operands[0]->name + "' has " + std::to_string(total) +
        " elements, not a multiple of the row length " + std::to_string(n);
    return false;
  }
  int64_t rows = total / n;
  for (size_t i : rowShaped)
    if (!ctx.expectElements(i, total))
      return false;
  for (size_t i : perRow)
    if (!ctx.expectElements(i, rows))
      return false;
  for (size_t i : perColumn)
    if (!ctx.expectElements(i, n))
      return false;
  return true;
}

bool verifyBiasAdd(VerifyContext &ctx) { return verifyRows(ctx, {2}, {}, {1}); }
bool verifyBiasGrad(VerifyContext &ctx) { return verifyRows(ctx, {}, {}, {1}); }
bool verifyLayerNormFwd(VerifyContext &ctx) {
  return verifyRows(ctx, {3}, {4, 5}, {1, 2});
}
bool verifyLayerNormBwd(VerifyContext &ctx) {
  return verifyRows(ctx, {1, 5}, {3, 4}, {2, 6, 7});
}
bool verifySoftmaxFwd(VerifyContext &ctx) {
  if (!ctx.expectIntRange(1, 0, 1) || !verifyRows(ctx, {1}, {}, {}))
    return false;
  // A causal mask views the input as [..., n, n].
  int64_t n = attr(ctx, 0);
  if (attr(ctx, 1) && ctx.operands[0]->numElements() % (n * n) != 0) {
    ctx.error =
        "causal softmax needs [..., n, n] input with n=" + std::to_string(n) +
        ", but '" + ctx.operands[0]->name + "' has " +
        std::to_string(ctx.operands[0]->numElements()) + " elements";
    return false;
  }
  return true;
}
bool verifyKvAttention(VerifyContext &ctx) {
  int64_t batch = attr(ctx, 0), heads = attr(ctx, 1), kvHeads = attr(ctx, 2),
          len = attr(ctx, 3), dim = attr(ctx, 4);
  if (batch < 1 || heads < 1 || kvHeads < 1 || len < 1 || dim < 1 ||
      heads % kvHeads != 0 || batch > (int64_t(1) << 20) ||
      heads > (int64_t(1) << 20) || len > (int64_t(1) << 31) ||
      dim > (int64_t(1) << 20)) {
    ctx.error = "kv_attention needs positive batch, heads, kv_heads, max_len "
                "and head_dim with kv_heads dividing heads";
    return false;
  }
  int64_t q = batch * heads * dim, kv = batch * kvHeads * dim;
  return ctx.expectElements(0, q) && ctx.expectElements(1, kv) &&
         ctx.expectElements(2, kv) && ctx.expectElements(3, kv * len) &&
         ctx.expectElements(4, kv * len) && ctx.expectElements(5, q);
}
bool verifyRotaryAtPosition(VerifyContext &ctx) {
  int64_t dim = attr(ctx, 0);
  if (dim < 2 || dim % 2 != 0 || ctx.operands[0]->numElements() % dim != 0) {
    ctx.error = "rotary_at_position needs an even head_dim dividing operand "
                "0's " +
                std::to_string(ctx.operands[0]->numElements()) + " elements";
    return false;
  }
  return ctx.expectElements(1, ctx.operands[0]->numElements());
}
/// Fused attention: ints [batch, heads, kv_heads, seq, head_dim], floats
/// [scale]; query-shaped operands `queryLike`, kv-shaped `kvLike`, and the
/// per-row statistics `rows`.
bool verifyCausalAttention(VerifyContext &ctx, std::vector<size_t> queryLike,
                           std::vector<size_t> kvLike, size_t rows) {
  for (size_t i = 0; i < 5; ++i)
    if (!ctx.expectIntRange(i, 1, kMaxDim))
      return false;
  int64_t batch = attr(ctx, 0), heads = attr(ctx, 1), kvHeads = attr(ctx, 2),
          seq = attr(ctx, 3), dim = attr(ctx, 4);
  if (heads % kvHeads != 0) {
    ctx.error = "causal attention needs kv_heads (" + std::to_string(kvHeads) +
                ") dividing heads (" + std::to_string(heads) + ")";
    return false;
  }
  if (!(ctx.inst.floats[0] > 0.0)) {
    ctx.error = "causal attention needs a positive scale";
    return false;
  }
  int64_t q = product({batch, heads, seq, dim}),
          kv = product({batch, kvHeads, seq, dim}),
          stats = product({batch, heads, seq});
  for (size_t i : queryLike)
    if (!ctx.expectElements(i, q))
      return false;
  for (size_t i : kvLike)
    if (!ctx.expectElements(i, kv))
      return false;
  return ctx.expectElements(rows, stats);
}
bool verifyCausalAttentionFwd(VerifyContext &ctx) {
  return verifyCausalAttention(ctx, {0, 3}, {1, 2}, 4);
}
bool verifyCausalAttentionBwd(VerifyContext &ctx) {
  return verifyCausalAttention(ctx, {0, 1, 4, 6}, {2, 3, 7, 8}, 5);
}
bool verifySoftmaxBwd(VerifyContext &ctx) {
  return verifyRows(ctx, {1, 2}, {}, {});
}
bool verifyCrossEntropyFwd(VerifyContext &ctx) {
  return verifyRows(ctx, {}, {1, 3}, {}) && ctx.expectElements(2, 1);
}
bool verifyCrossEntropyBwd(VerifyContext &ctx) {
  return verifyRows(ctx, {3}, {1, 2}, {});
}

/// Vocabulary-parallel cross-entropy over a shard [rows, n] whose first
/// `valid` columns are real (the rest pad the vocabulary to a multiple of the
/// tensor-parallel degree). ints[validIndex] must lie in [0, n].
bool verifyValidColumns(VerifyContext &ctx, size_t validIndex) {
  return ctx.expectIntRange(validIndex, 0, attr(ctx, 0));
}
/// ce_vp_max: logits, rowmax; ints = [n, valid].
bool verifyCeVpMax(VerifyContext &ctx) {
  return verifyRows(ctx, {}, {1}, {}) && verifyValidColumns(ctx, 1);
}
/// ce_vp_sumexp: logits, targets, rowmax, stats[2 * rows];
/// ints = [n, vocab_start, valid].
bool verifyCeVpSumExp(VerifyContext &ctx) {
  if (!verifyRows(ctx, {}, {1, 2}, {}) || !ctx.expectIntRange(1, 0, kMaxDim) ||
      !verifyValidColumns(ctx, 2))
    return false;
  int64_t rows = ctx.operands[1]->numElements();
  return ctx.expectElements(3, product({2, rows}));
}
/// ce_vp_loss: rowmax[rows], stats[2 * rows], loss[1], lse[rows];
/// ints = [rows].
bool verifyCeVpLoss(VerifyContext &ctx) {
  if (!ctx.expectIntRange(0, 1, kMaxDim))
    return false;
  int64_t rows = attr(ctx, 0);
  return ctx.expectElements(0, rows) &&
         ctx.expectElements(1, product({2, rows})) &&
         ctx.expectElements(2, 1) && ctx.expectElements(3, rows);
}
/// ce_vp_bwd: logits, targets, lse, dlogits; ints = [n, vocab_start, valid].
bool verifyCeVpBwd(VerifyContext &ctx) {
  return verifyRows(ctx, {3}, {1, 2}, {}) &&
         ctx.expectIntRange(1, 0, kMaxDim) && verifyValidColumns(ctx, 2);
}

// Llama family.
bool verifyRmsNormFwd(VerifyContext &ctx) {
  return verifyRows(ctx, {2}, {3}, {1});
}
bool verifyRmsNormBwd(VerifyContext &ctx) {
  return verifyRows(ctx, {1, 4}, {3}, {2, 5});
}
/// rotary_fwd/bwd: x viewed as [outer, seq, dim], dim even.
bool verifyRotary(VerifyContext &ctx) {
  if (!ctx.expectIntRange(0, 1, kMaxDim) || !ctx.expectIntRange(1, 2, kMaxDim))
    return false;
  int64_t seq = attr(ctx, 0), dim = attr(ctx, 1);
  int64_t block = product({seq, dim});
  int64_t total = ctx.operands[0]->numElements();
  if (dim % 2 != 0 || block < 0 || total % block != 0) {
    ctx.error = "rotary needs x [..., seq, dim] with an even dim; '" +
                ctx.operands[0]->name + "' has " + std::to_string(total) +
                " elements for seq " + std::to_string(seq) + ", dim " +
                std::to_string(dim);
    return false;
  }
  return ctx.expectElements(1, total);
}
/// repeat_interleave(_bwd): [outer, n, inner] <-> [outer, n * repeats,
/// inner]; ints = [outer, n, repeats, inner].
bool verifyRepeatInterleave(VerifyContext &ctx, bool backward) {
  for (size_t i = 0; i < 4; ++i)
    if (!ctx.expectIntRange(i, 1, kMaxDim))
      return false;
  int64_t small = product({attr(ctx, 0), attr(ctx, 1), attr(ctx, 3)});
  int64_t big =
      product({attr(ctx, 0), attr(ctx, 1), attr(ctx, 2), attr(ctx, 3)});
  return ctx.expectElements(0, backward ? big : small) &&
         ctx.expectElements(1, backward ? small : big);
}
bool verifyRepeatFwd(VerifyContext &ctx) {
  return verifyRepeatInterleave(ctx, false);
}
bool verifyRepeatBwd(VerifyContext &ctx) {
  return verifyRepeatInterleave(ctx, true);
}

bool verifyTranspose(VerifyContext &ctx) {
  const auto &ints = ctx.inst.ints;
  if (ints.empty() || ints[0] < 1 || ints[0] > 5) {
    ctx.error = "transpose needs ints = [rank, dims..., perm...] with rank in "
                "1..5";
    return false;
  }
  size_t rank = ints[0];
  if (ints.size() != 1 + 2 * rank) {
    ctx.error = "transpose of rank " + std::to_string(rank) + " needs " +
                std::to_string(1 + 2 * rank) + " int attributes, got " +
                std::to_string(ints.size());
    return false;
  }
  __int128 total = 1;
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < rank; ++i) {
    int64_t d = ints[1 + i], p = ints[1 + rank + i];
    if (d < 1 || d > kMaxDim || p < 0 || p >= int64_t(rank) || seen[p]) {
      ctx.error = "transpose dims must be >= 1 and perm a permutation of 0.." +
                  std::to_string(rank - 1);
      return false;
    }
    seen[p] = true;
    total *= d;
    if (total > kMaxElements)
      return ctx.expectElements(0, -1);
  }
  return ctx.expectElements(0, int64_t(total)) &&
         ctx.expectElements(1, int64_t(total));
}

/// slice_copy (x big -> out small) and slice_insert (x small -> out big):
/// ints = [outer, big, small, start, inner].
bool verifySlice(VerifyContext &ctx, bool insert) {
  for (size_t i = 0; i < 5; ++i)
    if (!ctx.expectIntRange(i, i == 2 || i == 3 ? 0 : 1, kMaxDim))
      return false;
  if (insert && !ctx.expectIntRange(5, 0, 1))
    return false;
  int64_t outer = attr(ctx, 0), big = attr(ctx, 1), small = attr(ctx, 2),
          start = attr(ctx, 3), inner = attr(ctx, 4);
  if (start + small > big) {
    ctx.error = "slice [" + std::to_string(start) + ", " +
                std::to_string(start + small) + ") exceeds the axis length " +
                std::to_string(big);
    return false;
  }
  int64_t bigElems = product({outer, big, inner});
  int64_t smallElems = product({outer, small, inner});
  return ctx.expectElements(0, insert ? smallElems : bigElems) &&
         ctx.expectElements(1, insert ? bigElems : smallElems);
}
/// Data movement of 4-byte elements: both sides must have one dtype.
bool verifySameDType(VerifyContext &ctx) {
  if (ctx.operands[0]->dtype == ctx.operands[1]->dtype)
    return true;
  ctx.error = std::string("operands '") + ctx.operands[0]->name + "' and '" +
              ctx.operands[1]->name + "' must have the same dtype";
  return false;
}
bool verifyCopy(VerifyContext &ctx) {
  return verifySameDType(ctx) && verifySameSize(ctx);
}
bool verifySliceCopy(VerifyContext &ctx) {
  return verifySameDType(ctx) && verifySlice(ctx, false);
}
bool verifySliceInsert(VerifyContext &ctx) { return verifySlice(ctx, true); }

bool verifyOptimizer(VerifyContext &ctx) { return verifySameSize(ctx); }

/// Collectives hand element counts to MPI/NCCL as int.
constexpr int64_t kMaxCommElements = (int64_t(1) << 31) - 1;

bool needEnv(VerifyContext &ctx) {
  if (ctx.env && ctx.env->meta && ctx.env->groups)
    return true;
  ctx.error = "needs the program's metadata and process groups to verify "
              "(build it with a ProgramBuilder or verify the whole program)";
  return false;
}

/// The group named by int attribute 0; the rank must be a member.
const ProcessGroup *memberGroup(VerifyContext &ctx) {
  if (!needEnv(ctx))
    return nullptr;
  const auto &groups = *ctx.env->groups;
  int64_t g = ctx.inst.ints[0];
  if (g < 0 || g >= int64_t(groups.size())) {
    ctx.error = "group " + std::to_string(g) +
                " does not exist (the program "
                "has " +
                std::to_string(groups.size()) + " process groups)";
    return nullptr;
  }
  if (groups[g].indexOf(ctx.env->rank) < 0) {
    ctx.error = "rank " + std::to_string(ctx.env->rank) +
                " is not a member of group " + std::to_string(g) + " ('" +
                groups[g].name + "')";
    return nullptr;
  }
  return &groups[g];
}

bool expectSlot(VerifyContext &ctx) {
  return ctx.expectIntRange(ctx.inst.ints.size() - 1, 0, kNumRequestSlots - 1);
}

bool expectCommSize(VerifyContext &ctx, size_t i) {
  if (ctx.operands[i]->numElements() <= kMaxCommElements)
    return true;
  ctx.error = "operand '" + ctx.operands[i]->name +
              "' has more than 2^31-1 "
              "elements; split the transfer";
  return false;
}

bool expectSameDType(VerifyContext &ctx) {
  if (ctx.operands[0]->dtype == ctx.operands[1]->dtype)
    return true;
  ctx.error = "operands '" + ctx.operands[0]->name + "' and '" +
              ctx.operands[1]->name + "' must have the same dtype";
  return false;
}

bool verifyAllReduce(VerifyContext &ctx) {
  return memberGroup(ctx) && ctx.expectIntRange(1, 0, 1) &&
         expectCommSize(ctx, 0) &&
         (slotUse(ctx.inst) != SlotUse::Start || expectSlot(ctx));
}

/// reduce_scatter: in [groupSize * n], out [n]; all_gather the reverse.
bool verifyScatterGather(VerifyContext &ctx, bool scatter) {
  const ProcessGroup *group = memberGroup(ctx);
  if (!group || !expectSameDType(ctx) || !expectCommSize(ctx, 0) ||
      !expectCommSize(ctx, 1) ||
      (slotUse(ctx.inst) == SlotUse::Start && !expectSlot(ctx)))
    return false;
  size_t whole = scatter ? 0 : 1, chunk = scatter ? 1 : 0;
  int64_t n = ctx.operands[chunk]->numElements();
  if (!ctx.expectElements(whole, n * int64_t(group->ranks.size())))
    return false;
  // all_gather may run in place (ZeRO: gather the updated slices back into
  // the parameter): `in` is then exactly this rank's chunk of `out`.
  const BufferDesc &in = *ctx.operands[0], &out = *ctx.operands[1];
  bool overlap = in.offset < out.offset + out.byteSize() &&
                 out.offset < in.offset + in.byteSize();
  if (!scatter && overlap) {
    uint64_t chunkOffset =
        out.offset + uint64_t(group->indexOf(ctx.env->rank)) * in.byteSize();
    if (in.offset != chunkOffset) {
      ctx.error = "in-place all_gather needs 'in' to be exactly this rank's "
                  "chunk (group rank " +
                  std::to_string(group->indexOf(ctx.env->rank)) + ") of '" +
                  out.name + "'";
      return false;
    }
  }
  return true;
}
bool verifyReduceScatter(VerifyContext &ctx) {
  return verifyScatterGather(ctx, true);
}
bool verifyAllGather(VerifyContext &ctx) {
  return verifyScatterGather(ctx, false);
}

bool verifyPointToPoint(VerifyContext &ctx) {
  if (!needEnv(ctx))
    return false;
  int64_t world = ctx.env->meta->worldSize;
  if (!ctx.expectIntRange(0, 0, world - 1) ||
      !ctx.expectIntRange(1, 0, (1 << 20) - 1) || !expectCommSize(ctx, 0) ||
      (slotUse(ctx.inst) == SlotUse::Start && !expectSlot(ctx)))
    return false;
  if (ctx.inst.ints[0] == int64_t(ctx.env->rank)) {
    ctx.error = "peer " + std::to_string(ctx.inst.ints[0]) +
                " is the rank itself; use copy";
    return false;
  }
  return true;
}

bool verifyBarrier(VerifyContext &ctx) { return memberGroup(ctx) != nullptr; }

bool verifyWait(VerifyContext &ctx) { return expectSlot(ctx); }

/// load_batch: tokens, targets, positions, each i32 [microBatch, seqLen] or
/// none; ints: micro-batch index.
bool verifyLoadBatch(VerifyContext &ctx) {
  if (!needEnv(ctx))
    return false;
  const ModelMeta &m = *ctx.env->meta;
  if (!ctx.expectIntRange(0, 0, m.numMicrobatches - 1))
    return false;
  bool any = false;
  for (size_t i = 0; i < ctx.operands.size(); ++i) {
    if (!ctx.operands[i])
      continue;
    any = true;
    if (!ctx.expectElements(i, m.microBatch * m.seqLen))
      return false;
  }
  if (!any)
    ctx.error = "load_batch needs at least one buffer to fill";
  return any;
}

constexpr auto In = OperandRole::In;
constexpr auto Out = OperandRole::Out;
constexpr auto InOut = OperandRole::InOut;
constexpr auto F32 = DType::F32;
constexpr auto I32 = DType::I32;
constexpr auto F64 = DType::F64;
constexpr uint8_t Opt = kOperandOptional;
constexpr uint8_t AnyFloat = kOperandAnyFloat;
constexpr uint8_t AnyDType = kOperandAnyDType;
constexpr uint8_t Any32 = kOperandAny32;

std::vector<OpSchema> buildSchemas() {
  std::vector<OpSchema> s;
  auto add = [&](OpSchema schema) { s.push_back(std::move(schema)); };
  // clang-format off
  add({Opcode::Fill, "fill", {{"out", Out, F32}}, false, {}, false, {"value"}, false, verifyAny});
  add({Opcode::Copy, "copy", {{"x", In, F32, Any32}, {"out", Out, F32, Any32}}, false, {}, false, {}, true, verifyCopy});
  add({Opcode::Accumulate, "accumulate", {{"x", In, F32}, {"y", InOut, F32}}, false, {}, false, {}, true, verifySameSize});
  add({Opcode::Add, "add", {{"a", In, F32}, {"b", In, F32}, {"out", Out, F32}}, false, {}, false, {}, true, verifySameSize});
  add({Opcode::Mul, "mul", {{"a", In, F32}, {"b", In, F32}, {"out", Out, F32}}, false, {}, false, {}, true, verifySameSize});
  add({Opcode::Scale, "scale", {{"x", In, F32}, {"out", Out, F32}}, false, {}, false, {"alpha"}, true, verifySameSize});
  add({Opcode::Transpose, "transpose", {{"x", In, F32}, {"out", Out, F32}}, false, {"rank"}, true, {}, false, verifyTranspose});
  add({Opcode::SliceCopy, "slice_copy", {{"x", In, F32, Any32}, {"out", Out, F32, Any32}}, false, {"outer", "big", "small", "start", "inner"}, false, {}, false, verifySliceCopy});
  add({Opcode::LoadBatch, "load_batch", {{"tokens", Out, I32, Opt}, {"targets", Out, I32, Opt}, {"positions", Out, I32, Opt}}, false, {"microbatch"}, false, {}, false, verifyLoadBatch});
  add({Opcode::SliceInsert, "slice_insert", {{"x", In, F32}, {"out", InOut, F32}}, false, {"outer", "big", "small", "start", "inner", "accumulate"}, false, {}, false, verifySliceInsert});
  // Mixed precision (bf16 helper's block).
  add({Opcode::Convert, "convert", {{"x", In, F32, AnyFloat}, {"out", Out, F32, AnyFloat}}, false, {}, false, {}, false, verifyConvert});
  add({Opcode::Matmul, "matmul", {{"a", In, F32}, {"b", In, F32}, {"c", InOut, F32}}, false, {"batch", "m", "n", "k", "trans_a", "trans_b", "broadcast_b"}, false, {"alpha", "beta"}, false, verifyMatmul});
  add({Opcode::EmbeddingFwd, "embedding_fwd", {{"ids", In, I32}, {"table", In, F32}, {"out", Out, F32}}, false, {"rows", "hidden", "row_start"}, false, {}, false, verifyEmbeddingFwd});
  add({Opcode::EmbeddingBwd, "embedding_bwd", {{"ids", In, I32}, {"dout", In, F32}, {"dtable", InOut, F32}}, false, {"rows", "hidden", "row_start"}, false, {}, false, verifyEmbeddingBwd});
  add({Opcode::BiasAdd, "bias_add", {{"x", In, F32}, {"bias", In, F32}, {"out", Out, F32}}, false, {"n"}, false, {}, true, verifyBiasAdd});
  add({Opcode::BiasGrad, "bias_grad", {{"dout", In, F32}, {"dbias", InOut, F32}}, false, {"n"}, false, {}, false, verifyBiasGrad});
  add({Opcode::GeluFwd, "gelu_fwd", {{"x", In, F32}, {"out", Out, F32}}, false, {}, false, {}, true, verifySameSize});
  add({Opcode::GeluBwd, "gelu_bwd", {{"x", In, F32}, {"dy", In, F32}, {"dx", Out, F32}}, false, {}, false, {}, true, verifySameSize});
  add({Opcode::ReluFwd, "relu_fwd", {{"x", In, F32}, {"out", Out, F32}}, false, {}, false, {}, true, verifySameSize});
  add({Opcode::ReluBwd, "relu_bwd", {{"x", In, F32}, {"dy", In, F32}, {"dx", Out, F32}}, false, {}, false, {}, true, verifySameSize});
  add({Opcode::LayerNormFwd, "layernorm_fwd", {{"x", In, F32}, {"gamma", In, F32}, {"beta", In, F32}, {"out", Out, F32}, {"mean", Out, F32}, {"rstd", Out, F32}}, false, {"n"}, false, {"eps"}, false, verifyLayerNormFwd});
  add({Opcode::LayerNormBwd, "layernorm_bwd", {{"dy", In, F32}, {"x", In, F32}, {"gamma", In, F32}, {"mean", In, F32}, {"rstd", In, F32}, {"dx", Out, F32}, {"dgamma", InOut, F32}, {"dbeta", InOut, F32}}, false, {"n"}, false, {}, false, verifyLayerNormBwd});
  add({Opcode::SoftmaxFwd, "softmax_fwd", {{"x", In, F32}, {"out", Out, F32}}, false, {"n", "causal"}, false, {"scale"}, true, verifySoftmaxFwd});
  add({Opcode::SoftmaxBwd, "softmax_bwd", {{"y", In, F32}, {"dy", In, F32}, {"dx", Out, F32}}, false, {"n"}, false, {"scale"}, true, verifySoftmaxBwd});
  add({Opcode::CrossEntropyFwd, "cross_entropy_fwd", {{"logits", In, F32}, {"targets", In, I32}, {"loss", Out, F32}, {"lse", Out, F32}}, false, {"vocab"}, false, {}, false, verifyCrossEntropyFwd});
  add({Opcode::CrossEntropyBwd, "cross_entropy_bwd", {{"logits", In, F32}, {"targets", In, I32}, {"lse", In, F32}, {"dlogits", Out, F32}}, false, {"vocab"}, false, {"scale"}, true, verifyCrossEntropyBwd});
  add({Opcode::CeVpMax, "ce_vp_max", {{"logits", In, F32}, {"rowmax", Out, F32}}, false, {"n", "valid"}, false, {}, false, verifyCeVpMax});
  add({Opcode::CeVpSumExp, "ce_vp_sumexp", {{"logits", In, F32}, {"targets", In, I32}, {"rowmax", In, F32}, {"stats", Out, F32}}, false, {"n", "vocab_start", "valid"}, false, {}, false, verifyCeVpSumExp});
  add({Opcode::CeVpLoss, "ce_vp_loss", {{"rowmax", In, F32}, {"stats", In, F32}, {"loss", Out, F32}, {"lse", Out, F32}}, false, {"rows"}, false, {}, false, verifyCeVpLoss});
  add({Opcode::CeVpBwd, "ce_vp_bwd", {{"logits", In, F32}, {"targets", In, I32}, {"lse", In, F32}, {"dlogits", Out, F32}}, false, {"n", "vocab_start", "valid"}, false, {"scale"}, true, verifyCeVpBwd});
  // Llama family.
  add({Opcode::RmsNormFwd, "rms_norm_fwd", {{"x", In, F32}, {"weight", In, F32}, {"out", Out, F32}, {"rstd", Out, F32}}, false, {"n"}, false, {"eps"}, false, verifyRmsNormFwd});
  add({Opcode::RmsNormBwd, "rms_norm_bwd", {{"dy", In, F32}, {"x", In, F32}, {"weight", In, F32}, {"rstd", In, F32}, {"dx", Out, F32}, {"dweight", InOut, F32}}, false, {"n"}, false, {}, false, verifyRmsNormBwd});
  add({Opcode::RotaryFwd, "rotary_fwd", {{"x", In, F32}, {"out", Out, F32}}, false, {"seq", "dim"}, false, {"theta"}, true, verifyRotary});
  add({Opcode::RotaryBwd, "rotary_bwd", {{"dy", In, F32}, {"dx", Out, F32}}, false, {"seq", "dim"}, false, {"theta"}, true, verifyRotary});
  add({Opcode::SiluFwd, "silu_fwd", {{"x", In, F32}, {"out", Out, F32}}, false, {}, false, {}, true, verifySameSize});
  add({Opcode::SiluBwd, "silu_bwd", {{"x", In, F32}, {"dy", In, F32}, {"dx", Out, F32}}, false, {}, false, {}, true, verifySameSize});
  add({Opcode::SiluMulFwd, "silu_mul_fwd", {{"gate", In, F32}, {"up", In, F32}, {"out", Out, F32}}, false, {}, false, {}, true, verifySameSize});
  add({Opcode::SiluMulBwd, "silu_mul_bwd", {{"gate", In, F32}, {"up", In, F32}, {"dy", In, F32}, {"dgate", Out, F32}, {"dup", Out, F32}}, false, {}, false, {}, true, verifySameSize});
  add({Opcode::UnaryFwd, "unary_fwd", {{"x", In, F32}, {"out", Out, F32}}, false, {"kind"}, false, {}, true, verifyUnary});
  add({Opcode::BinaryFwd, "binary_fwd", {{"x", In, F32}, {"y", In, F32}, {"out", Out, F32}}, false, {"kind", "outer", "mid", "inner"}, false, {}, false, verifyBinary});
  add({Opcode::UnaryBwd, "unary_bwd", {{"x", In, F32}, {"dy", In, F32}, {"dx", Out, F32}}, false, {"kind"}, false, {}, true, verifyUnary});
  add({Opcode::RepeatInterleave, "repeat_interleave", {{"x", In, F32}, {"out", Out, F32}}, false, {"outer", "n", "repeats", "inner"}, false, {}, false, verifyRepeatFwd});
  add({Opcode::RepeatInterleaveBwd, "repeat_interleave_bwd", {{"dy", In, F32}, {"dx", Out, F32}}, false, {"outer", "n", "repeats", "inner"}, false, {}, false, verifyRepeatBwd});
  add({Opcode::RotaryAtPosition, "rotary_at_position", {{"x", In, F32}, {"out", Out, F32}}, false, {"dim"}, false, {"theta"}, true, verifyRotaryAtPosition});
  add({Opcode::CausalAttentionFwd, "causal_attention_fwd", {{"q", In, F32}, {"k", In, F32}, {"v", In, F32}, {"out", Out, F32}, {"lse", Out, F32}}, false, {"batch", "heads", "kv_heads", "seq", "head_dim"}, false, {"scale"}, false, verifyCausalAttentionFwd});
  add({Opcode::CausalAttentionBwd, "causal_attention_bwd", {{"dout", In, F32}, {"q", In, F32}, {"k", In, F32}, {"v", In, F32}, {"out", In, F32}, {"lse", In, F32}, {"dq", Out, F32}, {"dk", Out, F32}, {"dv", Out, F32}}, false, {"batch", "heads", "kv_heads", "seq", "head_dim"}, false, {"scale"}, false, verifyCausalAttentionBwd});
  add({Opcode::KvAttention, "kv_attention", {{"q", In, F32}, {"k", In, F32}, {"v", In, F32}, {"k_cache", InOut, F32}, {"v_cache", InOut, F32}, {"out", Out, F32}}, false, {"batch", "heads", "kv_heads", "max_len", "head_dim"}, false, {"scale"}, false, verifyKvAttention});
  add({Opcode::GradSumSq, "grad_sumsq", {{"out", Out, F64}, {"grads", In, F32}}, true, {}, false, {}, false, verifyScalarFirst});
  add({Opcode::ClipGrads, "clip_grads", {{"sumsq", In, F64}, {"grads", InOut, F32}}, true, {}, false, {"max_norm"}, false, verifyScalarFirst});
  add({Opcode::SgdStep, "sgd_step", {{"param", InOut, F32}, {"grad", In, F32}, {"momentum_buf", InOut, F32}}, false, {}, false, {"momentum", "weight_decay"}, false, verifyOptimizer});
  add({Opcode::AdamWStep, "adamw_step", {{"param", InOut, F32}, {"grad", In, F32}, {"exp_avg", InOut, F32}, {"exp_avg_sq", InOut, F32}}, false, {}, false, {"beta1", "beta2", "eps", "weight_decay"}, false, verifyOptimizer});
  add({Opcode::AllReduce, "all_reduce", {{"buf", InOut, F32, AnyFloat}}, false, {"group", "op"}, false, {}, false, verifyAllReduce});
  add({Opcode::ReduceScatter, "reduce_scatter", {{"in", In, F32, AnyFloat}, {"out", Out, F32, AnyFloat}}, false, {"group"}, false, {}, false, verifyReduceScatter});
  add({Opcode::AllGather, "all_gather", {{"in", In, F32, AnyFloat}, {"out", Out, F32, AnyFloat}}, false, {"group"}, false, {}, false, verifyAllGather});
  add({Opcode::Send, "send", {{"buf", In, F32, AnyDType}}, false, {"peer", "tag"}, false, {}, false, verifyPointToPoint});
  add({Opcode::Recv, "recv", {{"buf", Out, F32, AnyDType}}, false, {"peer", "tag"}, false, {}, false, verifyPointToPoint});
  add({Opcode::Barrier, "barrier", {}, false, {"group"}, false, {}, false, verifyBarrier});
  add({Opcode::AllReduceStart, "all_reduce_start", {{"buf", InOut, F32, AnyFloat}}, false, {"group", "op", "slot"}, false, {}, false, verifyAllReduce});
  add({Opcode::ReduceScatterStart, "reduce_scatter_start", {{"in", In, F32, AnyFloat}, {"out", Out, F32, AnyFloat}}, false, {"group", "slot"}, false, {}, false, verifyReduceScatter});
  add({Opcode::AllGatherStart, "all_gather_start", {{"in", In, F32, AnyFloat}, {"out", Out, F32, AnyFloat}}, false, {"group", "slot"}, false, {}, false, verifyAllGather});
  add({Opcode::SendStart, "send_start", {{"buf", In, F32, AnyDType}}, false, {"peer", "tag", "slot"}, false, {}, false, verifyPointToPoint});
  add({Opcode::RecvStart, "recv_start", {{"buf", Out, F32, AnyDType}}, false, {"peer", "tag", "slot"}, false, {}, false, verifyPointToPoint});
  add({Opcode::Wait, "wait", {}, false, {"slot"}, false, {}, false, verifyWait});
  // clang-format on
  return s;
}

const std::vector<OpSchema> &schemas() {
  static const std::vector<OpSchema> table = buildSchemas();
  return table;
}

bool overlaps(const BufferDesc &a, const BufferDesc &b) {
  return a.offset < b.offset + b.byteSize() &&
         b.offset < a.offset + a.byteSize();
}

} // namespace

bool VerifyContext::expectElements(size_t index, int64_t elements) {
  int64_t have = operands[index]->numElements();
  if (have == elements)
    return true;
  std::ostringstream os;
  os << "operand " << index << " ('" << operands[index]->name << "') has "
     << have << " elements but the attributes need "
     << (elements < 0 ? std::string("an overflowing count")
                      : std::to_string(elements));
  error = os.str();
  return false;
}

bool VerifyContext::expectIntRange(size_t index, int64_t lo, int64_t hi) {
  int64_t v = inst.ints[index];
  if (v >= lo && v <= hi)
    return true;
  error = "int attribute " + std::to_string(index) + " = " + std::to_string(v) +
          " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) +
          "]";
  return false;
}

const std::vector<OpSchema> &allOpSchemas() { return schemas(); }

const OpSchema *lookupOpSchema(uint16_t opcode) {
  for (const OpSchema &s : schemas())
    if (static_cast<uint16_t>(s.opcode) == opcode)
      return &s;
  return nullptr;
}

const OpSchema &getOpSchema(Opcode opcode) {
  return *lookupOpSchema(static_cast<uint16_t>(opcode));
}

const OpSchema *lookupOpSchema(const std::string &name) {
  for (const OpSchema &s : schemas())
    if (name == s.name)
      return &s;
  return nullptr;
}

SlotUse slotUse(const Instruction &inst, int64_t *slot) {
  SlotUse use = SlotUse::None;
  switch (inst.opcode) {
  case Opcode::AllReduceStart:
  case Opcode::ReduceScatterStart:
  case Opcode::AllGatherStart:
  case Opcode::SendStart:
  case Opcode::RecvStart:
    use = SlotUse::Start;
    break;
  case Opcode::Wait:
    use = SlotUse::Wait;
    break;
  default:
    return SlotUse::None;
  }
  if (slot)
    *slot = inst.ints.empty() ? -1 : inst.ints.back();
  return use;
}

bool isCommunication(Opcode opcode) {
  uint16_t n = static_cast<uint16_t>(opcode);
  return n >= 128 && n <= 191;
}

std::string verifyInstruction(const Instruction &inst,
                              const std::vector<BufferDesc> &buffers,
                              const VerifyEnv *env) {
  const OpSchema *schema = lookupOpSchema(static_cast<uint16_t>(inst.opcode));
  if (!schema)
    return "unknown opcode " +
           std::to_string(static_cast<uint16_t>(inst.opcode));
  std::string op = schema->name;
  size_t declared = schema->operands.size();
  bool countOk = schema->variadicLastOperand ? inst.operands.size() >= declared
                                             : inst.operands.size() == declared;
  if (!countOk)
    return op + " takes " + (schema->variadicLastOperand ? "at least " : "") +
           std::to_string(declared) + " operands, got " +
           std::to_string(inst.operands.size());
  bool intsOk = schema->variadicInts ? inst.ints.size() >= schema->ints.size()
                                     : inst.ints.size() == schema->ints.size();
  if (!intsOk)
    return op + " takes " + std::to_string(schema->ints.size()) +
           " int attributes, got " + std::to_string(inst.ints.size());
  if (inst.floats.size() != schema->floats.size())
    return op + " takes " + std::to_string(schema->floats.size()) +
           " float attributes, got " + std::to_string(inst.floats.size());

  VerifyContext ctx{inst, {}, {}, env};
  for (size_t i = 0; i < inst.operands.size(); ++i) {
    uint32_t id = inst.operands[i];
    const OperandSpec &spec = schema->operands[std::min(i, declared - 1)];
    if (id == kNoBuffer && (spec.flags & kOperandOptional)) {
      ctx.operands.push_back(nullptr);
      continue;
    }
    if (id >= buffers.size())
      return op + " operand " + std::to_string(i) + " refers to buffer " +
             std::to_string(id) + ", but there are only " +
             std::to_string(buffers.size());
    DType have = buffers[id].dtype;
    // Every float32 operand may be bfloat16: kernels without a bfloat16
    // form compute in float32 on widened copies (docs/runtime.md).
    bool dtypeOk = have == spec.dtype ||
                   (spec.dtype == DType::F32 && have == DType::BF16) ||
                   ((spec.flags & kOperandAnyFloat) && have == DType::F64) ||
                   (spec.flags & kOperandAnyDType) ||
                   ((spec.flags & kOperandAny32) && have == DType::I32);
    if (!dtypeOk)
      return op + " operand '" + spec.name + "' must be " +
             ((spec.flags & kOperandAnyFloat) ? std::string("f32, bf16 or f64")
              : (spec.flags & kOperandAny32)  ? std::string("f32, bf16 or i32")
              : spec.dtype == DType::F32      ? std::string("f32 or bf16")
                                              : dtypeName(spec.dtype)) +
             ", buffer '" + buffers[id].name + "' is " + dtypeName(have);
    ctx.operands.push_back(&buffers[id]);
  }
  // Outputs must not partially overlap anything else the op touches.
  auto isOutput = [&](size_t i) {
    return ctx.operands[i] &&
           schema->operands[std::min(i, declared - 1)].role != OperandRole::In;
  };
  // The first offending (output, operand) pair in index order, or none.
  auto offends = [&](size_t i, size_t j) {
    if (inst.opcode == Opcode::AllGather ||
        inst.opcode == Opcode::AllGatherStart)
      return false; // In place; its verifier checks the chunk position.
    bool exact = ctx.operands[i]->offset == ctx.operands[j]->offset &&
                 ctx.operands[i]->byteSize() == ctx.operands[j]->byteSize();
    return !(exact && schema->allowsExactAlias);
  };
  std::pair<size_t, size_t> first{SIZE_MAX, SIZE_MAX};
  size_t n = inst.operands.size();
  if (n <= 32) {
    for (size_t i = 0; i < n && first.first == SIZE_MAX; ++i) {
      if (!isOutput(i))
        continue;
      for (size_t j = 0; j < n; ++j)
        if (i != j && ctx.operands[j] &&
            overlaps(*ctx.operands[i], *ctx.operands[j]) && offends(i, j)) {
          first = {i, j};
          break;
        }
    }
  } else {
    // Variadic ops (a fused update over every parameter) have thousands of
    // operands: sweep them by offset instead of comparing every pair.
    struct Span {
      uint64_t begin, end;
      size_t index;
    };
    std::vector<Span> spans;
    for (size_t i = 0; i < n; ++i)
      if (ctx.operands[i])
        spans.push_back({ctx.operands[i]->offset,
                         ctx.operands[i]->offset + ctx.operands[i]->byteSize(),
                         i});
    std::sort(spans.begin(), spans.end(), [](const Span &a, const Span &b) {
      return a.begin != b.begin ? a.begin < b.begin : a.index < b.index;
    });
    std::vector<Span> active; // earlier spans that may reach later ones
    for (const Span &s : spans) {
      active.erase(
          std::remove_if(active.begin(), active.end(),
                         [&](const Span &a) { return a.end <= s.begin; }),
          active.end());
      for (const Span &a : active) {
        if (!overlaps(*ctx.operands[a.index], *ctx.operands[s.index]))
          continue;
        for (auto [i, j] :
             {std::pair{a.index, s.index}, std::pair{s.index, a.index}})
          if (isOutput(i) && offends(i, j))
            first = std::min(first, std::pair{i, j});
      }
      active.push_back(s);
    }
  }
  if (first.first != SIZE_MAX)
    return op + " output '" + ctx.operands[first.first]->name +
           "' overlaps operand '" + ctx.operands[first.second]->name + "'";
  if (schema->verify && !schema->verify(ctx))
    return op + ": " + ctx.error;
  return {};
}

std::string describeInstruction(const Instruction &inst,
                                const std::vector<BufferDesc> &buffers) {
  const OpSchema *schema = lookupOpSchema(static_cast<uint16_t>(inst.opcode));
  std::ostringstream os;
  os << (schema ? schema->name : "op#" + std::to_string(int(inst.opcode)))
     << "(";
  for (size_t i = 0; i < inst.operands.size(); ++i) {
    os << (i ? ", " : "");
    if (schema && !schema->operands.empty())
      os << schema->operands[std::min(i, schema->operands.size() - 1)].name
         << "=";
    uint32_t id = inst.operands[i];
    os << (id < buffers.size() ? buffers[id].name
           : id == kNoBuffer   ? std::string("none")
                               : "#" + std::to_string(id));
  }
  for (size_t i = 0; i < inst.ints.size(); ++i)
    os << (i ? ", " : "; ") << inst.ints[i];
  for (size_t i = 0; i < inst.floats.size(); ++i)
    os << (i ? ", " : "; ") << inst.floats[i];
  os << ")";
  return os.str();
}

bool hasBf16Form(Opcode op, const std::vector<DType> &dtypes) {
  auto all = [&](std::initializer_list<size_t> operands, DType t) {
    for (size_t i : operands)
      if (i >= dtypes.size() || dtypes[i] != t)
        return false;
    return true;
  };
  const DType H = DType::BF16, F = DType::F32;
  switch (op) {
  case Opcode::Add:
  case Opcode::Mul:
  case Opcode::BiasAdd:
  case Opcode::GeluBwd:
    return all({0, 1, 2}, H);
  case Opcode::Scale:
  case Opcode::GeluFwd:
  case Opcode::Copy:
  case Opcode::Transpose:
  case Opcode::SliceCopy:
  case Opcode::SliceInsert:
    return all({0, 1}, H);
  case Opcode::RotaryFwd:
  case Opcode::RotaryBwd:
  case Opcode::SiluFwd:
  case Opcode::RepeatInterleave:
  case Opcode::RepeatInterleaveBwd:
    return all({0, 1}, H);
  case Opcode::SoftmaxFwd:
    return all({0, 1}, H);
  case Opcode::SoftmaxBwd:
  case Opcode::SiluBwd:
  case Opcode::SiluMulFwd:
    return all({0, 1, 2}, H);
  case Opcode::SiluMulBwd:
    return all({0, 1, 2, 3, 4}, H);
  case Opcode::RmsNormFwd: // x, weight, out; rstd
    return all({0, 1, 2}, H) && all({3}, F);
  case Opcode::RmsNormBwd: // dy, x, weight; rstd; dx; dweight
    return all({0, 1, 2, 4}, H) && all({3}, F) && (all({5}, H) || all({5}, F));
  case Opcode::Fill:
    return all({0}, H);
  case Opcode::Accumulate: // into a float32 or a bf16 sum
    return all({0}, H);
  case Opcode::BiasGrad: // into a float32 or a bf16 gradient
    return all({0}, H);
  case Opcode::LayerNormFwd:
    return all({0, 1, 2, 3}, H) && all({4, 5}, F);
  case Opcode::CausalAttentionFwd: // q, k, v, out; lse
    return all({0, 1, 2, 3}, H) && all({4}, F);
  case Opcode::CausalAttentionBwd: // dout, q, k, v, out; lse; dq, dk, dv
    return all({0, 1, 2, 3, 4, 6, 7, 8}, H) && all({5}, F);
  case Opcode::LayerNormBwd:
    return all({0, 1, 2, 5}, H) && all({3, 4}, F) &&
           (all({6, 7}, H) || all({6, 7}, F));
  default:
    return false;
  }
}


} // namespace strata::rt
