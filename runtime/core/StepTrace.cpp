//===- StepTrace.cpp - Measured Chrome traces of chosen steps -------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/StepTrace.h"

#include "runtime/core/Trainer.h"

#include "runtime/format/OpSchema.h"
#include "runtime/support/Error.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace strata::rt {

namespace {
/// Track numbers shared with the planner's simulated trace
/// (compiler/planner/Trace.h, TraceTrack).
enum Track { Compute = 0, TpComm = 1, PpComm = 2, DpComm = 3 };

double seconds(InstructionTracer::Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

} // namespace

bool parseTraceSteps(const std::string &text, int64_t &first, int64_t &last) {
  size_t dots = text.find("..");
  std::string a = text.substr(0, dots);
  std::string b = dots == std::string::npos ? a : text.substr(dots + 2);
  auto number = [](const std::string &s, int64_t &out) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
      return false;
    out = std::strtoll(s.c_str(), nullptr, 10);
    return out >= 1;
  };
  return number(a, first) && number(b, last) && first <= last;
}

StepTrace::StepTrace(const Program &program, int rank)
    : program_(program), rank_(rank) {}

void StepTrace::beginStep(int64_t step) {
  step_ = step;
  stepStart_ = seconds(Clock::now());
  if (origin_ < 0)
    origin_ = stepStart_;
}

void StepTrace::endStep(double stepSeconds) {
  Event e;
  e.name = "step " + std::to_string(step_);
  e.category = "step";
  e.track = Compute;
  e.startS = stepStart_;
  e.durationS = seconds(Clock::now()) - stepStart_;
  e.step = step_;
  e.sequence = "";
  e.group = std::to_string(stepSeconds);
  events_.push_back(e);
}

void StepTrace::record(const Instruction &inst, SequenceKind kind,
                       Clock::time_point start, Clock::time_point end,
                       uint64_t bytes) {
  Event e;
  uint16_t op = static_cast<uint16_t>(inst.opcode);
  const OpSchema *schema = lookupOpSchema(op);
  e.name = schema ? schema->name : "opcode " + std::to_string(op);
  e.startS = seconds(start);
  e.durationS = seconds(end) - e.startS;
  e.bytes = bytes;
  e.step = step_;
  e.sequence = sequenceName(kind);
  bool comm = op >= 128 && op < 192;
  if (!comm) {
    e.track = Compute;
    e.category = kind == SequenceKind::Update ? "optimizer" : "compute";
    events_.push_back(e);
    return;
  }
  auto slotOf = [&]() -> int64_t {
    switch (inst.opcode) {
    case Opcode::AllReduceStart:
    case Opcode::SendStart:
    case Opcode::RecvStart:
      return inst.ints.size() > 2 ? inst.ints[2] : -1;
    case Opcode::ReduceScatterStart:
    case Opcode::AllGatherStart:
      return inst.ints.size() > 1 ? inst.ints[1] : -1;
    default:
      return -1;
    }
  };
  if (inst.opcode == Opcode::Wait) {
    int64_t slot = inst.ints.empty() ? -1 : inst.ints[0];
    if (slot >= 0 && slot < kNumRequestSlots) {
      const Event &started = pending_[slot];
      e.track = started.track;
      e.name = "wait " + started.name;
      e.group = started.group;
      e.bytes = started.bytes;
    }
    e.category = "wait";
    events_.push_back(e);
    return;
  }
  bool p2p = inst.opcode == Opcode::Send || inst.opcode == Opcode::Recv ||
             inst.opcode == Opcode::SendStart ||
             inst.opcode == Opcode::RecvStart;
  if (p2p) {
    e.track = PpComm;
    e.group = "peer " + std::to_string(inst.ints.empty() ? -1 : inst.ints[0]);
  } else {
    int64_t g = inst.ints.empty() ? -1 : inst.ints[0];
    if (g >= 0 && g < int64_t(program_.groups.size()))
      e.group = program_.groups[g].name;
    std::string prefix = e.group.substr(0, 2);
    e.track = prefix == "tp" ? TpComm : prefix == "pp" ? PpComm : DpComm;
  }
  static const char *const kCategory[] = {"compute", "tp-comm", "pp-comm",
                                          "dp-comm"};
  e.category = kCategory[e.track];
  e.name += " (" + e.group + ")";
  int64_t slot = slotOf();
  if (slot >= 0 && slot < kNumRequestSlots)
    pending_[slot] = e;
  events_.push_back(e);
}

