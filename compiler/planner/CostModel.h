//===- CostModel.h - Predicting step time and memory of a plan --*- C++ -*-===//
//
// The cost model is an interface so researchers can plug in their own; the
// search only talks to it through `stageCosts` (per-layer and per-stage terms
// for a plan whose layer assignment is still open) and `estimate` (a complete
// plan). AnalyticalCostModel is the default, documented in docs/cost-model.md:
// roofline kernels, alpha-beta collectives over the topology tree, exact
// memory accounting.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_COSTMODEL_H
#define STRATA_COMPILER_PLANNER_COSTMODEL_H

#include "compiler/planner/Cluster.h"
#include "compiler/planner/Collectives.h"
#include "compiler/planner/ModelDesc.h"
#include "compiler/planner/Plan.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

namespace strata::planner {

/// Everything about one pipeline stage layout that does not depend on how
/// many layers each stage gets. Times are per micro-batch (forward, backward
/// and recomputation together); memory in bytes.
struct StageCosts {
  // Time of one repeated layer, split so the breakdown can be reported.
  double layerCompute = 0, layerTpComm = 0, layerZeroComm = 0;
  /// The forward part of layerTime() (the rest is backward + recompute).
  double layerForward = 0;
  // Extra work of the first stage (embedding) and the last (head + loss).
  double firstCompute = 0, firstTpComm = 0;
  double lastCompute = 0, lastTpComm = 0;
  /// ZeRO-3: the embedding's (first) and head's (last) parameter gathers
  /// and gradient reduce-scatter, per micro-batch.
  double firstZeroComm = 0, lastZeroComm = 0;
  double firstExtra() const {
    return firstCompute + firstTpComm + firstZeroComm;
  }
  double lastExtra() const { return lastCompute + lastTpComm + lastZeroComm; }
  /// Pipeline send/recv a device exposes per micro-batch (all its chunks).
  double p2pPerMicrobatch = 0;
  /// ZeRO-3: the first layer's forward gather, exposed per micro-batch.
  double zeroFirstGather = 0;
  double perMicrobatchComm() const {
    return p2pPerMicrobatch + zeroFirstGather;
  }
  /// Step-level terms, independent of the layer assignment (see
  /// docs/cost-model.md for why the data-parallel term uses an average stage).
  double dpExposed = 0, optimizer = 0;

  // Memory: per layer held by a device, and fixed per device.
  double layerWeights = 0, layerGrads = 0, layerOptState = 0;
  double layerActivation = 0; ///< saved per in-flight micro-batch
  double firstWeights = 0, firstGrads = 0, firstOptState = 0;
  double firstActivation = 0; ///< per in-flight micro-batch
  double lastWeights = 0, lastGrads = 0, lastOptState = 0;
  /// The head's peak beyond the layers' saved activations: the last layer's
  /// output, the final norm's saved tensors, one micro-batch's logits, their
  /// fp32 copy and gradient, the head's 16-bit weight copy.
  double lastActivation = 0;
  /// A layer's backward at its fullest beyond what is saved: the layer
  /// rebuilt by recomputation and the backward's gradient buffers.
  double transientActivation = 0;
  double commBuffers = 0, reserved = 0;
  /// Strata's pipelined programs: one micro-batch's activation (or its
  /// gradient) as a stage boundary sends it; the sends are held until the
  /// step's end (heldBoundaryBuffers).
  double boundaryBuffer = 0;
  double memoryLimit = 0;

