//===- Program.cpp - Program file encoding, decoding and verification -----===//
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
      haveInfo = true;
      break;
    case kRankBuffers: {
      uint32_t n = s.count(14);
      rank.buffers.resize(n);
      for (BufferDesc &b : rank.buffers) {
        b.name = s.str();
        b.offset = s.u64();
        b.dtype = enumValue<DType>(s, 2, "dtype");
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
  }
  return "?";
}

size_t dtypeBytes(DType dtype) { return dtype == DType::F64 ? 8 : 4; }

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

  Writer file;
  file.bytes.insert(file.bytes.end(), kProgramMagic, kProgramMagic + 8);
  file.u32(kProgramFormatVersion);
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
  if (version != kProgramFormatVersion)
    fail(source, ": program format version ", version,
         " is not supported by this runtime (it reads version ",
         kProgramFormatVersion, "); recompile with a matching strata");
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
  bool haveMeta = false, haveTrain = false;
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
  verifyProgram(program, source);
  return program;
}

Program loadProgramFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail(path, ": cannot open program file: ", std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  return parseProgram(bytes.data(), bytes.size(), path);
}

namespace {

void verifyRank(const Program &program, const RankProgram &rank,
                const std::string &where) {
  const ModelMeta &m = program.meta;
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
  auto expectBuffer = [&](uint32_t id, const char *role, DType dtype,
                          int64_t elements) {
    if (id >= rank.buffers.size())
      fail(where, ": the ", role, " buffer is missing");
    const BufferDesc &b = rank.buffers[id];
    if (b.dtype != dtype || b.numElements() != elements)
      fail(where, ": the ", role, " buffer '", b.name, "' must be ",
           dtypeName(dtype), " with ", elements, " elements");
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
           " of ", sequenceName(busyKind[slot]),
           " is never waited on within the step");
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
  if (m.globalBatch % (m.microBatch * m.numMicrobatches) != 0)
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
}

} // namespace strata::rt
