//===- CalibrateCommand.cpp - `strata calibrate` --------------------------===//
//
// Measures this machine and writes a cluster spec (docs/cluster-spec.md) that
// `strata plan --cluster FILE` and the cost model read. The measuring is done
// by `strata-calibrate-probe` (runtime/calibrate/), an MPI program that uses
// the runtime's own kernels and communicators; this command launches it with
// mpirun, reads its JSON and maps it onto the spec's fields. The mapping, and
// what the spec cannot express (per-collective alpha/beta), is described in
// docs/cluster-spec.md, "Calibration"; the full per-collective fits go into
// the file's comment header so that nothing measured is lost.
//
//===----------------------------------------------------------------------===//

#include "compiler/tools/strata/Commands.h"
#include "compiler/tools/strata/ToolSupport.h"

#include "compiler/planner/Cluster.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <unistd.h>

using namespace strata;

namespace {

struct CalibrateOptions {
  int ranks = 2;
  std::string output;
  bool quick = false;
  std::string mpirun = "mpirun";
  std::string probe;
  std::string keepJson;
  std::string probeJson; ///< Measurements taken elsewhere (--probe-json).
  bool gpu = false;      ///< Measure this machine's GPU (--gpu).
  int timeoutS = 900;
};

/// One collective's fit, as the probe reports it.
struct CollectiveFit {
  std::string op;
  int64_t ranks = 0;
  double alphaS = 0, busBw = 0, maxRelError = 0;
};

/// What the spec is made of, read from the probe's JSON.
struct Measured {
  std::string host, cpu, mpiLibrary, mode;
  int64_t ranks = 0, onlineCpus = 0;
  double physicalMemory = 0;
  double gemmPeak = 0, gemmDepthHalf = 0, gemmRowsHalf = 0, gemmBest = 0;
  std::vector<std::pair<int64_t, double>> gemmByDepth; ///< (K, FLOP/s)
  double memoryBandwidth = 0;
  /// All ranks streaming 64 MiB tensors at once, summed; 0 if not measured.
  double hostMemoryBandwidth = 0, hostCacheBytes = 0;
  std::vector<std::pair<std::string, double>> memoryKernels;
  double kernelOverheadS = 0;
  std::vector<CollectiveFit> collectives;
};

/// Reads the probe's JSON; on failure says which field is wrong.
bool readProbeJson(llvm::StringRef text, Measured &m, std::string &error) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed) {
    error = "the probe's output is not JSON (" +
            llvm::toString(parsed.takeError()) + ")";
    return false;
  }
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root) {
    error = "the probe's output is not a JSON object";
    return false;
  }
  auto number = [&](const llvm::json::Object *o, llvm::StringRef key,
                    double &out) {
    std::optional<double> v = o ? o->getNumber(key) : std::nullopt;
    if (!v) {
      error = "the probe's output has no number '" + key.str() + "'";
      return false;
    }
    out = *v;
    return true;
  };
  auto text_ = [&](llvm::StringRef key) {
    std::optional<llvm::StringRef> v = root->getString(key);
    return v ? v->str() : std::string("unknown");
  };
  m.host = text_("host");
  m.cpu = text_("cpu");
  m.mpiLibrary = text_("mpi_library");
  m.mode = text_("mode");
  double ranks = 0, cpus = 0;
  const llvm::json::Object *gemm = root->getObject("gemm");
  const llvm::json::Object *memory = root->getObject("memory");
  const llvm::json::Object *overhead = root->getObject("kernel_overhead");
  if (!number(root, "ranks", ranks) || !number(root, "online_cpus", cpus) ||
      !number(root, "physical_memory_bytes", m.physicalMemory) ||
      !number(gemm, "fit_peak_flops_per_s", m.gemmPeak) ||
      !number(gemm, "fit_depth_half", m.gemmDepthHalf) ||
      !number(gemm, "fit_rows_half", m.gemmRowsHalf) ||
      !number(gemm, "best_flops_per_s", m.gemmBest) ||
      !number(memory, "bytes_per_s", m.memoryBandwidth) ||
      !number(overhead, "seconds", m.kernelOverheadS))
    return false;
  m.ranks = int64_t(ranks);
  m.onlineCpus = int64_t(cpus);
  m.hostMemoryBandwidth = memory->getNumber("host_bytes_per_s").value_or(0.0);
  m.hostCacheBytes = memory->getNumber("llc_bytes").value_or(0.0);
  if (const llvm::json::Array *pts = gemm->getArray("points"))
    for (const llvm::json::Value &p : *pts)
      if (const llvm::json::Object *o = p.getAsObject())
        m.gemmByDepth.push_back({o->getInteger("k").value_or(0),
                                 o->getNumber("flops_per_s").value_or(0)});
  if (const llvm::json::Array *ks = memory->getArray("kernels"))
    for (const llvm::json::Value &k : *ks)
      if (const llvm::json::Object *o = k.getAsObject())
        m.memoryKernels.push_back({o->getString("kernel").value_or("?").str(),
                                   o->getNumber("bytes_per_s").value_or(0)});
  const llvm::json::Array *colls = root->getArray("collectives");
  if (!colls) {
    error = "the probe's output has no 'collectives' list";
    return false;
  }
  for (const llvm::json::Value &c : *colls) {
    const llvm::json::Object *o = c.getAsObject();
    CollectiveFit f;
    double n = 0;
    if (!o || !number(o, "ranks", n) || !number(o, "alpha_s", f.alphaS) ||
        !number(o, "busbw_bytes_per_s", f.busBw) ||
        !number(o, "fit_max_rel_error", f.maxRelError))
      return false;
    f.op = o->getString("op").value_or("?").str();
    f.ranks = int64_t(n);
    m.collectives.push_back(f);
  }
  if (m.ranks < 1 || !(m.gemmPeak > 0) || !(m.memoryBandwidth > 0)) {
    error = "the probe measured no usable GEMM rate or memory bandwidth";
    return false;
  }
  return true;
}

