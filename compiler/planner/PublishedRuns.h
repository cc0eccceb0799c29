//===- PublishedRuns.h - Published training runs as planner inputs -*- C++
//-*-===//
//
// Reads ../shared/validation/published-runs.csv (one published training run a
// row: model dimensions, cluster, the parallel plan as the source states it,
// and what the source measured) and turns each row into what the planner
// needs: a ModelDesc, a ClusterSpec, pins, and the measured quantity with the
// FLOP counting of its source. docs/validation.md explains every
// interpretation; nothing here depends on a measured value.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_PUBLISHEDRUNS_H
#define STRATA_COMPILER_PLANNER_PUBLISHEDRUNS_H

#include "compiler/planner/Search.h"

#include <string>
#include <vector>

namespace strata::planner {

/// What a source reports, so prediction and measurement are compared in the
/// source's own units.
enum class PublishedMetric {
  IterationTime, ///< seconds per step (lower is faster)
  TokensPerGpu,  ///< tokens/s per GPU
  TflopsPerGpu,  ///< TFLOP/s per GPU under the source's FLOP count (an
                 ///< MFU is read as this times the peak it names)
};

struct PublishedRun {
  std::string id, sourceKey, model;
  ModelDesc desc;
  ClusterSpec cluster;
  SearchOptions options; ///< global batch and the pins the source states
  PublishedMetric metric = PublishedMetric::IterationTime;
  double measured = 0;
  /// FLOPs per step as the source counts them (TflopsPerGpu): Megatron-LM's
  /// formula, 6·N (+ attention) per token, with or without recomputation.
  double flopsPerStep = 0;
  /// How the row was read (the pins and assumptions), for the table.
  std::string reading;
  /// Layers per pipeline stage when the source fixes the partition (BLOOM:
  /// the embedding takes a layer's slot on the first and last stage);
  /// empty when the planner places them.
  std::vector<int64_t> stageLayers;
};

/// The pinned search for `run`, with the best plan's layer partition (and
/// estimate) replaced by the source's when it states one.
PlanResult planAsStated(const PublishedRun &run);

/// Parses the CSV at `path`; rows it cannot read are skipped with a reason
/// appended to `skipped`. Returns an empty list if the file is missing.
std::vector<PublishedRun> readPublishedRuns(const std::string &path,
                                            std::vector<std::string> &skipped);

/// The predicted value of `run.metric` for a plan's estimate.
double predictedMetric(const PublishedRun &run, const Estimate &estimate);

/// Predicted speed over measured speed (above 1: the model is optimistic),
/// whichever way the source's metric runs.
double predictedSpeedRatio(const PublishedRun &run, const Estimate &estimate);

/// One CSV line split into fields (double quotes group, "" escapes a quote).
std::vector<std::string> splitCsvLine(const std::string &line);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_PUBLISHEDRUNS_H
