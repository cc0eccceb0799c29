//===- Cluster.cpp - Cluster presets, YAML parsing, group spans -----------===//
//
// Presets encode public vendor numbers (docs/cluster-spec.md cites them); the
// YAML reader mirrors the model spec's error style: every problem is reported
// as file:line:col with what would fix it, and nothing throws out of here.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/Cluster.h"
#include "compiler/planner/AttentionKernels.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace strata::planner {

std::string PlannerDiag::str() const {
  std::ostringstream os;
  if (!file.empty()) {
    os << file;
    if (line > 0)
      os << ":" << line << ":" << col;
    os << ": ";
  }
  os << "error: " << message;
  return os.str();
}

double DeviceSpec::peakFor(const std::string &dtype) const {
  auto it = peakFlops.find(dtype);
  if (it != peakFlops.end())
    return it->second;
  it = peakFlops.find("float32");
  return it == peakFlops.end() ? 0.0 : it->second;
}

int64_t ClusterSpec::numDevices() const {
  return levels.empty() ? 1 : unitDevices(levels.size() - 1);
}

int64_t ClusterSpec::unitDevices(size_t l) const {
  int64_t n = 1;
  for (size_t i = 0; i <= l && i < levels.size(); ++i)
    n *= levels[i].size;
  return n;
}

size_t GroupSpan::outermostLevel() const {
  for (size_t l = 0; l < members.size(); ++l)
    if (members[l] == members.back())
      return l;
  return members.empty() ? 0 : members.size() - 1;
}

