//===- Cluster.h - Devices and topology the planner plans for ---*- C++ -*-===//
//
// A cluster is one kind of device repeated over a tree of topology levels
// (docs/cluster-spec.md). The cost model only needs, for a process group, which
// levels it spans and how many of its members sit in each unit of each level;
// everything here exists to answer that question and to supply the device's
// roofline numbers.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_CLUSTER_H
#define STRATA_COMPILER_PLANNER_CLUSTER_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::planner {

/// The most devices a cluster may have (the product of its level sizes), and
/// the largest cluster spec file read: beyond them the input is rejected
/// with an error that states the limit.
constexpr int64_t kMaxClusterDevices = int64_t(1) << 24;
constexpr uint64_t kMaxClusterSpecBytes = uint64_t(1) << 20;

/// One user-facing error with a location ("file:line:col: error: msg"), or a
/// flag name in `file` when the problem came from the command line.
struct PlannerDiag {
  std::string file;
  int line = 0, col = 0;
  std::string message;
  std::string str() const;
};

/// The roofline numbers of one device plus the few efficiency constants of
/// the analytical cost model (docs/cost-model.md explains each one).
struct DeviceSpec {
  std::string name = "device";
  std::string kind = "gpu"; ///< "gpu" or "cpu"
  /// Dense peak FLOP/s keyed by dtype name ("float32", "bfloat16", ...).
  std::map<std::string, double> peakFlops;
  double memoryBytes = 0;     ///< usable memory per device
  double memoryBandwidth = 0; ///< bytes/s
  /// Parallel units the GEMM tiles are spread over (SMs); 0 disables the
  /// wave-quantisation term (CPUs).
  int computeUnits = 0;
  int gemmTile = 128;          ///< square output tile edge of one unit
  double gemmEfficiency = 0.8; ///< sustained fraction of peak, large GEMM
  double gemmDepthHalf = 128;  ///< K at which tile prologue/epilogue halve
  /// min(M, N) at which a GEMM reaches half its large-shape rate (packing
  /// and edge costs of narrow GEMMs on CPUs); 0 disables the term.
  double gemmRowsHalf = 0;
  double memoryEfficiency = 0.8; ///< sustained fraction of bandwidth
  double kernelOverheadS = 5e-6; ///< fixed cost per kernel launch
  double reservedBytes = 0;      ///< runtime/context memory not for tensors
  /// Compute units the collective library's kernels occupy while they run
  /// (NCCL: one thread block per channel); compute overlapped with a
  /// collective runs on the rest. 0 = communication uses no compute units.
  int collectiveUnits = 0;
  /// Exponentials per second of the special-function units (softmax inside
  /// a fused attention kernel); 0 = not modelled.
  double expRate = 0;
  /// Measured fraction of the dense peak a fused attention kernel sustains,
  /// softmax included, forward and (when given) backward: cuDNN's on an
  /// H100, 0.52 and 0.50; 0 = tensor cores at gemmEfficiency plus the
  /// exponentials.
  double attentionEfficiency = 0, attentionBackwardEfficiency = 0;
  /// The fused attention kernel the stack runs when no scalar rate is given:
  /// a kernel with measured rates by sequence length (AttentionKernels.h:
  /// "flash-attn-2", "flash-attn-triton"); empty = none.
  std::string attentionKernel;

  /// Peak for `dtype`, falling back to float32's; 0 if neither is given.
  double peakFor(const std::string &dtype) const;
};

/// The efficiency constants of a device of `kind` ("gpu" or "cpu") that a
/// cluster YAML leaves out: the same numbers the presets use, so a preset
/// written out by hand predicts what the preset predicts
/// (docs/cluster-spec.md lists them).
void applyKindDefaults(DeviceSpec &device);

/// The dgx-h100 / h100 presets' sustained GEMM efficiency (Cluster.cpp).
double h100GemmEfficiency();
/// The dgx-h100 / h100 presets' `gemm_depth_half`: the A100's 128 scaled by
/// the per-SM tensor rate (Cluster.cpp).
double h100GemmDepthHalf();

/// One level of the topology tree, innermost first. `size` units of the level
/// below (devices for level 0) form one unit of this level.
struct TopologyLevel {
  std::string name;
  int64_t size = 1;
  double bandwidth = 0;    ///< bytes/s per device, one direction, to peers
                           ///< in the same unit of this level
  double latencyS = 0;     ///< alpha of the alpha-beta model
  double efficiency = 0.8; ///< sustained fraction of `bandwidth`
  double oversubscription = 1.0; ///< >1: links above this level are shared
  /// Bus bandwidth (bytes/s, nccl-tests' busbw) of an all-reduce that the
  /// level's switches reduce in-network (NVLink SHARP, NCCL's NVLS); 0 = none.
  double nvlsBusBandwidth = 0;
};

struct ClusterSpec {
  std::string name;
  DeviceSpec device;
  std::vector<TopologyLevel> levels;
  /// The devices are ranks of one host that split its memory (`local:N`):
  /// `device.memoryBytes` is this total over the device count, so more
  /// ranks do not add memory. 0 for clusters of real devices.
  double sharedHostMemoryBytes = 0;
  /// DRAM bandwidth of the one host all devices are ranks of, with every
  /// rank streaming at once (`strata calibrate` measures it), and its
  /// last-level cache; 0 = devices have their own memory (GPUs).
  double hostMemoryBandwidth = 0, hostCacheBytes = 0;
  /// How collectives are costed (Collectives.h): "nccl", "alpha-beta", or
  /// empty for the device kind's library (NCCL on GPUs, MPI on CPU ranks).
  std::string collectives;

  int64_t numDevices() const;
  /// Devices in one unit of level `l` (product of sizes up to and incl. l).
  int64_t unitDevices(size_t l) const;
};

/// How a process group of `size` members, taken every `stride` ranks, is laid
/// over the topology: members[l] is how many members share one unit of level
/// l (members.back() == size). A group is "inside" level l when members[l]
/// equals its size.
struct GroupSpan {
  std::vector<int64_t> members;
  /// The innermost level the whole group fits in.
  size_t outermostLevel() const;
};
GroupSpan spanOf(const ClusterSpec &c, int64_t stride, int64_t size);

/// Built-in presets: "dgx-a100:NODES", "dgx-h100:NODES", "a100:GPUS",
/// "h100:GPUS" (1..8 GPUs of one NVLink domain), "local:RANKS".
/// Returns nullopt (and sets `error`) if `arg` names no preset or has a bad
/// count.
std::optional<ClusterSpec> clusterPreset(const std::string &arg,
                                         std::string &error, bool &isPreset);

/// Parses a cluster YAML file (or `contents`, reported as `path`). On failure
/// returns nullopt and appends located diagnostics. Never throws.
std::optional<ClusterSpec>
loadClusterSpec(const std::string &path, std::vector<PlannerDiag> &diags,
                const std::string *contents = nullptr);

/// A preset name or a YAML path, as `--cluster` accepts.
std::optional<ClusterSpec> resolveCluster(const std::string &arg,
                                          std::vector<PlannerDiag> &diags);

/// Checks invariants (positive numbers, sizes); appends diagnostics located
/// at `where`.
bool validateCluster(const ClusterSpec &c, const std::string &where,
                     std::vector<PlannerDiag> &diags);

/// "80 GiB", "2039 GB/s", "5 us", "312 TFLOP/s" or a bare number.
std::optional<double> parseQuantity(const std::string &text,
                                    const std::string &dimension);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_CLUSTER_H
