//===- CudaDevice.cpp - The CUDA backend ----------------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The kernel table mirrors runtime/cpu/CpuKernelTable.cpp entry for entry:
// operands and attributes are unpacked in OpSchema.cpp's order and handed to
// CudaKernels.h's launchers. Collectives and load_batch are host work:
// with a communicator that accepts device memory (NCCL) the pointers go
// straight through; otherwise (MPI) the buffers are staged through host
// memory, so that multi-rank plans also run with several ranks on one GPU.
// CudaDevice.h says how instructions are bound, fused, grouped and graphed.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaDevice.h"

#include "runtime/core/HostStaging.h"
#include "runtime/cuda/CudaBindPlan.h"
#include "runtime/cuda/CudaKernels.h"
#include "runtime/format/OpSchema.h"
#include "runtime/kernels/OptimizerMath.h"
#include "runtime/support/Error.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

namespace strata::rt {

std::unique_ptr<Device> createCudaDevice(const TargetDesc &target) {
  const std::string &why = cuda::cudaProbe();
  if (!why.empty())
    fail("cannot run a CUDA program: ", why);
  return std::make_unique<cuda::CudaDevice>(target);
}

namespace cuda {

namespace {

int envInt(std::initializer_list<const char *> names, int fallback) {
  for (const char *name : names)
    if (const char *value = std::getenv(name))
      if (*value)
        return std::atoi(value);
  return fallback;
}

/// A 0/1 switch from the environment; anything else is an error naming it.
bool envSwitch(const char *name, bool fallback) {
  const char *value = std::getenv(name);
  if (!value || !*value)
    return fallback;
  if (std::strcmp(value, "0") == 0)
    return false;
  if (std::strcmp(value, "1") == 0)
    return true;
  fail(name, "=", value, ": expected 0 or 1");
}

} // namespace

int localRanks() {
  return envInt({"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE",
                 "MPI_LOCALNRANKS"},
                1);
}

int selectGpu() {
  static const int gpu = [] {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    int local = envInt(
        {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}, 0);
    int index = count > 0 ? local % count : 0;
    check(cudaSetDevice(index), "cudaSetDevice");
    return index;
  }();
  return gpu;
}

const Streams &streams() {
  static const Streams s = [] {
    selectGpu();
    Streams made;
    check(cudaStreamCreateWithFlags(&made.compute, cudaStreamNonBlocking),
          "creating the compute stream");
    check(cudaStreamCreateWithFlags(&made.comm, cudaStreamNonBlocking),
          "creating the communication stream");
    return made;
  }();
  return s;
}

namespace {

using B = Bound;
using C = ExecContext;
using D = CudaDevice;

constexpr size_t kWorkspaceBytes = 32u << 20;
constexpr size_t kAlign = 256;

size_t roundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

Elem elemOf(DType t) { return t == DType::BF16 ? Elem::BF16 : Elem::F32; }

//===--- Compute ---------------------------------------------------------===//

void runFill(const B &b, const C &, D &d) {
  if (b.group >= 0) {
    const TensorGroup &g = d.group(b.group);
    return fillMulti(g.slots, g.chunks, g.numChunks, float(b.fattr(0)),
                     d.stream());
  }
  fill(b.operands[0], b.elem(0), b.elements[0], float(b.fattr(0)), d.stream());
}
void runCopy(const B &b, const C &, D &d) {
  if (b.operands[0] != b.operands[1])
    check(cudaMemcpyAsync(b.operands[1], b.operands[0],
                          dtypeBytes(b.dtypes[0]) * size_t(b.elements[0]),
                          cudaMemcpyDeviceToDevice, d.stream()),
          "copy");
}
void runConvert(const B &b, const C &, D &d) {
  convert(b.operands[0], b.elem(0), b.operands[1], b.elem(1), b.elements[0],
          d.stream());
}
void runAccumulate(const B &b, const C &, D &d) {
  accumulate(b.operands[0], b.elem(0), b.operands[1], b.elem(1), b.elements[0],
             d.stream());
}
void runAdd(const B &b, const C &, D &d) {
  add(b.operands[0], b.operands[1], b.operands[2], b.elem(0), b.elements[0],
      d.stream());
}
void runMul(const B &b, const C &, D &d) {
  mul(b.operands[0], b.operands[1], b.operands[2], b.elem(0), b.elements[0],
      d.stream());
}
void runScale(const B &b, const C &, D &d) {
  scale(b.operands[0], b.operands[1], b.elem(0), b.elements[0],
        float(b.fattr(0)), d.stream());
}
void runTranspose(const B &b, const C &, D &d) {
  int rank = int(b.attr(0));
  transpose(b.operands[0], b.operands[1], b.elem(0), rank,
            b.inst->ints.data() + 1, b.inst->ints.data() + 1 + rank,
            d.stream());
}
/// x viewed as [outer, big, inner] -> out [outer, small, inner] (or back).
void copySlice(void *dst, size_t dstPitch, const void *src, size_t srcPitch,
               size_t width, size_t height, cudaStream_t s) {
  check(cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, width, height,
                          cudaMemcpyDeviceToDevice, s),
        "slice copy");
}
void runSliceCopy(const B &b, const C &, D &d) {
  int64_t outer = b.attr(0), big = b.attr(1), small = b.attr(2),
          start = b.attr(3), inner = b.attr(4);
  size_t e = dtypeBytes(b.dtypes[0]);
  copySlice(b.operands[1], e * small * inner,
            static_cast<char *>(b.operands[0]) + e * start * inner,
            e * big * inner, e * small * inner, size_t(outer), d.stream());
}
void runSliceInsert(const B &b, const C &, D &d) {
  int64_t outer = b.attr(0), big = b.attr(1), small = b.attr(2),
          start = b.attr(3), inner = b.attr(4);
  size_t e = dtypeBytes(b.dtypes[0]);
  if (b.attr(5) != 0)
    sliceInsertAccumulate(b.operands[0], b.operands[1], b.elem(0), outer, big,
                          small, start, inner, d.stream());
  else
    copySlice(static_cast<char *>(b.operands[1]) + e * start * inner,
              e * big * inner, b.operands[0], e * small * inner,
              e * small * inner, size_t(outer), d.stream());
}
void runMatmul(const B &b, const C &, D &d) {
  b.matmul->run(b.operands[0], b.operands[1], b.operands[2], float(b.fattr(0)),
                float(b.fattr(1)), d.stream());
}
void runEmbeddingFwd(const B &b, const C &, D &d) {
  embeddingFwd(b.i32(0), b.elements[0], b.f32(1), b.attr(0), b.attr(1),
               b.attr(2), b.f32(2), d.stream());
}
void runEmbeddingBwd(const B &b, const C &, D &d) {
  embeddingBwd(b.i32(0), b.elements[0], b.f32(1), b.attr(0), b.attr(1),
               b.attr(2), b.f32(2), d.work(), d.workBytes(), d.stream());
}
void runBiasAdd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  biasAdd(b.operands[0], b.operands[1], b.operands[2], b.elem(0),
          b.elements[0] / n, n, d.stream());
}
void runBiasGrad(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  biasGrad(b.operands[0], b.elem(0), b.operands[1], b.elem(1),
           b.elements[0] / n, n, static_cast<float *>(d.work()), d.stream());
}
void runGeluFwd(const B &b, const C &, D &d) {
  geluFwd(b.operands[0], b.operands[1], b.elem(0), b.elements[0], d.stream());
}
void runGeluBwd(const B &b, const C &, D &d) {
  geluBwd(b.operands[0], b.operands[1], b.operands[2], b.elem(0), b.elements[0],
          d.stream());
}
void runReluFwd(const B &b, const C &, D &d) {
  reluFwd(b.f32(0), b.f32(1), b.elements[0], d.stream());
}
void runReluBwd(const B &b, const C &, D &d) {
  reluBwd(b.f32(0), b.f32(1), b.f32(2), b.elements[0], d.stream());
}
void runLayerNormFwd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  // Fused with the residual add before it: x = a + b is stored in the
  // norm's input buffer by the norm's kernel.
  if (b.residualA)
    return layerNormFwd(b.residualA, b.operands[1], b.operands[2],
                        b.operands[3], b.elem(0), b.f32(4), b.f32(5),
                        b.elements[0] / n, n, float(b.fattr(0)), d.stream(),
                        b.residualB, b.operands[0]);
  layerNormFwd(b.operands[0], b.operands[1], b.operands[2], b.operands[3],
               b.elem(0), b.f32(4), b.f32(5), b.elements[0] / n, n,
               float(b.fattr(0)), d.stream());
}
void runLayerNormBwd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  layerNormBwd(b.operands[0], b.operands[1], b.operands[2], b.f32(3), b.f32(4),
               b.operands[5], b.elem(0), b.operands[6], b.operands[7],
               b.elem(6), b.elements[0] / n, n, static_cast<float *>(d.work()),
               d.stream());
}
void runSoftmaxFwd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  softmaxFwd(b.operands[0], b.operands[1], b.elem(0), b.elements[0] / n, n,
             b.attr(1) != 0, float(b.fattr(0)), d.stream());
}
void runSoftmaxBwd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  softmaxBwd(b.operands[0], b.operands[1], b.operands[2], b.elem(0),
             b.elements[0] / n, n, float(b.fattr(0)), d.stream());
}
void runRotaryAtPosition(const B &b, const C &ctx, D &d) {
  int64_t dim = b.attr(0);
  rotaryAtPosition(b.f32(0), b.f32(1), b.elements[0] / dim, dim, ctx.step,
                   b.fattr(0), d.stream());
}
void runKvAttention(const B &b, const C &ctx, D &d) {
  // The scores of one head live in the block's shared memory (48 KiB).
  if (ctx.step + 1 > 12288)
    fail("kv_attention on CUDA holds at most 12288 positions in shared "
         "memory; position ",
         ctx.step, " is past it (generate fewer tokens)");
  kvAttention(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4), b.f32(5),
              b.attr(0), b.attr(1), b.attr(2), b.attr(3), b.attr(4), ctx.step,
              float(b.fattr(0)), d.stream());
}
void runCausalAttentionFwd(const B &b, const C &, D &d) {
  if (b.dtypes[0] == DType::BF16)
    return flashAttentionFwd(b.bf16(0), b.bf16(1), b.bf16(2), b.bf16(3),
                             b.f32(4), b.attr(0), b.attr(1), b.attr(2),
                             b.attr(3), b.attr(4), float(b.fattr(0)),
                             d.stream());
  causalAttentionFwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4),
                     b.attr(0), b.attr(1), b.attr(2), b.attr(3), b.attr(4),
                     float(b.fattr(0)), d.stream());
}
void runCausalAttentionBwd(const B &b, const C &, D &d) {
  if (b.dtypes[0] == DType::BF16)
    return flashAttentionBwd(
        b.bf16(0), b.bf16(1), b.bf16(2), b.bf16(3), b.bf16(4), b.f32(5),
        b.bf16(6), b.bf16(7), b.bf16(8), static_cast<float *>(d.work()),
        b.attr(0), b.attr(1), b.attr(2), b.attr(3), b.attr(4),
        float(b.fattr(0)), d.stream());
  causalAttentionBwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4), b.f32(5),
                     b.f32(6), b.f32(7), b.f32(8), b.attr(0), b.attr(1),
                     b.attr(2), b.attr(3), b.attr(4), float(b.fattr(0)),
                     d.stream());
}
void runCrossEntropyFwd(const B &b, const C &, D &d) {
  int64_t vocab = b.attr(0);
  if (b.ceGrad)
    return crossEntropyFwdBwd(b.f32(0), b.ceLogitsLd ? b.ceLogitsLd : vocab,
                              b.i32(1), b.elements[0] / vocab, vocab,
                              b.plan->ceDropLse ? nullptr : b.f32(3),
                              b.f32(2), d.scratch(),
                              static_cast<uint16_t *>(b.ceGrad),
                              b.ceGradLd ? b.ceGradLd : vocab, b.ceScale,
                              b.plan->ceZeroPadding, d.stream());
  crossEntropyFwd(b.f32(0), b.i32(1), b.elements[0] / vocab, vocab, b.f32(3),
                  b.f32(2), d.scratch(), d.stream());
}
void runCrossEntropyBwd(const B &b, const C &, D &d) {
  int64_t vocab = b.attr(0);
  crossEntropyBwd(b.f32(0), b.i32(1), b.f32(2), b.f32(3), b.elements[0] / vocab,
                  vocab, float(b.fattr(0)), d.stream());
}
void runCeVpMax(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  ceVpMax(b.f32(0), b.f32(1), b.elements[0] / n, n, b.attr(1), d.stream());
}
void runCeVpSumExp(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  ceVpSumExp(b.f32(0), b.i32(1), b.f32(2), b.f32(3), b.elements[0] / n, n,
             b.attr(1), b.attr(2), d.stream());
}
void runCeVpLoss(const B &b, const C &, D &d) {
  ceVpLoss(b.f32(0), b.f32(1), b.f32(3), b.f32(2), b.attr(0), d.scratch(),
           d.stream());
}
void runCeVpBwd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  ceVpBwd(b.f32(0), b.i32(1), b.f32(2), b.f32(3), b.elements[0] / n, n,
          b.attr(1), b.attr(2), float(b.fattr(0)), d.stream());
}
void runRmsNormFwd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  rmsNormFwd(b.operands[0], b.operands[1], b.operands[2], b.elem(0), b.f32(3),
             b.elements[0] / n, n, float(b.fattr(0)), d.stream());
}
void runRmsNormBwd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  rmsNormBwd(b.operands[0], b.operands[1], b.operands[2], b.f32(3),
             b.operands[4], b.elem(0), b.operands[5], b.elem(5),
             b.elements[0] / n, n, static_cast<float *>(d.work()), d.stream());
}
void runRotary(const B &b, bool inverse, D &d) {
  int64_t seq = b.attr(0), dim = b.attr(1);
  rotary(b.operands[0], b.operands[1], b.elem(0), b.elements[0] / (seq * dim),
         seq, dim, b.fattr(0), inverse, d.stream());
}
void runRotaryFwd(const B &b, const C &, D &d) { runRotary(b, false, d); }
void runRotaryBwd(const B &b, const C &, D &d) { runRotary(b, true, d); }
void runUnaryFwd(const B &b, const C &, D &d) {
  unaryFwd(b.attr(0), b.f32(0), b.f32(1), b.elements[0], d.stream());
}
void runUnaryBwd(const B &b, const C &, D &d) {
  unaryBwd(b.attr(0), b.f32(0), b.f32(1), b.f32(2), b.elements[0], d.stream());
}
void runBinaryFwd(const B &b, const C &, D &d) {
  binaryFwd(b.attr(0), b.f32(0), b.f32(1), b.f32(2), b.elements[0], b.attr(1),
            b.attr(2), b.attr(3), d.stream());
}
void runSiluFwd(const B &b, const C &, D &d) {
  siluFwd(b.operands[0], b.operands[1], b.elem(0), b.elements[0], d.stream());
}
void runSiluBwd(const B &b, const C &, D &d) {
  siluBwd(b.operands[0], b.operands[1], b.operands[2], b.elem(0), b.elements[0],
          d.stream());
}
void runSiluMulFwd(const B &b, const C &, D &d) {
  siluMulFwd(b.operands[0], b.operands[1], b.operands[2], b.elem(0),
             b.elements[0], d.stream());
}
void runSiluMulBwd(const B &b, const C &, D &d) {
  siluMulBwd(b.operands[0], b.operands[1], b.operands[2], b.operands[3],
             b.operands[4], b.elem(0), b.elements[0], d.stream());
}
void runRepeatInterleave(const B &b, const C &, D &d) {
  repeatInterleave(b.operands[0], b.operands[1], b.elem(0), b.attr(0),
                   b.attr(1), b.attr(2), b.attr(3), d.stream());
}
void runRepeatInterleaveBwd(const B &b, const C &, D &d) {
  repeatInterleaveBwd(b.operands[0], b.operands[1], b.elem(0), b.attr(0),
                      b.attr(1), b.attr(2), b.attr(3), d.stream());
}
void runGradSumSq(const B &b, const C &, D &d) {
  const TensorGroup &g = d.group(b.group);
  sumSquaresMulti(g.slots, g.chunks, g.numChunks, d.scratch(), b.f64(0),
                  d.stream());
}
void runClipGrads(const B &b, const C &, D &d) {
  const TensorGroup &g = d.group(b.group);
  clipMulti(g.slots, g.chunks, g.numChunks, b.f64(0), b.fattr(0), d.stream());
}
void runSgdStep(const B &b, const C &, D &d) {
  const TensorGroup &g = d.group(b.group);
  sgdMulti(g.slots, g.chunks, g.numChunks,
           static_cast<const kernels::SgdCoefficients *>(g.coefficients),
           d.stream());
}
void runAdamWStep(const B &b, const C &, D &d) {
  const TensorGroup &g = d.group(b.group);
  adamwMulti(g.slots, g.chunks, g.numChunks,
             static_cast<const kernels::AdamWCoefficients *>(g.coefficients),
             d.stream());
}

