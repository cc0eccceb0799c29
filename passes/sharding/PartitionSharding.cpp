//===- PartitionSharding.cpp - One member's program from the shardings ----===//
//
// After strata-propagate-sharding, rewrites @forward into what mesh member
// `rank` computes. Each op's rule and the shardings around it fix the axis
// of each factor (Sharding.h, the same decision propagation made); an
// operand whose sharding differs from what the op needs is reconciled, and
// the op's results get their local types:
//
//   partial sum -> whole      all_reduce
//   partial sum -> split on d reduce_scatter(d)
//   split on d  -> whole      all_gather(d)
//   whole       -> split on d replicate, then this member's slice along d
//   split on d  -> split on e all_gather(d), replicate, slice along e
//                             (all-to-all, from the runtime's collectives)
//
// A whole operand of an op that splits a factor the operand lacks (x in a
// column-parallel x·W) enters through `replicate`, whose gradient sums the
// members' partial gradients; an all_gather in front of such an op is the
// non-replicated kind, whose gradient reduce-scatters. So autodiff, run
// after this pass, needs nothing more: Megatron's f/g pairs and sequence
// parallelism's all-gather/reduce-scatter pairs come out of the rules.
// A split parameter keeps its checkpoint view (strata.shard_view/_start).
// A cross-entropy whose logits are split by classes becomes the
// vocabulary-parallel one (only per-position statistics cross members).
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"
#include "passes/Passes.h"
#include "passes/sharding/Sharding.h"

#include <algorithm>

