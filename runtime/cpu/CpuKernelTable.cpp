//===- CpuKernelTable.cpp - Opcode -> CPU kernel table --------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Each entry unpacks operands and attributes in the order OpSchema.cpp
// declares them and calls the kernel. Adding an opcode means: a line in
// Opcodes.def, its schema entry, and one entry here.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/AttentionKernels.h"
#include "runtime/cpu/CpuDevice.h"
#include "runtime/cpu/Kernels.h"

#include "runtime/format/OpSchema.h"
#include "runtime/kernels/OptimizerMath.h"
#include "runtime/support/Error.h"

#include <array>
#include <cmath>
#include <cstring>

namespace strata::rt::cpu {

namespace {

using B = BoundInstruction;
using C = ExecContext;

void runFill(const B &b, const C &) {
  if (b.isBf16(0))
    fill(b.bf16(0), b.elements[0], float(b.fattr(0)));
  else
    fill(b.f32(0), b.elements[0], float(b.fattr(0)));
}
void runCopy(const B &b, const C &) {
  if (b.isBf16(0))
    copy(b.bf16(0), b.bf16(1), b.elements[0]);
  else
    copy(b.f32(0), b.f32(1), b.elements[0]);
}
void runAccumulate(const B &b, const C &) {
  if (!b.isBf16(0))
    accumulate(b.f32(0), b.f32(1), b.elements[0]);
  else if (b.isBf16(1))
    accumulate(b.bf16(0), b.bf16(1), b.elements[0]);
  else
    accumulate(b.bf16(0), b.f32(1), b.elements[0]);
}
// Kernels with a bf16 form take it when kernelTakesDtypes says so (then
// their activation operands are all bf16); otherwise every operand is f32
// (the device stages bf16 ones).
void runAdd(const B &b, const C &) {
  if (b.isBf16(0))
    add(b.bf16(0), b.bf16(1), b.bf16(2), b.elements[0]);
  else
    add(b.f32(0), b.f32(1), b.f32(2), b.elements[0]);
}
void runMul(const B &b, const C &) {
  if (b.isBf16(0))
    mul(b.bf16(0), b.bf16(1), b.bf16(2), b.elements[0]);
  else
    mul(b.f32(0), b.f32(1), b.f32(2), b.elements[0]);
}
void runScale(const B &b, const C &) {
  if (b.isBf16(0))
    scale(b.bf16(0), b.bf16(1), b.elements[0], float(b.fattr(0)));
  else
    scale(b.f32(0), b.f32(1), b.elements[0], float(b.fattr(0)));
}
void runTranspose(const B &b, const C &) {
  int rank = int(b.attr(0));
  const int64_t *dims = b.inst->ints.data() + 1, *perm = dims + rank;
  if (b.isBf16(0))
    transpose(b.bf16(0), b.bf16(1), rank, dims, perm);
  else
    transpose(b.f32(0), b.f32(1), rank, dims, perm);
}
void runSliceCopy(const B &b, const C &) {
  if (b.isBf16(0))
    sliceCopy(b.bf16(0), b.bf16(1), b.attr(0), b.attr(1), b.attr(2), b.attr(3),
              b.attr(4));
  else
    sliceCopy(b.f32(0), b.f32(1), b.attr(0), b.attr(1), b.attr(2), b.attr(3),
              b.attr(4));
}
void runSliceInsert(const B &b, const C &) {
  if (b.isBf16(0))
    sliceInsert(b.bf16(0), b.bf16(1), b.attr(0), b.attr(1), b.attr(2),
                b.attr(3), b.attr(4), b.attr(5) != 0);
  else
    sliceInsert(b.f32(0), b.f32(1), b.attr(0), b.attr(1), b.attr(2), b.attr(3),
                b.attr(4), b.attr(5) != 0);
}
void runMatmul(const B &b, const C &) {
  MatmulShape s;
  s.batch = b.attr(0);
  s.m = b.attr(1);
  s.n = b.attr(2);
  s.k = b.attr(3);
  s.transA = b.attr(4) != 0;
  s.transB = b.attr(5) != 0;
  s.broadcastB = b.attr(6) != 0;
  if (b.dtypes[0] == DType::F32 && b.dtypes[1] == DType::F32 &&
      b.dtypes[2] == DType::F32)
    matmul(b.f32(0), b.f32(1), b.f32(2), s, float(b.fattr(0)),
           float(b.fattr(1)));
  else
    matmulMixed(b.operands[0], b.dtypes[0], b.operands[1], b.dtypes[1],
                b.operands[2], b.dtypes[2], s, float(b.fattr(0)),
                float(b.fattr(1)));
}
void runConvert(const B &b, const C &) {
  DType from = b.dtypes[0], to = b.dtypes[1];
  int64_t n = b.elements[0];
  if (from == DType::BF16 && to == DType::F32)
    widenBf16(static_cast<const uint16_t *>(b.operands[0]), b.f32(1), n);
  else if (from == DType::F32 && to == DType::BF16)
    narrowToBf16(b.f32(0), static_cast<uint16_t *>(b.operands[1]), n);
  else if (b.operands[0] != b.operands[1])
    std::memmove(b.operands[1], b.operands[0], size_t(n) * dtypeBytes(from));
}
void runEmbeddingFwd(const B &b, const C &) {
  embeddingFwd(b.i32(0), b.elements[0], b.f32(1), b.attr(0), b.attr(1),
               b.attr(2), b.f32(2));
}
void runEmbeddingBwd(const B &b, const C &) {
  embeddingBwd(b.i32(0), b.elements[0], b.f32(1), b.attr(0), b.attr(1),
               b.attr(2), b.f32(2));
}
void runBiasAdd(const B &b, const C &) {
  int64_t n = b.attr(0);
  if (b.isBf16(0))
    biasAdd(b.bf16(0), b.bf16(1), b.bf16(2), b.elements[0] / n, n);
  else
    biasAdd(b.f32(0), b.f32(1), b.f32(2), b.elements[0] / n, n);
}
void runBiasGrad(const B &b, const C &) {
  int64_t n = b.attr(0), rows = b.elements[0] / n;
  if (!b.isBf16(0))
    biasGrad(b.f32(0), b.f32(1), rows, n);
  else if (b.isBf16(1))
    biasGrad(b.bf16(0), b.bf16(1), rows, n);
  else
    biasGrad(b.bf16(0), b.f32(1), rows, n);
}
void runGeluFwd(const B &b, const C &) {
  if (b.isBf16(0))
    geluFwd(b.bf16(0), b.bf16(1), b.elements[0]);
  else
    geluFwd(b.f32(0), b.f32(1), b.elements[0]);
}
void runGeluBwd(const B &b, const C &) {
  if (b.isBf16(0))
    geluBwd(b.bf16(0), b.bf16(1), b.bf16(2), b.elements[0]);
  else
    geluBwd(b.f32(0), b.f32(1), b.f32(2), b.elements[0]);
}
void runReluFwd(const B &b, const C &) {
  reluFwd(b.f32(0), b.f32(1), b.elements[0]);
}
void runReluBwd(const B &b, const C &) {
  reluBwd(b.f32(0), b.f32(1), b.f32(2), b.elements[0]);
}
void runLayerNormFwd(const B &b, const C &) {
  int64_t n = b.attr(0), rows = b.elements[0] / n;
  float eps = float(b.fattr(0));
  if (b.isBf16(0))
    layerNormFwd(b.bf16(0), b.bf16(1), b.bf16(2), b.bf16(3), b.f32(4), b.f32(5),
                 rows, n, eps);
  else
    layerNormFwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4), b.f32(5),
                 rows, n, eps);
}
void runLayerNormBwd(const B &b, const C &) {
  int64_t n = b.attr(0), rows = b.elements[0] / n;
  if (!b.isBf16(0))
    layerNormBwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4), b.f32(5),
                 b.f32(6), b.f32(7), rows, n);
  else if (b.isBf16(6))
    layerNormBwd(b.bf16(0), b.bf16(1), b.bf16(2), b.f32(3), b.f32(4), b.bf16(5),
                 b.bf16(6), b.bf16(7), rows, n);
  else
    layerNormBwd(b.bf16(0), b.bf16(1), b.bf16(2), b.f32(3), b.f32(4), b.bf16(5),
                 b.f32(6), b.f32(7), rows, n);
}
void runSoftmaxFwd(const B &b, const C &) {
  int64_t n = b.attr(0), rows = b.elements[0] / n;
  bool causal = b.attr(1) != 0;
  if (b.isBf16(0))
    softmaxFwd(b.bf16(0), b.bf16(1), rows, n, causal, float(b.fattr(0)));
  else
    softmaxFwd(b.f32(0), b.f32(1), rows, n, causal, float(b.fattr(0)));
}
void runRotaryAtPosition(const B &b, const C &ctx) {
  int64_t dim = b.attr(0);
  rotaryAtPosition(b.f32(0), b.f32(1), b.elements[0] / dim, dim, ctx.step,
                   b.fattr(0));
}
void runKvAttention(const B &b, const C &ctx) {
  kvAttention(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4), b.f32(5),
              b.attr(0), b.attr(1), b.attr(2), b.attr(3), b.attr(4), ctx.step,
              float(b.fattr(0)));
}
AttentionShape attentionShape(const B &b) {
  return {b.attr(0), b.attr(1), b.attr(2), b.attr(3), b.attr(4)};
}
void runCausalAttentionFwd(const B &b, const C &) {
  if (b.isBf16(0))
    causalAttentionFwd(b.bf16(0), b.bf16(1), b.bf16(2), b.bf16(3), b.f32(4),
                       attentionShape(b), float(b.fattr(0)));
  else
    causalAttentionFwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4),
                       attentionShape(b), float(b.fattr(0)));
}
void runCausalAttentionBwd(const B &b, const C &) {
  if (b.isBf16(0))
    causalAttentionBwd(b.bf16(0), b.bf16(1), b.bf16(2), b.bf16(3), b.bf16(4),
                       b.f32(5), b.bf16(6), b.bf16(7), b.bf16(8),
                       attentionShape(b), float(b.fattr(0)));
  else
    causalAttentionBwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4),
                       b.f32(5), b.f32(6), b.f32(7), b.f32(8),
                       attentionShape(b), float(b.fattr(0)));
}
void runSoftmaxBwd(const B &b, const C &) {
  int64_t n = b.attr(0), rows = b.elements[0] / n;
  if (b.isBf16(0))
    softmaxBwd(b.bf16(0), b.bf16(1), b.bf16(2), rows, n, float(b.fattr(0)));
  else
    softmaxBwd(b.f32(0), b.f32(1), b.f32(2), rows, n, float(b.fattr(0)));
}
void runCrossEntropyFwd(const B &b, const C &) {
  int64_t vocab = b.attr(0);
  double loss = crossEntropyFwd(b.f32(0), b.i32(1), b.elements[0] / vocab,
                                vocab, b.f32(3));
  *b.f32(2) = float(loss);
}
void runCrossEntropyBwd(const B &b, const C &) {
  int64_t vocab = b.attr(0);
  crossEntropyBwd(b.f32(0), b.i32(1), b.f32(2), b.f32(3), b.elements[0] / vocab,
                  vocab, float(b.fattr(0)));
}
void runCeVpMax(const B &b, const C &) {
  int64_t n = b.attr(0);
  ceVpMax(b.f32(0), b.f32(1), b.elements[0] / n, n, b.attr(1));
}
void runCeVpSumExp(const B &b, const C &) {
  int64_t n = b.attr(0);
  ceVpSumExp(b.f32(0), b.i32(1), b.f32(2), b.f32(3), b.elements[0] / n, n,
             b.attr(1), b.attr(2));
}
void runCeVpLoss(const B &b, const C &) {
  *b.f32(2) = float(ceVpLoss(b.f32(0), b.f32(1), b.f32(3), b.attr(0)));
}
void runCeVpBwd(const B &b, const C &) {
  int64_t n = b.attr(0);
  ceVpBwd(b.f32(0), b.i32(1), b.f32(2), b.f32(3), b.elements[0] / n, n,
          b.attr(1), b.attr(2), float(b.fattr(0)));
}
// Llama family.
void runRmsNormFwd(const B &b, const C &) {
  int64_t n = b.attr(0), rows = b.elements[0] / n;
  float eps = float(b.fattr(0));
  if (b.isBf16(0))
    rmsNormFwd(b.bf16(0), b.bf16(1), b.bf16(2), b.f32(3), rows, n, eps);
  else
    rmsNormFwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), rows, n, eps);
}
void runRmsNormBwd(const B &b, const C &) {
  int64_t n = b.attr(0), rows = b.elements[0] / n;
  if (!b.isBf16(0))
    rmsNormBwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4), b.f32(5), rows,
               n);
  else if (b.isBf16(5))
    rmsNormBwd(b.bf16(0), b.bf16(1), b.bf16(2), b.f32(3), b.bf16(4), b.bf16(5),
               rows, n);
  else
    rmsNormBwd(b.bf16(0), b.bf16(1), b.bf16(2), b.f32(3), b.bf16(4), b.f32(5),
               rows, n);
}
void runRotary(const B &b, bool inverse) {
  int64_t seq = b.attr(0), dim = b.attr(1), outer = b.elements[0] / (seq * dim);
  if (b.isBf16(0))
    rotary(b.bf16(0), b.bf16(1), outer, seq, dim, b.fattr(0), inverse);
  else
    rotary(b.f32(0), b.f32(1), outer, seq, dim, b.fattr(0), inverse);
}
void runRotaryFwd(const B &b, const C &) { runRotary(b, false); }
void runRotaryBwd(const B &b, const C &) { runRotary(b, true); }
void runSiluFwd(const B &b, const C &) {
  if (b.isBf16(0))
    siluFwd(b.bf16(0), b.bf16(1), b.elements[0]);
  else
    siluFwd(b.f32(0), b.f32(1), b.elements[0]);
}
void runSiluBwd(const B &b, const C &) {
  if (b.isBf16(0))
    siluBwd(b.bf16(0), b.bf16(1), b.bf16(2), b.elements[0]);
  else
    siluBwd(b.f32(0), b.f32(1), b.f32(2), b.elements[0]);
}
void runUnaryFwd(const B &b, const C &) {
  unaryFwd(b.attr(0), b.f32(0), b.f32(1), b.elements[0]);
}
void runUnaryBwd(const B &b, const C &) {
  unaryBwd(b.attr(0), b.f32(0), b.f32(1), b.f32(2), b.elements[0]);
}
void runBinaryFwd(const B &b, const C &) {
  binaryFwd(b.attr(0), b.f32(0), b.f32(1), b.f32(2), b.elements[0], b.attr(1),
            b.attr(2), b.attr(3));
}
void runSiluMulFwd(const B &b, const C &) {
  if (b.isBf16(0))
    siluMulFwd(b.bf16(0), b.bf16(1), b.bf16(2), b.elements[0]);
  else
    siluMulFwd(b.f32(0), b.f32(1), b.f32(2), b.elements[0]);
}
void runSiluMulBwd(const B &b, const C &) {
  if (b.isBf16(0))
    siluMulBwd(b.bf16(0), b.bf16(1), b.bf16(2), b.bf16(3), b.bf16(4),
               b.elements[0]);
  else
    siluMulBwd(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.f32(4), b.elements[0]);
}
void runRepeatInterleave(const B &b, const C &) {
  if (b.isBf16(0))
    repeatInterleave(b.bf16(0), b.bf16(1), b.attr(0), b.attr(1), b.attr(2),
                     b.attr(3));
  else
    repeatInterleave(b.f32(0), b.f32(1), b.attr(0), b.attr(1), b.attr(2),
                     b.attr(3));
}
void runRepeatInterleaveBwd(const B &b, const C &) {
  if (b.isBf16(0))
    repeatInterleaveBwd(b.bf16(0), b.bf16(1), b.attr(0), b.attr(1), b.attr(2),
                        b.attr(3));
  else
    repeatInterleaveBwd(b.f32(0), b.f32(1), b.attr(0), b.attr(1), b.attr(2),
                        b.attr(3));
}

