//===- TensorParallelBlocks.cpp - Finding Megatron blocks by dataflow -----===//
//
// A block is one or more column matmuls (a parameter weight, read by nothing
// else) whose results flow, through ops that are local along one dimension,
// into exactly one other matmul with a parameter weight (the row half).
// Columns are found from the first one: an operand of a local op that comes
// from outside the block is followed back, through unary local ops, to
// another column matmul of the same input (GPT's fused QKV has one column,
// Llama's attention three: q, k and v; a gated MLP two: gate and up).
//
// Which dimension is local is found by propagating candidate splits through
// the block: the contiguous split of the column outputs (an MLP), or one
// dimension of the reshape that first unfolds each column output (attention:
// [n] -> [heads, head_dim], where only the heads split survives q k^T).
// When tp exceeds a column's heads but is a multiple of them (grouped-query
// attention with fewer kv heads than ranks), that column is `select`ed:
// each rank computes the one kv head its query heads use, and the
// repeat_interleave that serves the query heads turns it into an ordinary
// split (a fused strata.causal_attention reads the selected kv head for all
// of the rank's query heads itself).
//
//===----------------------------------------------------------------------===//

#include "passes/partition/TensorParallelBlocks.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <numeric>
#include <optional>

using namespace mlir;
using namespace strata;
using namespace strata::tensor_parallel;

namespace {

/// A bound on a block's local region; Llama's attention has 20 ops.
constexpr size_t kMaxRegionOps = 128;

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

int64_t product(ArrayRef<int64_t> dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1},
                         std::multiplies<int64_t>());
}

/// Ops a block may hold between its columns and its row.
bool isLocalOp(Operation *op) {
  return isa<BiasAddOp, GeluOp, ReluOp, SiluOp, ScaleOp, ElementwiseUnaryOp,
             ElementwiseBinaryOp, AddOp, MulOp, SiluMulOp, SoftmaxOp, ReshapeOp,
             TransposeOp, SplitOp, MatmulOp, RotaryEmbeddingOp,
             RepeatInterleaveOp, CausalAttentionOp>(op);
}

/// strata.binary by a scalar (one split passes through it unchanged).
bool isScalarBinary(Operation *op) {
  auto b = dyn_cast<ElementwiseBinaryOp>(op);
  return b && tensorType(b.getRhs()).getNumElements() == 1;
}

/// A column candidate: a matmul by a rank-2 parameter read by nothing else.
bool isColumnMatmul(MatmulOp mm) {
  ParamOp weight = weightParam(mm);
  return weight && weight->hasOneUse();
}

/// Follows `v` back through unary local ops to the column matmul it comes
/// from, or null.
MatmulOp producingColumn(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (auto mm = dyn_cast<MatmulOp>(def))
      return isColumnMatmul(mm) ? mm : nullptr;
    if (!isa<ReshapeOp, TransposeOp, RotaryEmbeddingOp, RepeatInterleaveOp,
             GeluOp, ReluOp, SiluOp, ScaleOp, ElementwiseUnaryOp>(def) &&
        !isScalarBinary(def))
      return nullptr;
    v = def->getOperand(0);
  }
  return nullptr;
}

/// The reshape that unfolds `column`'s output (after its bias, if any).
ReshapeOp unfoldingReshape(BlockColumn &column) {
  Value v = column.matmul.getResult();
  if (column.biasAdd)
    v = column.biasAdd.getResult();
  for (Operation *user : v.getUsers())
    if (auto reshape = dyn_cast<ReshapeOp>(user))
      return reshape;
  return nullptr;
}