namespace strata {
#define GEN_PASS_DEF_STRATAPARTITIONSHARDING
#include "passes/Passes.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

/// What this member holds of a value.
struct Local {
  Sharding sharding;
  bool partial = false;
};

struct PartitionShardingPass
    : strata::impl::StrataPartitionShardingBase<PartitionShardingPass> {
  using StrataPartitionShardingBase::StrataPartitionShardingBase;

  DenseMap<Value, Sharding> global; ///< propagation's decisions
  DenseMap<Value, SmallVector<int64_t>> globalShape;
  bool broken = false; ///< a reconciliation failed (diagnosed)
  SmallVector<RepeatInterleaveOp> fewerRepeats;
  /// Partial sums, completed: the value and its sharding.
  DenseMap<Value, std::pair<Value, Sharding>> completed;
  DenseMap<Value, Local> local;
  std::map<std::pair<void *, std::string>, Value> reconciled;

  RankedTensorType localType(RankedTensorType t, const Sharding &s) {
    SmallVector<int64_t> shape(t.getShape());
    for (auto [d, a] : llvm::enumerate(s))
      if (!a.empty()) {
        int64_t parts = parseDimSplit(a).parts(meshSize);
        shape[d] = (shape[d] + parts - 1) / parts; // padded if need be
      }
    return RankedTensorType::get(shape, t.getElementType());
  }

  static std::string key(const Sharding &s, bool replicate) {
    return shardingStr(s) + (replicate ? "+replicate" : "");
  }

  /// `v` as `user` needs it: split as `want`, entering through replicate
  /// when `replicate`.
  Value reconcile(Value v, const Sharding &want, bool replicate,
                  Operation *user) {
    Local have = local.lookup(v);
    if (have.sharding.empty())
      have.sharding = Sharding(want.size());
    bool isFloat = llvm::isa<FloatType>(
        llvm::cast<RankedTensorType>(v.getType()).getElementType());
    replicate = replicate && isFloat;
    if (!have.partial && have.sharding == want && !replicate)
      return v;
    auto cacheKey =
        std::make_pair(v.getAsOpaquePointer(), key(want, replicate));
    if (Value done = reconciled[cacheKey])
      return done;
    // Right after the value (its users share it), except that an input is
    // cut where it is first used.
    // A parameter cut for this user (a group's kv head) is cut where used,
    // in the user's layer.
    Operation *def = v.getDefiningOp();
    bool cut = isa_and_nonnull<ParamOp>(def) &&
               llvm::any_of(want, [](const std::string &a) {
                 return parseDimSplit(a).major != 0;
               });
    OpBuilder b(user);
    if (def && !isa<InputOp>(def) && !cut)
      b.setInsertionPointAfter(def);
    Location loc = user->getLoc();
    StringAttr group = b.getStringAttr(axisGroup);
    auto i64 = [&](int64_t x) { return b.getI64IntegerAttr(x); };
    // Completing a partial sum belongs to the layer that produced it; the
    // other reconciling ops to their user's layer, except that an input
    // shared by its users is no layer's. All take the user's
    // pipeline stage (stages may be assigned first). A parameter's reshape or
    // replicate takes its user's layer too, so that the stage holding the
    // user reshapes the weight (and sums its gradient) itself.
    bool shared = def && isa<InputOp>(def) && !cut;
    Attribute produced = def && !isa<ParamOp, InputOp>(def)
                             ? def->getAttr("strata.layer")
                             : Attribute();
    Attribute layer = shared ? Attribute() : user->getAttr("strata.layer");
    auto tag = [&](Operation *op, Attribute layer) {
      if (layer)
        op->setAttr("strata.layer", layer);
      if (Attribute stage = user->getAttr("strata.stage"))
        op->setAttr("strata.stage", stage);
      return op->getResult(0);
    };
    auto tagged = [&](Operation *op) { return tag(op, layer); };
    Value cur = v;
    Sharding s = have.sharding;
    bool replicated = false; // went through an op with a summing gradient
    if (have.partial) {
      // A partial sum is completed once for all its users: reduce-scattered
      // onto the split propagation decided for it, or else onto one this
      // user wants (along a dimension itself, not a view of it), or
      // all-reduced.
      auto completed_ = completed.find(v);
      if (completed_ != completed.end()) {
        cur = completed_->second.first;
        s = completed_->second.second;
        b.setInsertionPointAfter(cur.getDefiningOp());
      } else {
        auto scatterable = [&](const Sharding &target) {
          int64_t onto = -1;
          for (auto [d, a] : llvm::enumerate(target))
            if (!a.empty() && s[d].empty() && isReplicated(s) &&
                !parseDimSplit(a).viewed() &&
                parseDimSplit(a).parts(meshSize) == meshSize &&
                llvm::cast<RankedTensorType>(cur.getType()).getShape()[d] %
                        meshSize ==
                    0)
              onto = int64_t(d);
          return onto;
        };
        Sharding decided = global.lookup(v);
        int64_t onto = decided.size() == s.size() ? scatterable(decided) : -1;
        Sharding target = onto >= 0 ? decided : want;
        if (onto < 0)
          onto = scatterable(want);
        if (onto >= 0) {
          s[onto] = target[onto];
          auto type = llvm::cast<RankedTensorType>(cur.getType());
          SmallVector<int64_t> shape(type.getShape());
          shape[onto] /= meshSize;
          cur =
              tag(b.create<ReduceScatterOp>(
                      loc, RankedTensorType::get(shape, type.getElementType()),
                      cur, group, i64(onto), i64(meshSize)),
                  produced);
        } else {
          cur = tag(b.create<AllReduceOp>(loc, cur.getType(), cur, group),
                    produced);
        }
        completed[v] = {cur, s};
      }
    }
    auto elem = llvm::cast<RankedTensorType>(cur.getType()).getElementType();
    // A dimension split along a view dimension is unfolded into the view
    // for the collective or slice and folded back after.
    auto unfold = [&](int64_t d, const DimSplit &split) -> int64_t {
      if (!split.viewed())
        return d;
      auto type = llvm::cast<RankedTensorType>(cur.getType());
      SmallVector<int64_t> shape(type.getShape().take_front(d));
      llvm::append_range(shape, split.view);
      llvm::append_range(shape, type.getShape().drop_front(d + 1));
      // The split view dimension holds what this member has of it.
      int64_t whole = 1;
      for (int64_t size : split.view)
        whole *= size;
      if (type.getShape()[d] != whole)
        shape[d + split.index] /= meshSize;
      cur = tagged(
          b.create<ReshapeOp>(loc, RankedTensorType::get(shape, elem), cur));
      return d + split.index;
    };
    auto fold = [&](RankedTensorType flat, const DimSplit &split) {
      if (split.viewed())
        cur = tagged(b.create<ReshapeOp>(loc, flat, cur));
    };
    // Gather what the user needs whole.
    for (auto [d, a] : llvm::enumerate(s)) {
      if (a.empty() || want[d] == a)
        continue;
      DimSplit split = parseDimSplit(a);
      if (split.major || split.minor) {
        user->emitError("needs dimension ")
            << d << " of an operand whole that is split over part of the "
            << "mesh axis (\"" << a << "\"); gathering over a sub-group "
            << "is not supported";
        broken = true;
        return v;
      }
      SmallVector<int64_t> flat(
          llvm::cast<RankedTensorType>(cur.getType()).getShape());
      flat[d] *= meshSize;
      int64_t at = unfold(int64_t(d), split);
      SmallVector<int64_t> shape(
          llvm::cast<RankedTensorType>(cur.getType()).getShape());
      shape[at] *= meshSize;
      // A user that splits other factors makes the gradient partial: the
      // non-replicated gather, whose gradient reduce-scatters.
      cur = tagged(b.create<AllGatherOp>(
          loc, RankedTensorType::get(shape, elem), cur, group, i64(at),
          i64(meshSize), b.getBoolAttr(!replicate)));
      fold(RankedTensorType::get(flat, elem), split);
      // A padded split: drop the padding.
      auto whole = globalShape.find(v);
      if (whole != globalShape.end() && whole->second[d] < flat[d]) {
        flat[d] = whole->second[d];
        cur = tagged(b.create<SliceOp>(loc, RankedTensorType::get(flat, elem),
                                       cur, i64(d), i64(0), i64(flat[d])));
      }
      replicated = replicate;
      s[d] = "";
    }
    // Take this member's part of what the user needs split.
    bool sliced = false;
    for (auto [d, a] : llvm::enumerate(want)) {
      if (a.empty() || s[d] == a)
        continue;
      if (!sliced && isFloat) {
        cur = tagged(b.create<ReplicateOp>(loc, cur, group));
        replicated = true;
      }
      sliced = true;
      DimSplit split = parseDimSplit(a);
      // A major part of the axis: n / parts consecutive members share one
      // (one part: all share it, through replicate only).
      int64_t parts = split.parts(meshSize);
      if (parts == 1) {
        s[d] = a;
        continue;
      }
      int64_t part = split.minor ? rank % parts : rank / (meshSize / parts);
      SmallVector<int64_t> flat(
          llvm::cast<RankedTensorType>(cur.getType()).getShape());
      flat[d] /= parts;
      int64_t at = unfold(int64_t(d), split);
      if (llvm::cast<RankedTensorType>(cur.getType()).getShape()[at] % parts) {
        user->emitError("needs an operand split with padding (dimension ")
            << d << " of " << v.getType()
            << " over the mesh), which only a parameter or an op that "
               "computes it can be; give the producer that split";
        broken = true;
        return v;
      }
      int64_t size =
          llvm::cast<RankedTensorType>(cur.getType()).getShape()[at] / parts;
      SmallVector<int64_t> shape(
          llvm::cast<RankedTensorType>(cur.getType()).getShape());
      shape[at] = size;
      cur =
          tagged(b.create<SliceOp>(loc, RankedTensorType::get(shape, elem), cur,
                                   i64(at), i64(part * size), i64(size)));
      fold(RankedTensorType::get(flat, elem), split);
      s[d] = a;
    }
    if (replicate && !replicated)
      cur = tagged(b.create<ReplicateOp>(loc, cur, group));
    reconciled[cacheKey] = cur;
    return cur;
  }

  /// The op's rule and the axis of each of its factors, decided on the
  /// unpartitioned IR (global shapes) before anything is rewritten.
  struct Decision {
    ShardingRule rule;
    SmallVector<std::string> axis;
  };
  DenseMap<Operation *, Decision> decisions;

  Decision decide(Operation *op) {
    Decision d;
    if (auto iface = dyn_cast<ShardingRuleOpInterface>(op)) {
      d.rule = iface.getShardingRule();
    } else {
      for (Value v : op->getOperands())
        d.rule.operands.emplace_back(
            llvm::cast<RankedTensorType>(v.getType()).getRank());
      for (Value v : op->getResults())
        d.rule.results.emplace_back(
            llvm::cast<RankedTensorType>(v.getType()).getRank());
    }
    d.axis =
        assignFactors(op, d.rule, meshSize, [&](Value v) -> const Sharding * {
          auto it = global.find(v);
          return it == global.end() ? nullptr : &it->second;
        });
    return d;
  }

  /// A loss over logits split by classes: Megatron-LM's vocabulary-parallel
  /// cross-entropy, whose result every member holds whole.
  void vocabParallelLoss(CrossEntropyOp loss, int64_t vocab) {
    OpBuilder b(loss);
    // Classes past the vocabulary pad the last members' logits.
    int64_t width = (vocab + meshSize - 1) / meshSize, start = rank * width;
    int64_t valid = std::clamp<int64_t>(vocab - start, 0, width);
    auto sharded = b.create<VocabParallelCrossEntropyOp>(
        loss.getLoc(), loss.getLogits(), loss.getTargets(),
        b.getStringAttr(axisGroup), b.getI64IntegerAttr(start),
        b.getI64IntegerAttr(valid));
    for (NamedAttribute attr : loss->getDiscardableAttrs())
      sharded->setAttr(attr.getName(), attr.getValue());
    loss.getResult().replaceAllUsesWith(sharded.getResult());
    local[sharded.getResult()] = Local{Sharding(), false};
    loss.erase();
  }

  LogicalResult partitionOp(Operation *op) {
    const Decision &decision = decisions[op];
    const ShardingRule &rule = decision.rule;
    const SmallVector<std::string> &axis = decision.axis;
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      const ShardingRule::TensorFactors &dims = rule.operands[i];
      Sharding want = shardingFrom(rule, dims, axis);
      // Splits a factor this operand does not have: partial gradients.
      // Not a minor part of the axis ("tp%2"): its operands split over the
      // major part were cut from a whole value through replicate, which
      // already sums every member's gradient.
      bool replicate = false;
      for (auto [f, a] : llvm::enumerate(axis)) {
        if (parseDimSplit(a).minor)
          continue;
        bool mine = llvm::any_of(dims, [&](const ShardingRule::DimFactors &d) {
          return llvm::is_contained(d, int64_t(f));
        });
        replicate |= !a.empty() && !mine;
      }
      op->setOperand(unsigned(i), reconcile(operand, want, replicate, op));
    }
    if (auto loss = dyn_cast<CrossEntropyOp>(op)) {
      int64_t classes = rule.operands[0].back().front();
      if (!axis[classes].empty()) {
        vocabParallelLoss(loss, rule.factorSizes[classes]);
        return success();
      }
    }
    bool partial = false;
    for (auto [f, a] : llvm::enumerate(axis))
      partial |= !a.empty() && rule.isReduction(int64_t(f));
    for (auto [j, result] : llvm::enumerate(op->getResults())) {
      Sharding s = shardingFrom(rule, rule.results[j], axis);
      result.setType(
          localType(llvm::cast<RankedTensorType>(result.getType()), s));
      local[result] = Local{s, partial};
    }
    // Repeated kv heads of which each member holds its query heads' share:
    // fewer repeats (none left: the op is dropped after partitioning).
    if (auto rep = dyn_cast<RepeatInterleaveOp>(op);
        rep && !rule.results.empty()) {
      int64_t axisDim = rep.getAxis() < 0
                            ? rep.getAxis() + int64_t(rule.results[0].size())
                            : rep.getAxis();
      const ShardingRule::DimFactors &heads = rule.results[0][axisDim];
      if (heads.size() == 2 && !axis[heads[1]].empty()) {
        int64_t parts = parseDimSplit(axis[heads[1]]).parts(meshSize);
        rep->setAttr("repeats",
                     OpBuilder(op).getI64IntegerAttr(rep.getRepeats() / parts));
        fewerRepeats.push_back(rep);
      }
    }
    auto emb = dyn_cast<EmbeddingOp>(op);
    if (emb && !axis[rule.operands[0][0].front()].empty()) {
      int64_t rows =
          llvm::cast<RankedTensorType>(emb.getTable().getType()).getShape()[0];
      emb->setAttr("row_start", OpBuilder(op).getI64IntegerAttr(rank * rows));
    }
    return success();
  }