GroupSpan spanOf(const ClusterSpec &c, int64_t stride, int64_t size) {
  // Ranks are laid out contiguously over the tree, so a group whose members
  // are `stride` apart puts unit/stride of them into each unit of a level.
  GroupSpan s;
  for (size_t l = 0; l < c.levels.size(); ++l) {
    int64_t unit = c.unitDevices(l);
    int64_t m = stride >= unit ? 1 : unit / stride;
    s.members.push_back(std::clamp<int64_t>(m, 1, size));
  }
  if (s.members.empty())
    s.members.push_back(size);
  s.members.back() = size;
  return s;
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

static constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

void applyKindDefaults(DeviceSpec &d) {
  if (d.kind == "cpu") {
    d.gemmEfficiency = 0.7;
    d.memoryEfficiency = 0.7;
    d.kernelOverheadS = 2e-6;
  } else {
    d.gemmEfficiency = 0.72;
    d.memoryEfficiency = 0.8;
    d.kernelOverheadS = 5e-6;
  }
  d.gemmDepthHalf = 128;
  d.gemmRowsHalf = 0;
  // NCCL's ring/tree kernels: one thread block per channel, 16 channels on
  // DGX systems (two per NIC); MPI on CPU ranks takes no compute units.
  d.collectiveUnits = d.kind == "cpu" ? 0 : 16;
}

/// One NVIDIA data-centre GPU of a DGX.
static DeviceSpec gpuDevice(const char *gpu, double bf16, double fp32,
                            double hbm, int units) {
  DeviceSpec d;
  d.name = gpu;
  d.kind = "gpu";
  d.peakFlops = {{"bfloat16", bf16}, {"float16", bf16}, {"float32", fp32}};
  d.memoryBytes = 80 * GiB;
  d.reservedBytes = 1 * GiB;
  d.memoryBandwidth = hbm;
  d.computeUnits = units;
  applyKindDefaults(d);
  return d;
}

/// A DGX node: 8 GPUs on NVLink/NVSwitch (`nvlink` bytes/s per GPU, each
/// direction), 8 InfiniBand adapters per node (`ib` bytes/s each).
static ClusterSpec dgx(const std::string &preset, int64_t nodes,
                       const char *gpu, double bf16, double fp32, double hbm,
                       int units, double nvlink, double ib) {
  ClusterSpec c;
  c.name = preset + ":" + std::to_string(nodes);
  c.device = gpuDevice(gpu, bf16, fp32, hbm, units);
  c.levels.push_back({"nvlink", 8, nvlink, 3e-6, 0.8, 1.0});
  c.levels.push_back({"infiniband", nodes, ib, 5e-6, 0.9, 1.0});
  return c;
}

/// `gpus` GPUs of one NVLink domain (part of a DGX node, or one GPU).
static ClusterSpec nvlinkDomain(const std::string &preset, int64_t gpus,
                                const char *gpu, double bf16, double fp32,
                                double hbm, int units, double nvlink) {
  ClusterSpec c;
  c.name = preset + ":" + std::to_string(gpus);
  c.device = gpuDevice(gpu, bf16, fp32, hbm, units);
  c.levels.push_back({"nvlink", gpus, nvlink, 3e-6, 0.8, 1.0});
  return c;
}

// Special-function units: 16 exponentials per SM per clock, at the clock
// the dense tensor peak is quoted at (A100 1.41 GHz, H100 1.83 GHz): 2.4 and
// 3.9 T/s (the latter is FlashAttention-3's figure for H100 SXM5).

/// A100 specifics shared by dgx-a100:N and a100:N.
static ClusterSpec withA100(ClusterSpec c) {
  c.device.expRate = 108 * 16 * 1.41e9;
  // Fused attention as FlashAttention-2 runs it on Ampere (PyTorch's SDPA
  // and Transformer Engine's backend there), at its measured rates by
  // sequence length (AttentionKernels.cpp; docs/cost-model.md).
  c.device.attentionKernel = "flash-attn-2";
  return c;
}

/// H100 specifics shared by dgx-h100:N and h100:N: third-generation NVSwitch
/// reduces in the switch (NVLS): nccl-tests all_reduce_perf on 8 H100 SXM
/// reports 460-480 GB/s bus bandwidth.
///
/// Sustained GEMM efficiency: the A100's 0.72 (0.9 clock x 0.8 cuBLAS, set on
/// the SC'21 rows) scaled by the ratio of the two GPUs' maximum achievable
/// matmul throughput measured the same way (mamf-finder, best bf16 shape,
/// Stas Bekman's ml-engineering compute/accelerator README, "Maximum
/// Achievable Matmul FLOPS comparison table": A100 SXM 267.9 of 312, H100
/// SXM 792.1 of 989 TFLOP/s). The 821 TFLOP/s figure of the same table is
/// the GH200, whose module has a larger power budget than the H100 SXM's
/// 700 W. docs/cost-model.md, "H100 GEMM efficiency".
double h100GemmEfficiency() {
  constexpr double a100Mamf = 267.9 / 312.0, h100Mamf = 792.1 / 989.0;
  return 0.72 * h100Mamf / a100Mamf;
}

/// A tile's prologue and epilogue (loading the first operand stages,
/// writing the output) are bound by memory latency, which an H100 does not
/// shorten, while its K loop runs at the SM's tensor rate: 989/132 against
/// the A100's 312/108 TFLOP/s per SM. The K at which the fixed part halves
/// the tile's efficiency grows by that ratio: 128 x 2.59 = 332.
double h100GemmDepthHalf() {
  return 128.0 * (989.0 / 132.0) / (312.0 / 108.0);
}

static ClusterSpec withH100(ClusterSpec c) {
  c.device.gemmEfficiency = h100GemmEfficiency();
  // Fused attention as cuDNN runs it on Hopper (Transformer Engine's
  // preferred backend there): FlashAttention-3 paper (arXiv:2407.08608)
  // Fig. 5, head dim 128, sequence 4k: causal forward 518 and backward 499
  // of 989 TFLOP/s. docs/cost-model.md, "Fused attention".
  c.device.attentionEfficiency = 518.0 / 989.0;
  c.device.attentionBackwardEfficiency = 499.0 / 989.0;
  c.device.gemmDepthHalf = h100GemmDepthHalf();
  c.levels[0].nvlsBusBandwidth = 480e9;
  c.device.expRate = 132 * 16 * 1.83e9;
  return c;
}

static ClusterSpec dgxA100(int64_t nodes) {
  return withA100(dgx("dgx-a100", nodes, "A100-SXM4-80GB", 312e12, 19.5e12,
                      2039e9, 108, 300e9, 25e9));
}

static ClusterSpec dgxH100(int64_t nodes) {
  return withH100(dgx("dgx-h100", nodes, "H100-SXM5-80GB", 989e12, 67e12,
                      3350e9, 132, 450e9, 50e9));
}

// The same GPUs as the DGX presets, `gpus` of them in one NVLink domain.
static ClusterSpec a100Gpus(int64_t gpus) {
  return withA100(nvlinkDomain("a100", gpus, "A100-SXM4-80GB", 312e12,
                               19.5e12, 2039e9, 108, 300e9));
}

static ClusterSpec h100Gpus(int64_t gpus) {
  return withH100(nvlinkDomain("h100", gpus, "H100-SXM5-80GB", 989e12, 67e12,
                               3350e9, 132, 450e9));
}

static ClusterSpec localRanks(int64_t ranks) {
  ClusterSpec c;
  c.name = "local:" + std::to_string(ranks);
  DeviceSpec &d = c.device;
  d.name = "cpu-rank";
  d.kind = "cpu";
  // One core's GEMM rates; AVX512-BF16 (vdpbf16ps) doubles the fp32 rate
  // for bf16 operands, which a bf16 model's matmuls run on.
  d.peakFlops = {{"float32", 150e9}, {"bfloat16", 300e9}};
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  double total =
      pages > 0 && pageSize > 0 ? double(pages) * pageSize : 16 * GiB;
  d.memoryBytes = total / double(ranks);
  c.sharedHostMemoryBytes = total;
  d.memoryBandwidth = 20e9;
  d.computeUnits = 0;
  applyKindDefaults(d);
  c.levels.push_back({"shared-memory", ranks, 5e9, 1e-6, 0.8, 1.0});
  return c;
}

std::optional<ClusterSpec> clusterPreset(const std::string &arg,
                                         std::string &error, bool &isPreset) {
  isPreset = false;
  auto colon = arg.find(':');
  if (colon == std::string::npos)
    return std::nullopt;
  std::string kind = arg.substr(0, colon), count = arg.substr(colon + 1);
  bool gpus = kind == "a100" || kind == "h100";
  if (kind != "dgx-a100" && kind != "dgx-h100" && kind != "local" && !gpus)
    return std::nullopt;
  isPreset = true;
  const char *what = kind == "local" ? "ranks" : gpus ? "GPUs" : "nodes";
  char *end = nullptr;
  long long n = count.empty() ? 0 : std::strtoll(count.c_str(), &end, 10);
  if (count.empty() || *end != '\0' || n < 1 || n > 1000000) {
    error = "--cluster " + arg + ": '" + count + "' is not a number of " +
            what + "; write e.g. " + kind + ":4";
    return std::nullopt;
  }
  if (gpus && n > 8) {
    error = "--cluster " + arg +
            ": one NVLink domain holds at most 8 GPUs; "
            "for more write dgx-" +
            kind + ":NODES (8 GPUs per node)";
    return std::nullopt;
  }
  if (kind == "a100")
    return a100Gpus(n);
  if (kind == "h100")
    return h100Gpus(n);
  if (kind == "dgx-a100")
    return dgxA100(n);
  if (kind == "dgx-h100")
    return dgxH100(n);
  return localRanks(n);
}

//===----------------------------------------------------------------------===//
// Quantities with units
//===----------------------------------------------------------------------===//

std::optional<double> parseQuantity(const std::string &text,
                                    const std::string &dimension) {
  const char *s = text.c_str();
  char *end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || !std::isfinite(v))
    return std::nullopt;
  std::string unit(end);
  unit.erase(0, unit.find_first_not_of(" \t"));
  unit.erase(unit.find_last_not_of(" \t") + 1);
  if (unit.empty())
    return v;
  static const std::vector<std::pair<std::string, double>> bytes = {
      {"B", 1},           {"KB", 1e3},  {"MB", 1e6},
      {"GB", 1e9},        {"TB", 1e12}, {"KiB", 1024.0},
      {"MiB", 1048576.0}, {"GiB", GiB}, {"TiB", GiB * 1024}};
  auto lookup = [&](const std::string &u,
                    const std::vector<std::pair<std::string, double>> &t)
      -> std::optional<double> {
    for (auto &[name, scale] : t)
      if (u == name)
        return scale;
    return std::nullopt;
  };
  if (dimension == "bytes") {
    if (auto k = lookup(unit, bytes))
      return v * *k;
  } else if (dimension == "bandwidth") {
    if (unit.size() > 2 && unit.substr(unit.size() - 2) == "/s") {
      std::string u = unit.substr(0, unit.size() - 2);
      if (auto k = lookup(u, bytes))
        return v * *k;
      // Network rates are quoted in bits: "200 Gb/s".
      static const std::vector<std::pair<std::string, double>> bits = {
          {"b", 0.125},
          {"Kb", 125.0},
          {"Mb", 1.25e5},
          {"Gb", 1.25e8},
          {"Tb", 1.25e11}};
      if (auto k = lookup(u, bits))
        return v * *k;
    }
  } else if (dimension == "time") {
    static const std::vector<std::pair<std::string, double>> t = {
        {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
    if (auto k = lookup(unit, t))
      return v * *k;
  } else if (dimension == "flops") {
    static const std::vector<std::pair<std::string, double>> f = {
        {"FLOP/s", 1}, {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15}};
    if (auto k = lookup(unit, f))
      return v * *k;
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// YAML
//===----------------------------------------------------------------------===//

namespace {
/// Reads one spec file, collecting every error instead of stopping at the
/// first, so a user fixes a file in one round.
class ClusterReader {
public:
  ClusterReader(std::string path, std::vector<PlannerDiag> &diags)
      : path(std::move(path)), diags(diags) {}

  void error(const YAML::Node &n, const std::string &msg) {
    PlannerDiag d;
    d.file = path;
    if (n.IsDefined() && n.Mark().line >= 0) {
      d.line = n.Mark().line + 1;
      d.col = n.Mark().column + 1;
    }
    d.message = msg;
    diags.push_back(d);
  }

  void checkKeys(const YAML::Node &map, const std::set<std::string> &allowed,
                 const std::string &where) {
    for (auto it = map.begin(); it != map.end(); ++it) {
      std::string key = it->first.as<std::string>("");
      if (!allowed.count(key)) {
        std::string list;
        for (auto &a : allowed)
          list += (list.empty() ? "" : ", ") + a;
        error(it->first, "unknown key '" + key + "' in " + where +
                             "; expected one of: " + list);
      }
    }
  }

  std::optional<double> quantity(const YAML::Node &map, const char *key,
                                 const std::string &dimension, bool required,
                                 const char *example) {
    YAML::Node n = map[key];
    if (!n.IsDefined() || n.IsNull()) {
      if (required)
        error(map, std::string("missing '") + key + "' (e.g. " + key + ": " +
                       example + ")");
      return std::nullopt;
    }
    if (!n.IsScalar()) {
      error(n,
            std::string("'") + key + "' must be a scalar such as " + example);
      return std::nullopt;
    }
    auto v = parseQuantity(n.Scalar(), dimension);
    if (!v || *v < 0) {
      error(n, std::string("cannot read '") + n.Scalar() + "' as " + dimension +
                   " for '" + key + "'; write e.g. " + example);
      return std::nullopt;
    }
    return v;
  }

  /// A whole number in [min, max] (quantity() reads it as a double).
  std::optional<int64_t> count(const YAML::Node &map, const char *key,
                               bool required, const char *example, int64_t min,
                               int64_t max) {
    auto v = quantity(map, key, "count", required, example);
    if (!v)
      return std::nullopt;
    if (*v < double(min) || *v > double(max) || *v != std::floor(*v)) {
      error(map[key], std::string("'") + key + "' must be a whole number in [" +
                          std::to_string(min) + ", " + std::to_string(max) +
                          "]; write e.g. " + example);
      return std::nullopt;
    }
    return int64_t(*v);
  }

  std::optional<ClusterSpec> read(const YAML::Node &root) {
    if (!root.IsMap()) {
      error(root, "a cluster spec is a mapping with 'device' and 'topology' "
                  "(see docs/cluster-spec.md)");
      return std::nullopt;
    }
    checkKeys(root,
              {"name", "device", "topology", "host_memory", "collectives",
               "host_memory_bandwidth", "host_cache"},
              "the cluster spec");
    ClusterSpec c;
    c.name =
        root["name"] && root["name"].IsScalar() ? root["name"].Scalar() : path;
    readDevice(root, c.device);
    readTopology(root, c);
    if (auto v = quantity(root, "host_memory", "bytes", false, "24 GiB"))
      c.sharedHostMemoryBytes = *v;
    if (auto v = quantity(root, "host_memory_bandwidth", "bandwidth", false,
                          "12 GB/s"))
      c.hostMemoryBandwidth = *v;
    if (auto v = quantity(root, "host_cache", "bytes", false, "32 MiB"))
      c.hostCacheBytes = *v;
    if (YAML::Node k = root["collectives"]) {
      c.collectives = k.IsScalar() ? k.Scalar() : "";
      if (c.collectives != "nccl" && c.collectives != "alpha-beta")
        error(k, "collectives must be 'nccl' or 'alpha-beta'");
    }
    if (!diags.empty())
      return std::nullopt;
    return c;
  }

private:
  void readDevice(const YAML::Node &root, DeviceSpec &d) {
    YAML::Node dev = root["device"];
    if (!dev.IsDefined() || !dev.IsMap()) {
      error(dev.IsDefined() ? dev : root,
            "missing 'device' mapping (name, kind, memory, memory_bandwidth, "
            "peak_flops)");
      return;
    }
    checkKeys(dev,
              {"name", "kind", "memory", "reserved_memory", "memory_bandwidth",
               "peak_flops", "compute_units", "gemm_tile", "efficiency",
               "collective_units", "exp_rate", "attention_kernel"},
              "'device'");
    if (dev["name"] && dev["name"].IsScalar())
      d.name = dev["name"].Scalar();
    if (YAML::Node k = dev["attention_kernel"]) {
      const std::vector<std::string> &names = attentionKernelNames();
      std::string v = k.IsScalar() ? k.Scalar() : std::string();
      if (std::find(names.begin(), names.end(), v) == names.end()) {
        std::string list;
        for (const std::string &n : names)
          list += (list.empty() ? "" : ", ") + n;
        error(k, "unknown attention_kernel '" + v + "'; use one of: " + list);
        return;
      }
      d.attentionKernel = v;
    }
    if (YAML::Node k = dev["kind"]) {
      d.kind = k.as<std::string>("");
      if (d.kind != "gpu" && d.kind != "cpu")
        error(k, "device kind must be 'gpu' or 'cpu', not '" + d.kind + "'");
    }
    // What `efficiency` leaves out is what the presets of this kind use.
    applyKindDefaults(d);
    auto memory = quantity(dev, "memory", "bytes", true, "80 GiB");
    if (memory)
      d.memoryBytes = *memory;
    if (auto v = quantity(dev, "reserved_memory", "bytes", false, "1 GiB"))
      d.reservedBytes = *v;
    if (memory && d.memoryBytes <= d.reservedBytes)
      error(dev["reserved_memory"] ? dev["reserved_memory"] : dev["memory"],
            "device memory must exceed reserved_memory (the memory left for "
            "tensors is memory - reserved_memory)");
    if (auto v =
            quantity(dev, "memory_bandwidth", "bandwidth", true, "2039 GB/s")) {
      if (*v <= 0)
        error(dev["memory_bandwidth"],
              "device memory_bandwidth must be positive, e.g. 2039 GB/s");
      d.memoryBandwidth = *v;
    }
    if (auto v = count(dev, "collective_units", false, "16", 0, 1 << 20))
      d.collectiveUnits = int(*v);
    if (auto v = quantity(dev, "exp_rate", "count", false, "3.9e12"))
      d.expRate = *v;
    YAML::Node pf = dev["peak_flops"];
    if (!pf.IsDefined() || !pf.IsMap() || pf.size() == 0) {
      error(pf.IsDefined() ? pf : dev,
            "'peak_flops' must map dtypes to dense peaks, e.g. "
            "{bfloat16: 312 TFLOP/s, float32: 19.5 TFLOP/s}");
    } else {
      static const std::set<std::string> dtypes = {"float32", "bfloat16",
                                                   "float16"};
      for (auto it = pf.begin(); it != pf.end(); ++it) {
        std::string key = it->first.as<std::string>("");
        if (!dtypes.count(key)) {
          error(it->first, "unknown dtype '" + key +
                               "' in peak_flops; use float32, bfloat16 or "
                               "float16");
          continue;
        }
        if (auto v = quantity(pf, key.c_str(), "flops", true, "312 TFLOP/s")) {
          if (*v <= 0)
            error(pf[key], "peak_flops for " + key +
                               " must be positive, e.g. 312 TFLOP/s");
          d.peakFlops[key] = *v;
        }
      }
    }
    if (auto v = count(dev, "compute_units", false, "108", 0, 1 << 20))
      d.computeUnits = int(*v);
    if (auto v = count(dev, "gemm_tile", false, "128", 1, 1 << 16))
      d.gemmTile = int(*v);
    if (YAML::Node e = dev["efficiency"]) {
      if (!e.IsMap()) {
        error(e, "'efficiency' must be a mapping: {gemm, gemm_depth_half, "
                 "gemm_rows_half, memory, kernel_overhead, attention, "
                 "attention_backward}");
        return;
      }
      checkKeys(e,
                {"gemm", "gemm_depth_half", "gemm_rows_half", "memory",
                 "kernel_overhead", "attention", "attention_backward"},
                "'efficiency'");
      if (auto v = quantity(e, "attention", "fraction", false, "0.52"))
        d.attentionEfficiency = *v;
      if (auto v = quantity(e, "attention_backward", "fraction", false, "0.5"))
        d.attentionBackwardEfficiency = *v;
      if (auto v = quantity(e, "gemm", "fraction", false, "0.8"))
        d.gemmEfficiency = *v;
      if (auto v = quantity(e, "gemm_depth_half", "count", false, "128"))
        d.gemmDepthHalf = *v;
      if (auto v = quantity(e, "gemm_rows_half", "count", false, "0"))
        d.gemmRowsHalf = *v;
      if (auto v = quantity(e, "memory", "fraction", false, "0.8"))
        d.memoryEfficiency = *v;
      if (auto v = quantity(e, "kernel_overhead", "time", false, "5 us"))
        d.kernelOverheadS = *v;
      for (const char *k :
           {"gemm", "memory", "attention", "attention_backward"})
        if (e[k] && e[k].IsScalar()) {
          auto v = parseQuantity(e[k].Scalar(), "fraction");
          if (v && (*v <= 0 || *v > 1))
            error(e[k], std::string("efficiency '") + k +
                            "' is a fraction in (0, 1]");
        }
    }
  }

  void readTopology(const YAML::Node &root, ClusterSpec &c) {
    YAML::Node topo = root["topology"];
    if (!topo.IsDefined() || !topo.IsSequence() || topo.size() == 0) {
      error(topo.IsDefined() ? topo : root,
            "'topology' must be a non-empty list of levels, innermost first, "
            "e.g. - {name: nvlink, size: 8, bandwidth: 300 GB/s, latency: "
            "3 us}");
      return;
    }
    int64_t devices = 1; // the product of the sizes read so far
    bool tooMany = false;
    for (const YAML::Node &lv : topo) {
      if (!lv.IsMap()) {
        error(lv, "a topology level is a mapping with name, size, bandwidth, "
                  "latency");
        continue;
      }
      checkKeys(lv,
                {"name", "size", "bandwidth", "latency", "efficiency",
                 "oversubscription", "nvls_bus_bandwidth"},
                "a topology level");
      TopologyLevel t;
      t.name = lv["name"] && lv["name"].IsScalar()
                   ? lv["name"].Scalar()
                   : "level" + std::to_string(c.levels.size());
      if (auto v = quantity(lv, "size", "count", true, "8")) {
        if (*v < 1 || *v != std::floor(*v)) {
          error(lv["size"], "level size must be a positive integer");
        } else if (*v > double(kMaxClusterDevices) / double(devices)) {
          if (!tooMany)
            error(lv["size"], "the cluster would have more than " +
                                  std::to_string(kMaxClusterDevices) +
                                  " devices (the product of the level sizes); "
                                  "the planner handles at most that many");
          tooMany = true;
        } else {
          t.size = int64_t(*v);
          devices *= t.size;
        }
      }
      if (auto v = quantity(lv, "bandwidth", "bandwidth", true, "300 GB/s")) {
        if (*v <= 0)
          error(lv["bandwidth"], "bandwidth must be positive");
        t.bandwidth = *v;
      }
      if (auto v = quantity(lv, "latency", "time", true, "5 us"))
        t.latencyS = *v;
      if (auto v = quantity(lv, "nvls_bus_bandwidth", "bandwidth", false,
                            "480 GB/s"))
        t.nvlsBusBandwidth = *v;
      if (auto v = quantity(lv, "efficiency", "fraction", false, "0.8")) {
        if (*v <= 0 || *v > 1)
          error(lv["efficiency"], "efficiency is a fraction in (0, 1]");
        t.efficiency = *v;
      }
      if (auto v = quantity(lv, "oversubscription", "ratio", false, "2")) {
        if (*v < 1)
          error(lv["oversubscription"],
                "oversubscription is a ratio >= 1 (1 = non-blocking)");
        t.oversubscription = *v;
      }
      c.levels.push_back(t);
    }
  }

  std::string path;
  std::vector<PlannerDiag> &diags;
};
} // namespace

static std::string tooLargeMessage() {
  return "the file is larger than " +
         std::to_string(kMaxClusterSpecBytes >> 10) +
         " KiB; a cluster spec is a small YAML file (docs/cluster-spec.md)";
}

/// Reads a regular file of at most kMaxClusterSpecBytes. Opens without
/// blocking and checks what was opened, so a FIFO or a device (/dev/zero) is
/// refused instead of hanging or filling memory.
static bool readClusterFile(const std::string &path, std::string &text,
                            std::vector<PlannerDiag> &diags) {
  auto fail = [&](const std::string &m) {
    diags.push_back({path, 0, 0, m});
    return false;
  };
  const char *hint = " (give a YAML file or a preset: dgx-a100:NODES, "
                     "dgx-h100:NODES, a100:GPUS, h100:GPUS, local:RANKS)";
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return fail(std::string("cannot open cluster spec: ") +
                std::strerror(errno) + hint);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(std::string("is not a regular file (") +
                (S_ISDIR(st.st_mode)    ? "a directory"
                 : S_ISFIFO(st.st_mode) ? "a pipe"
                 : S_ISCHR(st.st_mode)  ? "a character device"
                                        : "not a plain file") +
                "); expected a cluster spec YAML file" + hint);
  }
  if (uint64_t(st.st_size) > kMaxClusterSpecBytes) {
    ::close(fd);
    return fail(tooLargeMessage());
  }
  text.clear();
  char buf[1 << 14];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      ::close(fd);
      return fail(std::string("cannot read cluster spec: ") +
                  std::strerror(errno));
    }
    if (n == 0)
      break;
    text.append(buf, size_t(n));
    if (text.size() > kMaxClusterSpecBytes) {
      ::close(fd);
      return fail(tooLargeMessage());
    }
  }
  ::close(fd);
  return true;
}

bool validateCluster(const ClusterSpec &c, const std::string &where,
                     std::vector<PlannerDiag> &diags) {
  size_t before = diags.size();
  auto fail = [&](const std::string &m) { diags.push_back({where, 0, 0, m}); };
  if (c.device.memoryBytes <= c.device.reservedBytes)
    fail("device memory must exceed reserved_memory");
  if (c.device.memoryBandwidth <= 0)
    fail("device memory_bandwidth must be positive");
  if (c.device.peakFor("float32") <= 0 && c.device.peakFlops.empty())
    fail("device peak_flops must give at least one positive peak");
  for (auto &[k, v] : c.device.peakFlops)
    if (v <= 0)
      fail("peak_flops for " + k + " must be positive");
  int64_t devices = 1;
  for (const TopologyLevel &l : c.levels) {
    if (l.size < 1 || l.size > kMaxClusterDevices / devices) {
      fail("cluster has more than " + std::to_string(kMaxClusterDevices) +
           " devices (the product of the level sizes); check the level "
           "sizes");
      break;
    }
    devices *= l.size;
  }
  return diags.size() == before;
}

std::optional<ClusterSpec> loadClusterSpec(const std::string &path,
                                           std::vector<PlannerDiag> &diags,
                                           const std::string *contents) {
  std::string text;
  if (contents) {
    if (contents->size() > kMaxClusterSpecBytes) {
      diags.push_back({path, 0, 0, tooLargeMessage()});
      return std::nullopt;
    }
    text = *contents;
  } else if (!readClusterFile(path, text, diags)) {
    return std::nullopt;
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception &e) {
    diags.push_back(
        {path, e.mark.line + 1, e.mark.column + 1, "malformed YAML: " + e.msg});
    return std::nullopt;
  }
  size_t before = diags.size();
  std::optional<ClusterSpec> c;
  try {
    // Explicit tags are refused everywhere (no node is read "as" a tag).
    std::vector<YAML::Node> stack = {root};
    while (!stack.empty()) {
      YAML::Node n = stack.back();
      stack.pop_back();
      const std::string &tag = n.Tag();
      if (!tag.empty() && tag != "?" && tag != "!") {
        diags.push_back({path, n.Mark().line + 1, n.Mark().column + 1,
                         "YAML tag '" + tag +
                             "' in a cluster spec; write plain values "
                             "without tags"});
        return std::nullopt;
      }
      if (n.IsSequence())
        for (const YAML::Node &item : n)
          stack.push_back(item);
      else if (n.IsMap())
        for (auto it = n.begin(); it != n.end(); ++it) {
          stack.push_back(it->first);
          stack.push_back(it->second);
        }
    }
    ClusterReader reader(path, diags);
    c = reader.read(root);
  } catch (const YAML::Exception &e) {
    diags.push_back({path, e.mark.line + 1, e.mark.column + 1, e.msg});
    return std::nullopt;
  }
  if (!c || diags.size() != before)
    return std::nullopt;
  if (!validateCluster(*c, path, diags))
    return std::nullopt;
  return c;
}

std::optional<ClusterSpec> resolveCluster(const std::string &arg,
                                          std::vector<PlannerDiag> &diags) {
  std::string error;
  bool isPreset = false;
  if (auto c = clusterPreset(arg, error, isPreset))
    return c;
  if (isPreset) {
    diags.push_back({"", 0, 0, error});
    return std::nullopt;
  }
  return loadClusterSpec(arg, diags);
}

} // namespace strata::planner
