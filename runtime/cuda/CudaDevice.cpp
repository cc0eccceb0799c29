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
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaDevice.h"

#include "runtime/core/HostStaging.h"
#include "runtime/cuda/CudaKernels.h"
#include "runtime/format/OpSchema.h"
#include "runtime/support/Error.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

//===--- Compute ---------------------------------------------------------===//

void runFill(const B &b, const C &, D &d) {
  fill(b.f32(0), b.elements[0], float(b.fattr(0)), d.stream());
}
void runCopy(const B &b, const C &, D &d) {
  if (b.operands[0] != b.operands[1])
    check(cudaMemcpyAsync(b.operands[1], b.operands[0],
                          sizeof(float) * b.elements[0],
                          cudaMemcpyDeviceToDevice, d.stream()),
          "copy");
}
void runAccumulate(const B &b, const C &, D &d) {
  accumulate(b.f32(0), b.f32(1), b.elements[0], d.stream());
}
void runAdd(const B &b, const C &, D &d) {
  add(b.f32(0), b.f32(1), b.f32(2), b.elements[0], d.stream());
}
void runMul(const B &b, const C &, D &d) {
  mul(b.f32(0), b.f32(1), b.f32(2), b.elements[0], d.stream());
}
void runScale(const B &b, const C &, D &d) {
  scale(b.f32(0), b.f32(1), b.elements[0], float(b.fattr(0)), d.stream());
}
void runTranspose(const B &b, const C &, D &d) {
  int rank = int(b.attr(0));
  transpose(b.f32(0), b.f32(1), rank, b.inst->ints.data() + 1,
            b.inst->ints.data() + 1 + rank, d.stream());
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
  copySlice(b.f32(1), sizeof(float) * small * inner, b.f32(0) + start * inner,
            sizeof(float) * big * inner, sizeof(float) * small * inner,
            size_t(outer), d.stream());
}
void runSliceInsert(const B &b, const C &, D &d) {
  int64_t outer = b.attr(0), big = b.attr(1), small = b.attr(2),
          start = b.attr(3), inner = b.attr(4);
  if (b.attr(5) != 0)
    sliceInsertAccumulate(b.f32(0), b.f32(1), outer, big, small, start, inner,
                          d.stream());
  else
    copySlice(b.f32(1) + start * inner, sizeof(float) * big * inner, b.f32(0),
              sizeof(float) * small * inner, sizeof(float) * small * inner,
              size_t(outer), d.stream());
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
               b.attr(2), b.f32(2), d.stream());
}
void runBiasAdd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  biasAdd(b.f32(0), b.f32(1), b.f32(2), b.elements[0] / n, n, d.stream());
}
void runBiasGrad(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  biasGrad(b.f32(0), b.f32(1), b.elements[0] / n, n, d.stream());
}
void runGeluFwd(const B &b, const C &, D &d) {
  geluFwd(b.f32(0), b.f32(1), b.elements[0], d.stream());
}
void runGeluBwd(const B &b, const C &, D &d) {
  geluBwd(b.f32(0), b.f32(1), b.f32(2), b.elements[0], d.stream());
}
void runReluFwd(const B &b, const C &, D &d) {
  reluFwd(b.f32(0), b.f32(1), b.elements[0], d.stream());
}
void runReluBwd(const B &b, const C &, D &d) {
  reluBwd(b.f32(0), b.f32(1), b.f32(2), b.elements[0], d.stream());
}
void runLayerNormFwd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  layerNormFwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4), b.f32(5),
               b.elements[0] / n, n, float(b.fattr(0)), d.stream());
}
void runLayerNormBwd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  layerNormBwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4), b.f32(5),
               b.f32(6), b.f32(7), b.elements[0] / n, n, d.stream());
}
void runSoftmaxFwd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  softmaxFwd(b.f32(0), b.f32(1), b.elements[0] / n, n, b.attr(1) != 0,
             float(b.fattr(0)), d.stream());
}
void runSoftmaxBwd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  softmaxBwd(b.f32(0), b.f32(1), b.f32(2), b.elements[0] / n, n,
             float(b.fattr(0)), d.stream());
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
  causalAttentionFwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4),
                     b.attr(0), b.attr(1), b.attr(2), b.attr(3), b.attr(4),
                     float(b.fattr(0)), d.stream());
}
void runCausalAttentionBwd(const B &b, const C &, D &d) {
  causalAttentionBwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4), b.f32(5),
                     b.f32(6), b.f32(7), b.f32(8), b.attr(0), b.attr(1),
                     b.attr(2), b.attr(3), b.attr(4), float(b.fattr(0)),
                     d.stream());
}
void runCrossEntropyFwd(const B &b, const C &, D &d) {
  int64_t vocab = b.attr(0);
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
  rmsNormFwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.elements[0] / n, n,
             float(b.fattr(0)), d.stream());
}
void runRmsNormBwd(const B &b, const C &, D &d) {
  int64_t n = b.attr(0);
  rmsNormBwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4), b.f32(5),
             b.elements[0] / n, n, d.stream());
}
void runRotary(const B &b, bool inverse, D &d) {
  int64_t seq = b.attr(0), dim = b.attr(1);
  rotary(b.f32(0), b.f32(1), b.elements[0] / (seq * dim), seq, dim, b.fattr(0),
         inverse, d.stream());
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
  siluFwd(b.f32(0), b.f32(1), b.elements[0], d.stream());
}
void runSiluBwd(const B &b, const C &, D &d) {
  siluBwd(b.f32(0), b.f32(1), b.f32(2), b.elements[0], d.stream());
}
void runSiluMulFwd(const B &b, const C &, D &d) {
  siluMulFwd(b.f32(0), b.f32(1), b.f32(2), b.elements[0], d.stream());
}
void runSiluMulBwd(const B &b, const C &, D &d) {
  siluMulBwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4), b.elements[0],
             d.stream());
}
void runRepeatInterleave(const B &b, const C &, D &d) {
  repeatInterleave(b.f32(0), b.f32(1), b.attr(0), b.attr(1), b.attr(2),
                   b.attr(3), d.stream());
}
void runRepeatInterleaveBwd(const B &b, const C &, D &d) {
  repeatInterleaveBwd(b.f32(0), b.f32(1), b.attr(0), b.attr(1), b.attr(2),
                      b.attr(3), d.stream());
}
void runGradSumSq(const B &b, const C &, D &d) {
  check(cudaMemsetAsync(d.scratch(), 0, sizeof(double) * kReduceBlocks,
                        d.stream()),
        "grad_sumsq");
  for (size_t i = 1; i < b.operands.size(); ++i)
    sumSquaresPartials(b.f32(i), b.elements[i], d.scratch(), d.stream());
  sumPartials(d.scratch(), kReduceBlocks, b.f64(0), d.stream());
}
void runClipGrads(const B &b, const C &, D &d) {
  for (size_t i = 1; i < b.operands.size(); ++i)
    clipGrads(b.f32(i), b.elements[i], b.f64(0), b.fattr(0), d.stream());
}
void runSgdStep(const B &b, const C &ctx, D &d) {
  sgdStep(b.f32(0), b.f32(1), b.f32(2), b.elements[0], ctx.lr, b.fattr(0),
          b.fattr(1), d.stream());
}
void runAdamWStep(const B &b, const C &ctx, D &d) {
  adamwStep(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.elements[0], ctx.lr,
            b.fattr(0), b.fattr(1), b.fattr(2), b.fattr(3), ctx.step + 1,
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
    // prepare() refuses bfloat16 buffers, so a convert here is f32 -> f32.
    {Opcode::Convert, runCopy},
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
/// instruction, and kReduceBlocks for grad_sumsq.
size_t scratchDoubles(const RankProgram &rank) {
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

/// The first word of a device model ("H100-SXM5-80GB" -> "H100").
std::string modelFamily(const std::string &model) {
  return model.substr(0, model.find('-'));
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
  release();
  cudaFree(lt_.workspace);
  if (lt_.handle)
    cublasLt().destroy(lt_.handle);
}

void CudaDevice::release() {
  for (auto &seq : sequences_)
    seq.clear();
  cudaFree(arena_);
  cudaFree(scratch_);
  arena_ = nullptr;
  scratch_ = nullptr;
}

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
  check(cudaMalloc(&scratch_, sizeof(double) * scratchDoubles(rank)),
        "allocating the reduction scratch");

  for (int kind = 0; kind < kNumSequenceKinds; ++kind) {
    auto &bound = sequences_[kind];
    auto &kernels = kernels_[kind];
    bound.clear();
    kernels.clear();
    for (const Instruction &inst : rank.sequences[kind]) {
      CudaKernelFn kernel = lookupCudaKernel(inst.opcode);
      if (!kernel)
        fail("opcode ", getOpSchema(inst.opcode).name,
             " has no CUDA kernel in this runtime");
      Bound b;
      b.inst = &inst;
      for (uint32_t id : inst.operands) {
        if (id == kNoBuffer) {
          b.operands.push_back(nullptr);
          b.elements.push_back(0);
          b.dtypes.push_back(DType::F32);
          continue;
        }
        const BufferDesc &buf = rank.buffers[id];
        if (buf.dtype == DType::BF16)
          fail("buffer '", buf.name,
               "' is bfloat16: the CUDA backend runs float32 programs only "
               "so far; compile with --target cpu, or with dtype: float32");
        b.operands.push_back(arena_ + buf.offset);
        b.elements.push_back(buf.numElements());
        b.dtypes.push_back(buf.dtype);
      }
      if (inst.opcode == Opcode::Matmul) {
        GemmShape s;
        s.batch = inst.ints[0];
        s.m = inst.ints[1];
        s.n = inst.ints[2];
        s.k = inst.ints[3];
        s.transA = inst.ints[4] != 0;
        s.transB = inst.ints[5] != 0;
        s.broadcastB = inst.ints[6] != 0;
        b.matmul = std::make_unique<MatmulPlan>(lt_, s, b.operands[0],
                                                b.operands[1], b.operands[2]);
      }
      bound.push_back(std::move(b));
      kernels.push_back(kernel);
    }
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

void CudaDevice::run(SequenceKind kind, const ExecContext &ctx) {
  StepServices *services = ctx.services;
  const auto &bound = sequences_[static_cast<int>(kind)];
  const auto &kernels = kernels_[static_cast<int>(kind)];
  for (size_t i = 0; i < bound.size(); ++i) {
    kernels[i](bound[i], ctx, *this);
    // Host-staged (MPI) requests only advance inside MPI calls.
    if (services && services->hasPending())
      services->progress();
  }
  // Launch errors surface here rather than at the next download.
  check(cudaGetLastError(), sequenceName(kind));
}

} // namespace cuda
} // namespace strata::rt