//===--- Host work: inputs and collectives --------------------------------===//

StepServices &services(const C &ctx) {
  if (!ctx.services)
    fail("internal error: a collective or load_batch ran without the "
         "executor's services");
  return *ctx.services;
}
ReduceOp reduceOp(int64_t op) {
  return op == 1 ? ReduceOp::Max : ReduceOp::Sum;
}
void toHost(void *host, const void *device, size_t bytes, cudaStream_t s) {
  check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s),
        "staging to the host");
  check(cudaStreamSynchronize(s), "staging to the host");
}
void toDevice(void *device, const void *host, size_t bytes, cudaStream_t s) {
  check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s),
        "staging to the device");
  check(cudaStreamSynchronize(s), "staging to the device");
}

void runLoadBatch(const B &b, const C &ctx, D &d) {
  std::vector<int32_t> host[3];
  int32_t *ptrs[3] = {nullptr, nullptr, nullptr};
  for (int i = 0; i < 3; ++i)
    if (b.operands[i]) {
      host[i].resize(size_t(b.elements[i]));
      ptrs[i] = host[i].data();
    }
  services(ctx).loadBatch(b.attr(0), ptrs[0], ptrs[1], ptrs[2]);
  for (int i = 0; i < 3; ++i)
    if (ptrs[i])
      toDevice(b.operands[i], ptrs[i], sizeof(int32_t) * host[i].size(),
               d.stream());
}

