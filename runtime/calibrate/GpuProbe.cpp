//===- GpuProbe.cpp - strata-calibrate-probe --gpu ------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Measures this process's GPU with the CUDA runtime's own code, so the
// numbers are what a compiled program gets:
//
// - bf16 GEMM rate (cuBLASLt plans as the device binds them, bf16 in and
//   out, float32 accumulation), M = N = 8192 over a range of K, fitted as
//   R·K/(K + Khalf) (ProbeFit);
// - effective memory bandwidth of the runtime's bf16 elementwise and norm
//   kernels on 256 MiB tensors, counting the bytes the cost model counts,
//   and a device-to-device copy for reference;
// - the fixed cost of a tiny kernel replayed from a CUDA graph (how
//   compiled steps launch their kernels);
// - the bf16 FlashAttention kernels, forward and backward, at two training
//   shapes, as fractions of R (FLOPs counted as the cost model counts them:
//   2 and 5 GEMMs, half of them under a causal mask).
//
// Each point is the fastest of several repetitions timed with CUDA events.
//
//===----------------------------------------------------------------------===//

#include "runtime/calibrate/GpuProbe.h"

#include "runtime/calibrate/ProbeFit.h"
#include "runtime/cuda/CudaDevice.h"
#include "runtime/cuda/CudaKernels.h"
#include "runtime/cuda/CudaLibraries.h"
#include "runtime/cuda/CudaMatmul.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

