//===- CostModel.cpp - The analytical cost model --------------------------===//
//
// Every constant used here is a field of DeviceSpec/TopologyLevel, so the
// cluster spec (or a later `strata calibrate`) owns the numbers and this file
// owns only the physics. docs/cost-model.md derives each formula.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/CostModel.h"
#include "compiler/planner/AttentionKernels.h"
#include "compiler/planner/Collectives.h"

#include <algorithm>
#include <cmath>

namespace strata::planner {

CostModel::~CostModel() = default;

std::vector<double> CostModel::unitTimes(const Plan &) const { return {}; }

double inflightMicrobatches(const Plan &p, int64_t d) {
  double m = double(p.numMicrobatches);
  switch (p.schedule) {
  case Schedule::GPipe:
    return m;
  case Schedule::OneFOneB:
    return std::min(m, double(p.pp - d));
  case Schedule::Interleaved: {
    // Megatron's warm-up count for model chunks, plus the one in progress;
    // each chunk holds 1/v of the device's layers.
    double v = double(p.vpp);
    double warm = double((p.pp - d - 1) * 2 + (p.vpp - 1) * p.pp);
    return (std::min(m * v, warm + 1)) / v;
  }
  }
  return m;
}

double heldBoundaryBuffers(const Plan &p, int64_t d) {
  // The emitted schedule waits for its sends at the end of the step: at a
  // device's peak (its last forward) every chunk that sends onward has sent
  // all its micro-batches' activations, and each finished backward of a
  // chunk that received its input has sent that input's gradient back (one
  // buffer: strata-autodiff sums the gradient on the receiving stage). The
  // received inputs are freed by their backward.
  int64_t m = p.numMicrobatches;
  int64_t v = p.schedule == Schedule::Interleaved ? p.vpp : 1;
  double sending = double(v - (d == p.pp - 1 ? 1 : 0));
  // Backward units done by the last forward, in Megatron's order: groups of
  // pp micro-batches per chunk, from the device's last chunk to its first.
  int64_t done =
      m * v - int64_t(std::llround(inflightMicrobatches(p, d) * double(v)));
  int64_t group = p.schedule == Schedule::Interleaved ? p.pp : m;
  int64_t finished = 0;
  for (int64_t k = 0; k < done; ++k) {
    int64_t chunk = v - 1 - (k % (group * v)) / group;
    if (chunk * p.pp + d > 0) // the model's first chunk receives nothing
      ++finished;
  }
  return sending * double(m) + double(finished);
}

double pipelineMakespan(const std::vector<double> &t, int64_t m, int64_t v) {
  double mx = 0, sum = 0;
  for (double x : t) {
    mx = std::max(mx, x);
    sum += x;
  }
  return (double(m) - 1.0 / double(v)) * mx + sum / double(v);
}

AnalyticalCostModel::AnalyticalCostModel(ModelDesc model, ClusterSpec cluster)
    : m(std::move(model)), c(std::move(cluster)) {
  peak = c.device.peakFor(m.dtype);
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

double AnalyticalCostModel::gemmTime(double M, double N, double K,
                                     double batch) const {
  const DeviceSpec &d = c.device;
  double flops = 2.0 * M * N * K * batch;
  // Work is issued in output tiles, one per compute unit per wave; a partial
  // last wave or partial edge tiles leave units idle. Libraries choose among
  // tile shapes, so take the best of three.
  double tileEff = 1.0;
  if (d.computeUnits > 0) {
    double t = d.gemmTile, best = 0;
    for (auto [tm, tn] : {std::pair{t, t}, {2 * t, t}, {t, 2 * t}}) {
      double tiles = std::ceil(M / tm) * std::ceil(N / tn) * batch;
      double waves = std::ceil(tiles / d.computeUnits);
      best = std::max(best, M * N * batch / (waves * d.computeUnits * tm * tn));
    }
    tileEff = best;
  }
  // Each tile pays a fixed prologue/epilogue, amortised over its K loop.
  double depthEff = K / (K + d.gemmDepthHalf);
  // Narrow GEMMs (few rows or columns) pay packing and edge costs that a
  // large one amortises (CPUs; calibrated by `strata calibrate`).
  double narrow = std::min(M, N);
  double rowsEff = narrow / (narrow + d.gemmRowsHalf);
  double compute =
      flops / (peak * d.gemmEfficiency * tileEff * depthEff * rowsEff);
  double bytes = double(m.dtypeBytes) * (M * K + K * N + M * N) * batch;
  double memory = bytes / (d.memoryBandwidth * d.memoryEfficiency);
  return std::max(compute, memory) + d.kernelOverheadS;
}

double AnalyticalCostModel::fusedAttentionTime(double heads, double s, double d,
                                               bool backward) const {
  const DeviceSpec &dev = c.device;
  // Forward: QK^T and PV (2 GEMMs of 2·s·s·d); backward: QK^T again, dV,
  // dP, dQ and dK (5). A causal mask skips the blocks above the diagonal.
  double gemms = backward ? 5 : 2;
  double causal = m.causal ? 0.5 : 1.0;
  double flops = gemms * 2 * s * s * d * heads * causal;
  // One thread block per 128 query rows of one head.
  double tileEff = 1.0;
  if (dev.computeUnits > 0) {
    double blocks = std::ceil(s / dev.gemmTile) * heads;
    double waves = std::ceil(blocks / dev.computeUnits);
    tileEff = blocks / (waves * dev.computeUnits);
  }
  double depth = s * causal; // keys each query block iterates over
  double depthEff = depth / (depth + dev.gemmDepthHalf);
  double compute;
  double measured = dev.attentionEfficiency > 0
                        ? 0
                        : measuredAttentionEfficiency(dev.attentionKernel,
                                                      dev.name, d, m.causal, s);
  if (measured > 0) {
    // The kernel's measured forward + backward rate at this sequence
    // length (AttentionKernels.cpp), for both directions.
    compute = flops / (peak * measured * tileEff);
  } else if (dev.attentionEfficiency > 0) {
    // A measured whole-kernel rate (softmax included) for the kernel the
    // stack runs, e.g. FlashAttention-2 on an H100 (docs/cost-model.md).
    double eff = backward && dev.attentionBackwardEfficiency > 0
                     ? dev.attentionBackwardEfficiency
                     : dev.attentionEfficiency;
    // The measurement already pays the K loop's fixed part (at sequence 4k,
    // within the 2k-8k band these rates are flat across), so no depthEff.
    compute = flops / (peak * eff * tileEff);
  } else {
    compute = flops / (peak * dev.gemmEfficiency * tileEff * depthEff);
    // Softmax exponentials on the special-function units, one per unmasked
    // score forward and again backward (P is rebuilt), serialised with the
    // tensor-core work within each thread block (FlashAttention-2's loop).
    if (dev.expRate > 0)
      compute += s * s * heads * causal / (dev.expRate * tileEff);
  }
  // Q, K, V read and O written; backward also reads O, dO and writes dQ, dK,
  // dV.
  double bytes = double(m.dtypeBytes) * s * d * heads * (backward ? 8 : 4);
  double memory = bytes / (dev.memoryBandwidth * dev.memoryEfficiency);
  return std::max(compute, memory) + dev.kernelOverheadS;
}

double AnalyticalCostModel::overlappedCommTime(double comm,
                                               double compute) const {
  if (!commOverlapsCompute())
    return comm;
  const DeviceSpec &d = c.device;
  double f = d.computeUnits > 0
                 ? std::min(0.5, double(d.collectiveUnits) / d.computeUnits)
                 : 0.0;
  // While both run, the kernels get (1 - f) of the units: the compute
  // stretches by f per second of overlap; the collective's excess shows.
  double stretched = compute + f * std::min(comm, compute);
  return std::max(comm, stretched) - compute;
}

double AnalyticalCostModel::crossEntropyTime(double logits, double e) const {
  // Strata's CUDA runtime: one pass reads the float32 logits (twice, the
  // second from L2 or shared memory) and writes the gradient, the 16-bit
  // cast when the model trains in 16 bits (float32: in place).
  if (m.strataRuntime && c.device.kind == "gpu")
    return memoryBoundTime(logits * (4 + (e < 4 ? e : 4)));
  return memoryBoundTime(logits * crossEntropyForwardBytes(e)) +
         memoryBoundTime(logits * crossEntropyBackwardBytes(e));
}

double AnalyticalCostModel::memoryBoundTime(double bytes) const {
  double bw = c.device.memoryBandwidth * c.device.memoryEfficiency;
  // Ranks of one host run the same kernels at about the same time (SPMD):
  // a kernel that outgrows its share of the last-level cache streams from
  // DRAM at its share of the host's bandwidth.
  if (c.hostMemoryBandwidth > 0) {
    double ranks = double(c.numDevices());
    if (bytes > c.hostCacheBytes / ranks)
      bw = std::min(bw, c.hostMemoryBandwidth / ranks);
  }
  return bytes / bw + c.device.kernelOverheadS;
}

//===----------------------------------------------------------------------===//
// Collectives (alpha-beta over the topology tree)
//===----------------------------------------------------------------------===//

double AnalyticalCostModel::levelBandwidth(size_t l) const {
  const TopologyLevel &lv = c.levels[l];
  return lv.bandwidth * lv.efficiency / lv.oversubscription;
}

double AnalyticalCostModel::cachedCollective(Collective kind, double bytes,
                                             int64_t stride,
                                             int64_t size) const {
  auto key = std::make_tuple(int(kind), bytes, stride, size);
  {
    std::lock_guard<std::mutex> lock(cacheMutex);
    auto it = collectiveCache.find(key);
    if (it != collectiveCache.end())
      return it->second;
  }
  double t = collectiveCost(c, kind, bytes, spanOf(c, stride, size)).timeS;
  std::lock_guard<std::mutex> lock(cacheMutex);
  collectiveCache.emplace(key, t);
  return t;
}

double AnalyticalCostModel::allReduceTime(double bytes, int64_t stride,
                                          int64_t size) const {
  if (size <= 1 || bytes <= 0)
    return 0;
  return cachedCollective(Collective::AllReduce, bytes, stride, size);
}

double AnalyticalCostModel::reduceScatterTime(double bytes, int64_t stride,
                                              int64_t size) const {
  if (size <= 1 || bytes <= 0)
    return 0;
  return cachedCollective(Collective::ReduceScatter, bytes, stride, size);
}

double AnalyticalCostModel::allGatherTime(double bytes, int64_t stride,
                                          int64_t size) const {
  if (size <= 1 || bytes <= 0)
    return 0;
  return cachedCollective(Collective::AllGather, bytes, stride, size);
}

double AnalyticalCostModel::sendRecvTime(double bytes, int64_t stride) const {
  GroupSpan s = spanOf(c, stride, 2);
  size_t l = s.outermostLevel();
  return bytes / levelBandwidth(l) + c.levels[l].latencyS;
}

//===----------------------------------------------------------------------===//
// One repeated layer
//===----------------------------------------------------------------------===//

namespace {
/// One kernel of a layer. GEMMs are [M,K]x[K,N] (batched); the others are
/// memory-bound over `elements` with bytes per element forward/backward.
struct LayerOp {
  bool gemm = false;
  double M = 0, N = 0, K = 0, batch = 1;
  double elements = 0, fwdBytes = 0, bwdBytes = 0;
  bool attentionCore = false; ///< recomputed under selective recomputation
  /// A fused attention kernel: QK^T and PV ([s,s]x[s,d], `batch` = b·heads
  /// each) on chip; only Q, K, V, O and dO/dQ/dK/dV touch memory.
  bool flash = false;
  /// Bytes saved for backward per micro-batch (activation dtype + masks).
  double saved = 0;
  /// The part of `saved` that is [s, s]-shaped: what selective
  /// recomputation rebuilds instead of keeping.
  double scoreSaved = 0;
};
} // namespace

/// `keepsGathered`: under sequence parallelism the backward reads the
/// all-gathered inputs of the qkv and first MLP GEMMs as the forward kept
/// them (Strata's emitted programs), rather than gathering them again
/// (Megatron-LM, Korthikanti et al. §4.2.2).
static std::vector<LayerOp> layerOps(const ModelDesc &m, double b, double t,
                                     bool sp, bool fused,
                                     bool keepsGathered = true) {
  double s = m.seqLen, h = m.hidden, f = m.ffnHidden, a = m.heads;
  double e = m.dtypeBytes, T = b * s;
  // Outside the tensor-parallel regions each rank holds the full [T, h]
  // activation unless sequence parallelism splits it.
  double outside = sp ? t : 1.0;
  std::vector<LayerOp> ops;
  auto gemm = [&](double M, double N, double K, double batch, double saved,
                  bool core = false) {
    LayerOp o;
    o.gemm = true;
    o.M = M, o.N = N, o.K = K, o.batch = batch, o.saved = saved;
    o.attentionCore = core;
    ops.push_back(o);
  };
  auto pointwise = [&](double elements, double fwdBytes, double bwdBytes,
                       double saved, bool core = false) {
    LayerOp o;
    o.elements = elements, o.fwdBytes = fwdBytes, o.bwdBytes = bwdBytes;
    o.saved = saved, o.attentionCore = core;
    ops.push_back(o);
  };
  // Layer norm (or RMSNorm): read x, write y; backward reads x, dy and
  // writes dx. Saves its input and the fp32 per-row statistics it computed
  // (mean and reciprocal deviation; RMSNorm only the latter). Its output is
  // saved by the GEMM that reads it, all-gathered under sequence
  // parallelism (the emitter keeps the gathered copy for the backward).
  double normStats = (m.rmsNorm ? 1.0 : 2.0) * T / outside * 4.0;
  double gemmInput = T * h * e / (keepsGathered ? 1.0 : outside);
  auto layerNorm = [&] {
    pointwise(T * h / outside, 2 * e, 3 * e, T * h * e / outside + normStats);
    if (m.eagerNorms && m.rmsNorm) { // the reference module op by op
      LayerOp &o = ops.back();
      o.fwdBytes = AnalyticalCostModel::eagerRmsNormForwardBytes(e);
      o.bwdBytes = AnalyticalCostModel::eagerRmsNormBackwardBytes(e);
    }
  };
  // Bias + dropout + residual add, fused: reads two, writes one and a mask;
  // without dropout and biases, the plain residual add.
  auto residual = [&] {
    if (m.dropout)
      pointwise(T * h / outside, 3 * e + 1, 2 * e + 1, T * h / outside);
    else
      pointwise(T * h / outside, 3 * e, 2 * e, 0);
  };
  if (m.kind == ModelDesc::Kind::Transformer) {
    double d = h / a, heads = a / t;
    // k and v width on one rank: split over tp, or one kv head's replica
    // when tp exceeds the kv heads.
    double kvLocal =
        m.replicatesKvHeads(int64_t(t)) ? d : double(m.kvWidth()) / t;
    double qkvLocal = h / t + 2 * kvLocal;
    layerNorm();
    gemm(T, qkvLocal, h, 1, gemmInput); // qkv; saves its (gathered) input
    if (!m.learnedPositions) {          // rotary embeddings of q and k
      double r =
          m.eagerNorms ? AnalyticalCostModel::eagerRotaryBytes(e) : 2 * e;
      pointwise(T * (h / t + kvLocal), r, r, 0);
    }
    if (fused) {
      // One kernel (strata.causal_attention, FlashAttention-2): Q K^T and
      // P V stay in the tile; saves Q, K and V (kv heads once), the output
      // and an fp32 log-sum-exp per query row, as the runtime's arena does;
      // the backward recomputes Q K^T (fusedAttentionTime).
      LayerOp o;
      o.flash = true;
      o.M = s, o.N = s, o.K = d, o.batch = b * heads;
      o.saved = T * (h / t + kvLocal) * e + T * kvLocal * e + T * h / t * e +
                b * heads * s * 4.0;
      ops.push_back(o);
    } else {
      // The unfused graph repeats the kv heads to every query head.
      // Q K^T; saves Q and the repeated K.
      gemm(s, s, d, b * heads, 2 * T * h / t * e, true);
      // Scale + mask + softmax (fused); saves its output, the probabilities.
      pointwise(b * heads * s * s, 2 * e, 3 * e, b * heads * s * s * e, true);
      ops.back().scoreSaved = ops.back().saved;
      if (m.dropout) { // attention dropout; saves the mask and its output
        pointwise(b * heads * s * s, 2 * e + 1, 2 * e + 1,
                  b * heads * s * s * (1 + e), true);
        ops.back().scoreSaved = ops.back().saved;
      }
      // probs x V; saves the repeated V (the probabilities are the
      // softmax's).
      gemm(s, d, s, b * heads, T * h / t * e, true);
    }
    pointwise(T * h / t, 2 * e, 2 * e, 0); // heads -> [T, h/t] copy
    gemm(T, h, h / t, 1, T * h / t * e);   // projection; saves its input
    residual();
    layerNorm();
    if (m.gatedMlp) {
      // gate and up (one [h, 2f/t] GEMM's worth); silu(gate) * up reads
      // two, writes one, and saves both inputs; down saves its input.
      gemm(T, 2 * f / t, h, 1, gemmInput);
      pointwise(T * f / t, 3 * e, 5 * e, 2 * T * f / t * e);
      gemm(T, h, f / t, 1, T * f / t * e);
    } else {
      gemm(T, f / t, h, 1, gemmInput);                   // fc1; saves input
      pointwise(T * f / t, 2 * e, 3 * e, T * f / t * e); // bias + gelu
      gemm(T, h, f / t, 1, T * f / t * e);               // fc2
    }
    residual();
  } else {
    layerNorm();
    gemm(T, f / t, h, 1, gemmInput);
    pointwise(T * f / t, 2 * e, 3 * e, T * f / t * e); // activation
    gemm(T, h, f / t, 1, T * f / t * e);
    pointwise(T * h / outside, 3 * e, 2 * e, 0); // bias + residual
  }
  return ops;
}

AnalyticalCostModel::LayerCost
AnalyticalCostModel::layerCost(const Plan &p) const {
  auto key = std::make_tuple(p.microBatch, p.tp, int(p.recompute), p.sp,
                             p.stride(Axis::TP));
  {
    std::lock_guard<std::mutex> lock(cacheMutex);
    auto it = layerCache.find(key);
    if (it != layerCache.end())
      return it->second;
  }
  LayerCost lc;
  double coreFwd = 0, coreSaved = 0, pointwiseFwd = 0;
  bool fused = fusedAttention();
  for (const LayerOp &o : layerOps(m, double(p.microBatch), double(p.tp), p.sp,
                                   fused, stratasLayout())) {
    double fwd, bwd;
    if (o.flash) {
      fwd = fusedAttentionTime(o.batch, o.M, o.K, false);
      bwd = fusedAttentionTime(o.batch, o.M, o.K, true);
    } else if (o.gemm) {
      fwd = gemmTime(o.M, o.N, o.K, o.batch);
      // dX = dY W^T and dW = X^T dY.
      bwd = gemmTime(o.M, o.K, o.N, o.batch) + gemmTime(o.K, o.N, o.M, o.batch);
    } else {
      fwd = memoryBoundTime(o.elements * o.fwdBytes);
      bwd = memoryBoundTime(o.elements * o.bwdBytes);
      pointwiseFwd += fwd;
    }
    lc.fwd += fwd;
    lc.bwd += bwd;
    lc.saved += o.saved;
    if (o.attentionCore)
      coreFwd += fwd;
    coreSaved += o.scoreSaved;
  }
  double e = double(m.dtypeBytes);
  double T = double(p.microBatch) * double(m.seqLen);
  // DeepSpeed's bf16 optimizer: every micro-batch adds the layer's 16-bit
  // weight gradients into fp32 buffers (read e, read and write 4 each).
  if (m.fp32GradAccumulationPass)
    lc.bwd += memoryBoundTime(double(m.layerParams()) / double(p.tp) * (e + 8));
  double t = double(p.tp), outside = p.sp ? t : 1.0;
  double layerInput = T * double(m.hidden) * e / outside;
  // The gradient buffers a layer's backward adds at its fullest: the
  // incoming gradient of the layer output and, at the MLP's activation, the
  // gradient of its output ([T, f/t]; a gated MLP also holds the gradients
  // of gate and up, having released the saved product).
  double f = double(m.ffnHidden);
  lc.backward =
      layerInput +
      (m.kind == ModelDesc::Kind::Transformer && m.gatedMlp ? 2.0 : 1.0) * T *
          f / t * e;
  switch (p.recompute) {
  case Recompute::None:
    break;
  case Recompute::Selective:
    // The [s, s] tensors are rebuilt in the backward from Q and K, which
    // stay saved with V (strata-recompute clones the ops whose result is
    // [..., s, s]).
    lc.recompute = coreFwd;
    lc.transient = coreSaved;
    lc.saved -= coreSaved;
    // torchtitan's op-level policy: every elementwise op and the 2nd, 4th
    // and 6th matmul of the layer (wk, wo, w3) run again.
    if (m.opLevelSelective && fused && m.gatedMlp &&
        m.kind == ModelDesc::Kind::Transformer) {
      double h = double(m.hidden);
      double kvLocal = m.replicatesKvHeads(p.tp) ? double(m.hidden / m.heads)
                                                 : double(m.kvWidth()) / t;
      lc.recompute = pointwiseFwd + gemmTime(T, kvLocal, h, 1) +
                     gemmTime(T, h, h / t, 1) +
                     gemmTime(T, double(m.ffnHidden) / t, h, 1);
      // What it keeps: the block's input (the checkpoint boundary), the
      // outputs of wq, wv, w1 and w2, and the attention kernel's output with
      // its fp32 log-sum-exp per query row; the backward rebuilds the rest
      // of the layer beside them.
      double heads = double(m.heads) / t;
      double kept = layerInput + T * e * (h / t + kvLocal + h / t + f / t) +
                    T * h * e / outside +
                    double(p.microBatch) * heads * double(m.seqLen) * 4.0;
      if (kept < lc.saved) {
        lc.transient = std::max(lc.transient, lc.saved - kept);
        lc.saved = kept;
      }
    }
    break;
  case Recompute::Full:
    // Only the layer input stays; the backward rebuilds the rest.
    lc.recompute = lc.fwd;
    lc.transient = lc.saved - layerInput;
    lc.saved = layerInput;
    // Unfused attention's backward comes after the MLP's has released its
    // part of the rebuilt layer, and holds the rebuilt first norm's output
    // and statistics, Q, K, V and the probabilities beside the gradients
    // of the probabilities and the scores ([s, s] per head each), of the
    // context and of the block's output.
    if (m.kind == ModelDesc::Kind::Transformer && !fused) {
      double hl = double(m.hidden) / t, heads = double(m.heads) / t;
      double s = double(m.seqLen), b = double(p.microBatch);
      double stats = (m.rmsNorm ? 1.0 : 2.0) * T / outside * 4.0;
      double gathered =
          T * double(m.hidden) * e / (stratasLayout() ? 1.0 : outside);
      double attention = stats + gathered + 3 * T * hl * e +
                         3 * b * heads * s * s * e + 2 * T * hl * e;
      lc.transient = std::max(lc.transient, attention - lc.backward);
    }
    break;
  }
  // Tensor parallelism: an all-reduce (or reduce-scatter + all-gather with
  // sequence parallelism, same volume) after each row-parallel GEMM forward
  // and before each column-parallel GEMM backward; recomputation repeats the
  // forward ones.
  if (p.tp > 1) {
    double perLayer = m.kind == ModelDesc::Kind::Transformer ? 2 : 1;
    double count =
        2 * perLayer + (p.recompute == Recompute::Full ? perLayer : 0);
    // Mixed precision reduces the partial sums in float32.
    double bytes =
        T * double(m.hidden) * (m.mixedPrecision() && stratasLayout() ? 4 : e);
    lc.tpComm = count * allReduceTime(bytes, p.stride(Axis::TP), p.tp);
    // Replicated kv heads: every rank holds the whole k and v projections
    // and sums their gradients over the group each micro-batch.
    if (m.replicatesKvHeads(p.tp))
      lc.tpComm +=
          allReduceTime(2.0 * double(m.kvWidth()) * double(m.hidden) * e,
                        p.stride(Axis::TP), p.tp);
  }
  std::lock_guard<std::mutex> lock(cacheMutex);
  layerCache.emplace(key, lc);
  return lc;
}

double AnalyticalCostModel::layerForwardFlops(int64_t microBatch,
                                              int64_t tp) const {
  double flops = 0;
  if (m.kind == ModelDesc::Kind::Graph) { // the average unit
    for (const GraphUnit &u : m.units)
      for (const GraphOpCost &o : u.ops)
        flops += o.flops + double(microBatch) * o.flopsPerSample;
    return flops / double(std::max<size_t>(1, m.units.size())) / double(tp);
  }
  // Model FLOPs count the full (unmasked) score matrix, as sources do.
  for (const LayerOp &o :
       layerOps(m, double(microBatch), double(tp), false, fusedAttention()))
    if (o.gemm || o.flash)
      flops += 2 * o.M * o.N * o.K * o.batch * (o.flash ? 2 : 1);
  return flops;
}

double AnalyticalCostModel::modelFlopsPerStep(int64_t globalBatch) const {
  if (m.kind == ModelDesc::Kind::Graph) {
    double perSample = 0;
    for (const GraphUnit &u : m.units)
      for (const GraphOpCost &o : u.ops)
        perSample += o.flopsPerSample;
    return 3.0 * double(globalBatch) * perSample;
  }
  double T = double(globalBatch) * double(m.seqLen);
  double layer = layerForwardFlops(1, 1) / double(m.seqLen); // per token
  double head = 2.0 * double(m.hidden) * double(m.vocab);
  return 3.0 * T * (double(m.layers) * layer + head);
}

//===----------------------------------------------------------------------===//
// Stage terms and the full estimate
//===----------------------------------------------------------------------===//

ParamBytes paramBytes(const ModelDesc &m, const Plan *p, bool stratasLayout) {
  double e = double(m.dtypeBytes);
  double master = m.mixedPrecision() ? 4 : 0;
  double grad = m.gradientBytes > 0 ? double(m.gradientBytes) : e;
  ParamBytes b{e, grad, master, 0};
  // Mixed precision as Strata's CPU runtime does it: the persistent weight
  // is the float32 master, gradients accumulate in float32 main gradients
  // (plus a bf16 copy of each bucket for a bf16 reduction); the bf16
  // working copies of the weights are transient and counted with the
  // activations.
  if (m.mixedPrecision() && stratasLayout) {
    b.weight = 4;
    b.grad = 4 + (p && p->bf16GradReduce && p->dp > 1 ? 2 : 0);
    b.optimizer = 0;
  }
  switch (m.optimizer) {
  case ModelDesc::Optimizer::Adam:
    b.optimizer += 8;
    b.update = 28; // read g, w, m, v; write w, m, v (+ the 16-bit copy)
    // A framework's own state layout (ModelDesc::optimizerStateBytes):
    // read the gradient and the state, write the state and the weight.
    if (m.optimizerStateBytes > 0 && !stratasLayout) {
      b.optimizer = m.optimizerStateBytes;
      b.update = grad + 2 * b.optimizer + 2 * e;
    }
    break;
  case ModelDesc::Optimizer::SgdMomentum:
    b.optimizer += 4;
    b.update = 20;
    break;
  case ModelDesc::Optimizer::Sgd:
    b.update = 12;
    break;
  }
  return b;
}

StageCosts AnalyticalCostModel::stageCosts(const Plan &p) const {
  if (m.kind == ModelDesc::Kind::Graph)
    return graphStageCosts(p);
  StageCosts sc;
  const DeviceSpec &dev = c.device;
  LayerCost lc = layerCost(p);
  double e = double(m.dtypeBytes), t = double(p.tp), dp = double(p.dp);
  double h = double(m.hidden), V = double(m.vocab), s = double(m.seqLen);
  double T = double(p.microBatch) * s;
  double outside = p.sp ? t : 1.0;
  int64_t tpStride = p.stride(Axis::TP), dpStride = p.stride(Axis::DP);
  sc.layerCompute = lc.fwd + lc.bwd + lc.recompute;
  sc.layerTpComm = lc.tpComm;
  double fwdComms = m.kind == ModelDesc::Kind::Transformer ? 2 : 1;
  double allComms =
      2 * fwdComms + (p.recompute == Recompute::Full ? fwdComms : 0);
  sc.layerForward = lc.fwd + lc.tpComm * fwdComms / allComms;

  // Parameters one device holds of a layer: GEMM weights are split by tensor
  // parallelism, norms and the row-parallel biases are replicated, and so
  // are the k and v projections when tp exceeds the kv heads.
  bool transformer = m.kind == ModelDesc::Kind::Transformer;
  double replicated =
      transformer ? 2 * double(m.normParams()) + (m.biases ? 2 * h : 0) : 3 * h;
  if (m.replicatesKvHeads(p.tp))
    replicated += 2 * h * double(m.kvWidth());
  double layerParams = (double(m.layerParams()) - replicated) / t + replicated;
  double finalNorm = double(m.normParams());
  double embedParams = V * h / t +
                       (transformer && m.learnedPositions ? s * h : 0) +
                       (p.pp == 1 ? finalNorm : 0);
  // The last stage: the untied head, or a copy of the tied embedding when
  // it is another device than the first, and the final norm.
  double headParams = (m.tiedEmbedding && p.pp == 1 ? 0 : V * h / t) +
                      (p.pp == 1 ? 0 : finalNorm);
  ParamBytes pb = paramBytes(m, &p, stratasLayout());
  bool mixed = m.mixedPrecision() && stratasLayout();
  // Bytes per weight element that collectives move: float32 masters under
  // mixed precision (ZeRO gathers), gradients in the reduction dtype.
  double weightWire = mixed ? 4 : e;
  double gradWire = !mixed ? pb.grad : p.bf16GradReduce ? 2 : 4;
  auto statics = [&](double params, double &w, double &g, double &o) {
    w = params * pb.weight / (p.zero >= 3 ? dp : 1);
    g = params * pb.grad / (p.zero >= 2 ? dp : 1);
    o = params * pb.optimizer / (p.zero >= 1 ? dp : 1);
  };
  statics(layerParams, sc.layerWeights, sc.layerGrads, sc.layerOptState);
  statics(embedParams, sc.firstWeights, sc.firstGrads, sc.firstOptState);
  statics(headParams, sc.lastWeights, sc.lastGrads, sc.lastOptState);
  // Strata's ZeRO-1 keeps, beside the whole fp32 gradient, the shard its
  // reduce-scatter writes (4 bytes per parameter / dp).
  if (stratasLayout() && p.zero == 1 && p.dp > 1) {
    sc.layerGrads += layerParams * 4 / dp;
    sc.firstGrads += embedParams * 4 / dp;
    sc.lastGrads += headParams * 4 / dp;
  }

  // ZeRO-3 (FSDP) gathers each layer's parameters once in the forward pass
  // and once in the backward pass (recomputation runs inside the latter),
  // and reduce-scatters its gradients, every micro-batch. Prefetch depth 1
  // (the runtime's and FSDP's): layer i+1's gather runs under layer i's
  // compute of the same pass, the backward's reduce-scatter under the next
  // layer's backward; what outlasts that compute is exposed, and the first
  // layer's forward gather of each micro-batch has nothing to hide under.
  if (p.zero >= 3 && p.dp > 1) {
    double bytes = layerParams * weightWire;
    double ag = allGatherTime(bytes, dpStride, p.dp);
    double rs = reduceScatterTime(layerParams * gradWire, dpStride, p.dp);
    sc.layerZeroComm = overlappedCommTime(ag, lc.fwd) +
                       overlappedCommTime(ag + rs, lc.bwd + lc.recompute);
    sc.zeroFirstGather = commOverlapsCompute() ? ag : 0;
    // The embedding and the head are gathered at the start of their pass
    // (nothing to hide under) and reduce-scattered at its end.
    auto ends = [&](double params) {
      return 2 * allGatherTime(params * weightWire, dpStride, p.dp) +
             reduceScatterTime(params * gradWire, dpStride, p.dp);
    };
    sc.firstZeroComm = ends(embedParams);
    sc.lastZeroComm = ends(headParams);
  }

  // Embedding: gather rows, add positions, dropout; backward scatter-adds.
  // Without positions and dropout: the gather and the scatter-add.
  double embedBytes =
      transformer && (m.learnedPositions || m.dropout) ? 5 * e + 1 : 3 * e;
  sc.firstCompute = memoryBoundTime(T * h * embedBytes / outside) +
                    memoryBoundTime(T * h * embedBytes);
  // Head: final norm, logits GEMM (vocab-parallel), fp32 cross entropy.
  sc.lastCompute = memoryBoundTime(T * h / outside * 2 * e) +
                   memoryBoundTime(T * h / outside * 3 * e) +
                   gemmTime(T, V / t, h, 1) + gemmTime(T, h, V / t, 1) +
                   gemmTime(h, V / t, T, 1) +
                   crossEntropyTime(T * V / t, e);
  if (p.tp > 1) {
    sc.firstTpComm = allReduceTime(T * h * e, tpStride, p.tp);
    sc.lastTpComm = allReduceTime(T * h * e, tpStride, p.tp) +
                    3 * allReduceTime(T * 4, tpStride, p.tp);
  }

  // Pipeline: each chunk boundary sends activations forward and gradients
  // back; with tensor parallelism each rank sends 1/t and the receivers
  // all-gather over the (faster) tensor-parallel links.
  if (p.pp > 1) {
    double bytes = T * h * e;
    double one = p.tp > 1 ? sendRecvTime(bytes / t, p.stride(Axis::PP)) +
                                allGatherTime(bytes, tpStride, p.tp)
                          : sendRecvTime(bytes, p.stride(Axis::PP));
    sc.p2pPerMicrobatch = 2.0 * double(p.vpp) * one;
  }

  // Memory per micro-batch in flight and per device, as the compiled
  // program holds it (docs/cost-model.md, "Memory").
  sc.layerActivation = lc.saved;
  sc.transientActivation = lc.transient + lc.backward;
  // Mixed precision: each micro-batch casts the layer's GEMM weights and
  // norm gains to bf16 in the forward pass and reads the copies again in
  // the backward pass (biases need no copy there); full recomputation
  // casts them again in the backward instead.
  if (mixed) {
    double gemmWeights =
        transformer
            ? h * (h / t + 2 * (m.replicatesKvHeads(p.tp)
                                    ? h / double(m.heads)
                                    : double(m.kvWidth()) / t)) +
                  h / t * h +
                  (m.gatedMlp ? 3 : 2) * h * double(m.ffnHidden) / t + 2 * h
            : layerParams;
    (p.recompute == Recompute::Full ? sc.transientActivation
                                    : sc.layerActivation) += gemmWeights * e;
  }
  sc.firstActivation = m.dropout ? T * h / outside : 0; // dropout mask
  // The head: the last layer's output and the final norm's saved tensors
  // (as in a layer), then one micro-batch's logits [T, V/t]. In float32 the
  // cross entropy turns the logits into their gradient in place, and the
  // peak is that buffer beside the head's input gradient [T, h]; in 16 bits
  // the loss reads an fp32 copy of the logits, and the peak is that copy
  // beside the 16-bit gradient cast from it, with the head's bf16 weight.
  double normStats = (m.rmsNorm ? 1.0 : 2.0) * T / outside * 4.0;
  double logits = T * V / t;
  double gathered = stratasLayout() ? 1.0 : outside;
  sc.lastActivation =
      transformer ? T * h * e / outside + normStats + T * h * e / gathered : 0;
  sc.lastActivation +=
      m.dtypeBytes < 4 ? logits * (4 + e) : logits * 4 + T * h * e;
  if (mixed)
    sc.lastActivation += (V * h / t + (transformer ? h : 0)) * e;
  sc.reserved = dev.reservedBytes;
  sc.memoryLimit = dev.memoryBytes;
  // Gradient buckets: Strata's runtime reduces the flat gradient buckets
  // in place (they are the persistent gradients); GPU frameworks keep two
  // 25 MiB communication buckets.
  if (p.dp > 1 && p.zero < 3 && !stratasLayout() && !m.gradientBucketsAreViews)
    sc.commBuffers += 2.0 * double(p.bucketBytes); // two gradient buckets
  if (p.pp > 1 && stratasLayout())
    sc.boundaryBuffer = T * h * e / outside;
  else if (p.pp > 1)
    sc.commBuffers += 2 * T * h * e; // send and receive buffers
  // Megatron-LM gathers the sequence again for the backward into a buffer
  // of its own; Strata's programs keep the forward's (saved above).
  if (p.sp && p.tp > 1 && !stratasLayout())
    sc.commBuffers += T * h * e;
  if (stratasLayout() && p.zero >= 2 && p.dp > 1) {
    // Strata's runtime works in flat buckets of bucket_bytes (fp32): the
    // unsharded gradient of the bucket being filled lives until its
    // reduce-scatter; ZeRO-3 also holds the gathered values of the current
    // bucket and of the prefetched next one.
    double stageBytes = 4 * (double(m.layers) / double(p.pp) * layerParams +
                             embedParams + (p.pp == 1 ? headParams : 0));
    double bucket = std::min(double(p.bucketBytes), stageBytes);
    sc.commBuffers += bucket;
    // The backward's matmuls read the bf16 copies cast in the forward, so
    // under mixed precision the gathered fp32 values are not live then.
    if (p.zero >= 3 && !mixed)
      sc.commBuffers += (stageBytes > bucket ? 2 : 1) * bucket;
    // A bf16 head peaks at the fp32 logits beside their bf16 gradient,
    // before it writes its weight gradient into the bucket, or at its input
    // gradient beside the bf16 logits' gradient, after.
    if (mixed) {
      double castPeak = logits * (4 + e), afterGrad = logits * e + T * h * e;
      sc.lastActivation += std::max(castPeak - bucket, afterGrad) - castPeak;
    }
  } else if (p.zero >= 3 && p.dp > 1) {
    // Current + prefetched gathered layer, and the layer's unsharded
    // gradient before its reduce-scatter.
    sc.commBuffers += 2 * layerParams * weightWire + layerParams * gradWire;
  }

  // Step-level terms use an average stage (L/pp layers) plus the heavier
  // end of the pipeline (the embedding, or the head's copy), so they do not
  // depend on the layer assignment the search optimises; one stage holds
  // both ends, an untied head included.
  double stageLayers = double(m.layers) / double(p.pp);
  double stageParams = stageLayers * layerParams +
                       (p.pp == 1 ? embedParams + headParams
                                  : std::max(embedParams, headParams));
  if (p.dp > 1 && p.zero < 3) {
    double bytes = stageParams * gradWire;
    double backward = stageLayers * lc.bwd;
    double forward = stageLayers * lc.fwd;
    // The bucket the reduction finishes with, and the gather the forward
    // starts with, holds the stage's first parameters: the embedding with
    // whatever of the first layer fills its bucket (Megatron-LM forms
    // buckets in reverse parameter order, so the embedding's gradient is
    // ready last; FSDP's root unit holds it). At least one bucket.
    double bucketParams = double(p.bucketBytes) / gradWire;
    double lastBucket =
        std::min(stageParams, std::max(embedParams, bucketParams)) /
        stageParams;
    // What a bucketed reduction leaves exposed: the part longer than the
    // compute it overlaps, and at least the last bucket; everything where
    // the device cannot overlap at all.
    auto exposed = [&](double comm, double hiding) {
      if (m.gradientReductionAfterBackward)
        return comm;
      double last = commOverlapsCompute() ? comm * lastBucket : 0;
      return last + overlappedCommTime(comm - last, hiding);
    };
    // One collective per bucket, each paying the library's latency (at
    // hundreds of ranks a ring's 2(p-1) steps cost milliseconds).
    double buckets = std::max(
        1.0, std::ceil(bytes / double(std::max<int64_t>(1, p.bucketBytes))));
    auto bucketed =
        [&](double (AnalyticalCostModel::*op)(double, int64_t, int64_t) const,
            double total) {
          return buckets * (this->*op)(total / buckets, dpStride, p.dp);
        };
    if (p.zero == 0) {
      sc.dpExposed = exposed(
          bucketed(&AnalyticalCostModel::allReduceTime, bytes), backward);
    } else {
      // Reduce-scatter hides under the last backward, the parameter
      // all-gather (same buckets) under the next step's first forward.
      double rs = bucketed(&AnalyticalCostModel::reduceScatterTime, bytes);
      double ag = bucketed(&AnalyticalCostModel::allGatherTime,
                           stageParams * weightWire);
      sc.dpExposed = exposed(rs, backward) + exposed(ag, forward);
    }
  }
  double localParams = stageParams / (p.zero >= 1 ? dp : 1);
  sc.optimizer = memoryBoundTime(localParams * pb.update);
  return sc;
}

Estimate AnalyticalCostModel::estimate(const Plan &p) const {
  if (m.kind == ModelDesc::Kind::Graph)
    return graphEstimate(p);
  Estimate est;
  StageCosts sc = stageCosts(p);
  int64_t pp = p.pp, mb = p.numMicrobatches;
  std::vector<double> layersOn(pp, 0.0);
  for (size_t k = 0; k < p.stageLayers.size(); ++k)
    layersOn[k % pp] += double(p.stageLayers[k]);

  std::vector<double> deviceTime(pp);
  int64_t critical = 0;
  for (int64_t d = 0; d < pp; ++d) {
    double t = layersOn[d] * sc.layerTime() + sc.perMicrobatchComm();
    if (d == 0)
      t += sc.firstExtra();
    if (d == pp - 1)
      t += sc.lastExtra();
    deviceTime[d] = t;
    if (t > deviceTime[critical])
      critical = d;
  }
  double pipe = pipelineMakespan(deviceTime, mb, p.vpp);
  double n = layersOn[critical], M = double(mb);
  TimeBreakdown &tb = est.time;
  tb.compute =
      M * (n * sc.layerCompute + (critical == 0 ? sc.firstCompute : 0) +
           (critical == pp - 1 ? sc.lastCompute : 0));
  tb.tpComm = M * (n * sc.layerTpComm + (critical == 0 ? sc.firstTpComm : 0) +
                   (critical == pp - 1 ? sc.lastTpComm : 0));
  tb.zeroComm = M * (n * sc.layerZeroComm + sc.zeroFirstGather +
                     (critical == 0 ? sc.firstZeroComm : 0) +
                     (critical == pp - 1 ? sc.lastZeroComm : 0));
  tb.ppComm = M * sc.p2pPerMicrobatch;
  tb.bubble = std::max(0.0, pipe - M * deviceTime[critical]);
  tb.dpComm = sc.dpExposed;
  tb.optimizer = sc.optimizer;
  est.stepTimeS = tb.total();

  double peakMem = -1;
  for (int64_t d = 0; d < pp; ++d) {
    MemoryBreakdown mem;
    double nd = layersOn[d];
    mem.weights = nd * sc.layerWeights;
    mem.gradients = nd * sc.layerGrads;
    mem.optimizerState = nd * sc.layerOptState;
    double perMicrobatch = nd * sc.layerActivation;
    if (d == 0) {
      mem.weights += sc.firstWeights;
      mem.gradients += sc.firstGrads;
      mem.optimizerState += sc.firstOptState;
      perMicrobatch += sc.firstActivation;
    }
    if (d == pp - 1) {
      mem.weights += sc.lastWeights;
      mem.gradients += sc.lastGrads;
      mem.optimizerState += sc.lastOptState;
    }
    // The saved activations of the micro-batches in flight, plus the larger
    // of a layer's backward (rebuilt layer and gradients) and, on the last
    // device, the head's logits: they are never live at once.
    mem.activations =
        inflightMicrobatches(p, d) * perMicrobatch +
        std::max(sc.transientActivation, d == pp - 1 ? sc.lastActivation : 0);
    mem.commBuffers =
        sc.commBuffers + heldBoundaryBuffers(p, d) * sc.boundaryBuffer;
    mem.reserved = sc.reserved;
    est.stageMemory.push_back(mem);
    if (mem.total() > peakMem) {
      peakMem = mem.total();
      est.memory = mem;
    }
  }
  est.memoryLimitBytes = sc.memoryLimit;
  est.fits = est.memory.total() <= sc.memoryLimit;

  int64_t batch = p.globalBatch();
  double devices = double(p.devices());
  est.tokensPerS = double(batch) * double(m.seqLen) / est.stepTimeS;
  est.modelFlopsPerStep = modelFlopsPerStep(batch);
  double tokens = double(batch) * double(m.seqLen);
  double layerFwdPerToken = layerForwardFlops(1, 1) / double(m.seqLen);
  double recomputed = p.recompute == Recompute::Full ? layerFwdPerToken
                      : p.recompute == Recompute::Selective
                          ? 4.0 * double(m.seqLen) * double(m.hidden)
                          : 0.0;
  if (m.kind != ModelDesc::Kind::Transformer &&
      p.recompute == Recompute::Selective)
    recomputed = 0;
  est.hardwareFlopsPerStep =
      est.modelFlopsPerStep + tokens * double(m.layers) * recomputed;
  est.tflopsPerDevice = est.modelFlopsPerStep / est.stepTimeS / devices / 1e12;
  est.mfu = peak > 0 ? est.tflopsPerDevice * 1e12 / peak : 0;
  return est;
}

LayerOpMix layerOpMix(const AnalyticalCostModel &cm, const Plan &p) {
  LayerOpMix mix;
  const ModelDesc &m = cm.model();
  double e = double(m.dtypeBytes);
  for (const LayerOp &o : layerOps(m, double(p.microBatch), double(p.tp), p.sp,
                                   cm.fusedAttention())) {
    if (o.flash) {
      // QK^T and PV on chip; Q, K, V and O touch memory.
      ++mix.gemms;
      mix.fwdFlops += 4 * o.M * o.N * o.K * o.batch;
      double bytes = 4 * o.M * o.K * o.batch * e;
      mix.fwdBytes += bytes;
      mix.bwdBytes += 2 * bytes;
    } else if (o.gemm) {
      ++mix.gemms;
      mix.fwdFlops += 2 * o.M * o.N * o.K * o.batch;
      double bytes = (o.M * o.K + o.K * o.N + o.M * o.N) * o.batch * e;
      mix.fwdBytes += bytes;
      mix.bwdBytes += 2 * bytes;
    } else {
      ++mix.pointwise;
      mix.fwdBytes += o.elements * o.fwdBytes;
      mix.bwdBytes += o.elements * o.bwdBytes;
    }
  }
  return mix;
}

} // namespace strata::planner