void runGradSumSq(const B &b, const C &) {
  double total = 0.0;
  for (size_t i = 1; i < b.operands.size(); ++i)
    total += sumSquares(b.f32(i), b.elements[i]);
  *b.f64(0) = total;
}
void runClipGrads(const B &b, const C &) {
  // torch.nn.utils.clip_grad_norm_: scale only when the coefficient is < 1.
  double coef = kernels::clipCoefficient(*b.f64(0), b.fattr(0));
  if (!(coef < 1.0))
    return;
  for (size_t i = 1; i < b.operands.size(); ++i)
    scale(b.f32(i), b.f32(i), b.elements[i], float(coef));
}
void runSgdStep(const B &b, const C &ctx) {
  sgdStep(b.f32(0), b.f32(1), b.f32(2), b.elements[0], ctx.lr, b.fattr(0),
          b.fattr(1));
}
void runAdamWStep(const B &b, const C &ctx) {
  adamwStep(b.f32(0), b.f32(1), b.f32(2), b.f32(3), b.elements[0], ctx.lr,
            b.fattr(0), b.fattr(1), b.fattr(2), b.fattr(3), ctx.step + 1);
}

// Collectives hand the arena pointers straight to the communicator; the
// verifier has checked group membership, sizes and slots.
StepServices &services(const C &ctx) {
  if (!ctx.services)
    fail("internal error: a collective or load_batch ran without the "
         "executor's services");
  return *ctx.services;
}
ReduceOp reduceOp(int64_t op) {
  return op == 1 ? ReduceOp::Max : ReduceOp::Sum;
}

