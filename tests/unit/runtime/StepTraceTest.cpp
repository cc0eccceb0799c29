//===- StepTraceTest.cpp - Measured traces: steps, tracks, waits ----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/StepTrace.h"
#include "runtime/support/Error.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>

using namespace strata::rt;

TEST(StepTrace, ParsesStepRanges) {
  int64_t a = 0, b = 0;
  EXPECT_TRUE(parseTraceSteps("2..5", a, b));
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 5);
  EXPECT_TRUE(parseTraceSteps("3", a, b));
  EXPECT_EQ(a, 3);
  EXPECT_EQ(b, 3);
  for (const char *bad : {"", "0", "5..2", "a..b", "2..", "..3", "-1..2"})
    EXPECT_FALSE(parseTraceSteps(bad, a, b)) << bad;
}

TEST(StepTrace, CollectivesOnTheirGroupsTrackAndWaitsBesideThem) {
  Program program;
  program.groups.push_back({"world", {0}});
  program.groups.push_back({"tp0", {0}});
  program.groups.push_back({"dp0", {0}});
  StepTrace trace(program, 0);
  using Clock = InstructionTracer::Clock;
  Clock::time_point t0 = Clock::now();
  auto at = [&](int us) { return t0 + std::chrono::microseconds(us); };
  trace.beginStep(7);
  Instruction matmul;
  matmul.opcode = Opcode::Matmul;
  trace.record(matmul, SequenceKind::Microbatch, at(0), at(10), 0);
  Instruction start;
  start.opcode = Opcode::AllReduceStart;
  start.ints = {2, 0, 5}; // group dp0, sum, slot 5
  trace.record(start, SequenceKind::Microbatch, at(10), at(11), 4096);
  Instruction tp;
  tp.opcode = Opcode::AllReduce;
  tp.ints = {1, 0};
  trace.record(tp, SequenceKind::Microbatch, at(11), at(15), 256);
  Instruction send;
  send.opcode = Opcode::Send;
  send.ints = {3, 0};
  trace.record(send, SequenceKind::Schedule, at(15), at(16), 64);
  Instruction wait;
  wait.opcode = Opcode::Wait;
  wait.ints = {5};
  trace.record(wait, SequenceKind::Update, at(16), at(30), 0);
  Instruction adam;
  adam.opcode = Opcode::AdamWStep;
  trace.record(adam, SequenceKind::Update, at(30), at(31), 0);
  trace.endStep(0.5);

  auto events = nlohmann::json::parse(trace.eventsJson(trace.originS()));
  std::map<std::string, nlohmann::json> byName;
  for (const auto &e : events)
    if (e["ph"] == "X")
      byName[e["name"].get<std::string>()] = e;
  ASSERT_TRUE(byName.count("matmul"));
  EXPECT_EQ(byName["matmul"]["tid"], 0);
  EXPECT_EQ(byName["matmul"]["cat"], "compute");
  EXPECT_EQ(byName["all_reduce_start (dp0)"]["tid"], 3);
  EXPECT_EQ(byName["all_reduce_start (dp0)"]["args"]["bytes"], 4096);
  EXPECT_EQ(byName["all_reduce (tp0)"]["tid"], 1);
  EXPECT_EQ(byName["send (peer 3)"]["tid"], 2);
  // The wait is on the track of the request it completes, with its bytes.
  const auto &w = byName["wait all_reduce_start (dp0)"];
  EXPECT_EQ(w["tid"], 3);
  EXPECT_EQ(w["cat"], "wait");
  EXPECT_EQ(w["args"]["bytes"], 4096);
  EXPECT_NEAR(w["dur"].get<double>(), 14.0, 0.5);
  EXPECT_EQ(byName["adamw_step"]["cat"], "optimizer");
  EXPECT_EQ(byName["step 7"]["args"]["step_time_s"], 0.5);
  EXPECT_EQ(byName["matmul"]["args"]["step"], 7);
}

TEST(StepTrace, OneRankWritesTheMergedFile) {
  Program program;
  program.groups.push_back({"world", {0}});
  StepTrace trace(program, 0);
  trace.beginStep(1);
  Instruction fill;
  fill.opcode = Opcode::Fill;
  auto now = InstructionTracer::Clock::now();
  trace.record(fill, SequenceKind::StepBegin, now, now, 0);
  trace.endStep(0.1);
  auto backend = createSingleRankBackend();
  std::string path = ::testing::TempDir() + "/strata-step-trace.json";
  writeMergedTrace(trace, backend->world(), path);
  std::ifstream in(path);
  auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["otherData"]["ranks"], 1);
  int complete = 0;
  for (const auto &e : doc["traceEvents"])
    complete += e["ph"] == "X";
  EXPECT_EQ(complete, 2); // fill + the step span
  std::remove(path.c_str());
  EXPECT_THROW(writeMergedTrace(trace, backend->world(), "/nonexistent/x.json"),
               RuntimeError);
}
