//===- Program.cpp - Program file encoding and decoding -------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The byte layout is documented in docs/program-format.md. Every read is
// bounds-checked and every count is checked against the bytes left before
// anything is allocated, so a truncated or hostile file yields a RuntimeError.
//
//===----------------------------------------------------------------------===//

#include "runtime/format/Program.h"

#include "runtime/format/OpSchema.h"
#include "runtime/support/Error.h"
#include "runtime/support/FileIO.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

namespace strata::rt {

namespace {

enum SectionId : uint32_t {
  kSectionMeta = 1,
  kSectionTrain = 2,
  kSectionRank = 3,
  kSectionGroups = 4,
  kSectionDecode = 5,
  kSectionTarget = 12, ///< Numbered apart from the others' additions.
};

enum RankSectionId : uint32_t {
  kRankInfo = 1,
  kRankBuffers = 2,
  kRankParams = 3,
  kRankSequence = 4,
  kRankParamLayout = 5,
  kRankParamShards = 6,
};

class Writer {
public:
  std::vector<uint8_t> bytes;

  template <typename T> void pod(T value) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T)); // The format is little-endian, as
    bytes.insert(bytes.end(), raw, raw + sizeof(T)); // is every target host.
  }
  void u8(uint8_t v) { pod(v); }
  void u16(uint16_t v) { pod(v); }
  void u32(uint32_t v) { pod(v); }
  void u64(uint64_t v) { pod(v); }
  void i64(int64_t v) { pod(v); }
  void f64(double v) { pod(v); }
  void str(const std::string &s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void section(uint32_t id, const Writer &body) {
    u32(id);
    u32(0);
    u64(body.bytes.size());
    bytes.insert(bytes.end(), body.bytes.begin(), body.bytes.end());
  }
};

class Reader {
public:
  Reader(const uint8_t *data, size_t size, std::string what)
      : data(data), size(size), what(std::move(what)) {}

  size_t remaining() const { return size - pos; }
  bool done() const { return pos == size; }

  void need(size_t n) {
    if (n > remaining())
      fail(what, ": truncated at byte ", pos, " (needs ", n, " more bytes, ",
           remaining(), " left); the program file is damaged, recompile it");
  }
  template <typename T> T pod() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, data + pos, sizeof(T));
    pos += sizeof(T);
    return value;
  }
  uint8_t u8() { return pod<uint8_t>(); }
  uint16_t u16() { return pod<uint16_t>(); }
  uint32_t u32() { return pod<uint32_t>(); }
  uint64_t u64() { return pod<uint64_t>(); }
  int64_t i64() { return pod<int64_t>(); }
  double f64() { return pod<double>(); }
  std::string str() {
    uint32_t n = u32();
    need(n);
    std::string s(reinterpret_cast<const char *>(data + pos), n);
    pos += n;
    return s;
  }
  /// Reads an element count and checks that `count * minBytes` fit.
  uint32_t count(size_t minBytes) {
    uint32_t n = u32();
    if (uint64_t(n) * minBytes > remaining())
      fail(what, ": count ", n, " at byte ", pos - 4,
           " exceeds the remaining data; the program file is damaged");
    return n;
  }
  /// Reads a section header and returns a reader over its body.
  Reader section(uint32_t &id) {
    id = u32();
    u32();
    uint64_t length = u64();
    need(length);
    Reader body(data + pos, length, what + " section " + std::to_string(id));
    pos += length;
    return body;
  }
  [[noreturn]] void bad(const std::string &message) {
    fail(what, ": ", message, " (at byte ", pos, ")");
  }

private:
  const uint8_t *data;
  size_t size;
  size_t pos = 0;
  std::string what;
};

template <typename Enum>
Enum enumValue(Reader &r, uint8_t maxValue, const char *field) {
  uint8_t v = r.u8();
  if (v > maxValue)
    r.bad(std::string("invalid ") + field + " " + std::to_string(v));
  return static_cast<Enum>(v);
}

std::vector<int64_t> readDims(Reader &r) {
  uint8_t rank = r.u8();
  r.need(size_t(rank) * 8);
  std::vector<int64_t> dims(rank);
  for (auto &d : dims)
    d = r.i64();
  return dims;
}

void writeDims(Writer &w, const std::vector<int64_t> &dims) {
  w.u8(static_cast<uint8_t>(dims.size()));
  for (int64_t d : dims)
    w.i64(d);
}