/// Propagates splits of the column outputs through the block (viewIndex and
/// unfolded set) and checks that every op computes its local part from
/// local parts only and that the row contracts over the split dimension.
LogicalResult propagate(ParallelBlock &block) {
  DenseMap<Value, Split> &splits = block.splits;
  splits.clear();
  for (auto [i, column] : llvm::enumerate(block.columns)) {
    int64_t rank = tensorType(column.matmul.getResult()).getRank();
    splits[column.matmul.getResult()] =
        Split{rank - 1, block.unfolded, column.select, int(i)};
  }
  auto splitOf = [&](Value v) -> std::optional<Split> {
    auto it = splits.find(v);
    return it == splits.end() ? std::nullopt : std::optional<Split>(it->second);
  };
  auto isColumnOutput = [&](Value v, const Split &s) {
    BlockColumn &c = block.columns[s.column];
    return s.dim == tensorType(v).getRank() - 1 && v == c.matmul.getResult();
  };
  for (Operation *op : block.ops) {
    std::optional<Split> in = splitOf(op->getOperand(0));
    if (!in)
      return failure();
    int64_t rank = tensorType(op->getOperand(0)).getRank();
    std::optional<Split> out =
        llvm::TypeSwitch<Operation *, std::optional<Split>>(op)
            .Case<GeluOp, ReluOp, SiluOp, ScaleOp, ElementwiseUnaryOp>(
                [&](auto) { return in; })
            .Case([&](BiasAddOp b) -> std::optional<Split> {
              // Only a column's bias, on the column output's layout, is
              // split with the column weight's view.
              if (!isColumnOutput(b.getInput(), *in) ||
                  block.columns[in->column].biasAdd != b)
                return std::nullopt;
              return in;
            })
            .Case([&](ElementwiseBinaryOp b) -> std::optional<Split> {
              if (isScalarBinary(b) || splitOf(b.getRhs()) == in)
                return in;
              return std::nullopt;
            })
            .Case<AddOp, MulOp, SiluMulOp>([&](auto) -> std::optional<Split> {
              if (splitOf(op->getOperand(1)) != in)
                return std::nullopt;
              return in;
            })
            .Case([&](SoftmaxOp s) -> std::optional<Split> {
              int64_t reduced = s.getCausal() ? rank - 2 : rank - 1;
              if (in->viewed || in->dim >= reduced)
                return std::nullopt;
              return in;
            })
            .Case([&](RotaryEmbeddingOp) -> std::optional<Split> {
              // Positions run along dim -2 and pairs along dim -1.
              if (in->viewed || in->dim >= rank - 2)
                return std::nullopt;
              return in;
            })
            .Case([&](RepeatInterleaveOp r) -> std::optional<Split> {
              if (in->viewed)
                return std::nullopt;
              if (r.getNormalizedAxis() != in->dim)
                return in;
              // Repeating this rank's kv heads for its query heads: a
              // selected group becomes an ordinary split.
              Split s = *in;
              s.select = false;
              return s;
            })
            .Case([&](CausalAttentionOp a) -> std::optional<Split> {
              // Heads (dim 1) split alike in query, key and value; a
              // selected kv head serves all of this rank's query heads.
              std::optional<Split> k = splitOf(a.getKey()),
                                   v = splitOf(a.getValue());
              auto byHeads = [](const std::optional<Split> &s) {
                return s && !s->viewed && s->dim == 1;
              };
              if (!byHeads(in) || in->select || !byHeads(k) || !byHeads(v) ||
                  k->select != v->select)
                return std::nullopt;
              return in;
            })
            .Case([&](TransposeOp t) -> std::optional<Split> {
              if (in->viewed)
                return std::nullopt;
              ArrayRef<int64_t> perm = t.getPermutation();
              Split s = *in;
              s.dim = llvm::find(perm, in->dim) - perm.begin();
              return s;
            })
            .Case([&](SplitOp s) -> std::optional<Split> {
              if (in->viewed || s.getNormalizedAxis() == in->dim)
                return std::nullopt;
              return in;
            })
            .Case([&](MatmulOp mm) -> std::optional<Split> {
              // Both operands split along the same batch dimension.
              if (in->viewed || splitOf(mm.getRhs()) != in ||
                  tensorType(mm.getRhs()).getRank() != rank ||
                  in->dim >= rank - 2)
                return std::nullopt;
              return in;
            })
            .Case([&](ReshapeOp r) -> std::optional<Split> {
              ArrayRef<int64_t> inShape = tensorType(r.getInput()).getShape();
              ArrayRef<int64_t> outShape = tensorType(r).getShape();
              if (in->viewed) {
                // The unfolding reshape: exactly the column's view.
                ArrayRef<int64_t> view = block.columns[in->column].view;
                if (outShape.size() != inShape.size() - 1 + view.size() ||
                    outShape.take_front(inShape.size() - 1) !=
                        inShape.drop_back() ||
                    outShape.drop_front(inShape.size() - 1) != view)
                  return std::nullopt;
                Split s = *in;
                s.viewed = false;
                s.dim =
                    static_cast<int64_t>(inShape.size()) - 1 + block.viewIndex;
                return s;
              }
              // A contiguous split of dimension d is the contiguous split
              // of every dimension d' with the same elements before it:
              // both select the same range of the row-major middle.
              int64_t before = product(inShape.take_front(in->dim));
              for (int64_t d = 0, e = outShape.size(); d < e; ++d)
                if (outShape[d] != 1 &&
                    product(outShape.take_front(d)) == before) {
                  Split s = *in;
                  s.dim = d;
                  return s;
                }
              return std::nullopt;
            })
            .Default([&](Operation *) { return std::nullopt; });
    if (!out)
      return failure();
    for (Value r : op->getResults())
      splits[r] = *out;
  }
  // The row half contracts over the split dimension.
  std::optional<Split> rowIn = splitOf(block.row.getLhs());
  if (!rowIn || rowIn->viewed || rowIn->select ||
      rowIn->dim != tensorType(block.row.getLhs()).getRank() - 1)
    return failure();
  return success();
}

