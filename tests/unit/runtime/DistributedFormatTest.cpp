//===- DistributedFormatTest.cpp - Multi-rank program tables --------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Groups, loss ranks, per-rank data offsets, parameter views and state
// ranges round-trip through the file format, and the verifier rejects what
// would hang or corrupt a multi-rank run: collectives on a group the rank is
// not in, wrong reduce_scatter sizes, misused request slots, missing ranks.
//
//===----------------------------------------------------------------------===//

#include "TestPrograms.h"

#include "runtime/core/Trainer.h"
#include "runtime/format/ProgramBuilder.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

using namespace strata::rt;

namespace {

Program dpProgram(bool zero = true) {
  testprograms::MlpConfig c;
  c.microBatch = 2;
  c.numMicrobatches = 2;
  return testprograms::buildDataParallelMlp(c, {2, true, zero});
}

std::string verifyError(const Program &p) {
  try {
    std::vector<uint8_t> bytes = serializeProgram(p);
    parseProgram(bytes.data(), bytes.size(), "test");
  } catch (const RuntimeError &e) {
    return e.what();
  }
  return "";
}

TEST(DistributedFormatTest, RoundTripKeepsEveryNewField) {
  Program p = dpProgram();
  p.ranks[1].params[0].checkpointShape = {32, 64};
  std::vector<uint8_t> bytes = serializeProgram(p);
  Program q = parseProgram(bytes.data(), bytes.size(), "dp");
  ASSERT_EQ(q.groups.size(), 1u);
  EXPECT_EQ(q.groups[0].name, "dp");
  EXPECT_EQ(q.groups[0].ranks, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(q.lossRanks, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(q.ranks[1].dataRowStart, 4);
  EXPECT_EQ(q.ranks[1].params[0].stateOffset, 64 * 32 / 2);
  EXPECT_EQ(q.ranks[1].params[0].checkpointShape,
            (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(q.ranks[0].sequence(SequenceKind::LastMicrobatch).size(),
            p.ranks[0].sequence(SequenceKind::LastMicrobatch).size());
  EXPECT_EQ(serializeProgram(q), bytes);
}

TEST(DistributedFormatTest, OneRankProgramsNeedNoGroupTable) {
  // Without a loss-rank list every rank with a loss buffer carries the loss.
  Program p = testprograms::buildMlpProgram();
  std::vector<uint8_t> bytes = serializeProgram(p);
  Program q = parseProgram(bytes.data(), bytes.size(), "mlp");
  EXPECT_TRUE(q.groups.empty());
  EXPECT_EQ(q.effectiveLossRanks(), (std::vector<uint32_t>{0}));
}

TEST(DistributedFormatTest, VerifierRejectsBrokenDistributedPrograms) {
  Program good = dpProgram(false);
  auto expectRejected = [](const Program &p, const std::string &needle) {
    std::string error = verifyError(p);
    EXPECT_NE(error.find(needle), std::string::npos) << error;
  };
  Program p = good;
  p.ranks.pop_back();
  expectRejected(p, "world size is 2 but the program has 1 rank programs");
  p = good;
  p.groups[0].ranks = {1};
  expectRejected(p, "rank 0 is not a member of group 0 ('dp')");
  p = good;
  p.groups[0].ranks = {0, 2};
  expectRejected(p, "member 2 is outside the world");
  p = good;
  // Two starts on one slot before its wait.
  auto &last = p.ranks[0].sequence(SequenceKind::LastMicrobatch);
  for (Instruction &inst : last)
    if (inst.opcode == Opcode::AllReduceStart)
      inst.ints[2] = 0;
  expectRejected(p, "slot 0 is still in use");
  p = good;
  p.ranks[0]
      .sequence(SequenceKind::Update)
      .erase(p.ranks[0].sequence(SequenceKind::Update).begin());
  expectRejected(p, "is never waited on within the step");
  p = good;
  p.ranks[0].sequence(SequenceKind::Update).push_back({Opcode::Wait, {}, {7}});
  expectRejected(p, "wait on slot 7, which holds no request");
  p = good;
  p.ranks[1].dataRowStart = 5;
  expectRejected(p, "data row start 5");
  p = good;
  p.lossRanks = {0, 0};
  expectRejected(p, "listed twice");
  p = good;
  p.ranks[0].params[0].checkpointShape = {7};
  expectRejected(p, "checkpoint shape has 7 elements");
}

TEST(DistributedFormatTest, BuilderChecksCollectiveSizesAtOnce) {
  ModelMeta meta;
  meta.family = "t";
  meta.vocab = 4;
  meta.seqLen = 1;
  meta.microBatch = 1;
  meta.globalBatch = 4;
  meta.worldSize = 4;
  MultiRankProgramBuilder mb(meta, TrainConfig{});
  uint32_t g = mb.addGroup("pair", {2, 0});
  ProgramBuilder &b = mb.rank(0);
  uint32_t in = b.addBuffer("in", {6}), out = b.addBuffer("out", {2});
  try {
    b.emit(SequenceKind::Update, Opcode::ReduceScatter, {in, out}, {g});
    FAIL();
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("reduce_scatter(in=in, out=out; 0)"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("has 6 elements but the attributes "
                                         "need 4"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(mb.rank(1).emit(SequenceKind::Update, Opcode::Barrier, {}, {g}),
               RuntimeError);
  EXPECT_THROW(b.emit(SequenceKind::Update, Opcode::Send, {out}, {0, 1}),
               RuntimeError); // To itself.
  EXPECT_THROW(b.emit(SequenceKind::Update, Opcode::Wait, {}, {64}),
               RuntimeError);
}

TEST(DistributedFormatTest, OneRankCollectivesRunWithoutMpi) {
  // all_reduce over a group of one is the identity, so a one-rank program
  // may contain collectives and still run in-process.
  testprograms::MlpConfig c;
  Program p = testprograms::buildDataParallelMlp(c, {1, true, true});
  Trainer t(p, 0, createCpuDevice(), 1234);
  t.initParameters();
  Program plain = testprograms::buildMlpProgram(c);
  Trainer ref(plain, 0, createCpuDevice(), 1234);
  ref.initParameters();
  TokenData data = TokenData::synthetic(1234, c.vocab, c.seqLen);
  for (int i = 0; i < 3; ++i)
    EXPECT_DOUBLE_EQ(t.runStep(data).loss, ref.runStep(data).loss);
}

} // namespace
