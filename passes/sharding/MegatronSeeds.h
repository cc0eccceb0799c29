//===- MegatronSeeds.h - Megatron-LM's decisions as seeds ------*- C++ -*-===//
//
// The presets' tensor parallelism is Megatron-LM's: column -> row blocks,
// attention split by heads (kv heads fewer than the ranks cut per group),
// the vocabulary split, and under sequence parallelism the residual stream
// split along the sequence. `seedMegatronDecisions` states those decisions
// as seeds for strata-propagate-sharding; the ops' rules and
// strata-partition-sharding do the rest.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_PASSES_SHARDING_MEGATRONSEEDS_H
#define STRATA_PASSES_SHARDING_MEGATRONSEEDS_H

#include "mlir/IR/BuiltinOps.h"

namespace strata {

/// Writes Megatron-LM's decisions for member `rank` of a tp group of `tp`
/// on @forward of `module`: strata.sharding (and strata.shard_view, the
/// checkpoint view a split is stated in) on the split parameters, and with
/// `sp` the embeddings' outputs split along the sequence. The decisions are
/// those of strata-shard-tensor-parallel's block analysis, run on a copy
/// (its errors are the presets' divisibility errors). Fails, with a
/// diagnostic, where a decision has no seed.
mlir::LogicalResult seedMegatronDecisions(mlir::ModuleOp module, int64_t tp,
                                          int64_t rank, bool sp);

} // namespace strata

#endif // STRATA_PASSES_SHARDING_MEGATRONSEEDS_H
