//===- ShardTensorParallel.cpp - Megatron tensor/sequence parallelism -----===//
//
// Rewrites @forward into what one rank of a tensor-parallel group computes
// (Shoeybi et al. 2019, "Megatron-LM"; Korthikanti et al. 2022 for sequence
// parallelism). The pass recognises structure by dataflow, never by names:
//
//  - column -> row blocks (TensorParallelBlocks.h): one or more matmuls
//    with parameter weights (the column half: a fused QKV projection, or
//    separate q, k and v; an MLP's up projection, or a gated MLP's gate and
//    up) whose results flow through local ops into exactly one other matmul
//    with a parameter weight (the row half). Weights may be [in, out]
//    (Conv1D) or [out, in] (nn.Linear, transpose_b). Key/value projections
//    with fewer heads than ranks are replicated: each rank slices its kv
//    head out of the whole (replicated) weight, whose gradient the
//    replicate sums over the group;
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
#include "passes/partition/TensorParallelBlocks.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <optional>

namespace strata {
#define GEN_PASS_DEF_STRATASHARDTENSORPARALLEL
#include "passes/Passes.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;
using namespace strata::tensor_parallel;

namespace {

constexpr llvm::StringLiteral kGroup = "tp";
constexpr llvm::StringLiteral kPassName = "strata-shard-tensor-parallel";
constexpr llvm::StringLiteral kLayerAttr = "strata.layer";
RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

RankedTensorType withDim(RankedTensorType type, int64_t dim, int64_t size) {
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size;
  return RankedTensorType::get(shape, type.getElementType());
}

/// Copies `from`'s strata.layer (the repeated block it belongs to) to `to`.
void copyLayer(Operation *from, Operation *to) {
  if (Attribute layer = from->getAttr(kLayerAttr))
    to->setAttr(kLayerAttr, layer);
}

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
  // Analysis (blocks: TensorParallelBlocks.h).
  LogicalResult matchVocabProjection(MatmulOp mm, VocabParallel &vocab);