// With NCCL the arena pointers go straight through; with MPI the buffers
// are staged through host memory (runtime/core/HostStaging.h).
void runAllReduce(const B &b, const C &ctx, D &d) {
  Communicator &comm = services(ctx).group(b.attr(0));
  if (comm.acceptsDeviceMemory())
    return comm.allReduce(b.operands[0], b.elements[0], b.dtypes[0],
                          reduceOp(b.attr(1)));
  staged::allReduce(comm, d.copier(), b.operands[0], b.elements[0], b.dtypes[0],
                    reduceOp(b.attr(1)));
}
void runReduceScatter(const B &b, const C &ctx, D &d) {
  Communicator &comm = services(ctx).group(b.attr(0));
  if (comm.acceptsDeviceMemory())
    return comm.reduceScatter(b.operands[0], b.operands[1], b.elements[1],
                              b.dtypes[0]);
  staged::reduceScatter(comm, d.copier(), b.operands[0], b.operands[1],
                        b.elements[1], b.dtypes[0]);
}
void runAllGather(const B &b, const C &ctx, D &d) {
  Communicator &comm = services(ctx).group(b.attr(0));
  if (comm.acceptsDeviceMemory())
    return comm.allGather(b.operands[0], b.operands[1], b.elements[0],
                          b.dtypes[0]);
  staged::allGather(comm, d.copier(), b.operands[0], b.operands[1],
                    b.elements[0], b.dtypes[0]);
}
void runSend(const B &b, const C &ctx, D &d) {
  Communicator &comm = services(ctx).world();
  if (comm.acceptsDeviceMemory())
    return comm.send(b.operands[0], b.elements[0], b.dtypes[0], int(b.attr(0)),
                     int(b.attr(1)));
  staged::send(comm, d.copier(), b.operands[0], b.elements[0], b.dtypes[0],
               int(b.attr(0)), int(b.attr(1)));
}
void runRecv(const B &b, const C &ctx, D &d) {
  Communicator &comm = services(ctx).world();
  if (comm.acceptsDeviceMemory())
    return comm.recv(b.operands[0], b.elements[0], b.dtypes[0], int(b.attr(0)),
                     int(b.attr(1)));
  staged::recv(comm, d.copier(), b.operands[0], b.elements[0], b.dtypes[0],
               int(b.attr(0)), int(b.attr(1)));
}
void runBarrier(const B &b, const C &ctx, D &d) {
  check(cudaStreamSynchronize(d.stream()), "barrier");
  services(ctx).group(b.attr(0)).barrier();
}

