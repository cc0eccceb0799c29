//===- StepTrace.h - Measured Chrome traces of chosen steps ------*- C++
//-*-===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// `BIN --trace FILE --trace-steps A..B` times every instruction of steps A..B
// on every rank and writes one Chrome trace (rank 0 gathers the others'
// events): one process per rank, and in it the tracks `strata plan --trace`
// uses (docs/report.md, "Trace conventions"): compute, tp comm, pp
// send/recv, dp comm. Collectives sit on their group's track with their
// bytes; `wait` instructions sit on the track of the request they complete,
// so the time a rank waits is visible. Off, the device reads no clock.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CORE_STEPTRACE_H
#define STRATA_RUNTIME_CORE_STEPTRACE_H

#include "runtime/core/Communicator.h"
#include "runtime/core/Device.h"

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace strata::rt {

/// "A..B" or "A" (1-based steps, A <= B); false if malformed.
bool parseTraceSteps(const std::string &text, int64_t &first, int64_t &last);

class StepTrace final : public InstructionTracer {
public:
  StepTrace(const Program &program, int rank);

  /// Brackets one traced step (1-based `step`); `seconds` is the step time
  /// the trainer measured.
  void beginStep(int64_t step);
  void endStep(double seconds);

  void record(const Instruction &inst, SequenceKind kind,
              Clock::time_point start, Clock::time_point end,
              uint64_t bytes) override;

  /// This rank's events as a JSON array, timestamps in microseconds from
  /// `originS` (seconds on the steady clock).
  std::string eventsJson(double originS) const;
  /// When this rank's first traced step began (steady clock seconds).
  double originS() const { return origin_; }
  bool empty() const { return events_.empty(); }

private:
  struct Event {
    std::string name, category;
    int track = 0;
    double startS = 0, durationS = 0;
    uint64_t bytes = 0;
    int64_t step = 0;
    const char *sequence = "";
    std::string group;
  };
  const Program &program_;
  int rank_;
  std::vector<Event> events_;
  /// The track, name and group of the request parked in each slot.
  std::array<Event, kNumRequestSlots> pending_{};
  int64_t step_ = 0;
  double stepStart_ = 0, origin_ = -1;
};

/// Gathers every rank's events on rank 0, which writes `path`; collective
/// over `world`. Throws RuntimeError if rank 0 cannot write the file.
void writeMergedTrace(const StepTrace &trace, Communicator &world,
                      const std::string &path);

class Trainer;

/// `--trace FILE --trace-steps A..B` over a run: brackets the traced steps
/// and writes the file once the last of them is done. Inactive (and free)
/// without --trace.
class StepTraceSession {
public:
  /// Throws RuntimeError naming the flag for a malformed --trace-steps or one
  /// without --trace.
  StepTraceSession(std::string path, const std::string &steps);
  /// Before the run's step `next` (1-based); `runSteps`: how many the run
  /// does from here.
  void beforeStep(Trainer &trainer, int64_t next, int64_t runSteps);
  /// After it; `runEnds`: no step follows in this run. Collective when it
  /// writes (every rank traces the same steps).
  void afterStep(Trainer &trainer, Communicator &world, double seconds,
                 bool runEnds);
  /// Rank 0 warns when --trace was given but no step of A..B ran.
  void finish(int rank, int64_t firstStep, int64_t lastStep) const;

private:
  std::string path_;
  int64_t first_ = 0, last_ = -1; ///< last_ < 0: the default, not yet set
  bool written_ = false, tracing_ = false;
  int64_t step_ = 0;
  std::unique_ptr<StepTrace> trace_;
};

} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_STEPTRACE_H
