//===- CudaBindPlan.cpp - How the CUDA device runs a rank program ---------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBindPlan.h"

#include "runtime/format/OpSchema.h"
#include "runtime/support/Error.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

namespace strata::rt::cuda {

namespace {

uint64_t roundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

/// Instructions that need the host, or values that change from call to
/// call (generation's position), and so run outside CUDA graphs.
bool isHostWork(Opcode op) {
  switch (op) {
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
  case Opcode::KvAttention:
  case Opcode::RotaryAtPosition:
    return true;
  default:
    return false;
  }
}

/// Opcodes whose kernels take any dtype themselves (never staged).
bool takesAnyDType(Opcode op) {
  return op == Opcode::Matmul || op == Opcode::Convert || isHostWork(op);
}

/// Whether operand `i` of `inst` is read: In and InOut roles, except a
/// matmul's C when beta is 0 (then it is only written).
bool readsOperand(const Instruction &inst, size_t i) {
  const OpSchema &schema = getOpSchema(inst.opcode);
  OperandRole role =
      schema.operands[std::min(i, schema.operands.size() - 1)].role;
  if (inst.opcode == Opcode::Matmul && i == 2)
    return inst.floats.size() > 1 && inst.floats[1] != 0.0;
  if (inst.opcode == Opcode::SliceInsert && i == 1)
    return inst.ints[5] != 0; // accumulates into the slice, else writes it
  return role != OperandRole::Out;
}

bool overlaps(const BufferDesc &a, const BufferDesc &b) {
  return a.offset < b.offset + b.byteSize() &&
         b.offset < a.offset + a.byteSize();
}

struct Planner {
  const RankProgram &rank;
  const BindOptions &options;
  BindPlan plan;

  Planner(const RankProgram &r, const BindOptions &o) : rank(r), options(o) {}

  const BufferDesc &buf(uint32_t id) const { return rank.buffers[id]; }

  /// Bytes of one buffer written so far, as sorted disjoint intervals.
  struct Written {
    uint64_t lo, hi; ///< The buffer's range.
    std::vector<std::pair<uint64_t, uint64_t>> parts;
    void add(uint64_t a, uint64_t b) {
      a = std::max(a, lo);
      b = std::min(b, hi);
      if (a >= b)
        return;
      std::vector<std::pair<uint64_t, uint64_t>> out;
      for (auto [x, y] : parts) {
        if (y < a || x > b)
          out.push_back({x, y});
        else {
          a = std::min(a, x);
          b = std::max(b, y);
        }
      }
      out.push_back({a, b});
      std::sort(out.begin(), out.end());
      parts = std::move(out);
    }
    bool contains(uint64_t a, uint64_t b) const {
      a = std::max(a, lo);
      b = std::min(b, hi);
      if (a >= b)
        return true;
      for (auto [x, y] : parts)
        if (x <= a && b <= y)
          return true;
      return false;
    }
    bool full() const { return contains(lo, hi); }
  };

  bool writesOperand(const Instruction &inst, size_t i) const {
    const OpSchema &schema = getOpSchema(inst.opcode);
    OperandRole role =
        schema.operands[std::min(i, schema.operands.size() - 1)].role;
    return role != OperandRole::In;
  }

  /// Scans `inst`: whether it reads bytes of `w`'s range that are not yet
  /// overwritten, then adds what it writes.
  bool step(const Instruction &inst, Written &w) const {
    bool readsOld = false;
    for (size_t i = 0; i < inst.operands.size(); ++i) {
      uint32_t op = inst.operands[i];
      if (op == kNoBuffer || !readsOperand(inst, i))
        continue;
      const BufferDesc &b = buf(op);
      readsOld = readsOld || !w.contains(b.offset, b.offset + b.byteSize());
    }
    for (size_t i = 0; i < inst.operands.size(); ++i) {
      uint32_t op = inst.operands[i];
      if (op == kNoBuffer || !writesOperand(inst, i))
        continue;
      uint64_t lo = buf(op).offset, hi = lo + buf(op).byteSize();
      if (inst.opcode == Opcode::SliceInsert && i == 1) {
        // Only the slice is written: contiguous when outer is 1; a strided
        // slice counts as nothing written (the safe side).
        int64_t outer = inst.ints[0], small = inst.ints[2],
                start = inst.ints[3], inner = inst.ints[4];
        if (outer != 1)
          continue;
        uint64_t e = dtypeBytes(buf(op).dtype);
        hi = lo + e * uint64_t((start + small) * inner);
        lo += e * uint64_t(start * inner);
      }
      w.add(lo, hi);
    }
    return readsOld;
  }