namespace strata::rt::calibrate {

namespace {

using json = nlohmann::json;
namespace cu = strata::rt::cuda;

struct DeviceBuffer {
  void *ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    cu::check(cudaMalloc(&ptr, std::max<size_t>(bytes, 256)), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(ptr); }
};

/// Fastest of `repeats` timings (seconds) of `body`, after one warm-up.
double timeIt(int repeats, cudaStream_t s, const std::function<void()> &body) {
  cudaEvent_t start, stop;
  cu::check(cudaEventCreate(&start), "event");
  cu::check(cudaEventCreate(&stop), "event");
  body();
  cu::check(cudaStreamSynchronize(s), "warm-up");
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    cu::check(cudaEventRecord(start, s), "event");
    body();
    cu::check(cudaEventRecord(stop, s), "event");
    cu::check(cudaEventSynchronize(stop), "timed run");
    float ms = 0;
    cu::check(cudaEventElapsedTime(&ms, start, stop), "event");
    best = std::min(best, double(ms) * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cu::check(cudaGetLastError(), "a probe kernel");
  return best;
}

/// Random bf16 data (so the tensor cores do not see zeros).
void fillRandom(void *p, size_t elements, cudaStream_t s) {
  std::vector<float> host(std::min<size_t>(elements, 1 << 20));
  uint32_t x = 12345;
  for (float &v : host) {
    x = x * 1664525u + 1013904223u;
    v = float(int32_t(x >> 9) % 2048) / 1024.0f - 1.0f;
  }
  DeviceBuffer f(host.size() * 4);
  cu::check(cudaMemcpy(f.ptr, host.data(), host.size() * 4,
                       cudaMemcpyHostToDevice),
            "upload");
  for (size_t done = 0; done < elements; done += host.size())
    cu::convert(f.ptr, cu::Elem::F32,
                static_cast<uint16_t *>(p) + done, cu::Elem::BF16,
                int64_t(std::min(host.size(), elements - done)), s);
}

} // namespace

json probeGpu(bool quick) {
  json out;
  int gpu = cu::selectGpu();
  cudaStream_t s = cu::streams().compute;
  cudaDeviceProp prop{};
  cu::check(cudaGetDeviceProperties(&prop, gpu), "cudaGetDeviceProperties");
  out["device"] = prop.name;
  out["compute_units"] = prop.multiProcessorCount;
  out["memory_bytes"] = double(prop.totalGlobalMem);
  int repeats = quick ? 3 : 7;

  // bf16 GEMMs, M = N = 8192, over K.
  cu::CublasLtContext lt;
  {
    const cu::CublasLtApi &api = cu::cublasLt();
    if (api.create(&lt.handle) != CUBLAS_STATUS_SUCCESS)
      cu::check(cudaErrorUnknown, "cublasLtCreate");
    lt.workspaceBytes = 32u << 20;
    cu::check(cudaMalloc(&lt.workspace, lt.workspaceBytes), "workspace");
  }
  const int64_t mn = 8192;
  std::vector<int64_t> depths =
      quick ? std::vector<int64_t>{256, 1024, 4096}
            : std::vector<int64_t>{128, 256, 512, 768, 1024, 2048, 4096, 8192};
  int64_t kMax = depths.back();
  DeviceBuffer a(size_t(mn * kMax) * 2), b(size_t(kMax * mn) * 2),
      c(size_t(mn * mn) * 2);
  fillRandom(a.ptr, size_t(mn * kMax), s);
  fillRandom(b.ptr, size_t(kMax * mn), s);
  std::vector<DepthRate> points;
  json gemm = json::array();
  for (int64_t k : depths) {
    cu::GemmShape shape;
    shape.m = shape.n = mn;
    shape.k = k;
    cu::GemmTypes types{CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF};
    cu::MatmulPlan plan(lt, shape, a.ptr, b.ptr, c.ptr, types);
    double t = timeIt(repeats, s,
                      [&] { plan.run(a.ptr, b.ptr, c.ptr, 1.0f, 0.0f, s); });
    double rate = 2.0 * double(mn) * double(mn) * double(k) / t;
    points.push_back({double(k), rate});
    gemm.push_back({{"k", k}, {"flops_per_s", rate}});
  }
  DepthFit fit = fitGemmDepth(points);
  double best = 0;
  for (const DepthRate &p : points)
    best = std::max(best, p.flopsPerS);
  // One float32 GEMM (no TF32: what float32 programs run).
  double f32Rate = 0;
  {
    const int64_t k = 4096;
    DeviceBuffer fa(size_t(mn * k) * 4), fb(size_t(k * mn) * 4),
        fc(size_t(mn * mn) * 4);
    cu::check(cudaMemsetAsync(fa.ptr, 0x3c, size_t(mn * k) * 4, s), "fill");
    cu::check(cudaMemsetAsync(fb.ptr, 0x3c, size_t(mn * k) * 4, s), "fill");
    cu::GemmShape shape;
    shape.m = shape.n = mn;
    shape.k = k;
    cu::MatmulPlan plan(lt, shape, fa.ptr, fb.ptr, fc.ptr);
    double t = timeIt(repeats, s,
                      [&] { plan.run(fa.ptr, fb.ptr, fc.ptr, 1.0f, 0.0f, s); });
    f32Rate = 2.0 * double(mn) * double(mn) * double(k) / t;
  }
  out["gemm_f32_flops_per_s"] = f32Rate;
  out["gemm"] = {{"dtype", "bfloat16"},
                 {"m", mn},
                 {"n", mn},
                 {"points", gemm},
                 {"fit_peak_flops_per_s", fit.peakFlopsPerS},
                 {"fit_depth_half", fit.depthHalf},
                 {"best_flops_per_s", best}};

  // Memory: the runtime's bf16 kernels on 256 MiB tensors; bytes as the
  // cost model counts them (every operand read or written once).
  const int64_t n = 128ll << 20; // elements (bf16: 256 MiB)
  DeviceBuffer x(size_t(n) * 2), y(size_t(n) * 2), z(size_t(n) * 2);
  fillRandom(x.ptr, size_t(n), s);
  fillRandom(y.ptr, size_t(n), s);
  json kernels = json::array();
  std::vector<double> rates;
  auto memoryKernel = [&](const char *name, double bytes,
                          const std::function<void()> &body) {
    double t = timeIt(repeats, s, body);
    rates.push_back(bytes / t);
    kernels.push_back({{"kernel", name}, {"bytes_per_s", bytes / t}});
  };
  memoryKernel("add", 3.0 * 2 * n, [&] {
    cu::add(x.ptr, y.ptr, z.ptr, cu::Elem::BF16, n, s);
  });
  memoryKernel("gelu", 2.0 * 2 * n,
               [&] { cu::geluFwd(x.ptr, z.ptr, cu::Elem::BF16, n, s); });
  {
    const int64_t width = 1024, rows = n / width;
    DeviceBuffer gamma(width * 2), beta(width * 2), stats(size_t(rows) * 8);
    fillRandom(gamma.ptr, width, s);
    fillRandom(beta.ptr, width, s);
    float *mean = static_cast<float *>(stats.ptr), *rstd = mean + rows;
    memoryKernel("layernorm", 2.0 * 2 * n, [&] {
      cu::layerNormFwd(x.ptr, gamma.ptr, beta.ptr, z.ptr, cu::Elem::BF16, mean,
                       rstd, rows, width, 1e-5f, s);
    });
  }
  double copy = timeIt(repeats, s, [&] {
    cu::check(cudaMemcpyAsync(z.ptr, x.ptr, size_t(n) * 2,
                              cudaMemcpyDeviceToDevice, s),
              "copy");
  });
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  out["memory"] = {{"kernels", kernels},
                   {"bytes_per_s", sorted[sorted.size() / 2]},
                   {"copy_bytes_per_s", 2.0 * 2 * double(n) / copy}};

  // A tiny kernel's fixed cost when replayed from a CUDA graph.
  {
    const int launches = 400;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cu::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
              "capture");
    for (int i = 0; i < launches; ++i)
      cu::fill(z.ptr, cu::Elem::BF16, 64, 0.0f, s);
    cu::check(cudaStreamEndCapture(s, &graph), "capture");
    cu::check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    double t = timeIt(repeats, s, [&] {
      cu::check(cudaGraphLaunch(exec, s), "graph launch");
    });
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    out["kernel_overhead"] = {{"seconds", t / launches},
                              {"how", "tiny kernels replayed in a CUDA graph"}};
  }

