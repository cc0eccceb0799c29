//===- ProgramBuilder.cpp - API the compiler uses to emit programs --------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/format/ProgramBuilder.h"

#include "runtime/format/OpSchema.h"
#include "runtime/support/Error.h"

namespace strata::rt {

namespace {
uint64_t alignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
} // namespace

ProgramBuilder::ProgramBuilder(
    ModelMeta meta, TrainConfig train, uint32_t rank,
    std::shared_ptr<std::vector<ProcessGroup>> groups)
    : meta_(std::move(meta)), train_(train), groups_(std::move(groups)) {
  rank_.rank = rank;
  if (!groups_)
    groups_ = std::make_shared<std::vector<ProcessGroup>>();
}

uint32_t ProgramBuilder::addGroup(const std::string &name,
                                  std::vector<uint32_t> ranks) {
  for (const ProcessGroup &g : *groups_)
    if (g.name == name)
      fail("ProgramBuilder: process group '", name, "' already exists");
  for (uint32_t r : ranks)
    if (r >= meta_.worldSize)
      fail("ProgramBuilder: process group '", name, "' member ", r,
           " is outside the world of ", meta_.worldSize, " ranks");
  groups_->push_back({name, std::move(ranks)});
  return uint32_t(groups_->size() - 1);
}

uint32_t ProgramBuilder::pushBuffer(BufferDesc desc) {
  // rankProgram() hands out the buffers; re-index if they changed behind us.
  if (namesIndexed_ != rank_.buffers.size()) {
    bufferNames_.clear();
    for (const BufferDesc &b : rank_.buffers)
      bufferNames_.insert(b.name);
    namesIndexed_ = rank_.buffers.size();
  }
  if (bufferNames_.count(desc.name))
    fail("ProgramBuilder: buffer '", desc.name, "' already exists");
  if (desc.numElements() < 0)
    fail("ProgramBuilder: buffer '", desc.name, "' has an invalid shape");
  uint64_t end = desc.offset + desc.byteSize();
  if (end > rank_.arenaBytes)
    rank_.arenaBytes = alignUp(end, kBufferAlignment);
  bufferNames_.insert(desc.name);
  rank_.buffers.push_back(std::move(desc));
  namesIndexed_ = rank_.buffers.size();
  return static_cast<uint32_t>(rank_.buffers.size() - 1);
}

uint32_t ProgramBuilder::addBuffer(const std::string &name,
                                   std::vector<int64_t> shape, DType dtype) {
  return addBufferAt(name, std::move(shape), dtype,
                     alignUp(rank_.arenaBytes, kBufferAlignment));
}

uint32_t ProgramBuilder::addBufferAt(const std::string &name,
                                     std::vector<int64_t> shape, DType dtype,
                                     uint64_t offset) {
  return pushBuffer({name, offset, dtype, std::move(shape)});
}

uint32_t ProgramBuilder::addAlias(const std::string &name, uint32_t base,
                                  std::vector<int64_t> shape,
                                  uint64_t byteOffset) {
  if (base >= rank_.buffers.size())
    fail("ProgramBuilder: alias '", name, "' of a missing buffer");
  const BufferDesc &b = rank_.buffers[base];
  BufferDesc alias{name, b.offset + byteOffset, b.dtype, std::move(shape)};
  if (alias.numElements() < 0 || byteOffset + alias.byteSize() > b.byteSize())
    fail("ProgramBuilder: alias '", name, "' does not fit inside '", b.name,
         "'");
  return pushBuffer(std::move(alias));
}

uint32_t ProgramBuilder::addParam(const std::string &name,
                                  std::vector<int64_t> shape, InitKind init,
                                  double initStd, bool weightDecay) {
  ParamDesc p;
  p.name = name;
  p.value = addBuffer(name, shape);
  p.grad = addBuffer(name + ".grad", shape);
  if (train_.optimizer == OptimizerKind::AdamW) {
    p.state.push_back(addBuffer(name + ".exp_avg", shape));
    p.state.push_back(addBuffer(name + ".exp_avg_sq", shape));
  } else {
    p.state.push_back(addBuffer(name + ".momentum", shape));
  }
  p.init = init;
  p.initStd = initStd;
  p.weightDecay = weightDecay;
  return addParamWithBuffers(std::move(p));
}

uint32_t ProgramBuilder::addParamWithBuffers(ParamDesc param) {
  for (const ParamDesc &p : rank_.params)
    if (p.name == param.name)
      fail("ProgramBuilder: parameter '", param.name, "' already exists");
  rank_.params.push_back(std::move(param));
  return static_cast<uint32_t>(rank_.params.size() - 1);
}

uint32_t ProgramBuilder::value(uint32_t param) const {
  return rank_.params.at(param).value;
}
uint32_t ProgramBuilder::grad(uint32_t param) const {
  return rank_.params.at(param).grad;
}

void ProgramBuilder::addInputs() {
  std::vector<int64_t> shape = {meta_.microBatch, meta_.seqLen};
  setInputs(addBuffer("tokens", shape, DType::I32),
            addBuffer("targets", shape, DType::I32),
            addBuffer("loss", {1}, DType::F32));
}

void ProgramBuilder::setInputs(uint32_t tokens, uint32_t targets,
                               uint32_t loss) {
  rank_.tokens = tokens;
  rank_.targets = targets;
  rank_.loss = loss;
}

void ProgramBuilder::emit(SequenceKind kind, Opcode opcode,
                          std::vector<uint32_t> operands,
                          std::vector<int64_t> ints,
                          std::vector<double> floats) {
  Instruction inst{opcode, std::move(operands), std::move(ints),
                   std::move(floats)};
  VerifyEnv env{&meta_, groups_.get(), rank_.rank};
  std::string error = verifyInstruction(inst, rank_.buffers, &env);
  if (!error.empty())
    fail("ProgramBuilder: invalid instruction ",
         describeInstruction(inst, rank_.buffers), " in ", sequenceName(kind),
         ": ", error);
  rank_.sequence(kind).push_back(std::move(inst));
}

void ProgramBuilder::emitZeroGrads() {
  for (const ParamDesc &p : rank_.params)
    emit(SequenceKind::StepBegin, Opcode::Fill, {p.grad}, {}, {0.0});
}

void ProgramBuilder::emitOptimizerStep() {
  std::vector<uint32_t> grads;
  for (const ParamDesc &p : rank_.params)
    grads.push_back(p.grad);
  if (grads.empty())
    return;
  uint32_t sumsq = rank_.findBuffer("grad_sumsq");
  if (sumsq == kNoBuffer)
    sumsq = addBuffer("grad_sumsq", {1}, DType::F64);
  rank_.gradSumSq = sumsq;
  std::vector<uint32_t> operands = {sumsq};
  operands.insert(operands.end(), grads.begin(), grads.end());
  emit(SequenceKind::Update, Opcode::GradSumSq, operands);
  if (train_.gradClip > 0)
    emit(SequenceKind::Update, Opcode::ClipGrads, operands, {},
         {train_.gradClip});
  for (const ParamDesc &p : rank_.params) {
    double wd = p.weightDecay ? train_.weightDecay : 0.0;
    if (train_.optimizer == OptimizerKind::AdamW)
      emit(SequenceKind::Update, Opcode::AdamWStep,
           {p.value, p.grad, p.state.at(0), p.state.at(1)}, {},
           {train_.beta1, train_.beta2, train_.eps, wd});
    else
      emit(SequenceKind::Update, Opcode::SgdStep,
           {p.value, p.grad, p.state.at(0)}, {}, {train_.momentum, wd});
  }
}

Program ProgramBuilder::finish() const {
  Program program;
  program.meta = meta_;
  program.train = train_;
  program.ranks.push_back(rank_);
  program.groups = *groups_;
  verifyProgram(program, "ProgramBuilder");
  return program;
}

std::vector<uint8_t> ProgramBuilder::serialize() const {
  return serializeProgram(finish());
}

MultiRankProgramBuilder::MultiRankProgramBuilder(ModelMeta meta,
                                                 TrainConfig train)
    : meta_(std::move(meta)), train_(train),
      groups_(std::make_shared<std::vector<ProcessGroup>>()) {
  if (meta_.worldSize < 1 || meta_.worldSize > (1u << 20))
    fail("MultiRankProgramBuilder: world size ", meta_.worldSize,
         " is out of range");
  for (uint32_t r = 0; r < meta_.worldSize; ++r)
    ranks_.push_back(
        std::make_unique<ProgramBuilder>(meta_, train_, r, groups_));
}

uint32_t MultiRankProgramBuilder::addGroup(const std::string &name,
                                           std::vector<uint32_t> ranks) {
  return ranks_.front()->addGroup(name, std::move(ranks));
}

Program MultiRankProgramBuilder::finish() const {
  std::vector<RankProgram> ranks;
  for (const auto &b : ranks_)
    ranks.push_back(b->rankProgram());
  return combinePrograms(meta_, train_, *groups_, std::move(ranks), lossRanks_);
}

std::vector<uint8_t> MultiRankProgramBuilder::serialize() const {
  return serializeProgram(finish());
}

Program combinePrograms(ModelMeta meta, TrainConfig train,
                        std::vector<ProcessGroup> groups,
                        std::vector<RankProgram> ranks,
                        std::vector<uint32_t> lossRanks) {
  Program program;
  program.meta = std::move(meta);
  program.meta.worldSize = uint32_t(ranks.size());
  program.train = train;
  program.groups = std::move(groups);
  program.ranks = std::move(ranks);
  program.lossRanks = std::move(lossRanks);
  verifyProgram(program, "combinePrograms");
  return program;
}

} // namespace strata::rt