  /// The instructions of sequence `kind` after `w` that read the value
  /// instruction `w` leaves in buffer `id` (any bytes of it: views alias),
  /// until every byte is overwritten. False when the value may outlive the
  /// sequence: some sequence (this one from its start included) reads
  /// bytes of it before writing them.
  bool valueReaders(int kind, size_t w, uint32_t id,
                    std::vector<size_t> &out) const {
    out.clear();
    const auto &seq = rank.sequences[kind];
    uint64_t lo = buf(id).offset, hi = lo + buf(id).byteSize();
    Written written{lo, hi, {}};
    for (size_t j = w + 1; j < seq.size(); ++j) {
      if (step(seq[j], written))
        out.push_back(j);
      if (written.full())
        return true;
    }
    for (int k = 0; k < kNumSequenceKinds; ++k) {
      const auto &other = rank.sequences[k];
      size_t stop = k == kind ? w + 1 : other.size();
      Written again{lo, hi, {}};
      for (size_t j = 0; j < stop && !again.full(); ++j)
        if (step(other[j], again))
          return false;
    }
    return true;
  }

  /// `out` (written earlier than the program writes it) is clear of every
  /// buffer in `reads`.
  bool clear(uint32_t out, std::initializer_list<uint32_t> reads) const {
    for (uint32_t in : reads)
      if (in != kNoBuffer && overlaps(buf(out), buf(in)))
        return false;
    return true;
  }