void runLoadBatch(const B &b, const C &ctx) {
  services(ctx).loadBatch(b.attr(0), b.i32(0), b.i32(1), b.i32(2));
}
void runAllReduce(const B &b, const C &ctx) {
  services(ctx).group(b.attr(0)).allReduce(b.operands[0], b.elements[0],
                                           b.dtypes[0], reduceOp(b.attr(1)));
}
void runReduceScatter(const B &b, const C &ctx) {
  services(ctx).group(b.attr(0)).reduceScatter(b.operands[0], b.operands[1],
                                               b.elements[1], b.dtypes[0]);
}
void runAllGather(const B &b, const C &ctx) {
  services(ctx).group(b.attr(0)).allGather(b.operands[0], b.operands[1],
                                           b.elements[0], b.dtypes[0]);
}
void runSend(const B &b, const C &ctx) {
  services(ctx).world().send(b.operands[0], b.elements[0], b.dtypes[0],
                             int(b.attr(0)), int(b.attr(1)));
}
void runRecv(const B &b, const C &ctx) {
  services(ctx).world().recv(b.operands[0], b.elements[0], b.dtypes[0],
                             int(b.attr(0)), int(b.attr(1)));
}
void runBarrier(const B &b, const C &ctx) {
  services(ctx).group(b.attr(0)).barrier();
}
void runAllReduceStart(const B &b, const C &ctx) {
  StepServices &s = services(ctx);
  s.park(b.attr(2),
         s.group(b.attr(0)).startAllReduce(b.operands[0], b.elements[0],
                                           b.dtypes[0], reduceOp(b.attr(1))));
}
void runReduceScatterStart(const B &b, const C &ctx) {
  StepServices &s = services(ctx);
  s.park(b.attr(1),
         s.group(b.attr(0)).startReduceScatter(b.operands[0], b.operands[1],
                                               b.elements[1], b.dtypes[0]));
}
void runAllGatherStart(const B &b, const C &ctx) {
  StepServices &s = services(ctx);
  s.park(b.attr(1),
         s.group(b.attr(0)).startAllGather(b.operands[0], b.operands[1],
                                           b.elements[0], b.dtypes[0]));
}
void runSendStart(const B &b, const C &ctx) {
  StepServices &s = services(ctx);
  s.park(b.attr(2),
         s.world().startSend(b.operands[0], b.elements[0], b.dtypes[0],
                             int(b.attr(0)), int(b.attr(1))));
}
void runRecvStart(const B &b, const C &ctx) {
  StepServices &s = services(ctx);
  s.park(b.attr(2),
         s.world().startRecv(b.operands[0], b.elements[0], b.dtypes[0],
                             int(b.attr(0)), int(b.attr(1))));
}
void runWait(const B &b, const C &ctx) { services(ctx).wait(b.attr(0)); }

