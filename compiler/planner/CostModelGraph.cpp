//===- CostModelGraph.cpp - The analytical cost model of explicit graphs --===//
//
// An explicit graph has no layer stack to multiply: it is a sequence of
// pipeline units (ModelDesc::units), each a list of ops as the dialect's
// cost interface reports them. Every op is a roofline kernel (contractions
// at GEMM efficiency, the rest memory-bound), its backward twice its forward
// (a contraction's two gradient GEMMs; an elementwise op reads the saved
// input and the incoming gradient and writes one). Stage terms are those of
// the units a stage holds; the search balances the units over the stages by
// their times (Search.cpp). docs/cost-model.md, "Explicit graphs".
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/CostModel.h"

#include <algorithm>

namespace strata::planner {

AnalyticalCostModel::UnitCost
AnalyticalCostModel::unitCost(const GraphUnit &u, const Plan &p) const {
  const DeviceSpec &d = c.device;
  double b = double(p.microBatch), t = double(p.tp);
  UnitCost uc;
  for (const GraphOpCost &o : u.ops) {
    // Under tp the rules split contractions (strata-propagate-sharding
    // {split-matmul-weights}); the other ops are counted whole.
    double split = o.contraction ? t : 1.0;
    double flops = (o.flops + b * o.flopsPerSample) / split;
    double bytes = (o.bytes + b * o.bytesPerSample) / split;
    double compute = flops / (peak * (o.contraction ? d.gemmEfficiency : 1.0));
    double memory = bytes / (d.memoryBandwidth * d.memoryEfficiency);
    double fwd = std::max(compute, memory) + d.kernelOverheadS;
    uc.fwd += fwd;
    uc.bwd += 2 * fwd;
    uc.saved += b * o.savedPerSample;
  }
  uc.boundary = b * u.boundaryPerSample;
  // One reconciling collective of the unit's output per pass, forward and
  // backward (Megatron's g and f), when the unit has a contraction.
  bool contracts =
      std::any_of(u.ops.begin(), u.ops.end(),
                  [](const GraphOpCost &o) { return o.contraction; });
  if (p.tp > 1 && contracts) {
    double comm = allReduceTime(uc.boundary, p.stride(Axis::TP), p.tp);
    uc.fwd += comm;
    uc.bwd += comm;
  }
  return uc;
}

std::vector<double> AnalyticalCostModel::unitTimes(const Plan &p) const {
  std::vector<double> times;
  for (const GraphUnit &u : m.units) {
    UnitCost uc = unitCost(u, p);
    times.push_back(uc.fwd + uc.bwd);
  }
  return times;
}

/// The average unit stands for "a layer" in the terms the search prunes
/// with; the exact per-stage figures come from graphEstimate.
StageCosts AnalyticalCostModel::graphStageCosts(const Plan &p) const {
  StageCosts sc;
  double n = double(std::max<size_t>(1, m.units.size()));
  double params = 0, boundary = 0;
  for (const GraphUnit &u : m.units) {
    UnitCost uc = unitCost(u, p);
    sc.layerCompute += (uc.fwd + uc.bwd) / n;
    sc.layerForward += uc.fwd / n;
    sc.layerActivation += uc.saved / n;
    boundary = std::max(boundary, uc.boundary);
    params += u.params;
  }
  double dp = double(p.dp), e = double(m.dtypeBytes);
  double unitParams = params / n;
  ParamBytes pb = paramBytes(m);
  sc.layerWeights = unitParams * pb.weight / (p.zero >= 3 ? dp : 1);
  sc.layerGrads = unitParams * pb.grad / (p.zero >= 2 ? dp : 1);
  sc.layerOptState = unitParams * pb.optimizer / (p.zero >= 1 ? dp : 1);
  int64_t dpStride = p.stride(Axis::DP);
  if (p.zero >= 3 && p.dp > 1) {
    double bytes = unitParams * e;
    double comm = 2 * allGatherTime(bytes, dpStride, p.dp) +
                  reduceScatterTime(bytes, dpStride, p.dp);
    sc.layerZeroComm =
        commOverlapsCompute() ? std::max(0.0, comm - sc.layerCompute) : comm;
  }
  if (p.pp > 1)
    sc.p2pPerMicrobatch = 2.0 * sendRecvTime(boundary, p.stride(Axis::PP));
  sc.reserved = c.device.reservedBytes;
  sc.memoryLimit = c.device.memoryBytes;
  if (p.dp > 1 && p.zero < 3)
    sc.commBuffers += 2.0 * double(p.bucketBytes);
  if (p.pp > 1)
    sc.commBuffers += 2 * boundary;
  if (p.zero >= 3 && p.dp > 1)
    sc.commBuffers += 2 * unitParams * e;
  // Step-level terms over an average stage, as for layer stacks.
  double stageUnits = n / double(p.pp);
  double stageParams = stageUnits * unitParams;
  if (p.dp > 1 && p.zero < 3) {
    double backward = stageUnits * (sc.layerCompute - sc.layerForward);
    double forward = stageUnits * sc.layerForward;
    double lastBucket = 1.0 / (stageUnits + 1.0);
    auto exposed = [&](double comm, double hiding) {
      return commOverlapsCompute() ? std::max(comm - hiding, comm * lastBucket)
                                   : comm;
    };
    double bytes = stageParams * pb.grad;
    if (p.zero == 0) {
      sc.dpExposed = exposed(allReduceTime(bytes, dpStride, p.dp), backward);
    } else {
      double rs = reduceScatterTime(bytes, dpStride, p.dp);
      double ag = allGatherTime(stageParams * e, dpStride, p.dp);
      sc.dpExposed = exposed(rs, backward) + exposed(ag, forward);
    }
  }
  sc.optimizer =
      memoryBoundTime(stageParams / (p.zero >= 1 ? dp : 1) * pb.update);
  return sc;
}

Estimate AnalyticalCostModel::graphEstimate(const Plan &p) const {
  Estimate est;
  StageCosts sc = graphStageCosts(p);
  int64_t pp = p.pp, mb = p.numMicrobatches;
  double dp = double(p.dp), e = double(m.dtypeBytes);
  // Units per stage: the plan's, or all on one stage.
  std::vector<int64_t> counts = p.stageLayers;
  if (int64_t(counts.size()) != pp)
    counts.assign(1, int64_t(m.units.size()));
  ParamBytes pb = paramBytes(m);
  std::vector<double> deviceTime(pp, 0.0), compute(pp, 0.0), zero(pp, 0.0);
  std::vector<double> p2p(pp, 0.0), edge(pp, 0.0);
  std::vector<MemoryBreakdown> mem(pp);
  size_t next = 0;
  for (int64_t d = 0; d < pp && d < int64_t(counts.size()); ++d) {
    double params = 0, saved = 0, transient = 0;
    UnitCost last;
    for (int64_t k = 0; k < counts[d] && next < m.units.size(); ++k) {
      const GraphUnit &u = m.units[next++];
      last = unitCost(u, p);
      compute[d] += last.fwd + last.bwd;
      saved += last.saved;
      params += u.params;
      transient = std::max(transient, u.params);
      if (p.zero >= 3 && p.dp > 1) {
        double bytes = u.params * e;
        double comm = 2 * allGatherTime(bytes, p.stride(Axis::DP), p.dp) +
                      reduceScatterTime(bytes, p.stride(Axis::DP), p.dp);
        zero[d] += commOverlapsCompute()
                       ? std::max(0.0, comm - (last.fwd + last.bwd))
                       : comm;
      }
    }
    // Activations forward and their gradients back, at each stage
    // boundary; both of its devices take part.
    if (d + 1 < pp)
      edge[d] = 2 * sendRecvTime(last.boundary, p.stride(Axis::PP));
    MemoryBreakdown &mb_ = mem[d];
    mb_.weights = params * pb.weight / (p.zero >= 3 ? dp : 1);
    mb_.gradients = params * pb.grad / (p.zero >= 2 ? dp : 1);
    mb_.optimizerState = params * pb.optimizer / (p.zero >= 1 ? dp : 1);
    mb_.activations = inflightMicrobatches(p, d) * saved;
    mb_.commBuffers = sc.commBuffers;
    if (p.zero >= 3 && p.dp > 1)
      mb_.commBuffers = 2 * transient * e;
    mb_.reserved = sc.reserved;
  }
  for (int64_t d = 0; d < pp; ++d) {
    p2p[d] = edge[d] + (d > 0 ? edge[d - 1] : 0);
    deviceTime[d] = compute[d] + zero[d] + p2p[d];
  }
  int64_t critical = 0;
  for (int64_t d = 1; d < pp; ++d)
    if (deviceTime[d] > deviceTime[critical])
      critical = d;
  double pipe = pipelineMakespan(deviceTime, mb, p.vpp);
  double M = double(mb);
  TimeBreakdown &tb = est.time;
  tb.compute = M * compute[critical];
  tb.zeroComm = M * zero[critical];
  tb.ppComm = M * p2p[critical];
  tb.bubble = std::max(0.0, pipe - M * deviceTime[critical]);
  tb.dpComm = sc.dpExposed;
  tb.optimizer = sc.optimizer;
  est.stepTimeS = tb.total();
  est.stageMemory = mem;
  double peakMem = -1;
  for (const MemoryBreakdown &x : mem)
    if (x.total() > peakMem) {
      peakMem = x.total();
      est.memory = x;
    }
  est.memoryLimitBytes = sc.memoryLimit;
  est.fits = est.memory.total() <= sc.memoryLimit;
  int64_t batch = p.globalBatch();
  est.tokensPerS = double(batch) * double(m.seqLen) / est.stepTimeS;
  est.modelFlopsPerStep = modelFlopsPerStep(batch);
  est.hardwareFlopsPerStep = est.modelFlopsPerStep;
  est.tflopsPerDevice =
      est.modelFlopsPerStep / est.stepTimeS / double(p.devices()) / 1e12;
  est.mfu = peak > 0 ? est.tflopsPerDevice * 1e12 / peak : 0;
  return est;
}

} // namespace strata::planner
