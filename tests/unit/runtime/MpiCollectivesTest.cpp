//===- MpiCollectivesTest.cpp - Every collective opcode on real ranks -----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Runs under `mpirun -np 2` and `-np 4`. One program exercises every
// collective and transfer opcode, blocking and non-blocking, f32 and f64,
// sum and max, on the world, on a subset and on a subset listed in reverse
// order (group rank != global rank order); each rank checks its results
// against closed forms.
//
//===----------------------------------------------------------------------===//

#include "MpiTestSupport.h"

#include "runtime/core/Trainer.h"
#include "runtime/format/ProgramBuilder.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

#include <map>

using namespace strata::rt;

namespace {

constexpr int64_t kN = 3;

struct CollectiveProgram {
  Program program;
  std::vector<uint32_t> evens, oddsReversed;
};

CollectiveProgram buildCollectiveProgram(uint32_t world) {
  ModelMeta meta;
  meta.family = "collectives";
  meta.vocab = 8;
  meta.seqLen = 1;
  meta.microBatch = 1;
  meta.numMicrobatches = 1;
  meta.globalBatch = world;
  meta.worldSize = world;
  meta.planDescription = "collective test";
  TrainConfig train;
  MultiRankProgramBuilder mb(meta, train);
  CollectiveProgram out;
  std::vector<uint32_t> all;
  for (uint32_t r = 0; r < world; ++r) {
    all.push_back(r);
    if (r % 2 == 0)
      out.evens.push_back(r);
  }
  for (int r = int(world) - 1; r >= 0; --r)
    if (r % 2 == 1)
      out.oddsReversed.push_back(uint32_t(r));
  int64_t gWorld = mb.addGroup("world", all);
  int64_t gEven = mb.addGroup("even", out.evens);
  int64_t gOdd = mb.addGroup("odd-reversed", out.oddsReversed);
  const auto seq = SequenceKind::Microbatch;
  const auto F64 = DType::F64;
  for (uint32_t r = 0; r < world; ++r) {
    ProgramBuilder &b = mb.rank(r);
    b.setLoss(b.addBuffer("loss", {1}));
    b.emit(seq, Opcode::Fill, {b.loss()}, {}, {0.0});
    bool even = r % 2 == 0;
    int64_t gs =
        even ? int64_t(out.evens.size()) : int64_t(out.oddsReversed.size());
    int64_t sub = even ? gEven : gOdd;
    // Blocking.
    b.emit(seq, Opcode::AllReduce, {b.addBuffer("ar_sum_f32", {kN})},
           {gWorld, 0});
    b.emit(seq, Opcode::AllReduce, {b.addBuffer("ar_max_f32", {kN})},
           {gWorld, 1});
    b.emit(seq, Opcode::AllReduce, {b.addBuffer("ar_sum_f64", {kN}, F64)},
           {gWorld, 0});
    b.emit(seq, Opcode::AllReduce, {b.addBuffer("ar_max_f64", {kN}, F64)},
           {gWorld, 1});
    b.emit(seq, Opcode::AllReduce, {b.addBuffer("ar_sub", {kN})}, {sub, 0});
    b.emit(seq, Opcode::ReduceScatter,
           {b.addBuffer("rs_in", {world * kN}), b.addBuffer("rs_out", {kN})},
           {gWorld});
    b.emit(seq, Opcode::AllGather,
           {b.addBuffer("ag_in", {kN}), b.addBuffer("ag_out", {world * kN})},
           {gWorld});
    b.emit(
        seq, Opcode::AllGather,
        {b.addBuffer("ag_sub_in", {kN}), b.addBuffer("ag_sub_out", {gs * kN})},
        {sub});
    // In place: this rank's chunk of the output is the input.
    uint32_t agip = b.addBuffer("ag_inplace", {world * kN});
    uint32_t agipChunk = b.addAlias("ag_inplace_chunk", agip, {kN}, r * kN * 4);
    b.emit(seq, Opcode::AllGather, {agipChunk, agip}, {gWorld});
    b.emit(seq, Opcode::Barrier, {}, {gWorld});
    // A ring: even ranks send first, odd ranks receive first.
    uint32_t next = (r + 1) % world, prev = (r + world - 1) % world;
    uint32_t sendBuf = b.addBuffer("send", {kN}, DType::I32);
    uint32_t recvBuf = b.addBuffer("recv", {kN}, DType::I32);
    if (even) {
      b.emit(seq, Opcode::Send, {sendBuf}, {next, 7});
      b.emit(seq, Opcode::Recv, {recvBuf}, {prev, 7});
    } else {
      b.emit(seq, Opcode::Recv, {recvBuf}, {prev, 7});
      b.emit(seq, Opcode::Send, {sendBuf}, {next, 7});
    }
    // Non-blocking, interleaved with compute, completed in update.
    uint32_t x = b.addBuffer("x", {kN}), y = b.addBuffer("y", {kN});
    b.emit(seq, Opcode::AllReduceStart, {b.addBuffer("nb_sum_f64", {kN}, F64)},
           {gWorld, 0, 0});
    b.emit(seq, Opcode::AllReduceStart, {b.addBuffer("nb_max_f32", {kN})},
           {gWorld, 1, 1});
    b.emit(seq, Opcode::ReduceScatterStart,
           {b.addBuffer("nb_rs_in", {gs * kN}, F64),
            b.addBuffer("nb_rs_out", {kN}, F64)},
           {sub, 2});
    b.emit(
        seq, Opcode::AllGatherStart,
        {b.addBuffer("nb_ag_in", {kN}), b.addBuffer("nb_ag_out", {world * kN})},
        {gWorld, 63});
    b.emit(seq, Opcode::RecvStart, {b.addBuffer("nb_recv", {kN})},
           {prev, 9, 4});
    b.emit(seq, Opcode::SendStart, {b.addBuffer("nb_send", {kN})},
           {next, 9, 5});
    b.emit(seq, Opcode::Scale, {x, y}, {}, {2.0});
    for (int64_t slot : {0, 1, 2, 63, 4, 5})
      b.emit(SequenceKind::Update, Opcode::Wait, {}, {slot});
  }
  mb.setLossRanks(all);
  out.program = mb.finish();
  return out;
}

template <typename T>
void put(Trainer &t, const std::string &name, const std::vector<T> &v) {
  uint32_t id = t.rankProgram().findBuffer(name);
  ASSERT_NE(id, kNoBuffer) << name;
  ASSERT_EQ(t.rankProgram().buffers[id].byteSize(), v.size() * sizeof(T));
  t.upload(id, v.data());
}

template <typename T> std::vector<T> get(Trainer &t, const std::string &name) {
  uint32_t id = t.rankProgram().findBuffer(name);
  std::vector<T> v(t.rankProgram().buffers[id].byteSize() / sizeof(T));
  t.download(id, v.data());
  return v;
}

TEST(MpiCollectivesTest, EveryOpcodeOnWorldAndSubgroups) {
  auto comms = mpitest::mpiComms();
  const uint32_t W = comms->worldSize(), r = comms->worldRank();
  ASSERT_GE(W, 2u);
  CollectiveProgram cp = buildCollectiveProgram(W);
  // Through the file format, as the launcher would see it.
  std::vector<uint8_t> bytes = serializeProgram(cp.program);
  Program program = parseProgram(bytes.data(), bytes.size(), "collectives");
  Trainer t(program, r, createCpuDevice(), 1, comms);
  bool even = r % 2 == 0;
  const auto &members = even ? cp.evens : cp.oddsReversed;
  int64_t gs = members.size();
  int grank = 0;
  while (members[grank] != r)
    ++grank;

  auto ramp = [&](double base, int64_t n, double plus = 0) {
    std::vector<double> v(n);
    for (int64_t i = 0; i < n; ++i)
      v[i] = base + i + plus;
    return v;
  };
  auto f32 = [](const std::vector<double> &v) {
    return std::vector<float>(v.begin(), v.end());
  };
  put(t, "ar_sum_f32", f32(ramp(r * 10, kN)));
  put(t, "ar_max_f32", f32(ramp(r * 10, kN)));
  put(t, "ar_sum_f64", ramp(r * 10, kN, 0.25));
  put(t, "ar_max_f64", ramp(-double(r) * 10, kN, 0.25));
  put(t, "ar_sub", f32(ramp(r * 10, kN)));
  put(t, "rs_in", f32(ramp(r * 100, W * kN)));
  put(t, "ag_in", f32(ramp(r * 100, kN)));
  put(t, "ag_sub_in", f32(ramp(r * 100, kN)));
  std::vector<float> inplace(W * kN, -1.0f);
  for (int64_t i = 0; i < kN; ++i)
    inplace[r * kN + i] = float(r * 100 + i);
  put(t, "ag_inplace", inplace);
  put(t, "send", std::vector<int32_t>{int32_t(r), int32_t(r * 2), -1});
  put(t, "x", std::vector<float>{1, 2, 3});
  put(t, "nb_sum_f64", ramp(r * 10, kN, 0.5));
  put(t, "nb_max_f32", f32(ramp(r * 10, kN)));
  put(t, "nb_rs_in", ramp(r * 1000, gs * kN, 0.125));
  put(t, "nb_ag_in", f32(ramp(r * 100, kN)));
  put(t, "nb_send", std::vector<float>{float(r) + 0.5f, 1, 2});

  TokenData data = TokenData::synthetic(1, 8, 1);
  StepStats s = t.runStep(data);
  EXPECT_EQ(s.loss, 0.0);

  double sumRanks = W * (W - 1) / 2.0;
  for (int64_t i = 0; i < kN; ++i) {
    EXPECT_EQ(get<float>(t, "ar_sum_f32")[i], float(10 * sumRanks + W * i));
    EXPECT_EQ(get<float>(t, "ar_max_f32")[i], float((W - 1) * 10 + i));
    EXPECT_EQ(get<double>(t, "ar_sum_f64")[i], 10 * sumRanks + W * (i + 0.25));
    EXPECT_EQ(get<double>(t, "ar_max_f64")[i], i + 0.25);
    double subSum = 0;
    for (uint32_t m : members)
      subSum += m * 10 + i;
    EXPECT_EQ(get<float>(t, "ar_sub")[i], float(subSum));
    // Chunk r of every rank's input, summed.
    EXPECT_EQ(get<float>(t, "rs_out")[i],
              float(100 * sumRanks + W * (r * kN + i)));
    for (uint32_t q = 0; q < W; ++q) {
      EXPECT_EQ(get<float>(t, "ag_out")[q * kN + i], float(q * 100 + i));
      EXPECT_EQ(get<float>(t, "ag_inplace")[q * kN + i], float(q * 100 + i));
      EXPECT_EQ(get<float>(t, "nb_ag_out")[q * kN + i], float(q * 100 + i));
    }
    // Group order, not global order: chunk k is member k's data.
    for (int64_t k = 0; k < gs; ++k)
      EXPECT_EQ(get<float>(t, "ag_sub_out")[k * kN + i],
                float(members[k] * 100 + i));
    EXPECT_EQ(get<double>(t, "nb_sum_f64")[i], 10 * sumRanks + W * (i + 0.5));
    EXPECT_EQ(get<float>(t, "nb_max_f32")[i], float((W - 1) * 10 + i));
    double rsSum = 0;
    for (uint32_t m : members)
      rsSum += m * 1000 + grank * kN + i + 0.125;
    EXPECT_EQ(get<double>(t, "nb_rs_out")[i], rsSum);
    EXPECT_EQ(get<float>(t, "y")[i], 2.0f * (i + 1));
  }
  uint32_t prev = (r + W - 1) % W;
  EXPECT_EQ(get<int32_t>(t, "recv"),
            (std::vector<int32_t>{int32_t(prev), int32_t(prev * 2), -1}));
  EXPECT_EQ(get<float>(t, "nb_recv")[0], float(prev) + 0.5f);
}

TEST(MpiCollectivesTest, GroupMembershipIsAVerifyError) {
  auto comms = mpitest::mpiComms();
  CollectiveProgram cp = buildCollectiveProgram(comms->worldSize());
  Program p = cp.program;
  // Rank 0 all-reduces over the odd group, which it is not in.
  p.ranks[0].sequence(SequenceKind::Microbatch)[5].ints[0] = 2;
  try {
    verifyProgram(p, "bad");
    FAIL() << "verified";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("not a member of group 2"),
              std::string::npos)
        << e.what();
  }
}

} // namespace
