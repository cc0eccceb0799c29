//===- FormatTest.cpp - Program format round trip and damage detection ----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "TestPrograms.h"

#include "runtime/format/OpSchema.h"
#include "runtime/format/ProgramBuilder.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

using namespace strata::rt;

namespace {

std::string parseError(const std::vector<uint8_t> &bytes) {
  try {
    parseProgram(bytes.data(), bytes.size(), "test.prog");
  } catch (const RuntimeError &e) {
    return e.what();
  }
  return "";
}

TEST(FormatTest, RoundTripIsExact) {
  Program program = testprograms::buildMlpProgram();
  program.meta.planDescription = "dp=1 tp=1 pp=1; \xce\xbb unicode ok";
  std::vector<uint8_t> bytes = serializeProgram(program);
  Program back = parseProgram(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(serializeProgram(back), bytes);
  EXPECT_EQ(back.meta.family, "mlp");
  EXPECT_EQ(back.meta.planDescription, program.meta.planDescription);
  EXPECT_EQ(back.train.gradClip, 1.0);
  const RankProgram &a = program.ranks[0], &b = back.ranks[0];
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  EXPECT_EQ(b.buffers[5].name, a.buffers[5].name);
  EXPECT_EQ(b.params[3].name, "fc2.weight");
  EXPECT_EQ(b.params[3].state.size(), 2u);
  EXPECT_TRUE(b.params[3].weightDecay);
  EXPECT_FALSE(b.params[4].weightDecay);
  for (int k = 0; k < kNumSequenceKinds; ++k)
    ASSERT_EQ(a.sequences[k].size(), b.sequences[k].size());
  const Instruction &mm = b.sequence(SequenceKind::Microbatch)[1];
  EXPECT_EQ(mm.opcode, Opcode::Matmul);
  EXPECT_EQ(mm.ints, a.sequence(SequenceKind::Microbatch)[1].ints);
}

TEST(FormatTest, EveryTruncationIsAnErrorNotACrash) {
  std::vector<uint8_t> bytes =
      serializeProgram(testprograms::buildMlpProgram());
  for (size_t len = 0; len < bytes.size(); len += (len < 64 ? 1 : 7)) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + len);
    EXPECT_FALSE(parseError(cut).empty()) << "length " << len;
  }
  EXPECT_NE(parseError({bytes.begin(), bytes.begin() + 100}).find("truncated"),
            std::string::npos);
}

TEST(FormatTest, CorruptionIsCaughtByTheChecksum) {
  std::vector<uint8_t> bytes =
      serializeProgram(testprograms::buildMlpProgram());
  for (size_t i = kProgramHeaderBytes; i < bytes.size(); i += 13) {
    std::vector<uint8_t> bad = bytes;
    bad[i] ^= 0x5a;
    EXPECT_NE(parseError(bad).find("checksum"), std::string::npos) << i;
  }
}

TEST(FormatTest, WrongMagicAndVersion) {
  std::vector<uint8_t> bytes =
      serializeProgram(testprograms::buildMlpProgram());
  std::vector<uint8_t> bad = bytes;
  bad[0] = 'X';
  EXPECT_NE(parseError(bad).find("magic"), std::string::npos);
  bad = bytes;
  uint32_t version = 99;
  std::memcpy(bad.data() + 8, &version, 4);
  std::string error = parseError(bad);
  EXPECT_NE(error.find("version 99"), std::string::npos) << error;
}

