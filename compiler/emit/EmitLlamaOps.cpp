//===- EmitLlamaOps.cpp - Lowering of the Llama family's ops --------------===//
//
// RMSNorm (and its saved reciprocal RMS), rotary embeddings, SiLU / SwiGLU
// and grouped-query attention's kv-head repetition, each onto its opcode of
// the 96..111 range (runtime/format/Opcodes.def).
//
//===----------------------------------------------------------------------===//

#include "compiler/emit/ProgramEmitter.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace strata;
using namespace strata::emit;

namespace {

int64_t lastDim(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape().back();
}

int64_t numel(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}

/// [outer, n, inner] around `axis`, the view repeat_interleave works in.
std::array<int64_t, 3> aroundAxis(Value v, int64_t axis) {
  auto shape = cast<RankedTensorType>(v.getType()).getShape();
  return {product(shape.take_front(axis)), shape[axis],
          product(shape.drop_front(axis + 1))};
}

/// [seq, dim]: the trailing dims rotary embeddings work on.
std::vector<int64_t> rotaryDims(Value v) {
  auto shape = cast<RankedTensorType>(v.getType()).getShape();
  return {shape[shape.size() - 2], shape.back()};
}

} // namespace

LogicalResult ProgramEmitter::lowerLlamaOp(Operation *op, bool &handled) {
  handled = true;
  // The buffer of result `v` of `op`, or failure (already reported).
  auto out = [&](Value v) { return result(op, v); };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](RmsNormOp r) -> LogicalResult {
        FailureOr<int> o = out(r.getResult());
        if (failed(o))
          return failure();
        int64_t n = lastDim(r.getInput());
        int rstd = newBuffer(freshName(r) + ".rstd", {numel(r.getInput()) / n},
                             rtf::DType::F32);
        savedStats[r] = {rstd, -1};
        emit(rtf::Opcode::RmsNormFwd,
             {operand(r.getInput()), operand(r.getWeight()), *o, rstd}, {n},
             {r.getEpsilon().convertToDouble()});
        return success();
      })
      .Case([&](RmsNormGradOp g) -> LogicalResult {
        // The saved statistics of the forward rms_norm of the same input.
        int rstd = -1;
        for (Operation *user : g.getInput().getUsers())
          if (auto fwd = dyn_cast<RmsNormOp>(user))
            if (fwd.getWeight() == g.getWeight() && savedStats.count(fwd))
              rstd = savedStats[fwd].first;
        if (rstd < 0)
          return g.emitError("has no forward strata.rms_norm of the same "
                             "input and weight to take statistics from");
        FailureOr<int> dx = out(g.getInputGrad());
        FailureOr<int> dw = out(g.getWeightGrad());
        if (failed(dx) || failed(dw))
          return failure();
        zeroUnlessAccumulating(g.getWeightGrad(), *dw);
        emit(rtf::Opcode::RmsNormBwd,
             {operand(g.getGrad()), operand(g.getInput()),
              operand(g.getWeight()), rstd, *dx, *dw},
             {lastDim(g.getInput())});
        return success();
      })
      .Case<RotaryEmbeddingOp, RotaryEmbeddingGradOp>(
          [&](auto r) -> LogicalResult {
            FailureOr<int> o = out(r->getResult(0));
            if (failed(o))
              return failure();
            Value in = r->getOperand(0);
            emit(isa<RotaryEmbeddingOp>(r) ? rtf::Opcode::RotaryFwd
                                           : rtf::Opcode::RotaryBwd,
                 {operand(in), *o}, rotaryDims(in),
                 {r.getTheta().convertToDouble()});
            return success();
          })
      .Case([&](SiluOp s) -> LogicalResult {
        FailureOr<int> o = out(s.getResult());
        if (failed(o))
          return failure();
        emit(rtf::Opcode::SiluFwd, {operand(s.getInput()), *o});
        return success();
      })
      .Case([&](SiluGradOp s) -> LogicalResult {
        FailureOr<int> o = out(s.getResult());
        if (failed(o))
          return failure();
        emit(rtf::Opcode::SiluBwd,
             {operand(s.getInput()), operand(s.getGrad()), *o});
        return success();
      })
      .Case([&](SiluMulOp s) -> LogicalResult {
        FailureOr<int> o = out(s.getResult());
        if (failed(o))
          return failure();
        emit(rtf::Opcode::SiluMulFwd,
             {operand(s.getGate()), operand(s.getUp()), *o});
        return success();
      })
      .Case([&](SiluMulGradOp s) -> LogicalResult {
        FailureOr<int> dg = out(s.getGateGrad());
        FailureOr<int> du = out(s.getUpGrad());
        if (failed(dg) || failed(du))
          return failure();
        emit(rtf::Opcode::SiluMulBwd, {operand(s.getGate()), operand(s.getUp()),
                                       operand(s.getGrad()), *dg, *du});
        return success();
      })
      .Case([&](RepeatInterleaveOp r) -> LogicalResult {
        FailureOr<int> o = out(r.getResult());
        if (failed(o))
          return failure();
        auto [outer, n, inner] =
            aroundAxis(r.getInput(), r.getNormalizedAxis());
        emit(rtf::Opcode::RepeatInterleave, {operand(r.getInput()), *o},
             {outer, n, int64_t(r.getRepeats()), inner});
        return success();
      })
      .Case([&](RepeatInterleaveGradOp r) -> LogicalResult {
        FailureOr<int> o = out(r.getResult());
        if (failed(o))
          return failure();
        auto [outer, n, inner] =
            aroundAxis(r.getResult(), r.getNormalizedAxis());
        emit(rtf::Opcode::RepeatInterleaveBwd, {operand(r.getGrad()), *o},
             {outer, n, int64_t(r.getRepeats()), inner});
        return success();
      })
      .Default([&](Operation *) {
        handled = false;
        return success();
      });
}