Writer encodeRank(const RankProgram &rank) {
  Writer out;
  Writer info;
  info.u32(rank.rank);
  info.u64(rank.arenaBytes);
  info.u32(rank.tokens);
  info.u32(rank.targets);
  info.u32(rank.loss);
  info.u32(rank.gradSumSq);
  // Appended later; readers of older programs find them absent.
  info.u32(rank.positions);
  info.i64(rank.dataRowStart);
  info.u32(rank.logits);
  out.section(kRankInfo, info);

  Writer buffers;
  buffers.u32(rank.buffers.size());
  for (const BufferDesc &b : rank.buffers) {
    buffers.str(b.name);
    buffers.u64(b.offset);
    buffers.u8(static_cast<uint8_t>(b.dtype));
    writeDims(buffers, b.shape);
  }
  out.section(kRankBuffers, buffers);

  Writer params;
  params.u32(rank.params.size());
  for (const ParamDesc &p : rank.params) {
    params.str(p.name);
    params.u32(p.value);
    params.u32(p.grad);
    params.u8(static_cast<uint8_t>(p.state.size()));
    for (uint32_t s : p.state)
      params.u32(s);
    params.u8(static_cast<uint8_t>(p.init));
    params.f64(p.initStd);
    params.u8(p.weightDecay ? 1 : 0);
    writeDims(params, p.globalShape);
    writeDims(params, p.shardStart);
  }
  out.section(kRankParams, params);

  // Per-parameter fields added after version 1's PARAMS layout was fixed.
  Writer layout;
  layout.u32(rank.params.size());
  for (const ParamDesc &p : rank.params) {
    writeDims(layout, p.checkpointShape);
    layout.i64(p.stateOffset);
  }
  out.section(kRankParamLayout, layout);

  // ZeRO-3 fields; left out when unused so that such programs stay
  // byte-identical to what older compilers wrote.
  bool anySharded = false;
  for (const ParamDesc &p : rank.params)
    anySharded = anySharded || p.valueSharded || !p.boxShape.empty();
  if (anySharded) {
    Writer shards;
    shards.u32(rank.params.size());
    for (const ParamDesc &p : rank.params) {
      shards.u8(p.valueSharded ? 1 : 0);
      writeDims(shards, p.boxShape);
    }
    out.section(kRankParamShards, shards);
  }

  for (int k = 0; k < kNumSequenceKinds; ++k) {
    // Older readers reject sequence kinds they do not know; empty new kinds
    // are left out so that programs which do not use them stay readable.
    if (k >= int(SequenceKind::LastMicrobatch) && rank.sequences[k].empty())
      continue;
    Writer seq;
    seq.u8(static_cast<uint8_t>(k));
    seq.u32(rank.sequences[k].size());
    for (const Instruction &inst : rank.sequences[k]) {
      seq.u16(static_cast<uint16_t>(inst.opcode));
      seq.u16(static_cast<uint16_t>(inst.operands.size()));
      seq.u16(static_cast<uint16_t>(inst.ints.size()));
      seq.u16(static_cast<uint16_t>(inst.floats.size()));
      for (uint32_t o : inst.operands)
        seq.u32(o);
      for (int64_t v : inst.ints)
        seq.i64(v);
      for (double v : inst.floats)
        seq.f64(v);
    }
    out.section(kRankSequence, seq);
  }
  return out;
}