TEST(FormatTest, TargetRoundTripAndVersion) {
  Program program = testprograms::buildMlpProgram();
  std::vector<uint8_t> cpuBytes = serializeProgram(program);
  uint32_t version = 0;
  std::memcpy(&version, cpuBytes.data() + 8, 4);
  EXPECT_EQ(version, kProgramFormatVersion); // No target: version 1 as before.
  Program back = parseProgram(cpuBytes.data(), cpuBytes.size(), "mem");
  EXPECT_EQ(back.target.kind, TargetKind::Cpu);
  EXPECT_EQ(back.target.deviceModel, "");

  program.target = {TargetKind::Cuda, "H100-SXM5-80GB", "h100:1"};
  std::vector<uint8_t> cudaBytes = serializeProgram(program);
  std::memcpy(&version, cudaBytes.data() + 8, 4);
  EXPECT_EQ(version, kProgramFormatVersionTargets);
  back = parseProgram(cudaBytes.data(), cudaBytes.size(), "mem");
  EXPECT_EQ(back.target.kind, TargetKind::Cuda);
  EXPECT_EQ(back.target.deviceModel, "H100-SXM5-80GB");
  EXPECT_EQ(back.target.cluster, "h100:1");
  EXPECT_EQ(serializeProgram(back), cudaBytes);

  // A CPU program recorded with its device model stays version 1.
  program.target = {TargetKind::Cpu, "cpu-rank", "local:1"};
  std::vector<uint8_t> cpuModel = serializeProgram(program);
  std::memcpy(&version, cpuModel.data() + 8, 4);
  EXPECT_EQ(version, kProgramFormatVersion);
  EXPECT_EQ(parseProgram(cpuModel.data(), cpuModel.size(), "m").target.cluster,
            "local:1");

  // Version 2 exists only for non-CPU targets.
  version = kProgramFormatVersionTargets;
  std::memcpy(cpuBytes.data() + 8, &version, 4);
  EXPECT_NE(parseError(cpuBytes).find("without a non-CPU target"),
            std::string::npos)
      << parseError(cpuBytes);
}

/// A program with a valid checksum but a broken table must fail the
/// verifier, not crash a kernel.
TEST(FormatTest, VerifierRejectsInconsistentPrograms) {
  Program good = testprograms::buildMlpProgram();
  auto expectRejected = [](const Program &p, const std::string &needle) {
    std::string error = parseError(serializeProgram(p));
    EXPECT_NE(error.find(needle), std::string::npos) << error;
  };
  Program p = good;
  p.ranks[0].buffers[3].offset = p.ranks[0].arenaBytes;
  expectRejected(p, "outside the arena");
  p = good;
  p.ranks[0].sequence(SequenceKind::Microbatch)[1].ints[1] += 1;
  expectRejected(p, "matmul");
  p = good;
  p.ranks[0].sequence(SequenceKind::Microbatch)[1].operands[0] = 100000;
  expectRejected(p, "only");
  p = good;
  p.ranks[0].sequence(SequenceKind::Microbatch)[0].opcode = Opcode(999);
  expectRejected(p, "unknown opcode 999");
  p = good;
  p.ranks[0].sequence(SequenceKind::Microbatch)[0].operands[0] =
      p.ranks[0].findBuffer("x");
  expectRejected(p, "must be i32");
  p = good;
  p.meta.globalBatch = 7;
  expectRejected(p, "global batch");
  p = good;
  p.ranks[0].params[0].state.pop_back();
  expectRejected(p, "optimizer state");
}

TEST(FormatTest, BuilderRejectsBadInstructionsAtOnce) {
  ModelMeta meta;
  meta.vocab = 10;
  meta.seqLen = 4;
  meta.microBatch = 2;
  meta.globalBatch = 2;
  ProgramBuilder b(meta, TrainConfig{});
  b.addInputs();
  uint32_t x = b.addBuffer("x", {8, 3});
  uint32_t y = b.addBuffer("y", {8, 4});
  try {
    b.emit(SequenceKind::Microbatch, Opcode::Add, {x, y, y});
    FAIL() << "size mismatch accepted";
  } catch (const RuntimeError &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("add(a=x, b=y, out=y)"), std::string::npos) << msg;
  }
  // Partial overlap between an output and an input is rejected.
  uint32_t head = b.addAlias("x.head", x, {4, 3});
  uint32_t tail = b.addAlias("x.mid", x, {4, 3}, 24);
  EXPECT_THROW(b.emit(SequenceKind::Microbatch, Opcode::Copy, {head, tail}),
               RuntimeError);
  b.emit(SequenceKind::Microbatch, Opcode::Scale, {x, x}, {}, {2.0});
  EXPECT_EQ(b.rankProgram().sequence(SequenceKind::Microbatch).size(), 1u);
}

TEST(FormatTest, EveryOpcodeHasSchemaAndUniqueNames) {
  std::set<std::string> names;
  for (const OpSchema &s : allOpSchemas()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_EQ(lookupOpSchema(s.name), &s);
    EXPECT_NE(s.verify, nullptr) << s.name;
  }
#define STRATA_OPCODE(Enum, Name, Number)                                      \
  EXPECT_NE(lookupOpSchema(uint16_t(Number)), nullptr) << Name;
#include "runtime/format/Opcodes.def"
}

} // namespace