/// Tries every dimension of the columns' views (all of one rank) as the
/// split; with `unfolded`, views come from the reshapes that unfold the
/// column outputs.
LogicalResult chooseSplit(ParallelBlock &block, bool unfolded, int64_t tp) {
  for (BlockColumn &column : block.columns) {
    RankedTensorType type = tensorType(column.matmul.getResult());
    if (!unfolded) {
      column.view = {type.getShape().back()};
      continue;
    }
    ReshapeOp reshape = unfoldingReshape(column);
    if (!reshape)
      return failure();
    ArrayRef<int64_t> in = tensorType(reshape.getInput()).getShape();
    ArrayRef<int64_t> out = tensorType(reshape).getShape();
    if (in.size() != static_cast<size_t>(type.getRank()) ||
        out.size() <= in.size() ||
        out.take_front(in.size() - 1) != in.drop_back())
      return failure();
    column.view.assign(out.begin() + (in.size() - 1), out.end());
  }
  size_t viewRank = block.columns.front().view.size();
  if (llvm::any_of(block.columns,
                   [&](BlockColumn &c) { return c.view.size() != viewRank; }))
    return failure();
  block.unfolded = unfolded;
  for (int64_t index = 0, e = viewRank; index < e; ++index) {
    block.viewIndex = index;
    for (BlockColumn &column : block.columns) {
      // A column with fewer groups than ranks (and a divisor of them) is
      // selected, if its groups are contiguous in the output.
      int64_t groups = column.groups(index);
      column.select =
          groups % tp != 0 && tp % groups == 0 &&
          product(ArrayRef<int64_t>(column.view).take_front(index)) == 1;
    }
    if (succeeded(propagate(block)))
      return success();
  }
  return failure();
}

} // namespace

ParamOp strata::tensor_parallel::weightParam(MatmulOp mm) {
  auto param = mm.getRhs().getDefiningOp<ParamOp>();
  if (!param || tensorType(param).getRank() != 2 || mm.getTransposeA() ||
      tensorType(mm.getLhs()).getRank() < 2)
    return nullptr;
  return param;
}