RankProgram decodeRank(Reader &r) {
  RankProgram rank;
  bool haveInfo = false, haveBuffers = false, haveParams = false;
  bool haveSeq[kNumSequenceKinds] = {};
  while (!r.done()) {
    uint32_t id;
    Reader s = r.section(id);
    switch (id) {
    case kRankInfo:
      rank.rank = s.u32();
      rank.arenaBytes = s.u64();
      rank.tokens = s.u32();
      rank.targets = s.u32();
      rank.loss = s.u32();
      rank.gradSumSq = s.u32();
      if (!s.done())
        rank.positions = s.u32();
      if (!s.done())
        rank.dataRowStart = s.i64();
      if (!s.done())
        rank.logits = s.u32();
      haveInfo = true;
      break;
    case kRankBuffers: {
      uint32_t n = s.count(14);
      rank.buffers.resize(n);
      for (BufferDesc &b : rank.buffers) {
        b.name = s.str();
        b.offset = s.u64();
        b.dtype = enumValue<DType>(s, 3, "dtype");
        b.shape = readDims(s);
      }
      haveBuffers = true;
      break;
    }
    case kRankParams: {
      uint32_t n = s.count(25);
      rank.params.resize(n);
      for (ParamDesc &p : rank.params) {
        p.name = s.str();
        p.value = s.u32();
        p.grad = s.u32();
        uint8_t nstate = s.u8();
        s.need(size_t(nstate) * 4);
        p.state.resize(nstate);
        for (auto &st : p.state)
          st = s.u32();
        p.init = enumValue<InitKind>(s, 2, "init kind");
        p.initStd = s.f64();
        p.weightDecay = s.u8() != 0;
        p.globalShape = readDims(s);
        p.shardStart = readDims(s);
      }
      haveParams = true;
      break;
    }
    case kRankParamLayout: {
      if (!haveParams)
        s.bad("parameter layout before the parameter table");
      uint32_t n = s.count(9);
      if (n != rank.params.size())
        s.bad("parameter layout has " + std::to_string(n) + " entries for " +
              std::to_string(rank.params.size()) + " parameters");
      for (ParamDesc &p : rank.params) {
        p.checkpointShape = readDims(s);
        p.stateOffset = s.i64();
      }
      break;
    }
    case kRankParamShards: {
      if (!haveParams)
        s.bad("parameter shards before the parameter table");
      uint32_t n = s.count(2);
      if (n != rank.params.size())
        s.bad("parameter shards have " + std::to_string(n) + " entries for " +
              std::to_string(rank.params.size()) + " parameters");
      for (ParamDesc &p : rank.params) {
        uint8_t flag = s.u8();
        if (flag > 1)
          s.bad("invalid value_sharded flag " + std::to_string(flag));
        p.valueSharded = flag != 0;
        p.boxShape = readDims(s);
      }
      break;
    }
    case kRankSequence: {
      auto kind =
          enumValue<SequenceKind>(s, kNumSequenceKinds - 1, "sequence kind");
      if (haveSeq[int(kind)])
        s.bad(std::string("duplicate sequence ") + sequenceName(kind));
      haveSeq[int(kind)] = true;
      uint32_t n = s.count(8);
      auto &seq = rank.sequence(kind);
      seq.resize(n);
      for (Instruction &inst : seq) {
        inst.opcode = static_cast<Opcode>(s.u16());
        uint16_t nops = s.u16(), nints = s.u16(), nfloats = s.u16();
        s.need(size_t(nops) * 4 + size_t(nints) * 8 + size_t(nfloats) * 8);
        inst.operands.resize(nops);
        for (auto &o : inst.operands)
          o = s.u32();
        inst.ints.resize(nints);
        for (auto &v : inst.ints)
          v = s.i64();
        inst.floats.resize(nfloats);
        for (auto &v : inst.floats)
          v = s.f64();
      }
      break;
    }
    default:
      break; // Sections added by later versions of the same format.
    }
  }
  if (!haveInfo || !haveBuffers || !haveParams)
    r.bad("a rank section lacks its info, buffer or parameter table");
  return rank;
}

} // namespace

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "f32";
  case DType::I32:
    return "i32";
  case DType::F64:
    return "f64";
  case DType::BF16:
    return "bf16";
  }
  return "?";
}

const char *targetName(TargetKind target) {
  switch (target) {
  case TargetKind::Cpu:
    return "cpu";
  case TargetKind::Cuda:
    return "cuda";
  }
  return "?";
}

size_t dtypeBytes(DType dtype) {
  return dtype == DType::F64 ? 8 : dtype == DType::BF16 ? 2 : 4;
}

const char *sequenceName(SequenceKind kind) {
  switch (kind) {
  case SequenceKind::StepBegin:
    return "step_begin";
  case SequenceKind::Microbatch:
    return "microbatch";
  case SequenceKind::Update:
    return "update";
  case SequenceKind::LastMicrobatch:
    return "last_microbatch";
  case SequenceKind::Schedule:
    return "schedule";
  case SequenceKind::Eval:
    return "eval";
  case SequenceKind::EvalSchedule:
    return "eval_schedule";
  }
  return "?";
}

