//===- CalibrateProbe.cpp - strata-calibrate-probe ------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// `mpirun -np N strata-calibrate-probe [--quick]` measures what the cost model
// needs to know about this machine (docs/cluster-spec.md, "Calibration") and
// rank 0 prints it as one JSON object on stdout:
//
// - fp32 GEMM rate per rank: the runtime's oneDNN sgemm, one thread, on every
//   rank at once (that is how training runs, so shared caches, memory and
//   oversubscribed cores are in the number), M = N = 1024 over a range of K,
//   fitted as R·K/(K + Khalf);
// - effective memory bandwidth of the runtime's elementwise kernels (add,
//   GeLU, layer norm, softmax) on 4 MiB tensors, counting the bytes the cost
//   model counts for them, and the fixed cost of a tiny kernel call;
// - all_reduce, reduce_scatter, all_gather and a ring of send/recv over
//   ranks 0..n−1 for every n in 2..N, through the runtime's MPI
//   communicators, timed the nccl-tests way (slowest rank, bus bandwidth)
//   and fitted as alpha + bytes/beta.
//
// Every point is the fastest of several repetitions (see `fastest`); kernels
// are timed in thread CPU time, collectives in wall time (their waiting is
// part of their cost).
// The probe uses the runtime's kernels and communicators rather than raw
// BLAS/MPI calls so that it measures exactly the code a compiled program runs.
//
//===----------------------------------------------------------------------===//

#include "runtime/calibrate/GpuProbe.h"
#include "runtime/calibrate/ProbeFit.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Threads.h"
#include "runtime/mpi/MpiBackend.h"

#include <CLI/CLI.hpp>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <time.h>
#include <unistd.h>
#include <vector>

using namespace strata::rt;
using namespace strata::rt::calibrate;
using json = nlohmann::json;