struct Entry {
  Opcode opcode;
  KernelFn kernel;
};

constexpr Entry kEntries[] = {
    {Opcode::Fill, runFill},
    {Opcode::Copy, runCopy},
    {Opcode::Accumulate, runAccumulate},
    {Opcode::Add, runAdd},
    {Opcode::Mul, runMul},
    {Opcode::Scale, runScale},
    {Opcode::Transpose, runTranspose},
    {Opcode::SliceCopy, runSliceCopy},
    {Opcode::SliceInsert, runSliceInsert},
    {Opcode::Matmul, runMatmul},
    {Opcode::Convert, runConvert},
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
    // Llama family.
    {Opcode::RmsNormFwd, runRmsNormFwd},
    {Opcode::RmsNormBwd, runRmsNormBwd},
    {Opcode::RotaryFwd, runRotaryFwd},
    {Opcode::RotaryBwd, runRotaryBwd},
    {Opcode::SiluFwd, runSiluFwd},
    {Opcode::SiluBwd, runSiluBwd},
    {Opcode::SiluMulFwd, runSiluMulFwd},
    {Opcode::UnaryFwd, runUnaryFwd},
    {Opcode::UnaryBwd, runUnaryBwd},
    {Opcode::BinaryFwd, runBinaryFwd},
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

std::array<KernelFn, 65536> buildTable() {
  std::array<KernelFn, 65536> table{};
  for (const Entry &e : kEntries)
    table[static_cast<uint16_t>(e.opcode)] = e.kernel;
  return table;
}

} // namespace

bool kernelTakesDtypes(Opcode op, const std::vector<DType> &dtypes) {
  return hasBf16Form(op, dtypes);
}

KernelFn lookupCpuKernel(Opcode opcode) {
  static const std::array<KernelFn, 65536> table = buildTable();
  return table[static_cast<uint16_t>(opcode)];
}

} // namespace strata::rt::cpu