int ProcessGroup::indexOf(uint32_t globalRank) const {
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == globalRank)
      return int(i);
  return -1;
}

std::vector<uint32_t> Program::effectiveLossRanks() const {
  if (!lossRanks.empty())
    return lossRanks;
  std::vector<uint32_t> result;
  for (const RankProgram &r : ranks)
    if (r.loss != kNoBuffer)
      result.push_back(r.rank);
  return result;
}

int64_t shapeElements(const std::vector<int64_t> &shape) {
  BufferDesc b;
  b.shape = shape;
  return b.numElements();
}

int64_t BufferDesc::numElements() const {
  __int128 n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return -1;
    n *= d;
    if (n > (int64_t(1) << 56))
      return -1;
  }
  return static_cast<int64_t>(n);
}

const std::vector<int64_t> &paramBoxShape(const RankProgram &rank,
                                          const ParamDesc &param) {
  if (!param.valueSharded)
    return rank.buffers[param.value].shape;
  if (!param.boxShape.empty())
    return param.boxShape;
  if (!param.globalShape.empty())
    return param.globalShape;
  return param.checkpointShape;
}

uint32_t RankProgram::findBuffer(const std::string &name) const {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].name == name)
      return static_cast<uint32_t>(i);
  return kNoBuffer;
}

