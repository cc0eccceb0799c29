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
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>
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

  llvm::ErrorOr<std::string> mpirun = llvm::sys::findProgramByName(opts.mpirun);
  if (!mpirun)
    return fail("'" + opts.mpirun +
                "' not found on PATH: calibration launches its probe with "
                "MPI. Install OpenMPI (Debian: apt-get install openmpi-bin) "
                "or pass --mpirun PATH");
  std::string probe = findBesideStrata(opts.probe, "STRATA_CALIBRATE_PROBE",
                                       "strata-calibrate-probe");
  // A bare name is looked up on PATH, as mpirun would.
  if (probe.find('/') == std::string::npos)
    if (llvm::ErrorOr<std::string> onPath = llvm::sys::findProgramByName(probe))
      probe = *onPath;
  if (!llvm::sys::fs::can_execute(probe))
    return fail("the calibration probe '" + probe +
                "' is missing or not executable; build the "
                "strata-calibrate-probe target or pass --probe PATH");

  llvm::SmallString<256> jsonPath;
  if (std::error_code ec = llvm::sys::fs::createTemporaryFile(
          "strata-calibrate", "json", jsonPath))
    return fail("cannot create a temporary file for the probe's output (" +
                ec.message() + ")");
  auto removeJson =
      llvm::make_scope_exit([&] { llvm::sys::fs::remove(jsonPath); });

  std::string np = std::to_string(opts.ranks);
  std::vector<llvm::StringRef> args = {*mpirun, "--oversubscribe", "-np", np,
                                       probe};
  if (opts.quick)
    args.push_back("--quick");
  llvm::errs() << "strata calibrate: measuring with " << *mpirun
               << " --oversubscribe -np " << np << " " << probe
               << (opts.quick ? " --quick" : "")
               << (opts.quick ? " (a few seconds)\n" : " (about a minute)\n");
  std::optional<llvm::StringRef> redirects[] = {
      llvm::StringRef(""), llvm::StringRef(jsonPath), std::nullopt};
  std::string execError;
  bool execFailed = false;
  int rc = llvm::sys::ExecuteAndWait(*mpirun, args, std::nullopt, redirects,
                                     opts.timeoutS, 0, &execError, &execFailed);
  if (execFailed)
    return fail("cannot run " + *mpirun + ": " + execError);
  if (rc != 0) {
    std::string hint;
    if (rc == -2)
      hint = "; it did not finish within --timeout " +
             std::to_string(opts.timeoutS) + " s";
    else if (geteuid() == 0 && !std::getenv("OMPI_ALLOW_RUN_AS_ROOT"))
      hint = "; as root, OpenMPI needs OMPI_ALLOW_RUN_AS_ROOT=1 "
             "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the environment";
    return fail("the calibration probe failed (mpirun exit status " +
                std::to_string(rc) +
                (execError.empty() ? "" : ": " + execError) + ")" + hint +
                "; see the messages above");
  }

  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buf =
      llvm::MemoryBuffer::getFile(jsonPath);
  if (!buf)
    return fail("cannot read the probe's output " + std::string(jsonPath));
  Measured m;
  std::string error;
  if (!readProbeJson((*buf)->getBuffer(), m, error))
    return fail(error);
  if (m.ranks != opts.ranks)
    return fail("the probe ran on " + std::to_string(m.ranks) +
                " ranks, not --ranks " + np);
  if (!opts.keepJson.empty()) {
    if (std::error_code ec = llvm::sys::fs::copy_file(jsonPath, opts.keepJson))
      return fail("--keep-json " + opts.keepJson + ": " + ec.message());
  }
  std::string spec = renderSpec(m, opts, error);
  if (spec.empty())
    return fail(error);
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
  llvm::outs() << "wrote " << opts.output << " (" << m.ranks << " rank"
               << (m.ranks == 1 ? "" : "s")
               << llvm::format(
                      "; fp32 GEMM %.1f GFLOP/s per rank, elementwise %.1f "
                      "GB/s",
                      m.gemmPeak / 1e9, m.memoryBandwidth / 1e9);
  for (const CollectiveFit &f : m.collectives)
    if (f.op == "all_reduce" && f.ranks == m.ranks)
      llvm::outs() << llvm::format(", all_reduce alpha %.1f us busbw %.2f GB/s",
                                   f.alphaS * 1e6, f.busBw / 1e9);
  llvm::outs() << ")\n";
  return 0;
}

} // namespace

void strata::addCalibrateSubcommand(CLI::App &app) {
  auto opts = std::make_shared<CalibrateOptions>();
  CLI::App *cmd = app.add_subcommand(
      "calibrate",
      "Measure this machine (GEMM rate, memory bandwidth, MPI collectives) "
      "and write a cluster spec for --cluster");
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
  cmd->add_option("--timeout", opts->timeoutS,
                  "Seconds to wait for the probe before giving up")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  cmd->callback([opts] { throw CLI::RuntimeError(runCalibrate(*opts)); });
}