  // The bf16 FlashAttention kernels at two training shapes.
  json attention = json::array();
  double fwdSum = 0, bwdSum = 0;
  struct Shape {
    int64_t batch, heads, seq, dim;
  };
  for (Shape sh : {Shape{8, 12, 1024, 64}, Shape{2, 16, 4096, 128}}) {
    int64_t elems = sh.batch * sh.heads * sh.seq * sh.dim;
    int64_t rows = sh.batch * sh.heads * sh.seq;
    DeviceBuffer q(size_t(elems) * 2), kk(size_t(elems) * 2),
        v(size_t(elems) * 2), o(size_t(elems) * 2), dout(size_t(elems) * 2),
        dq(size_t(elems) * 2), dk(size_t(elems) * 2), dv(size_t(elems) * 2),
        lse(size_t(rows) * 4),
        scratch(cu::flashAttentionScratchBytes(sh.batch, sh.heads, sh.seq));
    for (void *p : {q.ptr, kk.ptr, v.ptr, dout.ptr})
      fillRandom(p, size_t(elems), s);
    auto u16 = [](void *p) { return static_cast<uint16_t *>(p); };
    float scale = 1.0f / std::sqrt(float(sh.dim));
    double tf = timeIt(repeats, s, [&] {
      cu::flashAttentionFwd(u16(q.ptr), u16(kk.ptr), u16(v.ptr), u16(o.ptr),
                            static_cast<float *>(lse.ptr), sh.batch, sh.heads,
                            sh.heads, sh.seq, sh.dim, scale, s);
    });
    double tb = timeIt(repeats, s, [&] {
      cu::flashAttentionBwd(u16(dout.ptr), u16(q.ptr), u16(kk.ptr), u16(v.ptr),
                            u16(o.ptr), static_cast<float *>(lse.ptr),
                            u16(dq.ptr), u16(dk.ptr), u16(dv.ptr),
                            static_cast<float *>(scratch.ptr), sh.batch,
                            sh.heads, sh.heads, sh.seq, sh.dim, scale, s);
    });
    // The cost model's count: 2 (forward) and 5 (backward) GEMMs of
    // 2·s·s·d per head, half under the causal mask.
    double unit = 2.0 * double(sh.seq) * double(sh.seq) * double(sh.dim) *
                  double(sh.batch * sh.heads) * 0.5;
    double fwdRate = 2 * unit / tf, bwdRate = 5 * unit / tb;
    fwdSum += fwdRate / fit.peakFlopsPerS;
    bwdSum += bwdRate / fit.peakFlopsPerS;
    attention.push_back({{"batch", sh.batch},
                         {"heads", sh.heads},
                         {"seq", sh.seq},
                         {"head_dim", sh.dim},
                         {"forward_flops_per_s", fwdRate},
                         {"backward_flops_per_s", bwdRate}});
  }
  out["attention"] = {{"kernel", "strata-flash-bf16"},
                      {"shapes", attention},
                      {"forward_fraction", fwdSum / 2},
                      {"backward_fraction", bwdSum / 2}};
  cudaFree(lt.workspace);
  cu::cublasLt().destroy(lt.handle);
  return out;
}

} // namespace strata::rt::calibrate
