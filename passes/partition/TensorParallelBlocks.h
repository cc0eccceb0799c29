//===- TensorParallelBlocks.h - Finding Megatron blocks by dataflow -*- C++
//-*-===//
//
// The analysis half of strata-shard-tensor-parallel: which matmuls form a
// column-parallel -> row-parallel block, which ops lie between them, and
// along which dimension each value between them is divided among the ranks.
// The pass (ShardTensorParallel.cpp) rewrites what this finds.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_PASSES_PARTITION_TENSORPARALLELBLOCKS_H
#define STRATA_PASSES_PARTITION_TENSORPARALLELBLOCKS_H

#include "dialects/strata/StrataOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

namespace strata::tensor_parallel {

/// How a value inside a block is divided among the ranks: dimension `dim`
/// is split into `tp` equal contiguous parts, or (`select`) the rank holds
/// one of the column's `groups` contiguous groups of it (kv heads replicated
/// when tp exceeds them). `viewed` marks a column output before the reshape
/// that unfolds it: its last dimension is split along one dimension of
/// column `column`'s view, which need not be contiguous.
struct Split {
  int64_t dim = 0;
  bool viewed = false;
  bool select = false;
  int column = 0;
  bool operator==(const Split &o) const {
    return dim == o.dim && viewed == o.viewed && select == o.select &&
           (!viewed || column == o.column);
  }
  bool operator!=(const Split &o) const { return !(*this == o); }
};

/// One column-parallel matmul of a block (a block has one for a fused QKV
/// projection or an MLP's up projection, three for separate q, k and v, two
/// for a gated MLP's gate and up).
struct BlockColumn {
  MatmulOp matmul;
  ParamOp weight;
  BiasAddOp biasAdd; ///< may be null
  /// The output's last dimension viewed as these dimensions (attention:
  /// [heads, head_dim]; an MLP: [features]).
  llvm::SmallVector<int64_t> view;
  /// tp exceeds the column's groups (view[viewIndex]) and is a multiple of
  /// them: each rank computes one group (its query heads' kv head) from a
  /// replicated weight.
  bool select = false;

  int64_t groups(int64_t viewIndex) const { return view[viewIndex]; }
};

/// A column-parallel -> row-parallel block.
struct ParallelBlock {
  llvm::SmallVector<BlockColumn> columns;
  MatmulOp row;
  ParamOp rowWeight;
  /// The local ops between the columns and the row, in program order.
  llvm::SmallVector<mlir::Operation *> ops;
  /// The ranks split every column's view along this dimension.
  int64_t viewIndex = 0;
  /// Whether the split comes from reshapes that unfold the column outputs
  /// (attention heads) rather than the contiguous split (MLP features).
  bool unfolded = false;
  llvm::DenseMap<mlir::Value, Split> splits;

  BlockColumn &columnOf(const Split &s) { return columns[s.column]; }
};

/// Collects the block whose first column is `column`: the other columns
/// that read the same input and join its dataflow, the local ops, the row
/// matmul, and a split of every value between them for `tp` ranks. Fails
/// without a diagnostic when the dataflow is not that of a block.
mlir::LogicalResult matchBlock(MatmulOp column, int64_t tp,
                               ParallelBlock &block);

/// Reports (on the first column) when `tp` does not divide what the block
/// splits; `passName` prefixes the message.
mlir::LogicalResult checkBlockDivisibility(ParallelBlock &block, int64_t tp,
                                           llvm::StringRef passName);

/// The parameter behind a matmul's right operand, if it is one of rank 2
/// and the matmul can be split by it (no transposed lhs).
ParamOp weightParam(MatmulOp mm);

} // namespace strata::tensor_parallel

#endif // STRATA_PASSES_PARTITION_TENSORPARALLELBLOCKS_H
