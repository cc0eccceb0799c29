//===- Plan.h - The plan value and its predicted cost ------------*- C++
//-*-===//
//
// A Plan is a plain value: how one training step is laid out over the
// cluster. It round-trips through JSON (docs/plan-json.md) so the CLI can
// print it, the IR can carry it as an attribute, and the partition passes can
// read it back. JSON handling lives in Plan.cpp so this header stays light.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_PLAN_H
#define STRATA_COMPILER_PLANNER_PLAN_H

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata::planner {

enum class Schedule { GPipe, OneFOneB, Interleaved };
enum class Recompute { None, Selective, Full };
/// A mesh axis; ranks are numbered with `Plan::axisOrder[0]` varying fastest.
enum class Axis { TP, DP, PP };

const char *scheduleName(Schedule s);   ///< "gpipe", "1f1b", "interleaved"
const char *recomputeName(Recompute r); ///< "none", "selective", "full"
const char *axisName(Axis a);           ///< "tp", "dp", "pp"
std::optional<Schedule> parseSchedule(const std::string &s);
std::optional<Recompute> parseRecompute(const std::string &s);
std::optional<Axis> parseAxis(const std::string &s);

struct Plan {
  int64_t dp = 1, tp = 1, pp = 1;
  int64_t vpp = 1;        ///< virtual stages (model chunks) per pipeline device
  int64_t microBatch = 1; ///< sequences per micro-batch per replica
  int64_t numMicrobatches = 1; ///< per replica per step
  Schedule schedule = Schedule::OneFOneB;
  int zero = 0; ///< ZeRO stage 0..3 over the data-parallel group
  Recompute recompute = Recompute::None;
  bool sp = false; ///< sequence parallelism inside the tensor-parallel group
  /// Target bytes of gradient per data-parallel reduction bucket (as PyTorch
  /// DDP's bucket_cap_mb); pinnable, not searched.
  int64_t bucketBytes = 25 << 20;
  /// Data-parallel gradient reduction (all-reduce or ZeRO reduce-scatter)
  /// in bfloat16 instead of float32: half the bytes on the wire, the
  /// gradients rounded to bf16 once before the sum. Pinnable
  /// (`grad_reduce_dtype`), not searched; float32 by default.
  bool bf16GradReduce = false;
  /// Device placement: which axis is innermost in the rank numbering. The
  /// default puts tensor parallelism inside a node and pipeline outermost.
  std::array<Axis, 3> axisOrder = {Axis::TP, Axis::DP, Axis::PP};
  /// Layers of each (virtual) stage, pp*vpp entries, in model order. Virtual
  /// stage k runs on pipeline device k % pp. Empty = not yet assigned.
  std::vector<int64_t> stageLayers;

  int64_t devices() const { return dp * tp * pp; }
  int64_t globalBatch() const { return dp * microBatch * numMicrobatches; }
  /// Rank stride between consecutive members of an axis' groups.
  int64_t stride(Axis a) const;
  int64_t size(Axis a) const;

  bool operator==(const Plan &o) const;
  /// One line: "dp=4 tp=8 pp=2 vpp=1 mb=1x96 1f1b zero=1 recompute=full sp".
  std::string summary() const;

  std::string toJson(int indent = 2) const;
  /// Parses the `plan` object of docs/plan-json.md (or a whole plan document
  /// containing one). On failure returns nullopt and says what is wrong.
  static std::optional<Plan> fromJson(const std::string &text,
                                      std::string &error);
};

/// Where one step's time goes, in seconds on the critical path. The terms sum
/// to the step time.
struct TimeBreakdown {
  double compute = 0;   ///< forward, backward and recomputation kernels
  double tpComm = 0;    ///< exposed tensor/sequence-parallel collectives
  double ppComm = 0;    ///< exposed pipeline send/recv
  double dpComm = 0;    ///< gradient reduction not hidden by backward
  double zeroComm = 0;  ///< ZeRO-3 parameter gathers not hidden
  double bubble = 0;    ///< pipeline fill and drain
  double optimizer = 0; ///< optimizer step
  double total() const {
    return compute + tpComm + ppComm + dpComm + zeroComm + bubble + optimizer;
  }
};

/// Peak bytes on the most loaded device, by category.
struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizerState = 0, activations = 0,
         commBuffers = 0, reserved = 0;
  double total() const {
    return weights + gradients + optimizerState + activations + commBuffers +
           reserved;
  }
};

struct Estimate {
  double stepTimeS = 0;
  TimeBreakdown time;
  MemoryBreakdown memory;
  double tokensPerS = 0;
  double modelFlopsPerStep = 0;    ///< 6 * params * tokens-style model FLOPs
  double tflopsPerDevice = 0;      ///< model FLOPs / step / device, in TFLOP/s
  double mfu = 0;                  ///< tflopsPerDevice over peak
  double hardwareFlopsPerStep = 0; ///< including recomputation
  bool fits = false;
  double memoryLimitBytes = 0;
  /// Peak memory of each pipeline device (stage), in pipeline order.
  std::vector<MemoryBreakdown> stageMemory;
};

struct RankedPlan {
  Plan plan;
  Estimate estimate;
  /// Empty for the best plan; otherwise "+7.3%: more pipeline bubble (+..)".
  std::string whySlower;
};

/// The answer of one search: best plan first, then runners-up.
struct PlanResult {
  bool ok = false;
  std::string error; ///< why nothing fits or a pin is impossible
  std::vector<RankedPlan> plans;
  double searchTimeS = 0;
  int64_t candidatesEvaluated = 0;
  int64_t spaceSize = 0; ///< candidates before memory and bound pruning
  /// The fixed plan fields, as Pins::describe words them ("--pin tp=2",
  /// "micro_batch=8 (training.micro_batch in the spec)").
  std::vector<std::string> pins;
  const RankedPlan *best() const { return plans.empty() ? nullptr : &plans[0]; }
};

/// The JSON document of docs/plan-json.md for a result (`--json`).
/// `detailsJson` (PlanDetails.h), if given, becomes the "details" member.
std::string planResultToJson(const PlanResult &r, const std::string &model,
                             const std::string &cluster, int64_t devices,
                             const std::string &detailsJson = "");

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_PLAN_H