void runAllReduceStart(const B &b, const C &ctx, D &d) {
  StepServices &s = services(ctx);
  Communicator &comm = s.group(b.attr(0));
  s.park(b.attr(2), comm.acceptsDeviceMemory()
                        ? comm.startAllReduce(b.operands[0], b.elements[0],
                                              b.dtypes[0], reduceOp(b.attr(1)))
                        : staged::startAllReduce(
                              comm, d.copier(), b.operands[0], b.elements[0],
                              b.dtypes[0], reduceOp(b.attr(1))));
}
void runReduceScatterStart(const B &b, const C &ctx, D &d) {
  StepServices &s = services(ctx);
  Communicator &comm = s.group(b.attr(0));
  s.park(b.attr(1), comm.acceptsDeviceMemory()
                        ? comm.startReduceScatter(b.operands[0], b.operands[1],
                                                  b.elements[1], b.dtypes[0])
                        : staged::startReduceScatter(
                              comm, d.copier(), b.operands[0], b.operands[1],
                              b.elements[1], b.dtypes[0]));
}
void runAllGatherStart(const B &b, const C &ctx, D &d) {
  StepServices &s = services(ctx);
  Communicator &comm = s.group(b.attr(0));
  s.park(b.attr(1), comm.acceptsDeviceMemory()
                        ? comm.startAllGather(b.operands[0], b.operands[1],
                                              b.elements[0], b.dtypes[0])
                        : staged::startAllGather(comm, d.copier(),
                                                 b.operands[0], b.operands[1],
                                                 b.elements[0], b.dtypes[0]));
}
void runSendStart(const B &b, const C &ctx, D &d) {
  StepServices &s = services(ctx);
  Communicator &comm = s.world();
  s.park(b.attr(2),
         comm.acceptsDeviceMemory()
             ? comm.startSend(b.operands[0], b.elements[0], b.dtypes[0],
                              int(b.attr(0)), int(b.attr(1)))
             : staged::startSend(comm, d.copier(), b.operands[0], b.elements[0],
                                 b.dtypes[0], int(b.attr(0)), int(b.attr(1))));
}
void runRecvStart(const B &b, const C &ctx, D &d) {
  StepServices &s = services(ctx);
  Communicator &comm = s.world();
  s.park(b.attr(2),
         comm.acceptsDeviceMemory()
             ? comm.startRecv(b.operands[0], b.elements[0], b.dtypes[0],
                              int(b.attr(0)), int(b.attr(1)))
             : staged::startRecv(comm, d.copier(), b.operands[0], b.elements[0],
                                 b.dtypes[0], int(b.attr(0)), int(b.attr(1))));
}
void runWait(const B &b, const C &ctx, D &) { services(ctx).wait(b.attr(0)); }

struct Entry {
  Opcode opcode;
  CudaKernelFn kernel;
};

constexpr Entry kEntries[] = {
    {Opcode::Fill, runFill},
    {Opcode::Copy, runCopy},
    {Opcode::Convert, runConvert},
    {Opcode::Accumulate, runAccumulate},
    {Opcode::Add, runAdd},
    {Opcode::Mul, runMul},
    {Opcode::Scale, runScale},
    {Opcode::Transpose, runTranspose},
    {Opcode::SliceCopy, runSliceCopy},
    {Opcode::SliceInsert, runSliceInsert},
    {Opcode::Matmul, runMatmul},
    {Opcode::EmbeddingFwd, runEmbeddingFwd},
    {Opcode::EmbeddingBwd, runEmbeddingBwd},
    {Opcode::BiasAdd, runBiasAdd},
    {Opcode::BiasGrad, runBiasGrad},
    {Opcode::GeluFwd, runGeluFwd},
    {Opcode::GeluBwd, runGeluBwd},
    {Opcode::ReluFwd, runReluFwd},
    {Opcode::ReluBwd, runReluBwd},
    {Opcode::LayerNormFwd, runLayerNormFwd},
    {Opcode::LayerNormBwd, runLayerNormBwd},
    {Opcode::SoftmaxFwd, runSoftmaxFwd},
    {Opcode::SoftmaxBwd, runSoftmaxBwd},
    {Opcode::CausalAttentionFwd, runCausalAttentionFwd},
    {Opcode::CausalAttentionBwd, runCausalAttentionBwd},
    {Opcode::KvAttention, runKvAttention},
    {Opcode::RotaryAtPosition, runRotaryAtPosition},
    {Opcode::CrossEntropyFwd, runCrossEntropyFwd},
    {Opcode::CrossEntropyBwd, runCrossEntropyBwd},
    {Opcode::CeVpMax, runCeVpMax},
    {Opcode::CeVpSumExp, runCeVpSumExp},
    {Opcode::CeVpLoss, runCeVpLoss},
    {Opcode::CeVpBwd, runCeVpBwd},
    {Opcode::RmsNormFwd, runRmsNormFwd},
    {Opcode::RmsNormBwd, runRmsNormBwd},
    {Opcode::RotaryFwd, runRotaryFwd},
    {Opcode::RotaryBwd, runRotaryBwd},
    {Opcode::UnaryFwd, runUnaryFwd},
    {Opcode::UnaryBwd, runUnaryBwd},
    {Opcode::BinaryFwd, runBinaryFwd},
    {Opcode::SiluFwd, runSiluFwd},
    {Opcode::SiluBwd, runSiluBwd},
    {Opcode::SiluMulFwd, runSiluMulFwd},
    {Opcode::SiluMulBwd, runSiluMulBwd},
    {Opcode::RepeatInterleave, runRepeatInterleave},
    {Opcode::RepeatInterleaveBwd, runRepeatInterleaveBwd},
    {Opcode::GradSumSq, runGradSumSq},
    {Opcode::ClipGrads, runClipGrads},
    {Opcode::SgdStep, runSgdStep},
    {Opcode::AdamWStep, runAdamWStep},
    {Opcode::LoadBatch, runLoadBatch},
    {Opcode::AllReduce, runAllReduce},
    {Opcode::ReduceScatter, runReduceScatter},
    {Opcode::AllGather, runAllGather},
    {Opcode::Send, runSend},
    {Opcode::Recv, runRecv},
    {Opcode::Barrier, runBarrier},
    {Opcode::AllReduceStart, runAllReduceStart},
    {Opcode::ReduceScatterStart, runReduceScatterStart},
    {Opcode::AllGatherStart, runAllGatherStart},
    {Opcode::SendStart, runSendStart},
    {Opcode::RecvStart, runRecvStart},
    {Opcode::Wait, runWait},
};

