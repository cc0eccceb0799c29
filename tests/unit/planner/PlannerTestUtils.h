//===- PlannerTestUtils.h - Hand-built models and clusters for tests
//-------===//

#ifndef STRATA_TESTS_UNIT_PLANNER_PLANNERTESTUTILS_H
#define STRATA_TESTS_UNIT_PLANNER_PLANNERTESTUTILS_H

#include "compiler/planner/Cluster.h"
#include "compiler/planner/ModelDesc.h"

namespace strata::planner::test {

inline ModelDesc gpt(int64_t hidden, int64_t heads, int64_t layers,
                     int64_t seq = 2048, int64_t vocab = 51200) {
  ModelDesc m;
  m.name = "gpt-test";
  m.vocab = vocab;
  m.seqLen = seq;
  m.hidden = hidden;
  m.heads = heads;
  m.layers = layers;
  m.ffnHidden = 4 * hidden;
  m.dtype = "bfloat16";
  m.dtypeBytes = 2;
  // The hand-derived formulas (Korthikanti et al.) are for stored scores.
  m.attention = ModelDesc::Attention::Unfused;
  return m;
}

/// A `llama` preset's model: grouped-query attention, SwiGLU, RMSNorm, no
/// biases, rotary positions, an untied head, no dropout.
inline ModelDesc llama(int64_t hidden, int64_t heads, int64_t kvHeads,
                       int64_t layers, int64_t ffn, int64_t seq = 8192,
                       int64_t vocab = 128256) {
  ModelDesc m = gpt(hidden, heads, layers, seq, vocab);
  m.name = "llama-test";
  m.kvHeads = kvHeads;
  m.ffnHidden = ffn;
  m.gatedMlp = true;
  m.rmsNorm = true;
  m.biases = false;
  m.learnedPositions = false;
  m.dropout = false;
  m.tiedEmbedding = false;
  return m;
}

inline ClusterSpec preset(const std::string &name) {
  std::string err;
  bool isPreset = false;
  return *clusterPreset(name, err, isPreset);
}

/// Two levels (`inner` devices per node, `nodes` nodes) with round numbers,
/// no latency and full efficiency, so formulas can be checked exactly.
inline ClusterSpec ideal(int64_t inner, int64_t nodes, double memory = 80e9) {
  ClusterSpec c;
  c.name = "ideal";
  c.device.peakFlops = {{"bfloat16", 100e12}, {"float32", 10e12}};
  c.device.memoryBytes = memory;
  c.device.memoryBandwidth = 1e12;
  c.device.computeUnits = 0;
  c.device.gemmEfficiency = 1.0;
  c.device.memoryEfficiency = 1.0;
  c.device.kernelOverheadS = 0;
  c.levels.push_back({"node", inner, 100e9, 0.0, 1.0, 1.0});
  c.levels.push_back({"net", nodes, 10e9, 0.0, 1.0, 1.0});
  c.collectives = "alpha-beta"; // textbook formulas, not NCCL's latencies
  return c;
}

} // namespace strata::planner::test

#endif // STRATA_TESTS_UNIT_PLANNER_PLANNERTESTUTILS_H