  // Rewriting.
  Value shardParam(ParamOp param, ArrayRef<int64_t> view, int64_t axis,
                   int64_t localSize, RankedTensorType localType);
  Value enterParallelRegion(Operation *user, Value input);
  void leaveBlock(MatmulOp row);
  void rewriteColumn(ParallelBlock &block, BlockColumn &column);
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
    // The reshape belongs to its users' layer, so that a pipeline stage
    // reshapes its own weights (and, in the backward, its own gradients)
    // instead of the first stage doing it and sending the result on.
    for (Operation *user : local.getUsers())
      if (user != reshape.getOperation() && user->hasAttr(kLayerAttr)) {
        copyLayer(user, reshape);
        break;
      }
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

/// Shards a column's weight (and bias) by its view's split dimension, or,
/// for a selected column (replicated kv heads), makes it read this rank's
/// group out of the whole weight, replicated so that the ranks' partial
/// gradients are summed.
void ShardTensorParallelPass::rewriteColumn(ParallelBlock &block,
                                            BlockColumn &column) {
  OpBuilder &b = *builder;
  MatmulOp mm = column.matmul;
  int64_t n = tensorType(mm.getResult()).getShape().back();
  int64_t groups = column.groups(block.viewIndex);
  // nn.Linear weights ([out, in], transpose_b) split their rows.
  bool outFirst = mm.getTransposeB();
  int64_t outAxis = outFirst ? 0 : 1;
  RankedTensorType wType = tensorType(column.weight);
  auto bias = column.biasAdd ? column.biasAdd.getBias().getDefiningOp<ParamOp>()
                             : ParamOp();
  if (!column.select) {
    int64_t nLocal = n / tp;
    SmallVector<int64_t> wView;
    if (!outFirst)
      wView.push_back(wType.getDimSize(0));
    wView.append(column.view);
    if (outFirst)
      wView.push_back(wType.getDimSize(1));
    shardParam(column.weight, wView, (outFirst ? 0 : 1) + block.viewIndex,
               groups / tp, withDim(wType, outAxis, nLocal));
    if (bias)
      shardParam(bias, column.view, block.viewIndex, groups / tp,
                 withDim(tensorType(bias), 0, nLocal));
    return;
  }
  // This rank's query heads all use kv head `group`.
  int64_t nLocal = n / groups;
  int64_t group = tpRank * groups / tp;
  auto sliceOfReplicated = [&](ParamOp param, int64_t axis) -> Value {
    b.setInsertionPoint(mm);
    auto rep = b.create<ReplicateOp>(param.getLoc(), param.getResult(),
                                     b.getStringAttr(kGroup));
    copyLayer(mm, rep);
    if (groups == 1) // one kv head: every rank reads all of it
      return rep.getResult();
    auto slice = b.create<SliceOp>(
        param.getLoc(), rep.getResult(), b.getI64IntegerAttr(axis),
        b.getI64IntegerAttr(group * nLocal), b.getI64IntegerAttr(nLocal));
    copyLayer(mm, slice);
    return slice.getResult();
  };
  mm.getRhsMutable().set(sliceOfReplicated(column.weight, outAxis));
  if (bias)
    column.biasAdd.getBiasMutable().set(sliceOfReplicated(bias, 0));
}

void ShardTensorParallelPass::rewriteBlock(ParallelBlock &block) {
  // Output widths before anything is retyped.
  SmallVector<int64_t> widths;
  for (BlockColumn &column : block.columns)
    widths.push_back(tensorType(column.matmul.getResult()).getShape().back());
  for (BlockColumn &column : block.columns)
    rewriteColumn(block, column);
  // The row contracts over its weight's input dimension.
  RankedTensorType rType = tensorType(block.rowWeight);
  int64_t inAxis = block.row.getTransposeB() ? 1 : 0;
  int64_t kLocal = rType.getDimSize(inAxis) / tp;
  shardParam(block.rowWeight, rType.getShape(), inAxis, kLocal,
             withDim(rType, inAxis, kLocal));

  for (auto &[value, split] : block.splits) {
    RankedTensorType type = tensorType(value);
    BlockColumn &column = block.columnOf(split);
    int64_t parts = split.select ? column.groups(block.viewIndex) : tp;
    int64_t size = split.viewed ? widths[split.column] / parts
                                : type.getDimSize(split.dim) / parts;
    value.setType(withDim(type, split.dim, size));
  }
  // A rank repeats its kv heads for its own query heads only (one query
  // head per kv head: no repetition left).
  for (Operation *op : block.ops)
    if (auto repeat = dyn_cast<RepeatInterleaveOp>(op)) {
      int64_t axis = repeat.getNormalizedAxis();
      int64_t repeats = tensorType(repeat.getResult()).getDimSize(axis) /
                        tensorType(repeat.getInput()).getDimSize(axis);
      repeat.setRepeats(repeats);
      if (repeats == 1) {
        repeat.getResult().replaceAllUsesWith(repeat.getInput());
        repeat.erase();
      }
    }
  // One entry into the parallel region per distinct input of the columns.
  DenseMap<Value, Value> entered;
  for (BlockColumn &column : block.columns) {
    Value &in = entered[column.matmul.getLhs()];
    if (!in)
      in = enterParallelRegion(column.matmul, column.matmul.getLhs());
    column.matmul.getLhsMutable().set(in);
  }
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
  // In the layer of its user (a layer's norm and bias parameters): its
  // pipeline stage then sums the partial gradients itself.
  auto replicate = [&](Value v, Operation *user) {
    Value &r = replicated[v];
    if (!r) {
      if (Operation *def = v.getDefiningOp())
        b.setInsertionPointAfter(def);
      else
        b.setInsertionPointToStart(&forward.getBody().front());
      Operation *rep =
          b.create<ReplicateOp>(v.getLoc(), v, b.getStringAttr(kGroup));
      copyLayer(user, rep);
      r = rep->getResult(0);
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
      embedding.getTableMutable().set(
          replicate(embedding.getTable(), embedding));
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
            .Case<LayerNormOp, RmsNormOp, BiasAddOp>([&](auto) {
              if (!sharded.contains(op->getOperand(0)))
                return false;
              for (OpOperand &operand : llvm::drop_begin(op->getOpOperands()))
                operand.set(replicate(operand.get(), op));
              return true;
            })
            .Case<GeluOp, ReluOp, SiluOp, ScaleOp, ElementwiseUnaryOp>(
                [&](auto) { return true; })
            .Default([&](Operation *) { return false; });
    if (!ok)
      return op->emitError()
             << kPassName << ": with sp=true this op would run on sequence "
             << "shards, but only token-wise ops (add, mul, layer_norm, "
             << "rms_norm, bias_add, activations) can; turn sp off for this "
             << "model";
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
    if (succeeded(matchBlock(mm, tp, block))) {
      if (failed(checkBlockDivisibility(block, tp, kPassName)))
        return signalPassFailure();
      for (BlockColumn &column : block.columns)
        covered.insert(column.matmul);
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
                      "with the gpt, llama and mlp presets' structure";
    return signalPassFailure();
  }
  if (!vocab) {
    forward.emitError() << kPassName
                        << ": found no vocabulary projection (a matmul with a "
                           "parameter feeding strata.cross_entropy); tensor "
                           "parallelism supports models with the gpt, llama "
                           "and mlp presets' structure";
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