std::array<CudaKernelFn, 65536> buildTable() {
  std::array<CudaKernelFn, 65536> table{};
  for (const Entry &e : kEntries)
    table[static_cast<uint16_t>(e.opcode)] = e.kernel;
  return table;
}

/// Device-scalar reductions need one double per row of the largest loss
/// instruction, kReduceBlocks, and one per optimizer chunk.
size_t lossRows(const RankProgram &rank) {
  size_t doubles = kReduceBlocks;
  for (const auto &seq : rank.sequences)
    for (const Instruction &inst : seq) {
      int64_t rows = 0;
      if (inst.opcode == Opcode::CrossEntropyFwd)
        rows = rank.buffers[inst.operands[0]].numElements() / inst.ints[0];
      else if (inst.opcode == Opcode::CeVpLoss)
        rows = inst.ints[0];
      doubles = std::max(doubles, size_t(rows));
    }
  return doubles;
}

/// The work memory one instruction needs (CudaDevice::work()).
size_t workBytesOf(const Bound &b) {
  const Instruction &inst = *b.inst;
  switch (inst.opcode) {
  case Opcode::BiasGrad:
  case Opcode::LayerNormBwd:
  case Opcode::RmsNormBwd: {
    int64_t n = inst.ints[0];
    return columnScratchBytes(b.elements[0] / n, n);
  }
  case Opcode::EmbeddingBwd:
    return embeddingBwdScratchBytes(b.elements[0]);
  case Opcode::CausalAttentionBwd:
    return b.dtypes[0] == DType::BF16
               ? flashAttentionScratchBytes(inst.ints[0], inst.ints[1],
                                            inst.ints[3])
               : 0;
  default:
    return 0;
  }
}

/// The first word of a device model ("H100-SXM5-80GB" -> "H100").
std::string modelFamily(const std::string &model) {
  return model.substr(0, model.find('-'));
}

std::string profileKey(const Instruction &inst, const Bound &b,
                       double &flops) {
  flops = 0;
  std::string name = getOpSchema(inst.opcode).name;
  if (!b.staged.empty())
    name += " (staged f32)";
  if (inst.opcode != Opcode::Matmul)
    return name;
  const auto &a = inst.ints;
  flops = 2.0 * double(a[0]) * double(a[1]) * double(a[2]) * double(a[3]);
  char buf[160];
  std::snprintf(buf, sizeof(buf), "matmul %lldx[%lld,%lld,%lld]%s%s %s%s%s",
                (long long)a[0], (long long)a[1], (long long)a[2],
                (long long)a[3], a[4] ? " tA" : "", a[5] ? " tB" : "",
                dtypeName(b.dtypes[0]), dtypeName(b.dtypes[1]),
                b.dtypes[2] == DType::BF16 ? "->bf16" : "->f32");
  return buf;
}

} // namespace

void CudaCopier::toHost(void *host, const void *device, size_t bytes) {
  cuda::toHost(host, device, bytes, streams().compute);
}

void CudaCopier::toDevice(void *device, const void *host, size_t bytes) {
  cuda::toDevice(device, host, bytes, streams().compute);
}

CudaKernelFn lookupCudaKernel(Opcode opcode) {
  static const std::array<CudaKernelFn, 65536> table = buildTable();
  return table[static_cast<uint16_t>(opcode)];
}

CudaDevice::CudaDevice(const TargetDesc &target) {
  int gpu = selectGpu();
  streams();
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, gpu), "cudaGetDeviceProperties");
  // The plan's numbers are the device model's: say so when this GPU is
  // another kind.
  std::string family = modelFamily(target.deviceModel);
  if (!family.empty() &&
      std::string(prop.name).find(family) == std::string::npos)
    std::fprintf(stderr,
                 "strata: warning: this program was planned for %s but runs "
                 "on %s (GPU %d); the plan and the logged MFU assume the "
                 "former. Recompile with the matching --cluster preset.\n",
                 target.deviceModel.c_str(), prop.name, gpu);
  useGraphs_ = envSwitch("STRATA_CUDA_GRAPHS", true);
  profiling_ = envSwitch("STRATA_PROFILE", false);
  const CublasLtApi &lt = cublasLt();
  cublasStatus_t status = lt.create(&lt_.handle);
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cublasLtCreate: ", lt.statusString(status));
  lt_.workspaceBytes = kWorkspaceBytes;
  check(cudaMalloc(&lt_.workspace, lt_.workspaceBytes),
        "allocating the cuBLASLt workspace");
}

CudaDevice::~CudaDevice() {
  cudaStreamSynchronize(stream());
  if (profiling_)
    printProfile();
  release();
  cudaFree(lt_.workspace);
  if (lt_.handle)
    cublasLt().destroy(lt_.handle);
}

void CudaDevice::release() {
  for (int k = 0; k < kNumSequenceKinds; ++k) {
    for (cudaGraphExec_t g : graphs_[k])
      if (g)
        cudaGraphExecDestroy(g);
    graphs_[k].clear();
    sequences_[k].clear();
    kernels_[k].clear();
    groupsOf_[k].clear();
    profileRowOf_[k].clear();
    runs_[k] = 0;
  }
  groups_.clear();
  for (void *p : {static_cast<void *>(arena_), static_cast<void *>(scratch_),
                  work_, static_cast<void *>(staging_), tables_})
    cudaFree(p);
  for (void *p : extra_)
    cudaFree(p);
  extra_.clear();
  arena_ = nullptr;
  scratch_ = nullptr;
  work_ = nullptr;
  staging_ = nullptr;
  tables_ = nullptr;
}

