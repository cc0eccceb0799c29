//===- EmitAttentionOps.cpp - Lowering of fused causal attention ----------===//
//
// strata.causal_attention and its gradient onto causal_attention_fwd/bwd
// (runtime/format/Opcodes.def, 50..63). The forward's two results (output
// and per-row log-sum-exp) are ordinary buffers, so the memory plan keeps
// exactly them alive until the backward pass; no score buffer exists.
//
//===----------------------------------------------------------------------===//

#include "compiler/emit/ProgramEmitter.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace strata;
using namespace strata::emit;

namespace {

/// [batch, heads, kv_heads, seq, head_dim] of the instruction.
std::vector<int64_t> attentionInts(Value query, Value key) {
  auto q = cast<RankedTensorType>(query.getType()).getShape();
  auto k = cast<RankedTensorType>(key.getType()).getShape();
  return {q[0], q[1], k[1], q[2], q[3]};
}

} // namespace

LogicalResult ProgramEmitter::lowerAttentionOp(Operation *op, bool &handled) {
  handled = true;
  auto out = [&](Value v) { return result(op, v); };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](CausalAttentionOp a) -> LogicalResult {
        FailureOr<int> o = out(a.getOutput());
        FailureOr<int> lse = out(a.getLse());
        if (failed(o) || failed(lse))
          return failure();
        emit(rtf::Opcode::CausalAttentionFwd,
             {operand(a.getQuery()), operand(a.getKey()), operand(a.getValue()),
              *o, *lse},
             attentionInts(a.getQuery(), a.getKey()),
             {a.getScale().convertToDouble()});
        return success();
      })
      .Case([&](CausalAttentionGradOp g) -> LogicalResult {
        FailureOr<int> dq = out(g.getQueryGrad());
        FailureOr<int> dk = out(g.getKeyGrad());
        FailureOr<int> dv = out(g.getValueGrad());
        if (failed(dq) || failed(dk) || failed(dv))
          return failure();
        for (Value grad : g->getResults())
          if (accumulates(grad))
            return g.emitError("causal_attention_grad overwrites its "
                               "results; a query, key or value that is a "
                               "parameter is not supported");
        emit(rtf::Opcode::CausalAttentionBwd,
             {operand(g.getGrad()), operand(g.getQuery()), operand(g.getKey()),
              operand(g.getValue()), operand(g.getOutput()),
              operand(g.getLse()), *dq, *dk, *dv},
             attentionInts(g.getQuery(), g.getKey()),
             {g.getScale().convertToDouble()});
        return success();
      })
      .Default([&](Operation *) {
        handled = false;
        return success();
      });
}
