//===- ShardTensorParallel.cpp - Megatron tensor/sequence parallelism -----===//
//
// Rewrites @forward into what one rank of a tensor-parallel group computes
// (Shoeybi et al. 2019, "Megatron-LM"; Korthikanti et al. 2022 for sequence
// parallelism). The pass recognises structure by dataflow, never by names:
//
//  - a column -> row block is a matmul with a parameter weight (the column
//    half) whose result flows, through ops that are local along one
//    dimension (bias, activation, reshape, transpose, split, softmax,
//    activation x activation matmuls), into exactly one other matmul with a
//    parameter weight (the row half). Which dimension is local is found by
//    propagating candidate splits through the region: the contiguous split
//    of the column output (an MLP), or one dimension of the reshape that
//    first unfolds it (attention: [3H] -> [3, heads, head_dim], where only
//    the heads split survives the q/k/v split and q k^T);
//  - the vocabulary projection is a matmul with a parameter weight whose
//    result (after an optional parameter bias) is the cross-entropy's
//    logits; embeddings of tables with as many rows as there are classes
//    are vocabulary-parallel.
//
// Everything else computes replicated values and is left alone, except
// under sequence parallelism, where the token-wise ops between blocks run on
// sequence shards.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <numeric>
#include <optional>

namespace strata {
#define GEN_PASS_DEF_STRATASHARDTENSORPARALLEL
#include "passes/Passes.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

constexpr llvm::StringLiteral kGroup = "tp";
constexpr llvm::StringLiteral kPassName = "strata-shard-tensor-parallel";
constexpr llvm::StringLiteral kLayerAttr = "strata.layer";
/// A bound on a block's local region; the presets' attention has 14 ops.
constexpr size_t kMaxRegionOps = 128;

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

RankedTensorType withDim(RankedTensorType type, int64_t dim, int64_t size) {
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size;
  return RankedTensorType::get(shape, type.getElementType());
}

int64_t product(ArrayRef<int64_t> dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1},
                         std::multiplies<int64_t>());
}

/// The parameter behind a matmul's right operand, if it is one of rank 2.
ParamOp weightParam(MatmulOp mm) {
  auto param = mm.getRhs().getDefiningOp<ParamOp>();
  if (!param || tensorType(param).getRank() != 2 || mm.getTransposeA() ||
      tensorType(mm.getLhs()).getRank() < 2)
    return nullptr;
  return param;
}

/// How a value inside a block is divided among the ranks: dimension `dim` is
/// split into `tp` equal contiguous parts. `viewed` marks the column output
/// before the reshape that unfolds it: its last dimension is split along one
/// dimension of the block's view, which need not be contiguous.
struct Split {
  int64_t dim;
  bool viewed;
  bool operator==(const Split &o) const {
    return dim == o.dim && viewed == o.viewed;
  }
  bool operator!=(const Split &o) const { return !(*this == o); }
};

/// A column-parallel -> row-parallel block.
struct ParallelBlock {
  MatmulOp column, row;
  ParamOp columnWeight, rowWeight;
  BiasAddOp columnBiasAdd; ///< may be null
  /// The local ops between the two matmuls, in program order.
  SmallVector<Operation *> ops;
  /// The column output's last dimension viewed as these dimensions; the
  /// ranks split it along `view[viewIndex]`.
  SmallVector<int64_t> view;
  int64_t viewIndex = 0;
  /// Whether the split comes from a reshape that unfolds the column output
  /// (attention heads) rather than the contiguous split (MLP features).
  bool unfolded = false;
  DenseMap<Value, Split> splits;
};

/// The matmul before the loss and the embeddings of the same vocabulary.
struct VocabParallel {
  MatmulOp projection;
  BiasAddOp biasAdd; ///< may be null
  CrossEntropyOp loss;
  int64_t vocab = 0;
  SmallVector<EmbeddingOp> embeddings;
};