namespace {

/// Host copies of a multi-tensor group's tables: slots, then chunks.
struct GroupTables {
  std::vector<TensorSlot> slots;
  std::vector<TensorChunk> chunks;
  std::vector<const Instruction *> keys;
  size_t coefficientBytes = 0;
};

} // namespace

void CudaDevice::prepare(const RankProgram &rank) {
  release();
  arenaBytes_ = rank.arenaBytes;
  size_t bytes = std::max<uint64_t>(arenaBytes_, kBufferAlignment);
  cudaError_t status = cudaMalloc(&arena_, bytes);
  if (status != cudaSuccess)
    fail("cannot allocate the ", arenaBytes_, "-byte arena on the GPU (",
         cudaGetErrorString(status),
         "); the plan needs more GPU memory than this device has free");
  check(cudaMemsetAsync(arena_, 0, bytes, stream()), "zeroing the arena");

  plan_ = planCudaBinding(rank, bindOptionsFromEnvironment());

  // Scratch outside the arena: padded classifier matrices, staging.
  std::vector<uint8_t *> scratchPtrs;
  for (const ScratchPlan &sp : plan_.scratch) {
    void *p = nullptr;
    status = cudaMalloc(&p, sp.bytes);
    if (status != cudaSuccess)
      fail("cannot allocate ", sp.bytes, " bytes of GPU memory for the ",
           sp.what, " (", cudaGetErrorString(status), ")");
    extra_.push_back(p);
    scratchPtrs.push_back(static_cast<uint8_t *>(p));
    if (sp.zeroed)
      check(cudaMemsetAsync(p, 0, sp.bytes, stream()), "zeroing scratch");
  }
  if (plan_.stagingBytes > 0) {
    status = cudaMalloc(reinterpret_cast<void **>(&staging_),
                        plan_.stagingBytes);
    if (status != cudaSuccess)
      fail("cannot allocate ", plan_.stagingBytes,
           " bytes of GPU memory to stage bf16 operands of kernels without "
           "a bf16 form (",
           cudaGetErrorString(status), ")");
  }
  auto at = [&](uint32_t id) -> void * {
    return id == kNoBuffer ? nullptr : arena_ + rank.buffers[id].offset;
  };
  auto padded = [&](const PaddedView &v) -> void * {
    return v.scratch < 0 ? nullptr : scratchPtrs[size_t(v.scratch)];
  };

  std::vector<GroupTables> tables;
  for (int kind = 0; kind < kNumSequenceKinds; ++kind) {
    const SequencePlan &sp = plan_.sequences[kind];
    auto &bound = sequences_[kind];
    auto &kernels = kernels_[kind];
    for (size_t n = 0; n < rank.sequences[kind].size(); ++n) {
      const Instruction &inst = rank.sequences[kind][n];
      const InstructionPlan &ip = sp.instructions[n];
      CudaKernelFn kernel = lookupCudaKernel(inst.opcode);
      if (!kernel)
        fail("opcode ", getOpSchema(inst.opcode).name,
             " has no CUDA kernel in this runtime");
      Bound b;
      b.inst = &inst;
      b.plan = &ip;
      b.skip = ip.skip;
      for (uint32_t id : inst.operands) {
        b.operands.push_back(at(id));
        b.elements.push_back(id == kNoBuffer ? 0
                                             : rank.buffers[id].numElements());
        b.dtypes.push_back(id == kNoBuffer ? DType::F32
                                           : rank.buffers[id].dtype);
      }
      size_t offset = 0;
      for (const StagePlan &st : ip.staged) {
        StagedOperand s;
        s.operand = st.operand;
        s.arena = b.operands[st.operand];
        s.arenaType = b.dtypes[st.operand];
        s.stagedType = st.to;
        s.elements = b.elements[st.operand];
        s.read = st.read;
        s.written = st.written;
        s.staged = staging_ + offset;
        offset += roundUp(dtypeBytes(st.to) * size_t(s.elements));
        b.operands[st.operand] = s.staged;
        b.dtypes[st.operand] = st.to;
        b.staged.push_back(s);
      }
      if (ip.redirect >= 0)
        b.operands[1] = scratchPtrs[size_t(ip.redirect)];
      b.residualA = at(ip.residualA);
      b.residualB = at(ip.residualB);
      if (ip.ceGrad != kNoBuffer) {
        b.ceGrad = at(ip.ceGrad);
        b.ceScale = ip.ceScale;
        if (ip.ceLogits.scratch >= 0) {
          b.operands[0] = padded(ip.ceLogits);
          b.ceLogitsLd = ip.ceLogits.ld;
          b.ceGrad = padded(ip.ceGradPadded);
          b.ceGradLd = ip.ceGradPadded.ld;
        }
      }
      if (ip.group >= 0) {
        const GroupPlan &gp = sp.groups[size_t(ip.group)];
        GroupTables t;
        auto key = [&](const Instruction &i) {
          for (size_t k = 0; k < t.keys.size(); ++k)
            if (t.keys[k]->floats == i.floats)
              return int32_t(k);
          t.keys.push_back(&i);
          return int32_t(t.keys.size() - 1);
        };
        if (gp.opcode == Opcode::AdamWStep || gp.opcode == Opcode::SgdStep) {
          for (size_t j = gp.first; j <= gp.last; ++j) {
            const Instruction &g = rank.sequences[kind][j];
            TensorSlot slot;
            slot.param = static_cast<float *>(at(g.operands[0]));
            slot.grad = static_cast<float *>(at(g.operands[1]));
            slot.state0 = static_cast<float *>(at(g.operands[2]));
            slot.state1 = gp.opcode == Opcode::AdamWStep
                              ? static_cast<float *>(at(g.operands[3]))
                              : nullptr;
            slot.n = rank.buffers[g.operands[0]].numElements();
            slot.coefficients = key(g);
            t.slots.push_back(slot);
          }
          t.coefficientBytes = gp.opcode == Opcode::AdamWStep
                                   ? sizeof(kernels::AdamWCoefficients)
                                   : sizeof(kernels::SgdCoefficients);
        } else if (gp.opcode == Opcode::Fill) {
          for (size_t j = gp.first; j <= gp.last; ++j) {
            const Instruction &g = rank.sequences[kind][j];
            TensorSlot slot;
            slot.grad = static_cast<float *>(at(g.operands[0]));
            slot.n = rank.buffers[g.operands[0]].numElements();
            t.slots.push_back(slot);
          }
        } else {
          for (size_t j = 1; j < inst.operands.size(); ++j) {
            TensorSlot slot;
            slot.grad = static_cast<float *>(b.operands[j]);
            slot.n = b.elements[j];
            t.slots.push_back(slot);
          }
        }
        for (size_t sl = 0; sl < t.slots.size(); ++sl)
          for (int64_t st = 0; st < t.slots[sl].n; st += kOptimizerChunk)
            t.chunks.push_back({int32_t(sl), st});
        b.group = int(tables.size());
        groupsOf_[kind].push_back(b.group);
        tables.push_back(std::move(t));
      }
      // Matmul plans: the epilogue and padded operands the plan chose, on
      // the pointers they will run on (staged copies included).
      if (inst.opcode == Opcode::Matmul) {
        GemmShape s;
        s.batch = inst.ints[0];
        s.m = inst.ints[1];
        s.n = inst.ints[2];
        s.k = inst.ints[3];
        s.transA = inst.ints[4] != 0;
        s.transB = inst.ints[5] != 0;
        s.broadcastB = inst.ints[6] != 0;
        if (ip.n)
          s.n = ip.n;
        if (ip.k)
          s.k = ip.k;
        int64_t *lds[3] = {&s.lda, &s.ldb, &s.ldc};
        for (int op = 0; op < 3; ++op)
          if (ip.padded[op].scratch >= 0) {
            b.operands[size_t(op)] = padded(ip.padded[op]);
            *lds[op] = ip.padded[op].ld;
          }
        auto type = [](DType t) {
          return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
        };
        GemmTypes types{type(b.dtypes[0]), type(b.dtypes[1]),
                        type(b.dtypes[2])};
        GemmEpilogue epilogue;
        if (ip.epilogue != EpilogueKind::None) {
          epilogue.kind = ip.epilogue == EpilogueKind::Bias
                              ? GemmEpilogue::Bias
                          : ip.epilogue == EpilogueKind::BiasGeluAux
                              ? GemmEpilogue::BiasGeluAux
                              : GemmEpilogue::DGelu;
          epilogue.bias = at(ip.bias);
          epilogue.aux = at(ip.aux);
          b.operands[2] = at(ip.out);
          b.runBefore = ip.runBefore;
        }
        try {
          b.matmul = std::make_unique<MatmulPlan>(lt_, s, b.operands[0],
                                                  b.operands[1], b.operands[2],
                                                  types, epilogue);
        } catch (const RuntimeError &) {
          if (epilogue.kind == GemmEpilogue::None)
            throw;
          // No algorithm for the epilogue here: the group runs unfused.
          b.operands[2] = at(inst.operands[2]);
          b.runBefore = -1;
          b.unfuse = true;
          b.matmul = std::make_unique<MatmulPlan>(
              lt_, s, b.operands[0], b.operands[1], b.operands[2], types);
        }
      }
      bound.push_back(std::move(b));
      kernels.push_back(kernel);
    }
    // Instructions whose epilogue fell back run themselves again.
    for (Bound &b : bound)
      if (b.unfuse)
        for (size_t idx : b.plan->absorbed)
          bound[idx].skip = false;
  }

  // Reduction scratch (loss rows, the optimizer's chunk partials) and the
  // kernels' work memory.
  size_t doubles = lossRows(rank);
  for (const GroupTables &t : tables)
    doubles = std::max(doubles, t.chunks.size());
  check(cudaMalloc(&scratch_, sizeof(double) * doubles),
        "allocating the reduction scratch");
  workBytes_ = kAlign;
  for (const auto &seq : sequences_)
    for (const Bound &b : seq)
      workBytes_ = std::max(workBytes_, workBytesOf(b));
  check(cudaMalloc(&work_, workBytes_), "allocating the kernels' work memory");

  // The groups' tables in one allocation.
  size_t tableBytes = 0;
  for (const GroupTables &t : tables)
    tableBytes += roundUp(sizeof(TensorSlot) * t.slots.size()) +
                  roundUp(sizeof(TensorChunk) * t.chunks.size()) +
                  roundUp(t.coefficientBytes * t.keys.size());
  if (tableBytes > 0) {
    check(cudaMalloc(&tables_, tableBytes), "allocating the optimizer tables");
    uint8_t *at8 = static_cast<uint8_t *>(tables_);
    for (GroupTables &t : tables) {
      TensorGroup g;
      g.slots = reinterpret_cast<TensorSlot *>(at8);
      check(cudaMemcpy(at8, t.slots.data(), sizeof(TensorSlot) * t.slots.size(),
                       cudaMemcpyHostToDevice),
            "uploading the optimizer tables");
      at8 += roundUp(sizeof(TensorSlot) * t.slots.size());
      g.chunks = reinterpret_cast<TensorChunk *>(at8);
      check(cudaMemcpy(at8, t.chunks.data(),
                       sizeof(TensorChunk) * t.chunks.size(),
                       cudaMemcpyHostToDevice),
            "uploading the optimizer tables");
      at8 += roundUp(sizeof(TensorChunk) * t.chunks.size());
      g.coefficients = at8;
      at8 += roundUp(t.coefficientBytes * t.keys.size());
      g.numChunks = int64_t(t.chunks.size());
      g.keys = std::move(t.keys);
      groups_.push_back(std::move(g));
    }
  }
  if (profiling_)
    for (int kind = 0; kind < kNumSequenceKinds; ++kind)
      for (const Bound &b : sequences_[kind]) {
        double flops = 0;
        std::string key = profileKey(*b.inst, b, flops);
        auto it = std::find_if(profile_.begin(), profile_.end(),
                               [&](const ProfileRow &r) { return r.key == key; });
        if (it == profile_.end()) {
          profile_.push_back({key, flops, 0, 0.0});
          it = profile_.end() - 1;
        }
        profileRowOf_[kind].push_back(int(it - profile_.begin()));
      }
  check(cudaStreamSynchronize(stream()), "zeroing the arena");
}

