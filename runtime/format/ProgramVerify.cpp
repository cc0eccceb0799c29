//===- ProgramVerify.cpp - Program verification ---------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// verifyProgram: everything the executor and kernels rely on, checked once
// when a program is loaded (or built), so nothing downstream re-checks:
// buffers inside the arena, instruction schemas, parameter tables, process
// groups and ZeRO-3 value shards across ranks.
//
//===----------------------------------------------------------------------===//

#include "runtime/format/Program.h"

#include "runtime/format/OpSchema.h"
#include "runtime/support/Error.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

namespace strata::rt {

namespace {

/// Replays `order` (sequence, times) through the rank's request slots:
/// every start needs a free slot, every wait a busy one, and all slots are
/// free at the end of the `what` (a step, an evaluation).
void replaySlots(const RankProgram &rank, const std::string &where,
                 const std::vector<std::pair<SequenceKind, int>> &order,
                 const char *what) {
  std::vector<int> busy(kNumRequestSlots, -1);
  std::vector<SequenceKind> busyKind(kNumRequestSlots);
  for (auto [kind, times] : order) {
    for (int t = 0; t < times; ++t) {
      const auto &seq = rank.sequence(kind);
      for (size_t i = 0; i < seq.size(); ++i) {
        int64_t slot;
        SlotUse use = slotUse(seq[i], &slot);
        if (use == SlotUse::Start && busy[slot] >= 0)
          fail(where, " sequence ", sequenceName(kind), " instruction ", i,
               ": slot ", slot, " is still in use by instruction ", busy[slot],
               " of ", sequenceName(busyKind[slot]), "; wait on it first");
        if (use == SlotUse::Wait && busy[slot] < 0)
          fail(where, " sequence ", sequenceName(kind), " instruction ", i,
               ": wait on slot ", slot, ", which holds no request");
        if (use == SlotUse::Start) {
          busy[slot] = int(i);
          busyKind[slot] = kind;
        } else if (use == SlotUse::Wait) {
          busy[slot] = -1;
        }
      }
    }
  }
  for (int64_t slot = 0; slot < kNumRequestSlots; ++slot)
    if (busy[slot] >= 0)
      fail(where, ": slot ", slot, " started by instruction ", busy[slot],
           " of ", sequenceName(busyKind[slot]), " is never waited on within ",
           std::string(what) == "step" ? "the step" : "an evaluation");
}

/// Buffer names unique, shapes valid, every buffer inside the arena and
/// aligned to its element size.
void verifyBuffers(const RankProgram &rank, const std::string &where) {
  if (rank.arenaBytes > (uint64_t(1) << 48))
    fail(where, ": arena of ", rank.arenaBytes, " bytes is implausibly large");
  std::set<std::string> names;
  for (const BufferDesc &b : rank.buffers) {
    if (!names.insert(b.name).second)
      fail(where, ": buffer name '", b.name, "' is used twice");
    if (b.shape.size() > 8 || b.numElements() < 0)
      fail(where, ": buffer '", b.name, "' has an invalid shape");
    if (b.offset % dtypeBytes(b.dtype) != 0)
      fail(where, ": buffer '", b.name, "' offset ", b.offset,
           " is not aligned to its element size");
    if (b.offset > rank.arenaBytes || b.byteSize() > rank.arenaBytes - b.offset)
      fail(where, ": buffer '", b.name, "' [", b.offset, ", ",
           b.offset + b.byteSize(), ") lies outside the arena of ",
           rank.arenaBytes, " bytes");
  }
}

/// Buffer `id` exists with `dtype` and `elements` (an input or output the
/// executor reads or writes: tokens, loss, logits, ...).
void expectRoleBuffer(const RankProgram &rank, const std::string &where,
                      uint32_t id, const char *role, DType dtype,
                      int64_t elements) {
  if (id >= rank.buffers.size())
    fail(where, ": the ", role, " buffer is missing");
  const BufferDesc &b = rank.buffers[id];
  if (b.dtype != dtype || b.numElements() != elements)
    fail(where, ": the ", role, " buffer '", b.name, "' must be ",
         dtypeName(dtype), " with ", elements, " elements");
}

void verifyRank(const Program &program, const RankProgram &rank,
                const std::string &where) {
  const ModelMeta &m = program.meta;
  verifyBuffers(rank, where);
  auto expectBuffer = [&](uint32_t id, const char *role, DType dtype,
                          int64_t elements) {
    expectRoleBuffer(rank, where, id, role, dtype, elements);
  };
  // Inputs are optional per rank (a middle pipeline stage reads neither
  // tokens nor targets), but where present they have the executor's shapes.
  int64_t rows = m.microBatch * m.seqLen;
  if (rank.tokens != kNoBuffer)
    expectBuffer(rank.tokens, "tokens", DType::I32, rows);
  if (rank.targets != kNoBuffer)
    expectBuffer(rank.targets, "targets", DType::I32, rows);
  if (rank.loss != kNoBuffer)
    expectBuffer(rank.loss, "loss", DType::F32, 1);
  if (rank.gradSumSq != kNoBuffer)
    expectBuffer(rank.gradSumSq, "grad_sumsq", DType::F64, 1);
  if (rank.positions != kNoBuffer)
    expectBuffer(rank.positions, "positions", DType::I32, rows);
  if (rank.dataRowStart < 0 ||
      rank.dataRowStart + m.numMicrobatches * m.microBatch > m.globalBatch)
    fail(where, ": data row start ", rank.dataRowStart, " plus ",
         m.numMicrobatches, " micro-batches of ", m.microBatch,
         " rows exceeds the global batch of ", m.globalBatch);

  size_t nstate = program.train.optimizer == OptimizerKind::AdamW ? 2 : 1;
  std::set<std::string> paramNames;
  for (const ParamDesc &p : rank.params) {
    if (!paramNames.insert(p.name).second)
      fail(where, ": parameter '", p.name, "' appears twice");
    if (p.value >= rank.buffers.size() || p.grad >= rank.buffers.size())
      fail(where, ": parameter '", p.name, "' refers to a missing buffer");
    if (!p.valueSharded && !p.boxShape.empty())
      fail(where, ": parameter '", p.name,
           "' has a box shape but is not "
           "value-sharded; box_shape is only meaningful with value_sharded");
    const auto &local = paramBoxShape(rank, p);
    int64_t n = shapeElements(local);
    if (local.size() > 8 || n < 0)
      fail(where, ": parameter '", p.name, "' has an invalid box shape ",
           "(at most 8 non-negative dimensions)");
    if (p.state.size() != nstate)
      fail(where, ": parameter '", p.name, "' has ", p.state.size(),
           " optimizer state buffers; the optimizer needs ", nstate);
    for (uint32_t s : p.state)
      if (s >= rank.buffers.size())
        fail(where, ": parameter '", p.name,
             "' refers to a missing optimizer state buffer");
    // ZeRO: the state (and possibly the gradient, and under ZeRO-3 the
    // value) covers a flat range of the local box; without it every buffer
    // has the box's size.
    int64_t ns = rank.buffers[p.state[0]].numElements();
    if (ns < 0 || ns > n || p.stateOffset < 0 || p.stateOffset > n - ns)
      fail(where, ": parameter '", p.name, "' optimizer state range [",
           p.stateOffset, ", ", p.stateOffset + ns,
           ") lies outside its local box of ", n, " elements");
    auto checkBuffer = [&](uint32_t id, const char *what, int64_t a,
                           int64_t b) {
      int64_t have =
          id < rank.buffers.size() ? rank.buffers[id].numElements() : -1;
      if (id >= rank.buffers.size() || rank.buffers[id].dtype != DType::F32 ||
          (have != a && have != b))
        fail(where, ": parameter '", p.name, "' ", what,
             " buffer must be f32 with ", a,
             a != b ? " or " + std::to_string(b) : std::string(), " elements");
    };
    if (p.valueSharded)
      checkBuffer(p.value, "value (value-sharded: its optimizer state's size)",
                  ns, ns);
    else
      checkBuffer(p.value, "value", n, n);
    checkBuffer(p.grad, "grad", n, ns);
    for (uint32_t s : p.state)
      checkBuffer(s, "optimizer state", ns, ns);
    if (!(p.initStd >= 0.0) || !std::isfinite(p.initStd))
      fail(where, ": parameter '", p.name, "' has an invalid init std");
    if (!p.globalShape.empty()) {
      // The box may reach past the global shape (padding), never before it.
      bool ok = p.globalShape.size() == local.size() &&
                p.shardStart.size() == local.size();
      for (size_t d = 0; ok && d < local.size(); ++d)
        ok = p.shardStart[d] >= 0 && p.globalShape[d] >= 0 &&
             p.shardStart[d] <= (int64_t(1) << 40);
      if (!ok)
        fail(where, ": parameter '", p.name,
             "' shard does not fit its global shape (global_shape and "
             "shard_start need one non-negative entry per dimension)");
    }
    if (!p.checkpointShape.empty()) {
      const auto &view = p.globalShape.empty() ? local : p.globalShape;
      int64_t a = shapeElements(p.checkpointShape), b = shapeElements(view);
      if (a < 0 || a != b)
        fail(where, ": parameter '", p.name, "' checkpoint shape has ", a,
             " elements but its global shape has ", b);
    }
  }
  VerifyEnv env{&program.meta, &program.groups, rank.rank};
  for (int k = 0; k < kNumSequenceKinds; ++k) {
    const auto &seq = rank.sequences[k];
    for (size_t i = 0; i < seq.size(); ++i) {
      std::string error = verifyInstruction(seq[i], rank.buffers, &env);
      if (!error.empty())
        fail(where, " sequence ", sequenceName(SequenceKind(k)),
             " instruction ", i, ": ", error);
    }
  }

  // Request slots: replay one step in execution order; every start needs a
  // free slot, every wait a busy one, and a step ends with all slots free.
  // An evaluation is replayed the same way on its own.
  std::vector<std::pair<SequenceKind, int>> order;
  order.push_back({SequenceKind::StepBegin, 1});
  if (!rank.sequence(SequenceKind::Schedule).empty()) {
    order.push_back({SequenceKind::Schedule, 1});
  } else {
    bool hasLast = !rank.sequence(SequenceKind::LastMicrobatch).empty();
    int64_t plain = hasLast ? m.numMicrobatches - 1 : m.numMicrobatches;
    order.push_back(
        {SequenceKind::Microbatch, int(std::min<int64_t>(plain, 2))});
    if (hasLast)
      order.push_back({SequenceKind::LastMicrobatch, 1});
  }
  order.push_back({SequenceKind::Update, 1});
  replaySlots(rank, where, order, "step");
  replaySlots(rank, where,
              {{SequenceKind::Eval, 2}, {SequenceKind::EvalSchedule, 1}},
              "evaluation");
}

/// The inference program: one rank of whole parameters without gradients
/// or optimizer state, [1, 1] inputs, [1, vocab] logits, one sequence of
/// local instructions (no collectives, no requests).
void verifyDecode(const Program &program, const RankProgram &rank,
                  const std::string &source) {
  std::string where = source + ": inference program";
  verifyBuffers(rank, where);
  auto expectBuffer = [&](uint32_t id, const char *role, DType dtype,
                          int64_t elements) {
    expectRoleBuffer(rank, where, id, role, dtype, elements);
  };
  expectBuffer(rank.tokens, "tokens", DType::I32, 1);
  if (rank.positions != kNoBuffer)
    expectBuffer(rank.positions, "positions", DType::I32, 1);
  expectBuffer(rank.logits, "logits", DType::F32, program.meta.vocab);
  if (rank.targets != kNoBuffer || rank.loss != kNoBuffer ||
      rank.gradSumSq != kNoBuffer)
    fail(where, ": has training inputs or outputs");
  std::set<std::string> names;
  for (const ParamDesc &p : rank.params) {
    if (!names.insert(p.name).second)
      fail(where, ": parameter '", p.name, "' appears twice");
    if (p.value >= rank.buffers.size() ||
        rank.buffers[p.value].dtype != DType::F32)
      fail(where, ": parameter '", p.name, "' needs an f32 value buffer");
    if (p.grad != kNoBuffer || !p.state.empty() || p.valueSharded ||
        !p.globalShape.empty())
      fail(where, ": parameter '", p.name,
           "' must be whole, without gradient or optimizer state");
    if (!p.checkpointShape.empty() &&
        shapeElements(p.checkpointShape) != rank.buffers[p.value].numElements())
      fail(where, ": parameter '", p.name,
           "' checkpoint shape does not match its value buffer");
  }
  for (int k = 0; k < kNumSequenceKinds; ++k)
    if (k != int(SequenceKind::Microbatch) && !rank.sequences[k].empty())
      fail(where, ": only the microbatch sequence may be non-empty");
  std::vector<ProcessGroup> noGroups;
  VerifyEnv env{&program.meta, &noGroups, 0};
  const auto &seq = rank.sequence(SequenceKind::Microbatch);
  for (size_t i = 0; i < seq.size(); ++i) {
    std::string error = verifyInstruction(seq[i], rank.buffers, &env);
    if (error.empty() && slotUse(seq[i]) != SlotUse::None)
      error = "requests are not allowed in an inference program";
    if (!error.empty())
      fail(where, " instruction ", i, ": ", error);
  }
}

/// One rank's persistent values of a parameter: a flat range of its box.
struct HeldValues {
  uint32_t rank;
  std::vector<int64_t> start, box, view;
  int64_t begin, end;
};

std::string dimsText(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

/// A value-sharded parameter's values live nowhere else, so the ranks'
/// pieces must hold every element of the tensor: per box, the widest ranges
/// tile the box (narrower ones lie inside one of them: replicas), and the
/// distinct boxes tile the tensor. Checkpoints save each widest range once.
void verifyValueShards(const Program &program, const std::string &source) {
  std::set<std::string> sharded;
  for (const RankProgram &rank : program.ranks)
    for (const ParamDesc &p : rank.params)
      if (p.valueSharded)
        sharded.insert(p.name);
  if (sharded.empty())
    return;
  std::map<std::string, std::vector<HeldValues>> held;
  for (const RankProgram &rank : program.ranks)
    for (const ParamDesc &p : rank.params) {
      if (!sharded.count(p.name))
        continue;
      HeldValues h;
      h.rank = rank.rank;
      h.box = paramBoxShape(rank, p);
      h.view = p.globalShape.empty() ? h.box : p.globalShape;
      h.start = p.shardStart.empty() ? std::vector<int64_t>(h.box.size(), 0)
                                     : p.shardStart;
      if (h.start.size() != h.box.size() || h.view.size() != h.box.size())
        fail(source, ": rank ", rank.rank, ": parameter '", p.name,
             "' needs one shard_start and global_shape entry per dimension "
             "of its box ",
             dimsText(h.box));
      h.begin = p.valueSharded ? p.stateOffset : 0;
      h.end = h.begin + rank.buffers[p.value].numElements();
      held[p.name].push_back(std::move(h));
    }
  for (auto &[name, pieces] : held) {
    std::string what = source + ": value-sharded parameter '" + name + "'";
    const std::vector<int64_t> view = pieces.front().view;
    for (const HeldValues &h : pieces)
      if (h.view != view)
        fail(what, " has global shape ", dimsText(view), " on rank ",
             pieces.front().rank, " but ", dimsText(h.view), " on rank ",
             h.rank);
    // Boxes in order, and in each box the ranges by begin, widest first.
    std::sort(pieces.begin(), pieces.end(),
              [](const HeldValues &a, const HeldValues &b) {
                if (a.start != b.start)
                  return a.start < b.start;
                if (a.box != b.box)
                  return a.box < b.box;
                if (a.begin != b.begin)
                  return a.begin < b.begin;
                return a.end > b.end;
              });
    std::vector<const HeldValues *> boxes;
    for (size_t i = 0; i < pieces.size();) {
      size_t j = i;
      int64_t covered = 0;
      const HeldValues *widest = nullptr;
      for (; j < pieces.size() && pieces[j].start == pieces[i].start &&
             pieces[j].box == pieces[i].box;
           ++j) {
        const HeldValues &h = pieces[j];
        if (h.begin == h.end)
          continue;
        if (h.begin > covered)
          fail(what, ": no rank holds elements [", covered, ", ", h.begin,
               ") of the box at ", dimsText(h.start), " of shape ",
               dimsText(h.box), "; the value ranges of one box must cover it");
        if (h.begin == covered) {
          widest = &h;
          covered = h.end;
        } else if (h.end > covered) {
          fail(what, ": rank ", h.rank, " holds elements [", h.begin, ", ",
               h.end, ") and rank ", widest->rank, " holds [", widest->begin,
               ", ", widest->end, ") of the box at ", dimsText(h.start),
               "; ranges of one box must be disjoint or nested");
        }
      }
      int64_t n = shapeElements(pieces[i].box);
      if (covered != n)
        fail(what, ": no rank holds elements [", covered, ", ", n,
             ") of the box at ", dimsText(pieces[i].start), " of shape ",
             dimsText(pieces[i].box),
             "; the value ranges of one box must cover it");
      boxes.push_back(&pieces[i]);
      i = j;
    }
    // The parts of the boxes inside the tensor tile it.
    auto clippedLo = [](const HeldValues &h, size_t d) {
      return std::min(h.start[d], h.view[d]);
    };
    auto clippedHi = [](const HeldValues &h, size_t d) {
      return std::min(h.start[d] + h.box[d], h.view[d]);
    };
    int64_t total = 0;
    for (size_t a = 0; a < boxes.size(); ++a) {
      int64_t volume = 1;
      for (size_t d = 0; d < boxes[a]->box.size(); ++d)
        volume *= clippedHi(*boxes[a], d) - clippedLo(*boxes[a], d);
      total += volume;
      for (size_t b = 0; b < a && volume > 0; ++b) {
        bool overlap = true;
        for (size_t d = 0; overlap && d < boxes[a]->box.size(); ++d)
          overlap = std::max(clippedLo(*boxes[a], d), clippedLo(*boxes[b], d)) <
                    std::min(clippedHi(*boxes[a], d), clippedHi(*boxes[b], d));
        if (overlap)
          fail(what, ": the boxes of ranks ", boxes[b]->rank, " (at ",
               dimsText(boxes[b]->start), ", shape ", dimsText(boxes[b]->box),
               ") and ", boxes[a]->rank, " (at ", dimsText(boxes[a]->start),
               ", shape ", dimsText(boxes[a]->box),
               ") overlap but differ; boxes must be equal or disjoint");
      }
    }
    int64_t whole = shapeElements(view);
    if (total != whole)
      fail(what, ": the ranks' boxes hold ", total, " of its ", whole,
           " elements; together they must hold the whole tensor ",
           dimsText(view));
  }
}

} // namespace

void verifyProgram(const Program &program, const std::string &source) {
  const ModelMeta &m = program.meta;
  const TrainConfig &t = program.train;
  auto positive = [&](int64_t v, const char *what) {
    if (v < 1 || v > (int64_t(1) << 40))
      fail(source, ": ", what, " = ", v, " must be positive");
  };
  positive(m.vocab, "vocab");
  positive(m.seqLen, "seq_len");
  positive(m.microBatch, "micro-batch size");
  positive(m.numMicrobatches, "number of micro-batches");
  positive(m.globalBatch, "global batch");
  if (m.worldSize < 1 || m.vocab > (int64_t(1) << 31))
    fail(source, ": invalid world size or vocab");
  // The product is formed only when it cannot exceed the global batch (each
  // factor alone may be up to 2^40).
  if (m.numMicrobatches > m.globalBatch / m.microBatch ||
      m.globalBatch % (m.microBatch * m.numMicrobatches) != 0)
    fail(source, ": global batch ", m.globalBatch,
         " is not a multiple of micro-batch size x micro-batches (",
         m.microBatch, " x ", m.numMicrobatches, ")");
  if (program.ranks.size() != m.worldSize)
    fail(source, ": world size is ", m.worldSize, " but the program has ",
         program.ranks.size(), " rank programs");
  for (size_t r = 0; r < program.ranks.size(); ++r)
    if (program.ranks[r].rank != r)
      fail(source, ": rank table entry ", r, " is for rank ",
           program.ranks[r].rank);
  auto finiteNonNeg = [&](double v, const char *what) {
    if (!std::isfinite(v) || v < 0)
      fail(source, ": ", what, " = ", v, " must be finite and >= 0");
  };
  finiteNonNeg(t.lr, "lr");
  finiteNonNeg(t.momentum, "momentum");
  finiteNonNeg(t.beta1, "beta1");
  finiteNonNeg(t.beta2, "beta2");
  finiteNonNeg(t.eps, "eps");
  finiteNonNeg(t.weightDecay, "weight_decay");
  finiteNonNeg(t.minLr, "min_lr");
  finiteNonNeg(t.gradClip, "grad_clip");
  if (t.warmupSteps < 0 || t.totalSteps < 0 || t.defaultSteps < 0)
    fail(source, ": warmup, total and default steps must be >= 0");
  std::set<std::string> groupNames;
  for (size_t g = 0; g < program.groups.size(); ++g) {
    const ProcessGroup &group = program.groups[g];
    std::string what = source + ": process group " + std::to_string(g) + " ('" +
                       group.name + "')";
    if (group.name.empty() || !groupNames.insert(group.name).second)
      fail(what, ": group names must be non-empty and unique");
    if (group.ranks.empty())
      fail(what, ": has no members");
    std::set<uint32_t> members;
    for (uint32_t r : group.ranks) {
      if (r >= m.worldSize)
        fail(what, ": member ", r, " is outside the world of ", m.worldSize,
             " ranks");
      if (!members.insert(r).second)
        fail(what, ": rank ", r, " is listed twice");
    }
  }
  std::set<uint32_t> lossSet;
  for (uint32_t r : program.lossRanks)
    if (r >= m.worldSize || !lossSet.insert(r).second)
      fail(source, ": loss rank ", r, " is outside the world or listed twice");
  std::vector<uint32_t> lossRanks = program.effectiveLossRanks();
  if (lossRanks.empty())
    fail(source, ": no rank carries the loss (set a loss buffer and list "
                 "the rank in loss_ranks)");
  for (uint32_t r : lossRanks)
    if (program.ranks[r].loss == kNoBuffer)
      fail(source, ": loss rank ", r, " has no loss buffer");
  for (const RankProgram &rank : program.ranks)
    verifyRank(program, rank, source + ": rank " + std::to_string(rank.rank));
  verifyValueShards(program, source);
  if (program.decode)
    verifyDecode(program, *program.decode, source);
}

} // namespace strata::rt