std::string utcNow() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// A YAML double-quoted scalar of free text (CPU model names).
std::string quoted(const std::string &s) {
  std::string out = "\"";
  for (char c : s)
    out += (c == '"' || c == '\\' || c < ' ') ? ' ' : c;
  return out + "\"";
}

/// The cluster spec text. The level is fitted from the all-reduce over all
/// ranks, the collective data parallelism runs; see docs/cluster-spec.md.
std::string renderSpec(const Measured &m, const CalibrateOptions &opts,
                       std::string &error) {
  const CollectiveFit *level = nullptr;
  for (const CollectiveFit &f : m.collectives)
    if (f.op == "all_reduce" && f.ranks == m.ranks)
      level = &f;
  if (m.ranks > 1 && (!level || !(level->busBw > 0))) {
    error = "the probe reported no all_reduce fit over all " +
            std::to_string(m.ranks) + " ranks";
    return "";
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "# Measured by `strata calibrate --ranks " << opts.ranks
     << (opts.quick ? " --quick" : "") << "` on " << utcNow() << "\n"
     << "# host " << m.host << ": " << m.cpu << ", " << m.onlineCpus
     << " online CPUs; " << m.mpiLibrary << "\n"
     << "# " << m.ranks << " MPI ranks (mpirun --oversubscribe), one thread "
     << "each, all ranks measuring at once; " << m.mode << " probe.\n"
     << "# How the measurements map onto these fields: docs/cluster-spec.md, "
        "\"Calibration\".\n#\n";
  os << "# fp32 GEMM (oneDNN sgemm, M = N = 1024), per rank:";
  for (auto &[k, r] : m.gemmByDepth)
    os << llvm::format(" K=%lld %.1f", (long long)k, r / 1e9);
  os << " GFLOP/s\n"
     << llvm::format("#   fit R*K/(K+Khalf): R = %.1f GFLOP/s, Khalf = %.0f\n",
                     m.gemmPeak / 1e9, m.gemmDepthHalf);
  os << "# elementwise kernels on 4 MiB tensors (cost-model byte counts):";
  for (auto &[name, bw] : m.memoryKernels)
    os << " " << name << llvm::format(" %.1f", bw / 1e9);
  os << " GB/s; median taken\n"
     << llvm::format("# fixed cost of a tiny kernel call: %.3f us\n",
                     m.kernelOverheadS * 1e6);
  if (!m.collectives.empty()) {
    os << "#\n# collectives, time = alpha + bytes/beta (nccl-tests bus "
          "bandwidth = beta x bus factor):\n"
       << "#   op              ranks  alpha (us)  busbw (GB/s)  fit max err\n";
    for (const CollectiveFit &f : m.collectives)
      os << llvm::format("#   %-15s %5lld  %10.2f  %12.3f  %10.0f%%\n",
                         f.op.c_str(), (long long)f.ranks, f.alphaS * 1e6,
                         f.busBw / 1e9, f.maxRelError * 100);
  }
  os << "name: calibrated-local-" << m.ranks << "\n"
     << "# the ranks split this host's memory: more ranks do not add any\n"
     << llvm::format("host_memory: %.2f GiB\n",
                     m.physicalMemory / double(1u << 30));
  if (m.hostMemoryBandwidth > 0)
    os << "# all ranks streaming from DRAM at once share this bandwidth\n"
       << llvm::format("host_memory_bandwidth: %.3f GB/s\n",
                       m.hostMemoryBandwidth / 1e9)
       << llvm::format("host_cache: %.2f MiB\n",
                       m.hostCacheBytes / double(1u << 20));
  os << "device:\n"
     << "  name: " << quoted(m.cpu + ", 1 thread per rank") << "\n"
     << "  kind: cpu\n"
     << llvm::format("  memory: %.2f GiB\n",
                     m.physicalMemory / double(m.ranks) / (1u << 30))
     << llvm::format("  memory_bandwidth: %.3f GB/s\n", m.memoryBandwidth / 1e9)
     << llvm::format("  peak_flops: {float32: %.3f GFLOP/s}\n",
                     m.gemmPeak / 1e9)
     << "  compute_units: 0\n"
     << llvm::format("  efficiency: {gemm: 1.0, gemm_depth_half: %.0f, "
                     "gemm_rows_half: %.0f, memory: 1.0, kernel_overhead: "
                     "%.4f us}\n",
                     m.gemmDepthHalf, m.gemmRowsHalf, m.kernelOverheadS * 1e6)
     << "topology:\n";
  if (level) {
    double latency = level->alphaS / (2.0 * double(m.ranks - 1));
    os << llvm::format("  - {name: shared-memory, size: %lld, bandwidth: "
                       "%.4f GB/s, latency: %.4f us, efficiency: 1.0}\n",
                       (long long)m.ranks, level->busBw / 1e9, latency * 1e6);
  } else {
    // One rank has no peer to measure; the level is never used then.
    os << "  # one rank: no peer to measure; this level is never used\n"
       << "  - {name: shared-memory, size: 1, bandwidth: 5 GB/s, latency: "
          "1 us}\n";
  }
  return os.str();
}


/// What `strata-calibrate-probe --gpu` measured.
struct GpuMeasured {
  std::string host, device, mode;
  double computeUnits = 0, memoryBytes = 0;
  double gemmPeak = 0, gemmDepthHalf = 0, gemmBest = 0, gemmF32 = 0;
  std::vector<std::pair<int64_t, double>> gemmByDepth;
  double memoryBandwidth = 0, copyBandwidth = 0;
  std::vector<std::pair<std::string, double>> memoryKernels;
  double kernelOverheadS = 0;
  double attentionForward = 0, attentionBackward = 0;
  std::vector<std::string> attentionShapes;
};

bool readGpuProbeJson(const llvm::json::Object &root, GpuMeasured &m,
                      std::string &error) {
  auto number = [&](const llvm::json::Object *o, llvm::StringRef key,
                    double &out) {
    std::optional<double> v = o ? o->getNumber(key) : std::nullopt;
    if (!v || !(*v >= 0)) {
      error = "the GPU probe's output has no number '" + key.str() + "'";
      return false;
    }
    out = *v;
    return true;
  };
  m.host = root.getString("host").value_or("unknown").str();
  m.device = root.getString("device").value_or("GPU").str();
  m.mode = root.getString("mode").value_or("full").str();
  const llvm::json::Object *gemm = root.getObject("gemm");
  const llvm::json::Object *memory = root.getObject("memory");
  const llvm::json::Object *overhead = root.getObject("kernel_overhead");
  const llvm::json::Object *attention = root.getObject("attention");
  if (!number(&root, "compute_units", m.computeUnits) ||
      !number(&root, "memory_bytes", m.memoryBytes) ||
      !number(&root, "gemm_f32_flops_per_s", m.gemmF32) ||
      !number(gemm, "fit_peak_flops_per_s", m.gemmPeak) ||
      !number(gemm, "fit_depth_half", m.gemmDepthHalf) ||
      !number(gemm, "best_flops_per_s", m.gemmBest) ||
      !number(memory, "bytes_per_s", m.memoryBandwidth) ||
      !number(memory, "copy_bytes_per_s", m.copyBandwidth) ||
      !number(overhead, "seconds", m.kernelOverheadS) ||
      !number(attention, "forward_fraction", m.attentionForward) ||
      !number(attention, "backward_fraction", m.attentionBackward))
    return false;
  if (const llvm::json::Array *pts = gemm->getArray("points"))
    for (const llvm::json::Value &p : *pts)
      if (const llvm::json::Object *o = p.getAsObject())
        m.gemmByDepth.push_back({o->getInteger("k").value_or(0),
                                 o->getNumber("flops_per_s").value_or(0)});
  if (const llvm::json::Array *ks = memory->getArray("kernels"))
    for (const llvm::json::Value &k : *ks)
      if (const llvm::json::Object *o = k.getAsObject())
        m.memoryKernels.push_back({o->getString("kernel").value_or("?").str(),
                                   o->getNumber("bytes_per_s").value_or(0)});
  if (const llvm::json::Array *shapes = attention->getArray("shapes"))
    for (const llvm::json::Value &v : *shapes)
      if (const llvm::json::Object *o = v.getAsObject())
        m.attentionShapes.push_back(llvm::formatv(
            "b{0} h{1} s{2} d{3}: {4:F1} / {5:F1} TFLOP/s",
            o->getInteger("batch").value_or(0),
            o->getInteger("heads").value_or(0), o->getInteger("seq").value_or(0),
            o->getInteger("head_dim").value_or(0),
            o->getNumber("forward_flops_per_s").value_or(0) / 1e12,
            o->getNumber("backward_flops_per_s").value_or(0) / 1e12));
  if (!(m.gemmPeak > 0) || !(m.memoryBandwidth > 0) || !(m.computeUnits > 0) ||
      !(m.attentionForward > 0) || !(m.attentionBackward > 0)) {
    error = "the GPU probe measured no usable GEMM, memory or attention rate";
    return false;
  }
  return true;
}

/// One GPU as the cost model sees it: the measured bf16 rate and its depth
/// half as peak and efficiency 1, the runtime kernels' bandwidth, a graph
/// launch's fixed cost and the attention kernels' fractions; collectives
/// are not measured (one GPU): the single level is a placeholder.
std::string renderGpuSpec(const GpuMeasured &m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  std::string name;
  for (char c : m.device)
    name += std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(c))
                                                         : '-';
  os << "# Measured by `strata calibrate --gpu` on " << utcNow() << "\n"
     << "# host " << m.host << ": " << m.device << ", "
     << int64_t(m.computeUnits) << " SMs; " << m.mode << " probe.\n"
     << "# How the measurements map onto these fields: docs/cluster-spec.md, "
        "\"Calibration\".\n#\n"
     << "# bf16 GEMM (cuBLASLt, M = N = 8192):";
  for (auto &[k, r] : m.gemmByDepth)
    os << llvm::format(" K=%lld %.1f", (long long)k, r / 1e12);
  os << " TFLOP/s\n"
     << llvm::format("#   fit R*K/(K+Khalf): R = %.1f TFLOP/s, Khalf = %.0f; "
                     "float32 (no TF32) %.1f TFLOP/s\n",
                     m.gemmPeak / 1e12, m.gemmDepthHalf, m.gemmF32 / 1e12)
     << "# runtime bf16 kernels on 256 MiB tensors (cost-model byte counts):";
  for (auto &[kernel, bw] : m.memoryKernels)
    os << " " << kernel << llvm::format(" %.0f", bw / 1e9);
  os << llvm::format(" GB/s; median taken (device copy %.0f GB/s)\n",
                     m.copyBandwidth / 1e9)
     << llvm::format("# a tiny kernel replayed in a CUDA graph: %.2f us\n",
                     m.kernelOverheadS * 1e6)
     << "# bf16 attention (Strata's FlashAttention, forward / backward):";
  for (const std::string &shape : m.attentionShapes)
    os << " [" << shape << "]";
  os << "\n# one GPU: collectives were not measured; write your machine's "
        "links into the topology\n"
     << "name: calibrated-" << name << "\n"
     << "device:\n"
     << "  name: " << quoted(m.device) << "\n"
     << "  kind: gpu\n"
     << llvm::format("  memory: %.2f GiB\n", m.memoryBytes / double(1u << 30))
     << llvm::format("  memory_bandwidth: %.3f GB/s\n", m.memoryBandwidth / 1e9)
     << llvm::format("  peak_flops: {bfloat16: %.3f TFLOP/s, float16: %.3f "
                     "TFLOP/s, float32: %.3f TFLOP/s}\n",
                     m.gemmPeak / 1e12, m.gemmPeak / 1e12, m.gemmF32 / 1e12)
     << llvm::format("  compute_units: %lld\n", (long long)m.computeUnits)
     << llvm::format("  efficiency: {gemm: 1.0, gemm_depth_half: %.0f, "
                     "memory: 1.0, kernel_overhead: %.4f us, attention: "
                     "%.4f, attention_backward: %.4f}\n",
                     m.gemmDepthHalf, m.kernelOverheadS * 1e6,
                     m.attentionForward, m.attentionBackward)
     << "topology:\n"
     << "  - {name: nvlink, size: 1, bandwidth: 450 GB/s, latency: 3 us}\n";
  return os.str();
}