void CudaDevice::upload(uint64_t offset, const void *src, uint64_t bytes) {
  if (offset > arenaBytes_ || bytes > arenaBytes_ - offset)
    fail("internal error: upload outside the arena");
  toDevice(arena_ + offset, src, bytes, stream());
}

void CudaDevice::download(uint64_t offset, void *dst, uint64_t bytes) const {
  if (offset > arenaBytes_ || bytes > arenaBytes_ - offset)
    fail("internal error: download outside the arena");
  toHost(dst, arena_ + offset, bytes, stream());
}

void CudaDevice::runInstruction(size_t i, int kind, const ExecContext &ctx) {
  const Bound &b = sequences_[kind][i];
  if (b.skip)
    return;
  if (b.runBefore >= 0) {
    const Bound &first = sequences_[kind][size_t(b.runBefore)];
    kernels_[kind][size_t(b.runBefore)](first, ctx, *this);
  }
  for (const StagedOperand &s : b.staged)
    if (s.read)
      convert(s.arena, elemOf(s.arenaType), s.staged, elemOf(s.stagedType),
              s.elements, stream());
  kernels_[kind][i](b, ctx, *this);
  for (const StagedOperand &s : b.staged)
    if (s.written)
      convert(s.staged, elemOf(s.stagedType), s.arena, elemOf(s.arenaType),
              s.elements, stream());
}