LogicalResult strata::tensor_parallel::matchBlock(MatmulOp first, int64_t tp,
                                                  ParallelBlock &block) {
  if (!isColumnMatmul(first))
    return failure();
  Value input = first.getLhs();
  llvm::SetVector<Operation *> region;
  SmallVector<Value> worklist;
  auto addColumn = [&](MatmulOp mm) {
    block.columns.push_back({mm, weightParam(mm), nullptr, {}, false});
    worklist.push_back(mm.getResult());
  };
  auto isColumn = [&](Operation *op) {
    return llvm::any_of(block.columns, [&](BlockColumn &c) {
      return c.matmul.getOperation() == op;
    });
  };
  auto inRegion = [&](Value v) {
    Operation *def = v.getDefiningOp();
    return def && (region.contains(def) || isColumn(def));
  };
  addColumn(first);
  while (!worklist.empty()) {
    // Everything the columns' results reach, up to the row matmul.
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      for (OpOperand &use : v.getUses()) {
        Operation *user = use.getOwner();
        if (auto mm = dyn_cast<MatmulOp>(user)) {
          if (ParamOp p = weightParam(mm); p && use.getOperandNumber() == 0) {
            if (block.row && block.row != mm)
              return failure();
            block.row = mm;
            block.rowWeight = p;
            continue;
          }
        }
        if (!isLocalOp(user))
          return failure();
        if (!region.insert(user))
          continue;
        if (region.size() > kMaxRegionOps)
          return failure();
        for (Value r : user->getResults())
          worklist.push_back(r);
      }
    }
    // Operands from outside: another column of the same input joining the
    // dataflow, or a column's bias (a parameter read by nothing else).
    for (Operation *op : region) {
      for (OpOperand &operand : op->getOpOperands()) {
        Value v = operand.get();
        if (inRegion(v))
          continue;
        auto biasAdd = dyn_cast<BiasAddOp>(op);
        auto bias = v.getDefiningOp<ParamOp>();
        if (biasAdd && operand.getOperandNumber() == 1 && bias &&
            bias->hasOneUse()) {
          auto column = llvm::find_if(block.columns, [&](BlockColumn &c) {
            return c.matmul.getResult() == biasAdd.getInput();
          });
          if (column == block.columns.end() || column->biasAdd)
            return failure();
          column->biasAdd = biasAdd;
          continue;
        }
        MatmulOp other = producingColumn(v);
        if (!other || other.getLhs() != input || isColumn(other))
          return failure();
        addColumn(other);
      }
    }
  }
  if (!block.row || !block.rowWeight->hasOneUse() ||
      llvm::any_of(block.columns,
                   [&](BlockColumn &c) { return c.weight == block.rowWeight; }))
    return failure();
  llvm::sort(block.columns, [](BlockColumn &a, BlockColumn &b) {
    return a.matmul->isBeforeInBlock(b.matmul);
  });
  block.ops.assign(region.begin(), region.end());
  llvm::sort(block.ops,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });

  // Unfolded first: a split of heads is also a contiguous split of the
  // features, but only the heads view knows kv heads can be replicated.
  if (succeeded(chooseSplit(block, /*unfolded=*/true, tp)))
    return success();
  return chooseSplit(block, /*unfolded=*/false, tp);
}

LogicalResult strata::tensor_parallel::checkBlockDivisibility(
    ParallelBlock &block, int64_t tp, StringRef passName) {
  // Key/value columns are the ones whose heads are repeated for the query
  // heads (grouped-query attention); they may also be replicated.
  auto isKeyValue = [&](BlockColumn &column) {
    return llvm::any_of(block.ops, [&](Operation *op) {
      auto it = block.splits.find(op->getOperand(0));
      return isa<RepeatInterleaveOp>(op) && it != block.splits.end() &&
             &block.columnOf(it->second) == &column;
    });
  };
  auto fail = [&](BlockColumn &column, int64_t size) {
    int64_t parts = column.groups(block.viewIndex);
    bool kv = isKeyValue(column);
    InFlightDiagnostic diag = column.matmul.emitError();
    diag << passName << ": tp=" << tp << " does not divide ";
    if (kv)
      diag << "the " << parts << " key/value heads of this block";
    else if (block.unfolded)
      diag << "the " << parts << " attention heads of this block";
    else
      diag << "the " << parts << " hidden features (ffn_hidden) of this block";
    if (size != parts)
      diag << " (a dimension of size " << size << " in its local ops)";
    diag << (kv ? "; choose a tp that divides them or a multiple of them"
                : "; choose a tp that divides it");
    return failure();
  };
  for (BlockColumn &column : block.columns) {
    int64_t parts = column.groups(block.viewIndex);
    if (!column.select && parts % tp != 0)
      return fail(column, parts);
  }
  for (auto &[value, split] : block.splits) {
    BlockColumn &column = block.columnOf(split);
    int64_t parts = split.select ? column.groups(block.viewIndex) : tp;
    int64_t size = split.viewed ? product(column.view)
                                : tensorType(value).getDimSize(split.dim);
    if (size % parts != 0)
      return fail(column, size);
  }
  return success();
}
