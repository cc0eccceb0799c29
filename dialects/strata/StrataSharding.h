//===- StrataSharding.h - Sharding rules of strata ops ----------*- C++ -*-===//
//
// `ShardingRule` is Shardy's factor form of an op: matmul is
// ([i, k], [k, j]) -> ([i, j]) with k a reduction factor. Every forward op of
// the dialect has one, attached as an external model of
// ShardingRuleOpInterface by `registerShardingRules`.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_DIALECTS_STRATA_STRATASHARDING_H
#define STRATA_DIALECTS_STRATA_STRATASHARDING_H

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OpDefinition.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace strata {

struct ShardingRule {
  /// Factors of one dimension, major first; empty: the dimension stays whole.
  using DimFactors = llvm::SmallVector<int64_t, 2>;
  using TensorFactors = llvm::SmallVector<DimFactors>;
  llvm::SmallVector<int64_t> factorSizes;
  llvm::SmallVector<TensorFactors> operands, results;
  /// Factors the op computes right when they are split with padding (a size
  /// the mesh does not divide: each member holds ceil(size / n), the last
  /// ones zeros past the end): a table's rows, a matmul's output features
  /// (zero weight rows give zero outputs), a bias's features, a loss's
  /// classes (masked).
  llvm::SmallVector<int64_t> paddable;

  /// A factor of some operand that no result has: sharding it leaves
  /// partial sums.
  bool isReduction(int64_t factor) const;
  /// "([i, k], [k, j]) -> ([i, j]) {i=8, j=32, k=64} reduction={k}"; a
  /// dimension that stays whole prints as `_`, a composite one as `(a b)`.
  std::string str() const;
};

/// Attaches the sharding rule of every op that has one (StrataDialect does,
/// when it is loaded).
void attachShardingRules(mlir::MLIRContext *ctx);

} // namespace strata

#include "dialects/strata/StrataShardingInterface.h.inc"

#endif // STRATA_DIALECTS_STRATA_STRATASHARDING_H