int fail(const std::string &message) {
  llvm::errs() << "strata calibrate: error: " << message << "\n";
  return 1;
}

int runCalibrate(const CalibrateOptions &opts) {
  // Fail on an unwritable -o before spending a minute measuring.
  llvm::SmallString<256> outDir(opts.output);
  llvm::sys::path::remove_filename(outDir);
  if (outDir.empty())
    outDir = ".";
  llvm::SmallString<256> tmpOut;
  int tmpFd = -1;
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(
          outDir + "/." + llvm::sys::path::filename(opts.output) +
              ".tmp-%%%%%%",
          tmpFd, tmpOut))
    return fail("-o " + opts.output + ": cannot write in '" +
                std::string(outDir) + "' (" + ec.message() +
                "); choose a writable path");
  ::close(tmpFd);
  // Removed on every path; after the rename there is nothing left to remove.
  auto removeTmp =
      llvm::make_scope_exit([&] { llvm::sys::fs::remove(tmpOut); });

  // The measurements: a file measured elsewhere (a GPU machine without
  // this compiler), this machine's GPU, or MPI ranks on this machine.
  std::string jsonText;
  llvm::SmallString<256> jsonPath;
  auto removeJson =
      llvm::make_scope_exit([&] {
        if (!jsonPath.empty())
          llvm::sys::fs::remove(jsonPath);
      });
  if (!opts.probeJson.empty()) {
    llvm::sys::fs::file_status st;
    if (llvm::sys::fs::status(opts.probeJson, st) ||
        st.type() != llvm::sys::fs::file_type::regular_file)
      return fail("--probe-json " + opts.probeJson +
                  ": not a readable regular file");
    if (st.getSize() > (16u << 20))
      return fail("--probe-json " + opts.probeJson +
                  ": larger than 16 MiB; not a probe's output");
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buf =
        llvm::MemoryBuffer::getFile(opts.probeJson);
    if (!buf)
      return fail("--probe-json " + opts.probeJson + ": " +
                  buf.getError().message());
    jsonText = (*buf)->getBuffer().str();
  } else {
    std::string probe = findBesideStrata(opts.probe, "STRATA_CALIBRATE_PROBE",
                                         "strata-calibrate-probe");
    // A bare name is looked up on PATH, as mpirun would.
    if (probe.find('/') == std::string::npos)
      if (llvm::ErrorOr<std::string> onPath =
              llvm::sys::findProgramByName(probe))
        probe = *onPath;
    if (!llvm::sys::fs::can_execute(probe))
      return fail("the calibration probe '" + probe +
                  "' is missing or not executable; build the "
                  "strata-calibrate-probe target or pass --probe PATH");
    if (std::error_code ec = llvm::sys::fs::createTemporaryFile(
            "strata-calibrate", "json", jsonPath))
      return fail("cannot create a temporary file for the probe's output (" +
                  ec.message() + ")");
    std::optional<llvm::StringRef> redirects[] = {
        llvm::StringRef(""), llvm::StringRef(jsonPath), std::nullopt};
    std::string execError;
    bool execFailed = false;
    int rc = 0;
    std::string program;
    if (opts.gpu) {
      program = probe;
      std::vector<llvm::StringRef> args = {probe, "--gpu"};
      if (opts.quick)
        args.push_back("--quick");
      llvm::errs() << "strata calibrate: measuring this machine's GPU with "
                   << probe << " --gpu" << (opts.quick ? " --quick" : "")
                   << " (seconds)\n";
      rc = llvm::sys::ExecuteAndWait(probe, args, std::nullopt, redirects,
                                     opts.timeoutS, 0, &execError,
                                     &execFailed);
    } else {
      llvm::ErrorOr<std::string> mpirun =
          llvm::sys::findProgramByName(opts.mpirun);
      if (!mpirun)
        return fail("'" + opts.mpirun +
                    "' not found on PATH: calibration launches its probe "
                    "with MPI. Install OpenMPI (Debian: apt-get install "
                    "openmpi-bin) or pass --mpirun PATH");
      program = *mpirun;
      std::string np = std::to_string(opts.ranks);
      std::vector<llvm::StringRef> args = {*mpirun, "--oversubscribe", "-np",
                                           np, probe};
      if (opts.quick)
        args.push_back("--quick");
      llvm::errs() << "strata calibrate: measuring with " << *mpirun
                   << " --oversubscribe -np " << np << " " << probe
                   << (opts.quick ? " --quick" : "")
                   << (opts.quick ? " (a few seconds)\n"
                                  : " (about a minute)\n");
      rc = llvm::sys::ExecuteAndWait(*mpirun, args, std::nullopt, redirects,
                                     opts.timeoutS, 0, &execError,
                                     &execFailed);
    }
    if (execFailed)
      return fail("cannot run " + program + ": " + execError);
    if (rc != 0) {
      std::string hint;
      if (rc == -2)
        hint = "; it did not finish within --timeout " +
               std::to_string(opts.timeoutS) + " s";
      else if (!opts.gpu && geteuid() == 0 &&
               !std::getenv("OMPI_ALLOW_RUN_AS_ROOT"))
        hint = "; as root, OpenMPI needs OMPI_ALLOW_RUN_AS_ROOT=1 "
               "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the environment";
      return fail(std::string("the calibration probe failed (") +
                  (opts.gpu ? "exit status " : "mpirun exit status ") +
                  std::to_string(rc) +
                  (execError.empty() ? "" : ": " + execError) + ")" + hint +
                  "; see the messages above");
    }
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buf =
        llvm::MemoryBuffer::getFile(jsonPath);
    if (!buf)
      return fail("cannot read the probe's output " + std::string(jsonPath));
    jsonText = (*buf)->getBuffer().str();
  }
  if (!opts.keepJson.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream keep(opts.keepJson, ec);
    if (!ec) {
      keep << jsonText;
      keep.close();
      ec = keep.error();
      keep.clear_error();
    }
    if (ec)
      return fail("--keep-json " + opts.keepJson + ": " + ec.message());
  }

  std::string error, spec, summary;
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(jsonText);
  const llvm::json::Object *root = parsed ? parsed->getAsObject() : nullptr;
  if (!parsed)
    llvm::consumeError(parsed.takeError());
  if (root && root->getString("kind") == llvm::StringRef("gpu")) {
    GpuMeasured g;
    if (!readGpuProbeJson(*root, g, error))
      return fail((opts.probeJson.empty() ? "" : "--probe-json " +
                                                     opts.probeJson + ": ") +
                  error);
    spec = renderGpuSpec(g);
    summary = llvm::formatv("{0}: bf16 GEMM {1:F1} TFLOP/s, kernels {2:F0} "
                            "GB/s, attention {3:F3} / {4:F3} of peak",
                            g.device, g.gemmPeak / 1e12,
                            g.memoryBandwidth / 1e9, g.attentionForward,
                            g.attentionBackward);
  } else {
    Measured m;
    if (!readProbeJson(jsonText, m, error))
      return fail((opts.probeJson.empty() ? "" : "--probe-json " +
                                                     opts.probeJson + ": ") +
                  error);
    if (opts.probeJson.empty() && m.ranks != opts.ranks)
      return fail("the probe ran on " + std::to_string(m.ranks) +
                  " ranks, not --ranks " + std::to_string(opts.ranks));
    spec = renderSpec(m, opts, error);
    if (spec.empty())
      return fail(error);
    summary = std::to_string(m.ranks) + " rank" + (m.ranks == 1 ? "" : "s");
    summary += llvm::formatv("; fp32 GEMM {0:F1} GFLOP/s per rank, "
                             "elementwise {1:F1} GB/s",
                             m.gemmPeak / 1e9, m.memoryBandwidth / 1e9)
                   .str();
    for (const CollectiveFit &f : m.collectives)
      if (f.op == "all_reduce" && f.ranks == m.ranks)
        summary += llvm::formatv(", all_reduce alpha {0:F1} us busbw "
                                 "{1:F2} GB/s",
                                 f.alphaS * 1e6, f.busBw / 1e9)
                       .str();
  }
  // What we write must be what `strata plan --cluster` accepts.
  std::vector<planner::PlannerDiag> diags;
  if (!planner::loadClusterSpec(opts.output, diags, &spec)) {
    std::string all;
    for (const planner::PlannerDiag &d : diags)
      all += "\n  " + d.str();
    return fail("the measured numbers do not make a valid cluster spec:" + all);
  }
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(tmpOut, ec);
    if (!ec) {
      out << spec;
      out.close();
      ec = out.error();
      out.clear_error();
    }
    if (ec)
      return fail("-o " + opts.output + ": write failed (" + ec.message() +
                  ")");
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmpOut, opts.output))
    return fail("-o " + opts.output + ": cannot replace it (" + ec.message() +
                ")");
  llvm::outs() << "wrote " << opts.output << " (" << summary << ")\n";
  return 0;
}

} // namespace