namespace {

struct ProbeOptions {
  bool quick = false;
  int64_t maxBytes = 0; ///< largest collective buffer; 0 = mode default
  int repeats = 0;      ///< timed repetitions per point; 0 = mode default
  double targetS = 0;   ///< wall time one repetition aims for
};

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Contention from other processes on a shared machine only ever adds time,
/// so the fastest repetition is the closest to what the machine can do; a
/// median would make the spec depend on how busy the machine was.
double fastest(const std::vector<double> &v) {
  return *std::min_element(v.begin(), v.end());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// CPU time of the calling thread. Kernels run on it alone (one OpenMP
/// thread), so this is their time while scheduled: the device's rate, not
/// the share of a core that other processes left it while it was measured.
double threadCpuNow() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// Seconds per call of `fn` on this rank (thread CPU time): the fastest of
/// `repeats` means over enough calls to fill `targetS`.
double timeLocal(const std::function<void()> &fn, const ProbeOptions &o) {
  double t0 = threadCpuNow();
  fn(); // warm-up: page faults, oneDNN JIT
  double one = std::max(threadCpuNow() - t0, 1e-9);
  int64_t iters = std::clamp<int64_t>(int64_t(o.targetS / one), 1, 1000000);
  std::vector<double> samples;
  for (int r = 0; r < o.repeats; ++r) {
    t0 = threadCpuNow();
    for (int64_t i = 0; i < iters; ++i)
      fn();
    samples.push_back((threadCpuNow() - t0) / double(iters));
  }
  return fastest(samples);
}

/// Seconds per collective `fn` over group `g`: the slowest member's mean
/// over an iteration count the group agrees on, fastest of the repeats.
double timeCollective(Communicator &g, const std::function<void()> &fn,
                      const ProbeOptions &o) {
  g.barrier();
  double t0 = now();
  fn();
  double one = std::max(now() - t0, 1e-9);
  g.allReduce(&one, 1, DType::F64, ReduceOp::Max);
  int64_t iters = std::clamp<int64_t>(int64_t(o.targetS / one), 1, 100000);
  std::vector<double> samples;
  for (int r = 0; r < o.repeats; ++r) {
    g.barrier();
    t0 = now();
    for (int64_t i = 0; i < iters; ++i)
      fn();
    double dt = (now() - t0) / double(iters);
    g.allReduce(&dt, 1, DType::F64, ReduceOp::Max);
    samples.push_back(dt);
  }
  return fastest(samples);
}

/// Mean over world ranks of a per-rank number (every rank calls it).
double meanOverRanks(CommBackend &b, double v) {
  b.world().allReduce(&v, 1, DType::F64, ReduceOp::Sum);
  return v / b.worldSize();
}

std::vector<float> filled(size_t n, float seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = seed + 0.001f * float(i % 997) - 0.5f;
  return v;
}

json measureGemm(CommBackend &b, const ProbeOptions &o) {
  const int64_t mn = 1024;
  std::vector<int64_t> depths =
      o.quick ? std::vector<int64_t>{128, 512, 2048}
              : std::vector<int64_t>{64, 128, 256, 512, 1024, 2048};
  std::vector<float> a = filled(mn * 2048, 0.1f), w = filled(2048 * mn, 0.2f),
                     c(mn * mn);
  json points = json::array();
  std::vector<DepthRate> rates;
  for (int64_t k : depths) {
    cpu::MatmulShape s;
    s.m = mn, s.n = mn, s.k = k;
    b.world().barrier(); // every rank multiplies at once
    double t = timeLocal(
        [&] { cpu::matmul(a.data(), w.data(), c.data(), s, 1.0f, 0.0f); }, o);
    double flops = 2.0 * mn * mn * k;
    double rate = meanOverRanks(b, flops / t);
    rates.push_back({double(k), rate});
    points.push_back({{"m", mn}, {"n", mn}, {"k", k}, {"flops_per_s", rate}});
  }
  DepthFit fit = fitGemmDepth(rates);
  // Narrow GEMMs: few rows against a wide, deep weight, as training's
  // per-micro-batch GEMMs are on a CPU rank.
  std::vector<int64_t> rows =
      o.quick ? std::vector<int64_t>{32, 128, 512}
              : std::vector<int64_t>{16, 32, 64, 128, 256, 512, 1024};
  std::vector<DepthRate> rowRates;
  json rowPoints = json::array();
  for (int64_t m : rows) {
    cpu::MatmulShape s;
    s.m = m, s.n = mn, s.k = 1024;
    b.world().barrier();
    double t = timeLocal(
        [&] { cpu::matmul(a.data(), w.data(), c.data(), s, 1.0f, 0.0f); }, o);
    double rate = meanOverRanks(b, 2.0 * m * mn * 1024 / t);
    rowRates.push_back({double(m), rate});
    rowPoints.push_back(
        {{"m", m}, {"n", mn}, {"k", 1024}, {"flops_per_s", rate}});
  }
  DepthFit rowFit = fitGemmDepth(rowRates);
  double best = 0;
  for (const DepthRate &r : rates)
    best = std::max(best, r.flopsPerS);
  return {{"library", "oneDNN sgemm (runtime/cpu/Matmul.cpp)"},
          {"points", points},
          {"best_flops_per_s", best},
          {"fit_peak_flops_per_s", fit.peakFlopsPerS},
          {"fit_depth_half", fit.depthHalf},
          {"rows_points", rowPoints},
          {"fit_rows_half", rowFit.depthHalf}};
}

json measureMemory(CommBackend &b, const ProbeOptions &o) {
  const int64_t n = 1 << 20, row = 256; // 4 MiB fp32 tensors
  std::vector<float> x = filled(n, 0.3f), y = filled(n, 0.7f), out(n);
  std::vector<float> gamma(row, 1.0f), beta(row, 0.0f), mean(n / row),
      rstd(n / row);
  // Bytes per element as docs/cost-model.md counts them (e = 4).
  struct Kernel {
    const char *name;
    double bytesPerElement;
    std::function<void()> fn;
  };
  std::vector<Kernel> kernels = {
      {"add", 12, [&] { cpu::add(x.data(), y.data(), out.data(), n); }},
      {"gelu_fwd", 8, [&] { cpu::geluFwd(x.data(), out.data(), n); }},
      {"layer_norm_fwd", 8,
       [&] {
         cpu::layerNormFwd(x.data(), gamma.data(), beta.data(), out.data(),
                           mean.data(), rstd.data(), n / row, row, 1e-5f);
       }},
      {"softmax_fwd", 8,
       [&] {
         cpu::softmaxFwd(x.data(), out.data(), n / row, row, false, 1.0f);
       }},
  };
  json list = json::array();
  std::vector<double> rates;
  for (const Kernel &k : kernels) {
    b.world().barrier();
    double t = timeLocal(k.fn, o);
    double rate = meanOverRanks(b, k.bytesPerElement * n / t);
    rates.push_back(rate);
    list.push_back({{"kernel", k.name},
                    {"bytes", k.bytesPerElement * n},
                    {"bytes_per_s", rate}});
  }
  // Streaming from DRAM: 64 MiB tensors, far beyond a rank's share of the
  // last-level cache, every rank at once (the ranks share the host's
  // memory bandwidth, as when they train).
  const int64_t big = 16 << 20;
  std::vector<float> bx = filled(big, 0.3f), by = filled(big, 0.7f), bo(big);
  b.world().barrier();
  double t =
      timeLocal([&] { cpu::add(bx.data(), by.data(), bo.data(), big); }, o);
  double perRank = meanOverRanks(b, 12.0 * double(big) / t);
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return {{"tensor_bytes", n * 4},
          {"kernels", list},
          {"bytes_per_s", median(rates)},
          {"stream_tensor_bytes", big * 4},
          {"stream_bytes_per_s_per_rank", perRank},
          {"host_bytes_per_s", perRank * double(b.worldSize())},
          {"llc_bytes", llc > 0 ? double(llc) : 0.0}};
}

/// The fixed cost of a kernel call that moves next to nothing.
json measureOverhead(CommBackend &b, const ProbeOptions &o) {
  std::vector<float> x = filled(64, 0.1f), y = filled(64, 0.2f), out(64);
  std::vector<float> gamma(16, 1.0f), beta(16, 0.0f), stat(4);
  cpu::MatmulShape s;
  s.m = s.n = s.k = 8;
  std::vector<std::pair<const char *, std::function<void()>>> kernels = {
      {"matmul_8x8x8",
       [&] { cpu::matmul(x.data(), y.data(), out.data(), s, 1.0f, 0.0f); }},
      {"add_16", [&] { cpu::add(x.data(), y.data(), out.data(), 16); }},
      {"gelu_fwd_16", [&] { cpu::geluFwd(x.data(), out.data(), 16); }},
      {"layer_norm_fwd_16",
       [&] {
         cpu::layerNormFwd(x.data(), gamma.data(), beta.data(), out.data(),
                           stat.data(), stat.data() + 1, 1, 16, 1e-5f);
       }},
      {"softmax_fwd_16",
       [&] { cpu::softmaxFwd(x.data(), out.data(), 1, 16, false, 1.0f); }},
  };
  ProbeOptions shortRuns = o;
  shortRuns.targetS = std::min(o.targetS, 0.02);
  json list = json::array();
  std::vector<double> times;
  for (auto &[name, fn] : kernels) {
    b.world().barrier();
    double t = meanOverRanks(b, timeLocal(fn, shortRuns));
    times.push_back(t);
    list.push_back({{"kernel", name}, {"seconds", t}});
  }
  return {{"kernels", list}, {"seconds", median(times)}};
}

/// Message sizes: 8 B up to maxBytes, ×4 apart (×16 with --quick).
std::vector<int64_t> messageSizes(const ProbeOptions &o) {
  std::vector<int64_t> sizes;
  for (int64_t s = 8; s <= o.maxBytes; s *= o.quick ? 16 : 4)
    sizes.push_back(s);
  return sizes;
}

/// One collective over ranks 0..n−1 at every size; members only.
json measureCollective(Communicator &g, const char *op, const ProbeOptions &o) {
  int n = g.size(), me = g.rank();
  int prev = (me + n - 1) % n, next = (me + 1) % n;
  std::vector<float> in = filled(o.maxBytes / 4 + n, 0.4f),
                     out(o.maxBytes / 4 + n);
  json points = json::array();
  std::vector<TimedSize> timed;
  std::string name = op;
  for (int64_t size : messageSizes(o)) {
    int64_t elems = std::max<int64_t>(size / 4, 1);
    // Reduce-scatter and all-gather split the buffer into n equal parts;
    // `bytes` is the whole buffer (nccl-tests' "size").
    int64_t part = std::max<int64_t>(elems / n, 1);
    double bytes =
        4.0 * double(name == "reduce_scatter" || name == "all_gather" ? part * n
                                                                      : elems);
    std::function<void()> fn;
    if (name == "all_reduce")
      fn = [&] { g.allReduce(in.data(), elems, DType::F32, ReduceOp::Sum); };
    else if (name == "reduce_scatter")
      fn = [&] { g.reduceScatter(in.data(), out.data(), part, DType::F32); };
    else if (name == "all_gather")
      fn = [&] { g.allGather(in.data(), out.data(), part, DType::F32); };
    else
      fn = [&] {
        auto r = g.startRecv(out.data(), elems, DType::F32, prev, 7);
        auto s = g.startSend(in.data(), elems, DType::F32, next, 7);
        s->wait();
        r->wait();
      };
    double t = timeCollective(g, fn, o);
    timed.push_back({bytes, t});
    double algbw = bytes / t;
    points.push_back(
        {{"bytes", bytes},
         {"seconds", t},
         {"algbw_bytes_per_s", algbw},
         {"busbw_bytes_per_s", algbw * busBandwidthFactor(op, n)}});
  }
  AlphaBeta fit = fitAlphaBeta(timed);
  return {{"op", op},
          {"ranks", n},
          {"points", points},
          {"alpha_s", fit.alphaS},
          {"beta_bytes_per_s", fit.betaBytesPerS},
          {"busbw_bytes_per_s", fit.betaBytesPerS * busBandwidthFactor(op, n)},
          {"fit_max_rel_error", fit.maxRelError}};
}

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string m = line.substr(colon + 1);
        m.erase(0, m.find_first_not_of(" \t"));
        return m;
      }
    }
  return "unknown CPU";
}