  double layerTime() const {
    return layerCompute + layerTpComm + layerZeroComm;
  }
  double layerStatic() const {
    return layerWeights + layerGrads + layerOptState;
  }
};

class CostModel {
public:
  virtual ~CostModel();
  /// Terms for `plan` ignoring plan.stageLayers.
  virtual StageCosts stageCosts(const Plan &plan) const = 0;
  /// Full prediction; plan.stageLayers must hold pp*vpp counts summing to the
  /// model's layers.
  virtual Estimate estimate(const Plan &plan) const = 0;
  virtual const ModelDesc &model() const = 0;
  virtual const ClusterSpec &cluster() const = 0;
  /// Explicit graphs: the time of each pipeline unit (ModelDesc::units) per
  /// micro-batch, forward and backward, which the search balances over the
  /// stages. Empty for layer stacks.
  virtual std::vector<double> unitTimes(const Plan &plan) const;
};

/// Bytes per parameter by category (docs/cost-model.md, "Memory").
struct ParamBytes {
  double weight, grad, optimizer, update;
};
/// `stratasLayout`: mixed precision as Strata's CPU runtime keeps it (fp32
/// masters and main gradients; `p` says whether a bf16 reduction copy is
/// kept); otherwise Megatron's layout (16-bit weights, `gradientBytes`).
ParamBytes paramBytes(const ModelDesc &m, const Plan *p = nullptr,
                      bool stratasLayout = false);

/// Micro-batches' worth of activations pipeline device `d` holds at its peak.
double inflightMicrobatches(const Plan &plan, int64_t d);
/// Stage-boundary buffers (sent activations, and the input gradients sent
/// back by finished backwards) a Strata pipelined program still holds on
/// device `d` at its peak.
double heldBoundaryBuffers(const Plan &plan, int64_t d);

/// Step time of a pipeline whose devices take `deviceTimes` per micro-batch:
/// (m - 1/v) * max + sum / v, which is (m + (p-1)/v) * T for equal stages.
double pipelineMakespan(const std::vector<double> &deviceTimes, int64_t m,
                        int64_t v);

class AnalyticalCostModel : public CostModel {
public:
  AnalyticalCostModel(ModelDesc model, ClusterSpec cluster);
  StageCosts stageCosts(const Plan &plan) const override;
  Estimate estimate(const Plan &plan) const override;
  const ModelDesc &model() const override { return m; }
  const ClusterSpec &cluster() const override { return c; }
  std::vector<double> unitTimes(const Plan &plan) const override;