  /// Declares a split parameter as this member's box of its checkpoint
  /// tensor. The box is stated in the parameter's own shape, or in a view
  /// that refines it: the views of its viewed splits ("tp@3x4x4:1"), or one
  /// given with the decision (`strata.shard_view`, e.g. an nn.Linear q
  /// weight viewed as [heads, head_dim, in]), which splits the major view
  /// dimension of a plainly split dimension. The parameter is then declared
  /// in the view's shape and reshaped to its local shape.
  LogicalResult partitionParam(ParamOp param) {
    Value v = param.getResult();
    const Sharding &s = global[v];
    local[v] = Local{s, false};
    if (isReplicated(s))
      return success();
    // Split over part of the mesh axis: members share parts, so the
    // parameter stays whole (its gradient summed over all members) and its
    // users cut their part.
    if (llvm::any_of(s, [](const std::string &a) {
          DimSplit split = parseDimSplit(a);
          return split.major || split.minor;
        })) {
      local[v] = Local{Sharding(s.size()), false};
      return success();
    }
    OpBuilder b(param);
    auto type = llvm::cast<RankedTensorType>(v.getType());
    RankedTensorType flat = localType(type, s);
    // The view: given, or each dimension as itself or as the view its
    // split is along.
    SmallVector<int64_t> view;
    for (auto [d, size] : llvm::enumerate(type.getShape())) {
      DimSplit split = parseDimSplit(s[d]);
      if (split.viewed())
        llvm::append_range(view, split.view);
      else
        view.push_back(size);
    }
    if (auto given =
            param->getAttrOfType<DenseI64ArrayAttr>("strata.shard_view"))
      view.assign(given.asArrayRef().begin(), given.asArrayRef().end());
    SmallVector<int64_t> box(view), start(view.size(), 0);
    size_t at = 0;
    for (auto [d, size] : llvm::enumerate(type.getShape())) {
      int64_t product = 1;
      size_t major = at;
      while (at < view.size() && product < size)
        product *= view[at++];
      if (product != size || major == at) {
        param.emitError("strata.shard_view must refine the parameter's "
                        "shape (consecutive view dimensions whose products "
                        "are its dimensions), e.g. [4, 4, 16] for [16, 16]");
        return failure();
      }
      if (s[d].empty())
        continue;
      DimSplit split = parseDimSplit(s[d]);
      if (split.viewed() && ArrayRef<int64_t>(view).slice(major, at - major) !=
                                ArrayRef<int64_t>(split.view)) {
        param.emitError("strata.shard_view disagrees with the view of "
                        "dimension ")
            << d << " in its sharding \"" << s[d] << "\"";
        return failure();
      }
      size_t cut = split.viewed() ? major + split.index : major;
      // The parameter's own dimension may be split with padding (the
      // vocabulary's rows); a view's may not.
      bool own = at - major == 1 && !split.viewed();
      if (view[cut] % meshSize && !own) {
        param.emitError("strata.shard_view: the view dimension split in "
                        "dimension ")
            << d << " (" << view[cut] << ") must divide by the mesh size "
            << int64_t(meshSize);
        return failure();
      }
      box[cut] = (view[cut] + meshSize - 1) / meshSize;
      start[cut] = rank * box[cut];
    }
    if (at != view.size()) {
      param.emitError("strata.shard_view has more dimensions than the "
                      "parameter's shape accounts for");
      return failure();
    }
    param->setAttr("strata.global_shape",
                   b.getDenseI64ArrayAttr(type.getShape()));
    param->setAttr("strata.shard_view", b.getDenseI64ArrayAttr(view));
    param->setAttr("strata.shard_start", b.getDenseI64ArrayAttr(start));
    v.setType(RankedTensorType::get(box, type.getElementType()));
    if (ArrayRef<int64_t>(box) != flat.getShape()) {
      b.setInsertionPointAfter(param);
      auto reshape = b.create<ReshapeOp>(param.getLoc(), flat, v);
      // In its first layer-tagged user's layer, so that the pipeline stage
      // using the weight reshapes it (and its gradient) itself.
      for (Operation *user : v.getUsers())
        if (user != reshape.getOperation())
          if (Attribute layer = user->getAttr("strata.layer")) {
            reshape->setAttr("strata.layer", layer);
            break;
          }
      v.replaceAllUsesExcept(reshape, reshape);
      local[reshape] = Local{s, false};
    }
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward) {
      module.emitError("strata-partition-sharding runs on @forward");
      return signalPassFailure();
    }
    if (meshSize < 1 || rank < 0 || rank >= meshSize) {
      module.emitError("need mesh-size >= 1 and 0 <= rank < mesh-size");
      return signalPassFailure();
    }
    SmallVector<Operation *> ops;
    for (Operation &op : forward.getBody().front()) {
      if (isa<func::ReturnOp>(op))
        continue;
      std::optional<SmallVector<Sharding>> s = readShardings(&op);
      if (!s) {
        op.emitError("has no strata.sharding; run strata-propagate-sharding "
                     "first");
        return signalPassFailure();
      }
      for (auto [v, sh] : llvm::zip(op.getResults(), *s))
        global[v] = sh;
      for (Value v : op.getResults())
        globalShape[v] = SmallVector<int64_t>(
            llvm::cast<RankedTensorType>(v.getType()).getShape());
      ops.push_back(&op);
    }
    for (Operation *op : ops)
      if (!isa<ParamOp, InputOp>(op))
        decisions[op] = decide(op);
    OpBuilder b(module.getContext());
    for (Operation *op : ops) {
      if (auto param = dyn_cast<ParamOp>(op)) {
        if (failed(partitionParam(param)))
          return signalPassFailure();
        continue;
      }
      if (isa<InputOp>(op)) {
        local[op->getResult(0)] = Local{
            Sharding(llvm::cast<RankedTensorType>(op->getResult(0).getType())
                         .getRank()),
            false};
        continue;
      }
      if (failed(partitionOp(op)) || broken)
        return signalPassFailure();
    }
    // The outputs (the loss first) leave whole.
    auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
    for (OpOperand &use : ret->getOpOperands()) {
      auto type = llvm::cast<RankedTensorType>(use.get().getType());
      use.set(reconcile(use.get(), Sharding(type.getRank()), false, ret));
    }
    if (broken)
      return signalPassFailure();
    // Repeats this pass reduced to one are the identity.
    for (RepeatInterleaveOp rep : fewerRepeats)
      if (rep.getRepeats() == 1) {
        rep.getResult().replaceAllUsesWith(rep.getInput());
        rep.erase();
      }
    forward.setType(
        FunctionType::get(module.getContext(), {}, ret->getOperandTypes()));
  }
};

} // namespace