int runProbe(const ProbeOptions &o) {
  std::unique_ptr<CommBackend> backend = mpi::createMpiBackend();
  CommBackend &b = *backend;
  cpu::setNumThreads(1);
  int world = b.worldSize();

  json result;
  result["probe"] = "strata-calibrate-probe";
  result["format_version"] = 1;
  result["mode"] = o.quick ? "quick" : "full";
  result["ranks"] = world;
  result["threads_per_rank"] = 1;
  result["gemm"] = measureGemm(b, o);
  result["memory"] = measureMemory(b, o);
  result["kernel_overhead"] = measureOverhead(b, o);

  json collectives = json::array();
  for (int n = 2; n <= world; ++n) {
    ProcessGroup group;
    group.name = "calibrate" + std::to_string(n);
    for (int r = 0; r < n; ++r)
      group.ranks.push_back(uint32_t(r));
    std::unique_ptr<Communicator> g = b.createGroup(group);
    if (g)
      for (const char *op :
           {"all_reduce", "reduce_scatter", "all_gather", "send_recv"})
        collectives.push_back(measureCollective(*g, op, o));
    b.world().barrier();
  }
  result["collectives"] = collectives;

  if (b.worldRank() == 0) {
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    char mpiVersion[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    MPI_Get_library_version(mpiVersion, &len);
    std::string mpiName(mpiVersion, size_t(len));
    mpiName = mpiName.substr(0, mpiName.find_first_of(",\n"));
    long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
    result["host"] = host;
    result["cpu"] = cpuModel();
    result["online_cpus"] = sysconf(_SC_NPROCESSORS_ONLN);
    result["mpi_library"] = mpiName;
    result["physical_memory_bytes"] =
        pages > 0 && pageSize > 0 ? double(pages) * double(pageSize) : 0.0;
    std::cout << result.dump(1) << std::endl;
  }
  mpi::finalizeMpi();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"Measures this machine's GEMM, memory and MPI collective rates "
               "for `strata calibrate`; rank 0 prints JSON.\n"
               "Run it as: mpirun -np N strata-calibrate-probe [--quick]",
               "strata-calibrate-probe"};
  ProbeOptions o;
  bool gpu = false;
  app.add_flag("--gpu", gpu,
               "Measure this process's GPU instead (bf16 GEMMs, memory-bound "
               "kernels, graph launches, attention); no MPI, one process");
  app.add_flag("--quick", o.quick,
               "Fewer shapes, sizes (up to 8 MiB) and repetitions: seconds "
               "instead of a minute");
  app.add_option("--max-bytes", o.maxBytes,
                 "Largest collective buffer in bytes (default 32 MiB, 8 MiB "
                 "with --quick)")
      ->check(CLI::Range(int64_t(64), int64_t(1) << 30));
  app.add_option("--repeats", o.repeats,
                 "Timed repetitions per point, fastest taken (default 9, 5 "
                 "with --quick)")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  if (gpu) {
    try {
      json result = probeGpu(o.quick);
      result["kind"] = "gpu";
      result["mode"] = o.quick ? "quick" : "full";
      char host[256] = {0};
      gethostname(host, sizeof(host) - 1);
      result["host"] = host;
      std::cout << result.dump(1) << "\n";
      return 0;
    } catch (const std::exception &e) {
      std::cerr << "strata-calibrate-probe: error: " << e.what() << "\n";
      return 1;
    }
  }
  if (!mpi::launchedByMpiLauncher()) {
    std::cerr << "strata-calibrate-probe: error: start it with mpirun, e.g. "
                 "mpirun --oversubscribe -np 2 strata-calibrate-probe "
                 "(or run `strata calibrate --ranks 2 -o cluster.yaml`)\n";
    return 1;
  }
  if (o.maxBytes == 0)
    o.maxBytes = o.quick ? (8 << 20) : (32 << 20);
  if (o.repeats == 0)
    o.repeats = o.quick ? 5 : 9;
  o.targetS = o.quick ? 0.005 : 0.05;
  return runProbe(o);
}