  /// The value `w` writes into `id` is read by exactly `expected` (in
  /// order) and by nothing else, in any sequence.
  bool readOnlyBy(int kind, size_t w, uint32_t id,
                  std::vector<size_t> expected) const {
    std::vector<size_t> got;
    return valueReaders(kind, w, id, got) && got == expected;
  }
  void stage(int kind);
  void fuseMatmuls(int kind);
  void fuseNorms(int kind);
  void fuseCrossEntropy(int kind);
  void padClassifier(int kind);
  void padClassifierWeight(int kind, size_t logitsMatmul, int64_t ld,
                           const std::vector<std::pair<size_t, int>> &gradUses);
  void group(int kind);
  void segment(int kind);
};

void Planner::stage(int kind) {
  auto &plans = plan.sequences[kind].instructions;
  const auto &seq = rank.sequences[kind];
  plans.resize(seq.size());
  for (size_t n = 0; n < seq.size(); ++n) {
    const Instruction &inst = seq[n];
    InstructionPlan &p = plans[n];
    p.hostWork = isHostWork(inst.opcode);
    std::vector<DType> dtypes;
    for (uint32_t id : inst.operands)
      dtypes.push_back(id == kNoBuffer ? DType::F32 : buf(id).dtype);
    bool anyBf16 =
        std::find(dtypes.begin(), dtypes.end(), DType::BF16) != dtypes.end();
    bool native = hasBf16Form(inst.opcode, dtypes);
    if (native && (inst.opcode == Opcode::CausalAttentionFwd ||
                   inst.opcode == Opcode::CausalAttentionBwd))
      native = flashAttentionTakes(rank, inst);
    uint64_t bytes = 0;
    auto add = [&](uint32_t i, DType to, bool read, bool written) {
      p.staged.push_back({i, to, read, written});
      bytes += roundUp(dtypeBytes(to) * uint64_t(buf(inst.operands[i])
                                                     .numElements()),
                       256);
    };
    if (inst.opcode == Opcode::Matmul && dtypes[0] != dtypes[1]) {
      add(dtypes[0] == DType::F32 ? 0 : 1, DType::BF16, true, false);
    } else if (anyBf16 && !native && !takesAnyDType(inst.opcode)) {
      for (uint32_t i = 0; i < inst.operands.size(); ++i)
        if (inst.operands[i] != kNoBuffer && dtypes[i] == DType::BF16) {
          const OpSchema &schema = getOpSchema(inst.opcode);
          OperandRole role =
              schema.operands[std::min<size_t>(i, schema.operands.size() - 1)]
                  .role;
          add(i, DType::F32, role != OperandRole::Out,
              role != OperandRole::In);
        }
    }
    plan.stagingBytes = std::max(plan.stagingBytes, bytes);
  }
}

void Planner::fuseMatmuls(int kind) {
  auto &plans = plan.sequences[kind].instructions;
  const auto &seq = rank.sequences[kind];
  auto plain = [&](size_t n) { return plans[n].staged.empty(); };
  for (size_t i = 0; i < seq.size(); ++i) {
    const Instruction &mi = seq[i];
    InstructionPlan &mm = plans[i];
    if (mi.opcode != Opcode::Matmul || mm.skip || !plain(i) ||
        mi.floats[1] != 0.0)
      continue;
    bool single = mi.ints[0] == 1 || (mi.ints[6] != 0 && mi.ints[4] == 0);
    if (!single)
      continue;
    uint32_t a = mi.operands[0], b = mi.operands[1], c = mi.operands[2];
    size_t j = i + 1;
    int conv = -1;
    if (j + 1 < seq.size() && seq[j].opcode == Opcode::Convert &&
        seq[j + 1].opcode == Opcode::BiasAdd &&
        seq[j + 1].operands[1] == seq[j].operands[1] && plain(j)) {
      conv = int(j);
      ++j;
    }
    if (j < seq.size() && seq[j].opcode == Opcode::BiasAdd &&
        seq[j].operands[0] == c && plain(j) && seq[j].ints[0] == mi.ints[2] &&
        readOnlyBy(kind, i, c, {j})) {
      uint32_t bias = seq[j].operands[1], sum = seq[j].operands[2];
      if (buf(bias).dtype != buf(sum).dtype || buf(sum).dtype != buf(c).dtype)
        continue;
      // A cast moved ahead of the product must not clobber its inputs.
      if (conv >= 0 && !clear(bias, {a, b}))
        continue;
      size_t g = j + 1;
      // GELU in the epilogue measured slower on an H200 than the BIAS
      // epilogue and the GELU kernel (0.185 ms against 0.14 ms for
      // [8192, 3072, 768]; docs/benchmarks.md): opt-in.
      bool gelu = options.geluEpilogue && g < seq.size() &&
                  seq[g].opcode == Opcode::GeluFwd &&
                  seq[g].operands[0] == sum && plain(g);
      uint32_t out = gelu ? seq[g].operands[1] : sum;
      if (!clear(sum, {a, b, bias}) || (gelu && !clear(out, {a, b, bias, sum})))
        continue;
      mm.epilogue = gelu ? EpilogueKind::BiasGeluAux : EpilogueKind::Bias;
      mm.bias = bias;
      mm.aux = gelu ? sum : kNoBuffer;
      mm.out = out;
      mm.runBefore = conv;
      if (conv >= 0)
        mm.absorbed.push_back(size_t(conv));
      mm.absorbed.push_back(j);
      if (gelu)
        mm.absorbed.push_back(g);
      for (size_t idx : mm.absorbed)
        plans[idx].skip = true;
      continue;
    }
    // matmul -> [one instruction clear of it] -> gelu_bwd of the product
    // (the weight gradient's matmul sits between in the backward).
    for (size_t g = i + 1; g <= i + 2 && g < seq.size(); ++g) {
      if (seq[g].opcode != Opcode::GeluBwd) {
        continue;
      }
      if (seq[g].operands[1] != c || !plain(g) ||
          !readOnlyBy(kind, i, c, {g}))
        break;
      uint32_t x = seq[g].operands[0], dx = seq[g].operands[2];
      bool ok = buf(x).dtype == buf(c).dtype && buf(dx).dtype == buf(c).dtype &&
                clear(dx, {a, b, x});
      // What runs between must not touch the gradient's buffers; the
      // earlier write of dx must not touch its operands.
      for (size_t m = i + 1; m < g && ok; ++m)
        for (uint32_t id : seq[m].operands)
          ok = ok && (id == kNoBuffer ||
                      (!overlaps(buf(id), buf(dx)) &&
                       !overlaps(buf(id), buf(x)) && id != c));
      if (!ok)
        break;
      mm.epilogue = EpilogueKind::DGelu;
      mm.aux = x;
      mm.out = dx;
      mm.absorbed.push_back(g);
      plans[g].skip = true;
      break;
    }
  }
}

void Planner::fuseNorms(int kind) {
  auto &plans = plan.sequences[kind].instructions;
  const auto &seq = rank.sequences[kind];
  for (size_t i = 0; i + 1 < seq.size(); ++i) {
    const Instruction &add = seq[i];
    if (add.opcode != Opcode::Add || !plans[i].staged.empty() || plans[i].skip)
      continue;
    size_t j = i + 1;
    bool ok = true;
    // Casts of the norm's parameters between the two run first: they must
    // be clear of the add's operands.
    while (j < seq.size() && j <= i + 2 && seq[j].opcode == Opcode::Convert) {
      ok = ok && plans[j].staged.empty() && !plans[j].skip;
      for (uint32_t id : add.operands)
        ok = ok && !overlaps(buf(seq[j].operands[1]), buf(id));
      ++j;
    }
    if (!ok || j >= seq.size())
      continue;
    const Instruction &norm = seq[j];
    if (norm.opcode != Opcode::LayerNormFwd || !plans[j].staged.empty() ||
        add.operands[2] != norm.operands[0] ||
        buf(add.operands[0]).dtype != buf(norm.operands[0]).dtype ||
        buf(add.operands[1]).dtype != buf(norm.operands[0]).dtype)
      continue;
    plans[i].skip = true;
    plans[j].residualA = add.operands[0];
    plans[j].residualB = add.operands[1];
    plans[j].absorbed.push_back(i);
  }
}

void Planner::fuseCrossEntropy(int kind) {
  auto &plans = plan.sequences[kind].instructions;
  const auto &seq = rank.sequences[kind];
  for (size_t i = 0; i + 2 < seq.size(); ++i) {
    const Instruction &fi = seq[i], &bi = seq[i + 1], &ci = seq[i + 2];
    if (fi.opcode != Opcode::CrossEntropyFwd ||
        bi.opcode != Opcode::CrossEntropyBwd || ci.opcode != Opcode::Convert ||
        !plans[i].staged.empty() || !plans[i + 1].staged.empty() ||
        !plans[i + 2].staged.empty())
      continue;
    uint32_t logits = fi.operands[0], grad = bi.operands[3],
             cast = ci.operands[1];
    uint32_t lse = fi.operands[3];
    if (bi.operands[0] != logits || bi.operands[1] != fi.operands[1] ||
        bi.operands[2] != lse || ci.operands[0] != grad ||
        buf(cast).dtype != DType::BF16 || buf(logits).dtype != DType::F32 ||
        !clear(cast, {logits, fi.operands[1], fi.operands[2]}))
      continue;
    // The saved log-sum-exp may share memory with the cast (it dies at the
    // backward): then, read by nothing else, it is not stored.
    bool dropLse = overlaps(buf(cast), buf(lse));
    if (dropLse && !readOnlyBy(kind, i, lse, {i + 1}))
      continue;
    // The float32 gradient is only ever narrowed.
    if (!readOnlyBy(kind, i + 1, grad, {i + 2}))
      continue;
    InstructionPlan &p = plans[i];
    p.ceGrad = cast;
    p.ceScale = float(bi.floats[0]);
    p.ceDropLse = dropLse;
    p.absorbed = {i + 1, i + 2};
    plans[i + 1].skip = plans[i + 2].skip = true;
  }
}

/// The classifier's matmul and the fused loss's gradient, padded: see the
/// header. The logits are written by a matmul just before the loss and
/// read by nothing else; the bf16 gradient is read by matmuls only.
void Planner::padClassifier(int kind) {
  auto &plans = plan.sequences[kind].instructions;
  const auto &seq = rank.sequences[kind];
  for (size_t i = 1; i < seq.size(); ++i) {
    InstructionPlan &ce = plans[i];
    if (seq[i].opcode != Opcode::CrossEntropyFwd || ce.ceGrad == kNoBuffer)
      continue;
    const Instruction &fi = seq[i];
    uint32_t logits = fi.operands[0];
    int64_t vocab = fi.ints[0], rows = buf(logits).numElements() / vocab;
    if (vocab % 8 == 0)
      continue;
    // The producing matmul: the instruction before, unstaged, unfused,
    // writing the logits whole ([rows, vocab], batch 1, beta 0).
    const Instruction &mi = seq[i - 1];
    InstructionPlan &mm = plans[i - 1];
    if (mi.opcode != Opcode::Matmul || mi.operands[2] != logits ||
        !mm.staged.empty() || mm.epilogue != EpilogueKind::None ||
        mi.floats[1] != 0.0 || mi.ints[0] != 1 || mi.ints[1] != rows ||
        mi.ints[2] != vocab)
      continue;
    // The logits are read by the loss only; the bf16 gradient by matmuls
    // that read it whole as a [rows, vocab] matrix.
    if (!readOnlyBy(kind, i - 1, logits, {i, i + 1}))
      continue;
    uint32_t grad = ce.ceGrad;
    std::vector<size_t> uses;
    if (!valueReaders(kind, i + 2, grad, uses) || uses.empty())
      continue;
    bool ok = true;
    std::vector<std::pair<size_t, int>> operandUses;
    for (size_t n : uses) {
      const Instruction &u = seq[n];
      bool found = false;
      for (int op = 0; op < 3 && ok; ++op) {
        if (op >= int(u.operands.size()) || u.operands[size_t(op)] == kNoBuffer ||
            !overlaps(buf(u.operands[size_t(op)]), buf(grad)))
          continue;
        bool whole = u.opcode == Opcode::Matmul && op < 2 &&
                     buf(u.operands[size_t(op)]).offset == buf(grad).offset &&
                     buf(u.operands[size_t(op)]).byteSize() ==
                         buf(grad).byteSize() &&
                     u.ints[0] == 1 && plans[n].staged.empty() &&
                     plans[n].epilogue == EpilogueKind::None;
        if (whole) {
          bool trans = u.ints[size_t(4 + op)] != 0;
          int64_t r = op == 0 ? (trans ? u.ints[3] : u.ints[1])
                              : (trans ? u.ints[2] : u.ints[3]);
          int64_t c = op == 0 ? (trans ? u.ints[1] : u.ints[3])
                              : (trans ? u.ints[3] : u.ints[2]);
          whole = r == rows && c == vocab;
        }
        ok = ok && whole;
        found = true;
        operandUses.push_back({n, op});
      }
      ok = ok && found;
    }
    if (!ok)
      continue;
    int64_t ld = (vocab + 7) / 8 * 8;
    int logitsScratch = int(plan.scratch.size());
    plan.scratch.push_back({uint64_t(rows * ld) * 4,
                            "padded logits [" + std::to_string(rows) + ", " +
                                std::to_string(ld) + "] f32"});
    int gradScratch = int(plan.scratch.size());
    plan.scratch.push_back({uint64_t(rows * ld) * 2,
                            "padded logits gradient [" + std::to_string(rows) +
                                ", " + std::to_string(ld) + "] bf16"});
    mm.padded[2] = {logitsScratch, rows, vocab, ld};
    ce.ceLogits = {logitsScratch, rows, vocab, ld};
    ce.ceGradPadded = {gradScratch, rows, vocab, ld};
    for (auto [n, op] : operandUses)
      plans[n].padded[op] = {gradScratch, rows, vocab, ld};
    padClassifierWeight(kind, i - 1, ld, operandUses);
  }
}

/// The classifier's weight, [vocab, hidden] (its bf16 cast), padded with
/// zero rows to `ld`: then the logits matmul's n and the input gradient's
/// k are whole multiples of 8 too (cuBLASLt's fast kernels need both; the
/// loss writes zero gradient columns past the vocabulary).
void Planner::padClassifierWeight(
    int kind, size_t logitsMatmul, int64_t ld,
    const std::vector<std::pair<size_t, int>> &gradUses) {
  auto &plans = plan.sequences[kind].instructions;
  const auto &seq = rank.sequences[kind];
  const Instruction &mi = seq[logitsMatmul];
  uint32_t w = mi.operands[1];
  int64_t vocab = mi.ints[2], hidden = mi.ints[3];
  if (mi.ints[5] == 0)
    return; // the weight must be stored [vocab, hidden]
  // Its writer: a cast earlier in this sequence writing exactly it.
  int cast = -1;
  for (size_t n = logitsMatmul; n-- > 0;)
    if (seq[n].opcode == Opcode::Convert && seq[n].operands[1] == w &&
        plans[n].staged.empty() && !plans[n].skip) {
      cast = int(n);
      break;
    }
  if (cast < 0)
    return;
  std::vector<size_t> readersOfW;
  if (!valueReaders(kind, size_t(cast), w, readersOfW))
    return;
  // Readers: the logits matmul, and matmuls taking it as [k = vocab,
  // n = hidden] whose other operand is the padded gradient.
  std::vector<size_t> inputGrads;
  for (size_t n : readersOfW) {
    if (n == logitsMatmul)
      continue;
    const Instruction &u = seq[n];
    bool padA = false;
    for (auto [m, op] : gradUses)
      padA = padA || (m == n && op == 0);
    if (u.opcode != Opcode::Matmul || u.operands[1] != w || u.ints[5] != 0 ||
        u.ints[4] != 0 || u.ints[3] != vocab || u.ints[2] != hidden ||
        !padA || plans[n].epilogue != EpilogueKind::None)
      return;
    inputGrads.push_back(n);
  }
  int scratch = int(plan.scratch.size());
  plan.scratch.push_back({uint64_t(ld * hidden) * dtypeBytes(buf(w).dtype),
                          "padded classifier weight [" + std::to_string(ld) +
                              ", " + std::to_string(hidden) + "] " +
                              dtypeName(buf(w).dtype),
                          /*zeroed=*/true});
  plans[size_t(cast)].redirect = scratch;
  plans[logitsMatmul].padded[1] = {scratch, ld, hidden, hidden};
  plans[logitsMatmul].n = ld;
  for (size_t n : inputGrads) {
    plans[n].padded[1] = {scratch, ld, hidden, hidden};
    plans[n].k = ld;
  }
  for (size_t n = 0; n < seq.size(); ++n)
    if (seq[n].opcode == Opcode::CrossEntropyFwd &&
        plans[n].ceGradPadded.scratch >= 0)
      plans[n].ceZeroPadding = true;
}

void Planner::group(int kind) {
  auto &sp = plan.sequences[kind];
  const auto &seq = rank.sequences[kind];
  for (size_t i = 0; i < seq.size(); ++i) {
    Opcode op = seq[i].opcode;
    auto f32Fill = [&](size_t n) {
      return seq[n].opcode == Opcode::Fill &&
             buf(seq[n].operands[0]).dtype == DType::F32 &&
             seq[n].floats[0] == seq[i].floats[0] && !sp.instructions[n].skip;
    };
    if (op != Opcode::AdamWStep && op != Opcode::SgdStep &&
        op != Opcode::GradSumSq && op != Opcode::ClipGrads &&
        !(op == Opcode::Fill && f32Fill(i)))
      continue;
    size_t end = i + 1;
    if (op == Opcode::AdamWStep || op == Opcode::SgdStep)
      while (end < seq.size() && seq[end].opcode == op &&
             sp.instructions[end].staged.empty())
        ++end;
    if (op == Opcode::Fill) {
      while (end < seq.size() && f32Fill(end))
        ++end;
      if (end - i < 2)
        continue; // a lone fill runs as itself
    }
    sp.instructions[i].group = int(sp.groups.size());
    for (size_t j = i + 1; j < end; ++j) {
      sp.instructions[j].skip = true;
      sp.instructions[i].absorbed.push_back(j);
    }
    sp.groups.push_back({op, i, end - 1});
    i = end - 1;
  }
}

void Planner::segment(int kind) {
  auto &sp = plan.sequences[kind];
  for (size_t i = 0; i < sp.instructions.size();) {
    SegmentPlan s;
    s.begin = i;
    s.device = !sp.instructions[i].hostWork;
    while (i < sp.instructions.size() &&
           sp.instructions[i].hostWork == !s.device)
      ++i;
    s.end = i;
    sp.segments.push_back(s);
  }
}

const char *epilogueName(EpilogueKind k) {
  switch (k) {
  case EpilogueKind::Bias:
    return "BIAS";
  case EpilogueKind::BiasGeluAux:
    return "GELU_AUX_BIAS";
  case EpilogueKind::DGelu:
    return "DGELU";
  default:
    return "none";
  }
}

} // namespace

bool flashAttentionTakes(const RankProgram &rank, const Instruction &inst) {
  int64_t headDim = inst.ints[4];
  if (headDim != 16 && headDim != 32 && headDim != 64 && headDim != 128)
    return false;
  for (uint32_t id : inst.operands)
    if (id != kNoBuffer && rank.buffers[id].offset % 16 != 0)
      return false;
  return true;
}

namespace {
bool envSwitch(const char *name, bool fallback) {
  const char *value = std::getenv(name);
  if (!value || !*value)
    return fallback;
  if (std::strcmp(value, "0") == 0)
    return false;
  if (std::strcmp(value, "1") == 0)
    return true;
  fail(name, "=", value, ": expected 0 or 1");
}
} // namespace

BindOptions bindOptionsFromEnvironment() {
  BindOptions o;
  o.fuse = envSwitch("STRATA_CUDA_FUSE", true);
  o.geluEpilogue = envSwitch("STRATA_CUDA_GELU_EPILOGUE", false);
  return o;
}

BindPlan planCudaBinding(const RankProgram &rank, const BindOptions &options) {
  Planner p(rank, options);
  for (int kind = 0; kind < kNumSequenceKinds; ++kind) {
    p.stage(kind);
    if (options.fuse) {
      p.fuseMatmuls(kind);
      p.fuseNorms(kind);
      p.fuseCrossEntropy(kind);
      if (options.padWide)
        p.padClassifier(kind);
    }
    p.group(kind);
    p.segment(kind);
  }
  return std::move(p.plan);
}

std::string describeCudaBinding(const RankProgram &rank, const BindPlan &plan) {
  std::ostringstream os;
  auto name = [&](uint32_t id) {
    return id == kNoBuffer ? std::string("-") : rank.buffers[id].name;
  };
  for (int kind = 0; kind < kNumSequenceKinds; ++kind) {
    const auto &seq = rank.sequences[kind];
    const SequencePlan &sp = plan.sequences[kind];
    if (seq.empty())
      continue;
    size_t graphs = 0, staged = 0, fused = 0;
    std::map<std::string, int> counts;
    for (const SegmentPlan &s : sp.segments)
      graphs += s.device ? 1 : 0;
    for (size_t n = 0; n < seq.size(); ++n) {
      const InstructionPlan &p = sp.instructions[n];
      staged += p.staged.empty() ? 0 : 1;
      fused += p.skip ? 1 : 0;
      if (p.epilogue != EpilogueKind::None)
        ++counts[std::string("matmul + ") + epilogueName(p.epilogue) +
                 " epilogue"];
      if (p.residualA != kNoBuffer)
        ++counts["add + layernorm_fwd"];
      if (p.ceGrad != kNoBuffer)
        ++counts["cross_entropy fwd + bwd + bf16 cast"];
      if (p.padded[0].scratch >= 0 || p.padded[1].scratch >= 0 ||
          p.padded[2].scratch >= 0)
        ++counts["matmul on padded rows"];
      if (p.group >= 0)
        ++counts[std::string("multi-tensor ") +
                 getOpSchema(seq[n].opcode).name];
      if (!p.staged.empty())
        ++counts[std::string("staged f32: ") + getOpSchema(seq[n].opcode).name];
    }
    os << sequenceName(SequenceKind(kind)) << ": " << seq.size()
       << " instructions, " << fused << " fused into others, " << staged
       << " staged, " << sp.segments.size() << " segments (" << graphs
       << " as CUDA graphs)\n";
    for (const auto &[what, count] : counts)
      os << "  " << count << " x " << what << "\n";
  }
  for (const ScratchPlan &s : plan.scratch)
    os << "scratch: " << s.what << " (" << s.bytes << " bytes)\n";
  os << "staging: " << plan.stagingBytes << " bytes\n";
  (void)name;
  return os.str();
}

} // namespace strata::rt::cuda