struct ShardTensorParallelPass
    : strata::impl::StrataShardTensorParallelBase<ShardTensorParallelPass> {
  using StrataShardTensorParallelBase::StrataShardTensorParallelBase;

  void runOnOperation() override;

private:
  // Analysis.
  LogicalResult matchBlock(MatmulOp column, ParallelBlock &block);
  LogicalResult propagateSplits(ParallelBlock &block, bool unfolded);
  LogicalResult checkBlockDivisibility(ParallelBlock &block);
  LogicalResult matchVocabProjection(MatmulOp mm, VocabParallel &vocab);

  // Rewriting.
  Value shardParam(ParamOp param, ArrayRef<int64_t> view, int64_t axis,
                   int64_t localSize, RankedTensorType localType);
  Value enterParallelRegion(Operation *user, Value input);
  void leaveBlock(MatmulOp row);
  void rewriteBlock(ParallelBlock &block);
  void rewriteVocab(VocabParallel &vocab);
  LogicalResult shardSequence(func::FuncOp forward);

  OpBuilder *builder = nullptr;
  int64_t seqAxis = 1;
  int64_t seqLen = 0;
  /// Ops this pass created at the boundary of sequence-sharded regions
  /// (gathers before blocks), and the values that start such regions.
  DenseSet<Operation *> sequenceGathers;
  SmallVector<Value> sequenceSeeds;
  /// Parameters already sharded, with the value their uses now take.
  DenseMap<Operation *, Value> shardedParams;
};

//===----------------------------------------------------------------------===//
// Analysis
//===----------------------------------------------------------------------===//

/// Collects the ops between `column` and its row half. Fails (without a
/// diagnostic: the caller tries other structures) if the dataflow is not
/// that of a block.
LogicalResult ShardTensorParallelPass::matchBlock(MatmulOp column,
                                                  ParallelBlock &block) {
  ParamOp weight = weightParam(column);
  if (!weight || column.getTransposeB() || !weight->hasOneUse())
    return failure();
  block.column = column;
  block.columnWeight = weight;
  llvm::SetVector<Operation *> region;
  SmallVector<Value> worklist{column.getResult()};
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
      if (!isa<BiasAddOp, GeluOp, ReluOp, ScaleOp, AddOp, MulOp, SoftmaxOp,
               ReshapeOp, TransposeOp, SplitOp, MatmulOp>(user))
        return failure();
      if (!region.insert(user))
        continue;
      if (region.size() > kMaxRegionOps)
        return failure();
      for (Value r : user->getResults())
        worklist.push_back(r);
    }
  }
  if (!block.row || block.row.getTransposeB() ||
      !block.rowWeight->hasOneUse() || block.rowWeight == weight)
    return failure();

  // Every operand inside the region comes from the region, except the
  // column bias (a parameter used nowhere else).
  auto inRegion = [&](Value v) {
    return v == column.getResult() || region.contains(v.getDefiningOp());
  };
  for (Operation *op : region) {
    for (OpOperand &operand : op->getOpOperands()) {
      if (inRegion(operand.get()))
        continue;
      auto biasAdd = dyn_cast<BiasAddOp>(op);
      auto bias = operand.get().getDefiningOp<ParamOp>();
      if (!biasAdd || operand.getOperandNumber() != 1 || !bias ||
          !bias->hasOneUse() || block.columnBiasAdd)
        return failure();
      block.columnBiasAdd = biasAdd;
    }
  }
  block.ops.assign(region.begin(), region.end());
  llvm::sort(block.ops,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });

  if (succeeded(propagateSplits(block, /*unfolded=*/false)))
    return success();
  return propagateSplits(block, /*unfolded=*/true);
}