void strata::addCalibrateSubcommand(CLI::App &app) {
  auto opts = std::make_shared<CalibrateOptions>();
  CLI::App *cmd = app.add_subcommand(
      "calibrate",
      "Measure this machine (GEMM rate, memory bandwidth, MPI collectives; "
      "or its GPU with --gpu) and write a cluster spec for --cluster");
  cmd->add_option("--ranks", opts->ranks,
                  "MPI ranks to measure with (the N of local:N)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("-o,--output", opts->output, "The cluster spec to write")
      ->required();
  cmd->add_flag("--quick", opts->quick,
                "Fewer shapes, sizes and repetitions: seconds, noisier");
  cmd->add_option("--mpirun", opts->mpirun, "The MPI launcher to use")
      ->capture_default_str();
  cmd->add_option("--probe", opts->probe,
                  "The probe program (default: strata-calibrate-probe beside "
                  "strata, or $STRATA_CALIBRATE_PROBE)");
  cmd->add_option("--keep-json", opts->keepJson,
                  "Also keep the probe's raw measurements (JSON) here");
  cmd->add_flag("--gpu", opts->gpu,
                "Measure this machine's GPU (bf16 GEMMs, the runtime's "
                "memory-bound kernels, CUDA-graph launches, attention) "
                "instead of MPI ranks");
  cmd->add_option("--probe-json", opts->probeJson,
                  "Write the spec from measurements taken elsewhere "
                  "(`strata-calibrate-probe --gpu > FILE` on a GPU machine, "
                  "or --keep-json) instead of measuring");
  cmd->add_option("--timeout", opts->timeoutS,
                  "Seconds to wait for the probe before giving up")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  cmd->callback([opts] { throw CLI::RuntimeError(runCalibrate(*opts)); });
}