  // Building blocks, public for tests and for the trace writer.
  /// Whether communication proceeds while the device computes: GPUs move
  /// data with copy engines and NICs beside the SMs; a single-threaded CPU
  /// rank moves shared-memory MPI traffic with the same core that computes.
  bool commOverlapsCompute() const { return c.device.kind != "cpu"; }
  /// Whether memory and traffic follow Strata's own (CPU) runtime: fp32
  /// masters and main gradients under mixed precision, fp32 tensor-parallel
  /// reductions. GPU clusters follow Megatron-LM's GPU implementation (16-bit
  /// weights and gradients, fp32 masters in the optimizer state), which the
  /// validation against published runs checks.
  bool stratasLayout() const { return c.device.kind == "cpu"; }
  double gemmTime(double M, double N, double K, double batch) const;
  /// Whether attention is costed as one fused kernel: the model runs
  /// strata.causal_attention (the presets' default, on CPU and GPU alike).
  bool fusedAttention() const {
    return m.attention == ModelDesc::Attention::Fused;
  }
  /// One fused attention kernel over `heads` (micro-batch x local heads)
  /// independent [s, d] heads, forward or backward.
  double fusedAttentionTime(double heads, double s, double d,
                            bool backward) const;
  double memoryBoundTime(double bytes) const;
  /// Bytes per logit of the unfused fp32 cross entropy (Megatron-LM's
  /// vocab-parallel one; PyTorch's F.cross_entropy on upcast logits moves
  /// about as many): forward casts to fp32 (read e, write 4), takes the max
  /// (read 4), subtracts it, exponentiates and normalises in place (read and
  /// write 4 each) and sums (read 4): 36 + e; backward scales the saved
  /// softmax by the loss gradient (read and write 4) and casts back (read 4,
  /// write e): 12 + e.
  /// The loss over `logits` elements of e-byte activations, forward and
  /// backward, as the run's runtime does it (ModelDesc::strataRuntime).
  double crossEntropyTime(double logits, double e) const;
  static double crossEntropyForwardBytes(double e) { return 36 + e; }
  static double crossEntropyBackwardBytes(double e) { return 12 + e; }
  /// Bytes per element of the reference RMSNorm run op by op (ModelDesc::
  /// eagerNorms): forward x.float() (read e, write 4), pow(2) (4, 4),
  /// mean (4), x * rsqrt (4, 4), type_as (4, e), * weight (e, e): 28 + 4e;
  /// backward the weight product's input and weight gradients (e, e; e and
  /// e, e; e), the casts (e, 4; 4, e), x * rsqrt's two gradients (4, 4;
  /// 4 and 4, 4; 4), pow's (4 and 4, 4) and their sum (4 and 4, 4):
  /// 56 + 8e.
  static double eagerRmsNormForwardBytes(double e) { return 28 + 4 * e; }
  static double eagerRmsNormBackwardBytes(double e) { return 56 + 8 * e; }
  /// Eager rotary embedding (complex multiply in fp32), each direction:
  /// cast up (e, 4), complex product (4, 4), cast down (4, e): 16 + 2e.
  static double eagerRotaryBytes(double e) { return 16 + 2 * e; }
  /// What a collective of `comm` seconds adds to `compute` seconds of
  /// kernels it overlaps: the compute units its kernels occupy
  /// (DeviceSpec::collectiveUnits) slow the compute while both run, and
  /// what outlasts the compute is exposed; all of it where nothing overlaps.
  double overlappedCommTime(double comm, double compute) const;
  /// Collective times for `bytes` per member over a group of `size` ranks
  /// `stride` apart, as the cluster's library runs them (Collectives.h).
  double allReduceTime(double bytes, int64_t stride, int64_t size) const;
  double reduceScatterTime(double bytes, int64_t stride, int64_t size) const;
  double allGatherTime(double bytes, int64_t stride, int64_t size) const;
  double sendRecvTime(double bytes, int64_t stride) const;
  /// Per-layer forward FLOPs of one micro-batch on one device.
  double layerForwardFlops(int64_t microBatch, int64_t tp) const;
  /// Model FLOPs of one step without recomputation (3x forward).
  double modelFlopsPerStep(int64_t globalBatch) const;

private:
  struct LayerCost {
    double fwd = 0, bwd = 0, recompute = 0, tpComm = 0;
    /// Saved per micro-batch; rebuilt by recomputation during the layer's
    /// backward; gradient buffers of the backward (docs/cost-model.md).
    double saved = 0, transient = 0, backward = 0;
  };
  LayerCost layerCost(const Plan &plan) const;
  // Explicit graphs (CostModelGraph.cpp): every term from the units.
  struct UnitCost {
    double fwd = 0, bwd = 0, saved = 0, boundary = 0;
  };
  UnitCost unitCost(const GraphUnit &u, const Plan &plan) const;
  StageCosts graphStageCosts(const Plan &plan) const;
  Estimate graphEstimate(const Plan &plan) const;
  double levelBandwidth(size_t l) const;
  double cachedCollective(Collective kind, double bytes, int64_t stride,
                          int64_t size) const;

  ModelDesc m;
  ClusterSpec c;
  double peak = 0;
  /// Layer costs depend on few plan fields; the search asks for the same
  /// ones many times.
  mutable std::mutex cacheMutex;
  mutable std::map<std::tuple<int64_t, int64_t, int, bool, int64_t>, LayerCost>
      layerCache;
  mutable std::map<std::tuple<int, double, int64_t, int64_t>, double>
      collectiveCache;
};

/// Kernels of one repeated layer for one micro-batch on one device, as the
/// analytical model counts them (trace `args`); a fused attention kernel
/// counts as one GEMM.
struct LayerOpMix {
  int gemms = 0, pointwise = 0;
  double fwdFlops = 0, fwdBytes = 0, bwdBytes = 0;
};
LayerOpMix layerOpMix(const AnalyticalCostModel &cm, const Plan &plan);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_COSTMODEL_H
