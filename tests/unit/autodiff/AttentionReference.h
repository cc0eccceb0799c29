//===- AttentionReference.h - float64 semantics of causal_attention -*- C++
//-*-===//
//
// The reference interpreter's transcription of strata.causal_attention and
// its gradient op (StrataOps.td), in double precision and written the plain
// way: the whole [S, S] probability matrix per head, no tiles and no online
// softmax, so it is independent of the runtime's FlashAttention kernel.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TESTS_UNIT_AUTODIFF_ATTENTIONREFERENCE_H
#define STRATA_TESTS_UNIT_AUTODIFF_ATTENTIONREFERENCE_H

#include "tests/unit/autodiff/Interpreter.h"

namespace strata::reference {

/// q [B, H, S, D], k and v [B, KV, S, D]: out = softmax(scale q k^T,
/// causal) v with query head h reading kv head h / (H / KV); lse [B, H, S]
/// the log of each row's softmax denominator.
void causalAttention(const Tensor &q, const Tensor &k, const Tensor &v,
                     double scale, Tensor &out, Tensor &lse);

/// Gradients of causalAttention with respect to q, k and v from the output
/// gradient (the probabilities are recomputed in full, not from lse).
void causalAttentionGrad(const Tensor &dout, const Tensor &q, const Tensor &k,
                         const Tensor &v, double scale, Tensor &dq, Tensor &dk,
                         Tensor &dv);

} // namespace strata::reference

#endif // STRATA_TESTS_UNIT_AUTODIFF_ATTENTIONREFERENCE_H
