//===- SeedStatedDecisions.h - A model's stated decisions as seeds -*- C++
//-*-===//
//
// The presets state Megatron-LM's decisions where they build the graph
// (frontends/yaml/Presets.cpp): each parameter's split in strata.sharding's
// notation (`strata.tp_decision`, with the checkpoint view it is stated in,
// `strata.tp_decision_view`, and `strata.tp_decision_padded` where tp need
// not divide it), and the residual stream's split along the sequence under
// sequence parallelism (`strata.sp_decision`). `seedStatedDecisions` (the
// strata-seed-stated-decisions pass) turns them into seeds for
// strata-propagate-sharding for a given tp; the ops' rules and
// strata-partition-sharding do the rest.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_PASSES_SHARDING_SEEDSTATEDDECISIONS_H
#define STRATA_PASSES_SHARDING_SEEDSTATEDDECISIONS_H

#include "mlir/IR/BuiltinOps.h"

namespace strata {

/// Writes the stated decisions of @forward's ops in `module` for a tp group
/// of `tp` as strata.sharding (and strata.shard_view) seeds, the
/// sequence-parallel ones only with `sp`, and removes the statements. A
/// "tp/K" split (K key/value heads) is a plain split when tp divides K and
/// stays "tp/K" (the weight whole, tp/K members sharing each head) when K
/// divides tp. Fails, naming the parameter, where tp does not divide a
/// split dimension that may not be padded. With `tp` 1 only removes them.
mlir::LogicalResult seedStatedDecisions(mlir::ModuleOp module, int64_t tp,
                                        bool sp);

} // namespace strata

#endif // STRATA_PASSES_SHARDING_SEEDSTATEDDECISIONS_H