/// Propagates a split of the column output through the region and checks
/// that every op computes its local part from local parts only. With
/// `unfolded`, tries each dimension of the first reshape that unfolds the
/// column output's last dimension.
LogicalResult ShardTensorParallelPass::propagateSplits(ParallelBlock &block,
                                                       bool unfolded) {
  RankedTensorType columnType = tensorType(block.column.getResult());
  int64_t columnRank = columnType.getRank();
  SmallVector<SmallVector<int64_t>> views;
  if (!unfolded) {
    views.push_back({columnType.getShape().back()});
  } else {
    auto it = llvm::find_if(block.ops,
                            [](Operation *op) { return isa<ReshapeOp>(op); });
    if (it == block.ops.end())
      return failure();
    ArrayRef<int64_t> out = tensorType((*it)->getResult(0)).getShape();
    ArrayRef<int64_t> in = tensorType((*it)->getOperand(0)).getShape();
    if (in.size() != static_cast<size_t>(columnRank) ||
        out.size() <= in.size() ||
        out.take_front(in.size() - 1) != in.drop_back())
      return failure();
    views.push_back(SmallVector<int64_t>(out.drop_front(in.size() - 1)));
  }

  for (int64_t index = 0, e = views[0].size(); index < e; ++index) {
    block.view = views[0];
    block.viewIndex = index;
    block.unfolded = unfolded;
    DenseMap<Value, Split> &splits = block.splits;
    splits.clear();
    Split columnSplit{columnRank - 1, unfolded};
    splits[block.column.getResult()] = columnSplit;
    auto splitOf = [&](Value v) -> std::optional<Split> {
      auto it = splits.find(v);
      return it == splits.end() ? std::nullopt
                                : std::optional<Split>(it->second);
    };
    bool ok = true;
    for (Operation *op : block.ops) {
      std::optional<Split> in = splitOf(op->getOperand(0));
      if (!in) {
        ok = false;
        break;
      }
      int64_t rank = tensorType(op->getOperand(0)).getRank();
      std::optional<Split> out =
          llvm::TypeSwitch<Operation *, std::optional<Split>>(op)
              .Case<GeluOp, ReluOp, ScaleOp>([&](auto) { return in; })
              .Case([&](BiasAddOp) -> std::optional<Split> {
                // Only the column bias, on the column output's layout, is
                // split with the column weight's view.
                if (op->getOperand(0).getType() != columnType ||
                    *in != columnSplit)
                  return std::nullopt;
                return in;
              })
              .Case<AddOp, MulOp>([&](auto) -> std::optional<Split> {
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
              .Case([&](TransposeOp t) -> std::optional<Split> {
                if (in->viewed)
                  return std::nullopt;
                ArrayRef<int64_t> perm = t.getPermutation();
                auto it = llvm::find(perm, in->dim);
                return Split{static_cast<int64_t>(it - perm.begin()), false};
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
                  // The unfolding reshape: exactly the block's view.
                  if (outShape.size() !=
                          inShape.size() - 1 + block.view.size() ||
                      outShape.take_front(inShape.size() - 1) !=
                          inShape.drop_back() ||
                      outShape.drop_front(inShape.size() - 1) !=
                          ArrayRef<int64_t>(block.view))
                    return std::nullopt;
                  return Split{static_cast<int64_t>(inShape.size()) - 1 +
                                   block.viewIndex,
                               false};
                }
                // A contiguous split of dimension d is the contiguous split
                // of every dimension d' with the same elements before it:
                // both select the same range of the row-major middle.
                int64_t before = product(inShape.take_front(in->dim));
                for (int64_t d = 0, e = outShape.size(); d < e; ++d)
                  if (outShape[d] != 1 &&
                      product(outShape.take_front(d)) == before)
                    return Split{d, false};
                return std::nullopt;
              })
              .Default([&](Operation *) { return std::nullopt; });
      if (!out) {
        ok = false;
        break;
      }
      for (Value r : op->getResults())
        splits[r] = *out;
    }
    // The row half contracts over the split dimension.
    std::optional<Split> rowIn = splitOf(block.row.getLhs());
    if (ok && rowIn && !rowIn->viewed &&
        rowIn->dim == tensorType(block.row.getLhs()).getRank() - 1)
      return success();
  }
  return failure();
}

LogicalResult
ShardTensorParallelPass::checkBlockDivisibility(ParallelBlock &block) {
  int64_t parts = block.view[block.viewIndex];
  auto fail = [&](int64_t size) {
    InFlightDiagnostic diag = block.column.emitError();
    diag << kPassName << ": tp=" << static_cast<int64_t>(tp)
         << " does not divide ";
    if (block.unfolded)
      diag << "the " << parts << " attention heads of this block";
    else
      diag << "the " << parts << " hidden features (ffn_hidden) of this block";
    if (size != parts)
      diag << " (a dimension of size " << size << " in its local ops)";
    diag << "; choose a tp that divides it";
    return failure();
  };
  if (parts % tp != 0)
    return fail(parts);
  for (auto &[value, split] : block.splits) {
    int64_t size = split.viewed ? product(block.view)
                                : tensorType(value).getDimSize(split.dim);
    if (size % tp != 0)
      return fail(size);
  }
  return success();
}

LogicalResult
ShardTensorParallelPass::matchVocabProjection(MatmulOp mm,
                                              VocabParallel &vocab) {
  if (!weightParam(mm) || !mm->hasOneUse())
    return failure();
  Operation *user = *mm->getUsers().begin();
  if (auto biasAdd = dyn_cast<BiasAddOp>(user)) {
    auto bias = biasAdd.getBias().getDefiningOp<ParamOp>();
    if (!bias || !bias->hasOneUse() || !biasAdd->hasOneUse())
      return failure();
    vocab.biasAdd = biasAdd;
    user = *biasAdd->getUsers().begin();
  }
  auto loss = dyn_cast<CrossEntropyOp>(user);
  Value logits = vocab.biasAdd ? vocab.biasAdd.getResult() : mm.getResult();
  if (!loss || loss.getLogits() != logits)
    return failure();
  vocab.projection = mm;
  vocab.loss = loss;
  vocab.vocab = tensorType(logits).getShape().back();
  return success();
}

//===----------------------------------------------------------------------===//
// Rewriting
//===----------------------------------------------------------------------===//

/// Gives `param` the box of this rank in `view` (the checkpoint's row-major
/// bytes viewed with this shape), split along `axis` into parts of
/// `localSize` (the last part may extend past the view: padding). Returns
/// the value its users take: the box reshaped to `localType`.
Value ShardTensorParallelPass::shardParam(ParamOp param, ArrayRef<int64_t> view,
                                          int64_t axis, int64_t localSize,
                                          RankedTensorType localType) {
  if (Value local = shardedParams.lookup(param))
    return local;
  OpBuilder &b = *builder;
  RankedTensorType global = tensorType(param);
  SmallVector<int64_t> box(view), start(view.size(), 0);
  box[axis] = localSize;
  start[axis] = tpRank * localSize;
  param->setAttr("strata.global_shape",
                 b.getDenseI64ArrayAttr(global.getShape()));
  param->setAttr("strata.shard_view", b.getDenseI64ArrayAttr(view));
  param->setAttr("strata.shard_start", b.getDenseI64ArrayAttr(start));
  param.getResult().setType(
      RankedTensorType::get(box, global.getElementType()));
  Value local = param.getResult();
  if (ArrayRef<int64_t>(box) != localType.getShape()) {
    b.setInsertionPointAfter(param);
    auto reshape = b.create<ReshapeOp>(param.getLoc(), localType, local);
    local.replaceAllUsesExcept(reshape, reshape);
    local = reshape;
  }
  shardedParams[param] = local;
  return local;
}

/// Marks where a replicated (or, with sp, sequence-sharded) value enters
/// per-rank computation: Megatron's f (replicate), or an all-gather of the
/// sequence whose gradient reduce-scatters the partial input gradients.
Value ShardTensorParallelPass::enterParallelRegion(Operation *user,
                                                   Value input) {
  OpBuilder &b = *builder;
  b.setInsertionPoint(user);
  Operation *op;
  if (sp) {
    op = b.create<AllGatherOp>(user->getLoc(), input.getType(), input,
                               b.getStringAttr(kGroup),
                               b.getI64IntegerAttr(seqAxis),
                               b.getI64IntegerAttr(tp), b.getBoolAttr(false));
    sequenceGathers.insert(op);
  } else {
    op = b.create<ReplicateOp>(user->getLoc(), input, b.getStringAttr(kGroup));
  }
  if (Attribute layer = user->getAttr(kLayerAttr))
    op->setAttr(kLayerAttr, layer);
  return op->getResult(0);
}

/// Completes the partial sums of a row-parallel matmul (or of a
/// vocabulary-parallel embedding): all-reduce, or with sp reduce-scatter
/// onto sequence shards.
static Value completePartialSum(OpBuilder &b, Operation *producer, bool sp,
                                int64_t seqAxis, int64_t tp) {
  b.setInsertionPointAfter(producer);
  Value partial = producer->getResult(0);
  Operation *op;
  if (sp)
    op = b.create<ReduceScatterOp>(
        producer->getLoc(), partial, b.getStringAttr(kGroup),
        b.getI64IntegerAttr(seqAxis), b.getI64IntegerAttr(tp));
  else
    op = b.create<AllReduceOp>(producer->getLoc(), partial,
                               b.getStringAttr(kGroup));
  if (Attribute layer = producer->getAttr(kLayerAttr))
    op->setAttr(kLayerAttr, layer);
  partial.replaceAllUsesExcept(op->getResult(0), op);
  return op->getResult(0);
}

void ShardTensorParallelPass::leaveBlock(MatmulOp row) {
  Value done = completePartialSum(*builder, row, sp, seqAxis, tp);
  if (sp)
    sequenceSeeds.push_back(done);
}

void ShardTensorParallelPass::rewriteBlock(ParallelBlock &block) {
  RankedTensorType columnType = tensorType(block.column.getResult());
  int64_t n = columnType.getShape().back(), nLocal = n / tp;
  int64_t parts = block.view[block.viewIndex];

  RankedTensorType wType = tensorType(block.columnWeight);
  SmallVector<int64_t> wView{wType.getDimSize(0)};
  wView.append(block.view);
  shardParam(block.columnWeight, wView, 1 + block.viewIndex, parts / tp,
             withDim(wType, 1, nLocal));
  if (block.columnBiasAdd) {
    auto bias = block.columnBiasAdd.getBias().getDefiningOp<ParamOp>();
    shardParam(bias, block.view, block.viewIndex, parts / tp,
               withDim(tensorType(bias), 0, nLocal));
  }
  RankedTensorType rType = tensorType(block.rowWeight);
  int64_t kLocal = rType.getDimSize(0) / tp;
  shardParam(block.rowWeight, rType.getShape(), 0, kLocal,
             withDim(rType, 0, kLocal));

  for (auto &[value, split] : block.splits) {
    RankedTensorType type = tensorType(value);
    int64_t size = split.viewed ? nLocal : type.getDimSize(split.dim) / tp;
    value.setType(withDim(type, split.dim, size));
  }
  block.column.getLhsMutable().set(
      enterParallelRegion(block.column, block.column.getLhs()));
  leaveBlock(block.row);
}

void ShardTensorParallelPass::rewriteVocab(VocabParallel &vocab) {
  OpBuilder &b = *builder;
  int64_t v = vocab.vocab, vLocal = (v + tp - 1) / tp;
  MatmulOp mm = vocab.projection;
  ParamOp weight = weightParam(mm);
  RankedTensorType wType = tensorType(weight);
  // [V, H] used with transpose_b (tied to the embedding) or [H, V].
  int64_t vAxis = mm.getTransposeB() ? 0 : 1;
  shardParam(weight, wType.getShape(), vAxis, vLocal,
             withDim(wType, vAxis, vLocal));
  if (vocab.biasAdd) {
    auto bias = vocab.biasAdd.getBias().getDefiningOp<ParamOp>();
    shardParam(bias, {v}, 0, vLocal, withDim(tensorType(bias), 0, vLocal));
  }
  mm.getLhsMutable().set(enterParallelRegion(mm, mm.getLhs()));
  Value logits = mm.getResult();
  RankedTensorType logitsType = tensorType(logits);
  int64_t last = logitsType.getRank() - 1;
  logits.setType(withDim(logitsType, last, vLocal));
  if (vocab.biasAdd) {
    logits = vocab.biasAdd.getResult();
    logits.setType(withDim(logitsType, last, vLocal));
  }
  // Megatron-LM's vocabulary-parallel cross-entropy: only per-position
  // statistics cross ranks, never the [.., V] logits; the padding columns of
  // the last shard are excluded.
  b.setInsertionPoint(vocab.loss);
  int64_t start = tpRank * vLocal;
  int64_t valid = std::clamp<int64_t>(v - start, 0, vLocal);
  auto sharded = b.create<VocabParallelCrossEntropyOp>(
      vocab.loss.getLoc(), logits, vocab.loss.getTargets(),
      b.getStringAttr(kGroup), b.getI64IntegerAttr(start),
      b.getI64IntegerAttr(valid));
  for (NamedAttribute attr : vocab.loss->getDiscardableAttrs())
    sharded->setAttr(attr.getName(), attr.getValue());
  vocab.loss.getResult().replaceAllUsesWith(sharded.getResult());
  vocab.loss.erase();

  for (EmbeddingOp embedding : vocab.embeddings) {
    auto table = embedding.getTable().getDefiningOp<ParamOp>();
    RankedTensorType tType = tensorType(table);
    shardParam(table, tType.getShape(), 0, vLocal, withDim(tType, 0, vLocal));
    embedding.setRowStart(tpRank * vLocal);
    Value done = completePartialSum(b, embedding, sp, seqAxis, tp);
    if (sp)
      sequenceSeeds.push_back(done);
  }
}

/// Sequence parallelism: the replicated embeddings look up this rank's
/// positions only, and every token-wise op fed by a sequence shard works on
/// shards, with the replicated operands it adds in (norm and bias
/// parameters, position tables) wrapped in replicate so that their partial
/// gradients are summed over the group.
LogicalResult ShardTensorParallelPass::shardSequence(func::FuncOp forward) {
  OpBuilder &b = *builder;
  int64_t local = seqLen / tp;
  DenseMap<Value, Value> replicated;
  auto replicate = [&](Value v) {
    Value &r = replicated[v];
    if (!r) {
      if (Operation *def = v.getDefiningOp())
        b.setInsertionPointAfter(def);
      else
        b.setInsertionPointToStart(&forward.getBody().front());
      r = b.create<ReplicateOp>(v.getLoc(), v, b.getStringAttr(kGroup));
    }
    return r;
  };

  DenseSet<Value> sharded(sequenceSeeds.begin(), sequenceSeeds.end());
  SmallVector<Operation *> ops;
  for (Operation &op : forward.getBody().front())
    ops.push_back(&op);
  for (Operation *op : ops) {
    if (sequenceGathers.contains(op))
      continue;
    if (auto embedding = dyn_cast<EmbeddingOp>(op);
        embedding &&
        !shardedParams.count(embedding.getTable().getDefiningOp())) {
      Value ids = embedding.getIds();
      RankedTensorType idsType = tensorType(ids);
      if (idsType.getRank() <= seqAxis || idsType.getDimSize(seqAxis) != seqLen)
        return embedding.emitError()
               << kPassName << ": sp=true needs this embedding's ids to have "
               << "the sequence (" << seqLen << ") as dimension " << seqAxis;
      b.setInsertionPoint(embedding);
      Value mine = b.create<SliceOp>(
          embedding.getLoc(), ids, b.getI64IntegerAttr(seqAxis),
          b.getI64IntegerAttr(tpRank * local), b.getI64IntegerAttr(local));
      embedding.getIdsMutable().set(mine);
      embedding.getTableMutable().set(replicate(embedding.getTable()));
      embedding.getResult().setType(
          withDim(tensorType(embedding.getResult()), seqAxis, local));
      sharded.insert(embedding.getResult());
      continue;
    }
    if (llvm::none_of(op->getOperands(),
                      [&](Value v) { return sharded.contains(v); }))
      continue;
    bool ok =
        llvm::TypeSwitch<Operation *, bool>(op)
            .Case<AddOp, MulOp>([&](auto) {
              return llvm::all_of(op->getOperands(),
                                  [&](Value v) { return sharded.contains(v); });
            })
            .Case<LayerNormOp, BiasAddOp>([&](auto) {
              if (!sharded.contains(op->getOperand(0)))
                return false;
              for (OpOperand &operand : llvm::drop_begin(op->getOpOperands()))
                operand.set(replicate(operand.get()));
              return true;
            })
            .Case<GeluOp, ReluOp, ScaleOp>([&](auto) { return true; })
            .Default([&](Operation *) { return false; });
    if (!ok)
      return op->emitError()
             << kPassName << ": with sp=true this op would run on sequence "
             << "shards, but only token-wise ops (add, mul, layer_norm, "
             << "bias_add, activations) can; turn sp off for this model";
    for (Value r : op->getResults()) {
      RankedTensorType type = tensorType(r);
      if (type.getRank() <= seqAxis || type.getDimSize(seqAxis) != seqLen)
        return op->emitError()
               << kPassName << ": with sp=true this op's result should have "
               << "the sequence (" << seqLen << ") as dimension " << seqAxis;
      r.setType(withDim(type, seqAxis, local));
      sharded.insert(r);
    }
  }
  return success();
}

void ShardTensorParallelPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (tp < 1) {
    module.emitError() << kPassName
                       << ": option tp=" << static_cast<int64_t>(tp)
                       << " must be at least 1";
    return signalPassFailure();
  }
  if (tpRank < 0 || tpRank >= tp) {
    module.emitError() << kPassName
                       << ": option tp-rank=" << static_cast<int64_t>(tpRank)
                       << " must be in [0, tp) = [0, "
                       << static_cast<int64_t>(tp) << ")";
    return signalPassFailure();
  }
  if (tp == 1)
    return;
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward) {
    module.emitError() << kPassName << " needs a func.func @forward";
    return signalPassFailure();
  }

  // Analysis: everything is matched and checked before anything changes.
  SmallVector<ParallelBlock> blocks;
  std::optional<VocabParallel> vocab;
  DenseSet<Operation *> covered;
  SmallVector<MatmulOp> matmuls;
  forward.walk([&](MatmulOp mm) { matmuls.push_back(mm); });
  for (MatmulOp mm : matmuls) {
    if (covered.contains(mm) || !mm.getRhs().getDefiningOp<ParamOp>())
      continue;
    ParallelBlock block;
    if (succeeded(matchBlock(mm, block))) {
      if (failed(checkBlockDivisibility(block)))
        return signalPassFailure();
      covered.insert(block.column);
      covered.insert(block.row);
      blocks.push_back(std::move(block));
      continue;
    }
    VocabParallel candidate;
    if (!vocab && succeeded(matchVocabProjection(mm, candidate))) {
      covered.insert(mm);
      vocab = candidate;
      continue;
    }
    auto param = mm.getRhs().getDefiningOp<ParamOp>();
    mm.emitError() << kPassName << ": this matmul with parameter \""
                   << param.getName()
                   << "\" is neither half of a column-parallel -> "
                      "row-parallel block nor the vocabulary projection "
                      "before the loss; tensor parallelism supports models "
                      "with the gpt and mlp presets' structure";
    return signalPassFailure();
  }
  if (!vocab) {
    forward.emitError() << kPassName
                        << ": found no vocabulary projection (a matmul with a "
                           "parameter feeding strata.cross_entropy); tensor "
                           "parallelism supports models with the gpt and mlp "
                           "presets' structure";
    return signalPassFailure();
  }
  // Embeddings of the vocabulary: tables with one row per class.
  bool failedTables = false;
  forward.walk([&](EmbeddingOp embedding) {
    auto table = embedding.getTable().getDefiningOp<ParamOp>();
    if (!table || tensorType(table).getDimSize(0) != vocab->vocab)
      return;
    for (Operation *user : table->getUsers())
      if (!isa<EmbeddingOp>(user) && user != vocab->projection.getOperation()) {
        user->emitError() << kPassName << ": the vocabulary table \""
                          << table.getName()
                          << "\" is used other than by embeddings and the "
                             "vocabulary projection";
        failedTables = true;
      }
    vocab->embeddings.push_back(embedding);
  });
  if (failedTables)
    return signalPassFailure();
  if (sp) {
    if (vocab->embeddings.empty()) {
      forward.emitError() << kPassName
                          << ": sp=true needs the token embedding of the "
                             "vocabulary, which this model lacks";
      return signalPassFailure();
    }
    EmbeddingOp tokens = vocab->embeddings.front();
    seqAxis = tensorType(tokens.getIds()).getRank() - 1;
    seqLen = tensorType(tokens.getIds()).getDimSize(seqAxis);
    if (seqLen % tp != 0) {
      tokens.emitError() << kPassName << ": sp=true splits the sequence of "
                         << seqLen
                         << " tokens over tp=" << static_cast<int64_t>(tp)
                         << " ranks, which does not divide it; choose a tp "
                            "that divides seq_len or set sp=false";
      return signalPassFailure();
    }
  }

  OpBuilder b(module.getContext());
  builder = &b;
  for (ParallelBlock &block : blocks)
    rewriteBlock(block);
  rewriteVocab(*vocab);
  if (sp && failed(shardSequence(forward)))
    return signalPassFailure();
}

} // namespace