std::string StepTrace::eventsJson(double originS) const {
  using json = nlohmann::json;
  static const char *const kTracks[] = {"compute", "tp comm", "pp send/recv",
                                        "dp comm"};
  json out = json::array();
  out.push_back({{"ph", "M"},
                 {"name", "process_name"},
                 {"pid", rank_},
                 {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  for (int t = 0; t < 4; ++t) {
    out.push_back({{"ph", "M"},
                   {"name", "thread_name"},
                   {"pid", rank_},
                   {"tid", t},
                   {"args", {{"name", kTracks[t]}}}});
    out.push_back({{"ph", "M"},
                   {"name", "thread_sort_index"},
                   {"pid", rank_},
                   {"tid", t},
                   {"args", {{"sort_index", t}}}});
  }
  for (const Event &e : events_) {
    json args = {{"step", e.step}};
    if (e.category == "step") {
      args["step_time_s"] = std::strtod(e.group.c_str(), nullptr);
    } else {
      args["sequence"] = e.sequence;
      if (!e.group.empty())
        args["group"] = e.group;
      if (e.bytes)
        args["bytes"] = e.bytes;
    }
    out.push_back({{"name", e.name},
                   {"cat", e.category},
                   {"ph", "X"},
                   {"pid", rank_},
                   {"tid", e.track},
                   {"ts", (e.startS - originS) * 1e6},
                   {"dur", e.durationS * 1e6},
                   {"args", args}});
  }
  return out.dump();
}

void writeMergedTrace(const StepTrace &trace, Communicator &world,
                      const std::string &path) {
  // One origin for all ranks: the earliest first step. The steady clock is
  // the host's monotonic clock, shared by the ranks of one machine.
  double origin[1] = {-trace.originS()};
  world.allReduce(origin, 1, DType::F64, ReduceOp::Max);
  std::string mine = trace.eventsJson(-origin[0]);
  int size = world.size(), rank = world.rank();
  std::vector<std::string> all;
  if (rank == 0)
    all.push_back(mine);
  for (int r = 1; r < size; ++r) {
    // Lengths, then the text in int32 words, rank by rank.
    if (rank == r) {
      int32_t n = int32_t(mine.size());
      world.send(&n, 1, DType::I32, 0, 0);
      std::vector<int32_t> words((mine.size() + 3) / 4, 0);
      std::memcpy(words.data(), mine.data(), mine.size());
      world.send(words.data(), int64_t(words.size()), DType::I32, 0, 1);
    } else if (rank == 0) {
      int32_t n = 0;
      world.recv(&n, 1, DType::I32, r, 0);
      std::vector<int32_t> words((size_t(n) + 3) / 4, 0);
      world.recv(words.data(), int64_t(words.size()), DType::I32, r, 1);
      all.emplace_back(reinterpret_cast<const char *>(words.data()), size_t(n));
    }
  }
  if (rank != 0)
    return;
  nlohmann::json events = nlohmann::json::array();
  for (const std::string &text : all)
    for (auto &e : nlohmann::json::parse(text))
      events.push_back(std::move(e));
  nlohmann::json doc = {
      {"traceEvents", events},
      {"displayTimeUnit", "ms"},
      {"otherData", {{"source", "strata run (measured)"}, {"ranks", size}}}};
  std::ofstream out(path);
  if (out)
    out << doc.dump() << "\n";
  if (!out)
    fail("--trace ", path,
         ": cannot write the file (does its directory "
         "exist?)");
}

StepTraceSession::StepTraceSession(std::string path, const std::string &steps)
    : path_(std::move(path)) {
  if (!steps.empty() && path_.empty())
    fail("--trace-steps needs --trace FILE (where the measured Chrome trace "
         "goes)");
  if (!path_.empty() && !steps.empty() &&
      !parseTraceSteps(steps, first_, last_))
    fail("--trace-steps ", steps,
         ": expected A..B or A with 1 <= A <= B (1-based steps), e.g. "
         "--trace-steps 2..3");
}

void StepTraceSession::beforeStep(Trainer &trainer, int64_t next,
                                  int64_t runSteps) {
  if (path_.empty() || written_)
    return;
  // The default is the run's second step: the first warms caches up.
  if (last_ < 0)
    first_ = last_ = runSteps >= 2 ? next + 1 : next;
  tracing_ = next >= first_ && next <= last_;
  if (!tracing_)
    return;
  if (!trace_)
    trace_ = std::make_unique<StepTrace>(trainer.program(),
                                         int(trainer.rankProgram().rank));
  step_ = next;
  trace_->beginStep(next);
  trainer.setTracer(trace_.get());
}

void StepTraceSession::afterStep(Trainer &trainer, Communicator &world,
                                 double seconds, bool runEnds) {
  if (!tracing_)
    return;
  tracing_ = false;
  trainer.setTracer(nullptr);
  trace_->endStep(seconds);
  if (step_ < last_ && !runEnds)
    return;
  writeMergedTrace(*trace_, world, path_);
  if (world.rank() == 0)
    std::fprintf(stderr, "strata: wrote the trace of steps %lld..%lld to %s\n",
                 (long long)first_, (long long)step_, path_.c_str());
  trace_.reset();
  written_ = true;
}

void StepTraceSession::finish(int rank, int64_t firstStep,
                              int64_t lastStep) const {
  if (path_.empty() || written_ || rank != 0)
    return;
  std::fprintf(stderr,
               "strata: warning: --trace %s: no step of %lld..%lld ran (the "
               "run did steps %lld..%lld); nothing written\n",
               path_.c_str(), (long long)first_, (long long)last_,
               (long long)firstStep, (long long)lastStep);
}

} // namespace strata::rt
