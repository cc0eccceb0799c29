//===- Search.h - Joint search over parallel plans ----------------*- C++
//-*-===//
//
// The default search enumerates data-, tensor- and pipeline-parallel sizes,
// placement, micro-batching, schedule, ZeRO stage, recomputation and sequence
// parallelism, and for each candidate assigns layers to stages optimally in
// closed form (identical layers make that a min-max with capacities). It is
// exact over that space (tests/unit/planner checks it against brute force)
// and costs each distinct layer shape once.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_SEARCH_H
#define STRATA_COMPILER_PLANNER_SEARCH_H

#include "compiler/planner/CostModel.h"

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace strata::planner {

/// Plan fields fixed by the user (`--pin key=value`); unset ones are searched.
struct Pins {
  std::optional<int64_t> dp, tp, pp, vpp, microBatch, numMicrobatches;
  std::optional<int64_t> bucketBytes;
  std::optional<Schedule> schedule;
  std::optional<int> zero;
  std::optional<Recompute> recompute;
  std::optional<bool> sp;
  std::optional<bool> bf16GradReduce;
  std::optional<std::array<Axis, 3>> placement;
  /// The pins as the user wrote them ("tp=2"), for error messages, and
  /// how to name the ones not given with `--pin` (e.g.
  /// "training.micro_batch: 8 in the spec"; empty for `--pin`).
  std::vector<std::string> given;
  std::vector<std::string> origins;
  bool empty() const { return given.empty(); }
  /// "--pin tp=2", or "training.micro_batch: 8 in the spec".
  std::string describe(size_t i) const {
    if (i < origins.size() && !origins[i].empty())
      return origins[i];
    return "--pin " + given[i];
  }
};

/// The largest global batch (sequences per step) the planner searches; the
/// same bound as training.global_batch in a model spec.
constexpr int64_t kMaxGlobalBatch = int64_t(1) << 40;
/// A pipelined program is unrolled: each stage's program holds
/// num_microbatches x (layers per stage) layer passes. Plans beyond this are
/// not searched (the compiler would run out of memory building them).
constexpr int64_t kMaxUnrolledLayers = int64_t(1) << 17;

/// Parses one "key=value"; on failure says which keys and values exist.
/// `origin` names a pin not given with --pin (Pins::origins).
bool parsePin(const std::string &text, Pins &pins, std::string &error,
              const std::string &origin = "");

struct SearchOptions {
  int64_t globalBatch = 0; ///< sequences per step (required, > 0)
  Pins pins;
  int topK = 3; ///< the best plan plus topK-1 runners-up
  /// Suggest a fix (unpin / more devices) when nothing fits.
  bool diagnoseInfeasible = true;
};

/// Runs the search with `costModel` (the analytical one if null).
PlanResult searchPlans(const ModelDesc &model, const ClusterSpec &cluster,
                       const SearchOptions &options,
                       const CostModel *costModel = nullptr);

/// Optimal layers per stage for a GPipe/1F1B candidate: minimises the
/// slowest device subject to each device's memory; empty if none fits.
std::vector<int64_t> assignLayers(const Plan &plan, const StageCosts &sc,
                                  int64_t layers);

/// Units per stage for an explicit graph: the split of `unitTimes` into
/// `stages` contiguous runs (at least one unit each) whose slowest run is
/// fastest; empty when there are fewer units than stages.
std::vector<int64_t> balanceUnits(const std::vector<double> &unitTimes,
                                  int64_t stages);

/// "+7.3%: more pipeline bubble (+1.2 s), less ... " comparing to `best`.
std::string explainSlower(const Estimate &best, const Estimate &other);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_SEARCH_H