uint64_t fnv1a64(const uint8_t *data, size_t size, uint64_t hash) {
  for (size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::vector<uint8_t> serializeProgram(const Program &program) {
  Writer payload;
  Writer meta;
  const ModelMeta &m = program.meta;
  meta.str(m.family);
  meta.i64(m.vocab);
  meta.i64(m.seqLen);
  meta.i64(m.microBatch);
  meta.i64(m.numMicrobatches);
  meta.i64(m.globalBatch);
  meta.u64(m.seed);
  meta.str(m.planDescription);
  meta.u32(m.worldSize);
  // Appended later; readers of older programs find them absent.
  meta.f64(m.flopsPerStep);
  meta.f64(m.peakFlops);
  meta.str(m.hfConfig);
  payload.section(kSectionMeta, meta);

  Writer train;
  const TrainConfig &t = program.train;
  train.u8(static_cast<uint8_t>(t.optimizer));
  train.f64(t.lr);
  train.f64(t.momentum);
  train.f64(t.beta1);
  train.f64(t.beta2);
  train.f64(t.eps);
  train.f64(t.weightDecay);
  train.u8(static_cast<uint8_t>(t.schedule));
  train.i64(t.warmupSteps);
  train.f64(t.minLr);
  train.i64(t.totalSteps);
  train.f64(t.gradClip);
  train.i64(t.defaultSteps);
  payload.section(kSectionTrain, train);

  for (const RankProgram &rank : program.ranks)
    payload.section(kSectionRank, encodeRank(rank));

  if (!program.groups.empty() || !program.lossRanks.empty()) {
    Writer groups;
    groups.u32(program.groups.size());
    for (const ProcessGroup &g : program.groups) {
      groups.str(g.name);
      groups.u32(g.ranks.size());
      for (uint32_t r : g.ranks)
        groups.u32(r);
    }
    groups.u32(program.lossRanks.size());
    for (uint32_t r : program.lossRanks)
      groups.u32(r);
    payload.section(kSectionGroups, groups);
  }
  if (program.decode)
    payload.section(kSectionDecode, encodeRank(*program.decode));
  const TargetDesc &target = program.target;
  if (target.kind != TargetKind::Cpu || !target.deviceModel.empty() ||
      !target.cluster.empty()) {
    Writer t;
    t.u8(static_cast<uint8_t>(target.kind));
    t.str(target.deviceModel);
    t.str(target.cluster);
    payload.section(kSectionTarget, t);
  }

  Writer file;
  file.bytes.insert(file.bytes.end(), kProgramMagic, kProgramMagic + 8);
  file.u32(target.kind == TargetKind::Cpu ? kProgramFormatVersion
                                          : kProgramFormatVersionTargets);
  file.u32(0);
  file.u64(payload.bytes.size());
  file.u64(fnv1a64(payload.bytes.data(), payload.bytes.size()));
  file.bytes.insert(file.bytes.end(), payload.bytes.begin(),
                    payload.bytes.end());
  return file.bytes;
}

Program parseProgram(const uint8_t *data, size_t size,
                     const std::string &source) {
  if (size < kProgramHeaderBytes)
    fail(source, ": not a Strata program (", size,
         " bytes, shorter than the 32-byte header)");
  if (std::memcmp(data, kProgramMagic, 8) != 0)
    fail(source, ": not a Strata program (bad magic number); compile one "
                 "with `strata compile`");
  Reader header(data + 8, kProgramHeaderBytes - 8, source);
  uint32_t version = header.u32();
  header.u32(); // flags: none defined in version 1
  uint64_t payloadLength = header.u64();
  uint64_t checksum = header.u64();
  if (version != kProgramFormatVersion &&
      version != kProgramFormatVersionTargets)
    fail(source, ": program format version ", version,
         " is not supported by this runtime (it reads versions ",
         kProgramFormatVersion, " and ", kProgramFormatVersionTargets,
         "); recompile with a matching strata");
  if (payloadLength != size - kProgramHeaderBytes)
    fail(source, ": program is truncated or has trailing bytes (header says ",
         payloadLength, " payload bytes, file has ", size - kProgramHeaderBytes,
         ")");
  const uint8_t *payload = data + kProgramHeaderBytes;
  if (fnv1a64(payload, payloadLength) != checksum)
    fail(source, ": program checksum mismatch; the file is corrupted, "
                 "recompile it");

  Program program;
  Reader r(payload, payloadLength, source);
  bool haveMeta = false, haveTrain = false, haveTarget = false;
  while (!r.done()) {
    uint32_t id;
    Reader s = r.section(id);
    if (id == kSectionMeta) {
      ModelMeta &m = program.meta;
      m.family = s.str();
      m.vocab = s.i64();
      m.seqLen = s.i64();
      m.microBatch = s.i64();
      m.numMicrobatches = s.i64();
      m.globalBatch = s.i64();
      m.seed = s.u64();
      m.planDescription = s.str();
      m.worldSize = s.u32();
      if (!s.done()) {
        m.flopsPerStep = s.f64();
        m.peakFlops = s.f64();
        m.hfConfig = s.str();
      }
      haveMeta = true;
    } else if (id == kSectionTrain) {
      TrainConfig &t = program.train;
      t.optimizer = enumValue<OptimizerKind>(s, 1, "optimizer");
      t.lr = s.f64();
      t.momentum = s.f64();
      t.beta1 = s.f64();
      t.beta2 = s.f64();
      t.eps = s.f64();
      t.weightDecay = s.f64();
      t.schedule = enumValue<LrScheduleKind>(s, 2, "lr schedule");
      t.warmupSteps = s.i64();
      t.minLr = s.f64();
      t.totalSteps = s.i64();
      t.gradClip = s.f64();
      t.defaultSteps = s.i64();
      haveTrain = true;
    } else if (id == kSectionRank) {
      program.ranks.push_back(decodeRank(s));
    } else if (id == kSectionDecode) {
      program.decode = decodeRank(s);
    } else if (id == kSectionTarget) {
      program.target.kind = enumValue<TargetKind>(s, 1, "target");
      program.target.deviceModel = s.str();
      program.target.cluster = s.str();
      haveTarget = true;
    } else if (id == kSectionGroups) {
      uint32_t n = s.count(8);
      program.groups.resize(n);
      for (ProcessGroup &g : program.groups) {
        g.name = s.str();
        uint32_t members = s.count(4);
        g.ranks.resize(members);
        for (uint32_t &r : g.ranks)
          r = s.u32();
      }
      uint32_t losses = s.count(4);
      program.lossRanks.resize(losses);
      for (uint32_t &r : program.lossRanks)
        r = s.u32();
    }
  }
  if (!haveMeta || !haveTrain)
    fail(source, ": program lacks its metadata or training section");
  // Version 2 exists only to keep target-unaware runtimes away.
  if (version == kProgramFormatVersionTargets &&
      (!haveTarget || program.target.kind == TargetKind::Cpu))
    fail(source, ": program format version ", version,
         " without a non-CPU target section; the file is corrupted, "
         "recompile it");
  verifyProgram(program, source);
  return program;
}

Program loadProgramFile(const std::string &path) {
  std::vector<uint8_t> bytes = readRegularFile(path, "a Strata program file");
  return parseProgram(bytes.data(), bytes.size(), path);
}

} // namespace strata::rt