void CudaDevice::runEager(int kind, const ExecContext &ctx, size_t begin,
                          size_t end) {
  StepServices *services = ctx.services;
  for (size_t i = begin; i < end; ++i) {
    if (profiling_) {
      cudaEvent_t start, stop;
      check(cudaEventCreate(&start), "profile event");
      check(cudaEventCreate(&stop), "profile event");
      check(cudaEventRecord(start, stream()), "profile event");
      runInstruction(i, kind, ctx);
      check(cudaEventRecord(stop, stream()), "profile event");
      check(cudaEventSynchronize(stop), "profile event");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "profile event");
      ProfileRow &row = profile_[size_t(profileRowOf_[kind][i])];
      row.calls += sequences_[kind][i].skip ? 0 : 1;
      row.seconds += ms * 1e-3;
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    } else {
      runInstruction(i, kind, ctx);
    }
    // Host-staged (MPI) requests only advance inside MPI calls.
    if (services && services->hasPending())
      services->progress();
  }
}

/// Each step's optimizer coefficients (learning rate, bias corrections)
/// into the groups' device tables, by a small copy kernel launched before
/// the update (so the update's graph never changes).
void CudaDevice::writeCoefficients(int kind, const ExecContext &ctx) {
  for (int index : groupsOf_[kind]) {
    const TensorGroup &g = groups_[size_t(index)];
    if (g.keys.empty())
      continue;
    Opcode op = g.keys[0]->opcode;
    std::vector<uint8_t> bytes;
    for (const Instruction *inst : g.keys) {
      const std::vector<double> &f = inst->floats;
      if (op == Opcode::AdamWStep) {
        kernels::AdamWCoefficients c = kernels::adamwCoefficients(
            ctx.lr, f[0], f[1], f[2], f[3], ctx.step + 1);
        const uint8_t *p = reinterpret_cast<const uint8_t *>(&c);
        bytes.insert(bytes.end(), p, p + sizeof(c));
      } else {
        kernels::SgdCoefficients c =
            kernels::sgdCoefficients(ctx.lr, f[0], f[1]);
        const uint8_t *p = reinterpret_cast<const uint8_t *>(&c);
        bytes.insert(bytes.end(), p, p + sizeof(c));
      }
    }
    writeSmall(g.coefficients, bytes.data(), bytes.size(), stream());
  }
}

void CudaDevice::capture(int kind, const ExecContext &ctx) {
  const auto &segments = plan_.sequences[kind].segments;
  graphs_[kind].assign(segments.size(), nullptr);
  for (size_t si = 0; si < segments.size(); ++si) {
    const SegmentPlan &s = segments[si];
    if (!s.device)
      continue;
    check(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal),
          "beginning a CUDA graph capture");
    try {
      for (size_t i = s.begin; i < s.end; ++i)
        runInstruction(i, kind, ctx);
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(stream(), &broken);
      if (broken)
        cudaGraphDestroy(broken);
      throw;
    }
    cudaGraph_t graph = nullptr;
    check(cudaStreamEndCapture(stream(), &graph), "capturing a CUDA graph");
    check(cudaGraphInstantiate(&graphs_[kind][si], graph, 0),
          "instantiating a CUDA graph");
    cudaGraphDestroy(graph);
  }
}

void CudaDevice::run(SequenceKind kindEnum, const ExecContext &ctx) {
  int kind = static_cast<int>(kindEnum);
  const auto &bound = sequences_[kind];
  if (bound.empty())
    return;
  writeCoefficients(kind, ctx);
  // The first run is eager (it also initialises libraries and kernel
  // attributes outside any capture); from the second, device segments run
  // as graphs.
  bool useGraphs = useGraphs_ && !profiling_ && runs_[kind] >= 1;
  ++runs_[kind];
  if (!useGraphs) {
    runEager(kind, ctx, 0, bound.size());
  } else {
    if (runs_[kind] == 2)
      capture(kind, ctx);
    StepServices *services = ctx.services;
    for (size_t si = 0; si < plan_.sequences[kind].segments.size(); ++si) {
      const SegmentPlan &s = plan_.sequences[kind].segments[si];
      if (s.device)
        check(cudaGraphLaunch(graphs_[kind][si], stream()),
              "launching a CUDA graph");
      else
        runEager(kind, ctx, s.begin, s.end);
      if (services && services->hasPending())
        services->progress();
    }
  }
  // Launch errors surface here rather than at the next download.
  check(cudaGetLastError(), sequenceName(kindEnum));
}

void CudaDevice::printProfile() const {
  double total = 0;
  for (const ProfileRow &row : profile_)
    total += row.seconds;
  if (total <= 0)
    return;
  std::vector<const ProfileRow *> rows;
  for (const ProfileRow &row : profile_)
    if (row.calls)
      rows.push_back(&row);
  std::sort(rows.begin(), rows.end(),
            [](const ProfileRow *a, const ProfileRow *b) {
              return a->seconds > b->seconds;
            });
  std::fprintf(stderr,
               "strata: STRATA_PROFILE: GPU time per instruction kind, all "
               "sequences (%.4f s)\n%-52s %8s %10s %6s %9s %8s\n",
               total, "instruction", "calls", "total_s", "%", "ms/call",
               "TFLOP/s");
  for (const ProfileRow *row : rows) {
    std::fprintf(stderr, "%-52s %8lld %10.4f %6.2f %9.3f", row->key.c_str(),
                 (long long)row->calls, row->seconds,
                 100.0 * row->seconds / total,
                 1e3 * row->seconds / double(row->calls));
    if (row->flopsPerCall > 0)
      std::fprintf(stderr, " %8.1f",
                   row->flopsPerCall * double(row->calls) / row->seconds /
                       1e12);
    std::fprintf(stderr, "\n");
  }
}

} // namespace cuda
} // namespace strata::rt
