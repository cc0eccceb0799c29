//===- Sharding.h - Shardings of values and factor assignments --*- C++ -*-===//
//
// A value's sharding is, per dimension, the mesh axis it is split over ("" =
// whole). The propagation pass writes them on the defining op as
// `strata.sharding = [["", "tp"], ...]` (one list per result); a user may
// write them by hand as seeds. `assignFactors` turns the shardings around an
// op into the axis of each factor of its rule, the one decision both passes
// share.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_PASSES_SHARDING_SHARDING_H
#define STRATA_PASSES_SHARDING_SHARDING_H

#include "dialects/strata/StrataSharding.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseMap.h"

#include <optional>
#include <string>

namespace strata {

constexpr const char *kShardingAttr = "strata.sharding";

/// Per dimension, the mesh axis ("" = whole). A dimension may be split
/// along one dimension of a view of it: "tp@3x4x4:1" is the dimension
/// viewed as [3, 4, 4] (row-major) split over "tp" along view dimension 1
/// (GPT-2's fused QKV projection [.., 3 * heads * head_dim] split by heads).
/// Locally it still has size/n elements; ops whose rule splits the
/// dimension into those factors (a reshape) split the view's factor.
using Sharding = llvm::SmallVector<std::string>;

/// A dimension may also be split over a major part of the mesh axis:
/// "tp/2" is 2 parts, member r holding part r / (n / 2), so n / 2
/// consecutive members share each (key/value heads fewer than the members:
/// each group of members sharing a kv head). Its minor complement "tp%2"
/// (member r: r % (n / 2)) exists only inside a composite dimension whose
/// major factor has "tp/2" (query heads (kv g)), which is then plainly
/// "tp". A parameter so split stays whole; its users cut their part.
struct DimSplit {
  std::string axis;                ///< "" = whole
  llvm::SmallVector<int64_t> view; ///< empty: split along the dimension
  int64_t index = -1;              ///< the view dimension split
  int64_t major = 0;               ///< "tp/k": k; 0 = the whole axis
  int64_t minor = 0;               ///< "tp%k": k
  bool viewed() const { return index >= 0; }
  /// How many parts the dimension is split into over a mesh of `n`.
  int64_t parts(int64_t n) const {
    return major ? major : minor ? n / minor : n;
  }
};
DimSplit parseDimSplit(llvm::StringRef entry);
/// Writes splits over all of a mesh of `n` plainly ("tp/n" is "tp").
void normalizeSharding(Sharding &s, int64_t n);
std::string viewedSplit(llvm::StringRef axis, llvm::ArrayRef<int64_t> view,
                        int64_t index);

/// The shardings written on `op` for its results; nullopt when absent or
/// malformed (one list per result, one string per dimension).
std::optional<llvm::SmallVector<Sharding>> readShardings(mlir::Operation *op);
void writeShardings(mlir::Operation *op, llvm::ArrayRef<Sharding> shardings);

bool isReplicated(const Sharding &s);
std::string shardingStr(const Sharding &s);

/// The axis of each factor of `rule` for `op`, from the known shardings of
/// its operands (parameters first, so weights win over activations) and
/// then of its results. A factor takes an axis only if every dimension it
/// leads divides by the mesh size `meshSize` (or the rule lets it be
/// padded), and an axis goes to one factor only. `known` returns the sharding
/// of a value, if any.
llvm::SmallVector<std::string>
assignFactors(mlir::Operation *op, const ShardingRule &rule, int64_t meshSize,
              llvm::function_ref<const Sharding *(mlir::Value)> known);

/// The sharding of dimension list `dims` under `factorAxis`: each dimension
/// takes the axis of its major factor, or, when only a minor factor is
/// split, that factor's split of the dimension viewed as its factors.
Sharding shardingFrom(const ShardingRule &rule,
                      const ShardingRule::TensorFactors &dims,
                      llvm::ArrayRef<std::string> factorAxis);

} // namespace strata

#endif // STRATA_PASSES_SHARDING_SHARDING_H
