//===- PropagateSharding.cpp - Spread shardings through @forward ----------===//
//
// From a few decisions (`strata.sharding` written on some ops: parameters,
// activations), every value of @forward gets a sharding: each op's rule
// (ShardingRuleOpInterface) maps the shardings it knows onto its factors
// (Sharding.h: parameters first) and the factors back onto the dimensions
// of the operands and results that have none yet. Forward and backward
// sweeps repeat until nothing changes. Inputs stay whole (the runtime feeds
// them whole); an op without a rule is replicated, with a warning.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"
#include "passes/Passes.h"
#include "passes/sharding/Sharding.h"
#include "llvm/ADT/DenseSet.h"

namespace strata {
#define GEN_PASS_DEF_STRATAPROPAGATESHARDING
#include "passes/Passes.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

/// The mesh axis `split-matmul-weights` splits over.
constexpr const char *kAxis = "tp";

struct PropagateShardingPass
    : strata::impl::StrataPropagateShardingBase<PropagateShardingPass> {
  using StrataPropagateShardingBase::StrataPropagateShardingBase;

  DenseMap<Value, Sharding> known;

  /// Results of ops that split a reduction factor: partial sums, which
  /// the partitioner may reduce onto whatever split their users want
  /// (reduce_scatter) as well as whole (all_reduce), so their "whole" is
  /// no decision for the ops that read them.
  DenseSet<Value> partial;

  const Sharding *lookup(Value v) {
    auto it = known.find(v);
    return it == known.end() || partial.contains(v) ? nullptr : &it->second;
  }

  static Sharding whole(Value v) {
    return Sharding(llvm::cast<RankedTensorType>(v.getType()).getRank());
  }

  /// Gives `v` a sharding if it has none; true if it did.
  bool decide(Value v, Sharding s) {
    if (known.count(v))
      return false;
    // Inputs are fed whole; a parameter declared on several pipeline stages
    // (strata.tied) must be split alike on each, so it stays whole.
    Operation *def = v.getDefiningOp();
    if (isa_and_nonnull<InputOp>(def) ||
        (isa_and_nonnull<ParamOp>(def) && def->hasAttr("strata.tied")))
      s = whole(v);
    known[v] = std::move(s);
    return true;
  }

  /// `split-matmul-weights`: a matmul whose input is whole (or not known
  /// yet) and whose weight is an undecided parameter gets that weight split
  /// by its output features.
  bool splitWeight(Operation *op, const ShardingRule &rule) {
    auto mm = dyn_cast<MatmulOp>(op);
    if (!mm || !isa_and_nonnull<ParamOp>(mm.getRhs().getDefiningOp()) ||
        mm.getRhs().getDefiningOp()->hasAttr("strata.tied") ||
        known.count(mm.getRhs()))
      return false;
    if (const Sharding *in = lookup(mm.getLhs()); in && !isReplicated(*in))
      return false;
    // The factor of the result's last dimension (N) on the weight.
    int64_t n = rule.results[0].back().front();
    Sharding s = whole(mm.getRhs());
    for (auto [d, factors] : llvm::enumerate(rule.operands[1]))
      if (!factors.empty() && factors.front() == n &&
          rule.factorSizes[n] % meshSize == 0)
        s[d] = kAxis;
    if (isReplicated(s))
      return false;
    known[mm.getRhs()] = s;
    return true;
  }

  bool visit(Operation *op) {
    auto iface = dyn_cast<ShardingRuleOpInterface>(op);
    bool changed = false;
    if (!iface) {
      for (Value v : op->getResults())
        changed |= decide(v, whole(v));
      return changed;
    }
    ShardingRule rule = iface.getShardingRule();
    if (splitMatmulWeights)
      changed |= splitWeight(op, rule);
    SmallVector<std::string> axis =
        assignFactors(op, rule, meshSize, [&](Value v) { return lookup(v); });
    auto isKnown = [&](Value v) {
      return known.count(v) != 0 && !partial.contains(v);
    };
    if (llvm::none_of(op->getOperands(), isKnown) &&
        llvm::none_of(op->getResults(), isKnown))
      return false; // nothing known around this op yet
    for (auto [i, v] : llvm::enumerate(op->getOperands()))
      if (i < rule.operands.size())
        changed |= decide(v, shardingFrom(rule, rule.operands[i], axis));
    bool reduces = false;
    for (auto [f, a] : llvm::enumerate(axis))
      reduces |= !a.empty() && rule.isReduction(int64_t(f));
    for (auto [i, v] : llvm::enumerate(op->getResults()))
      if (i < rule.results.size()) {
        Sharding s = shardingFrom(rule, rule.results[i], axis);
        // A dimension of several factors of which only the major has a part
        // of the axis (kv heads repeated for their query heads) waits for
        // its readers, which may split it over the whole axis.
        bool pending = false;
        for (auto [d, a] : llvm::enumerate(s))
          pending |=
              rule.results[i][d].size() >= 2 && parseDimSplit(a).major != 0;
        if (pending)
          continue;
        bool fresh = decide(v, std::move(s));
        if (fresh && reduces)
          partial.insert(v);
        changed |= fresh;
      }
    return changed;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward) {
      module.emitError("strata-propagate-sharding runs on @forward");
      return signalPassFailure();
    }
    if (meshSize < 1) {
      module.emitError("mesh-size must be >= 1");
      return signalPassFailure();
    }
    Block &body = forward.getBody().front();
    SmallVector<Operation *> ops;
    for (Operation &op : body) {
      if (isa<func::ReturnOp>(op))
        continue;
      ops.push_back(&op);
      if (!op.hasAttr(kShardingAttr))
        continue;
      std::optional<SmallVector<Sharding>> seeds = readShardings(&op);
      if (!seeds) {
        op.emitError("strata.sharding must list, for each result, one mesh "
                     "axis name per dimension (\"\" for whole), e.g. "
                     "[[\"\", \"tp\"]]");
        return signalPassFailure();
      }
      for (auto [v, s] : llvm::zip(op.getResults(), *seeds)) {
        normalizeSharding(s, meshSize);
        known[v] = s;
      }
    }
    for (Operation *op : ops)
      if (!isa<ParamOp, InputOp>(op) && !isa<ShardingRuleOpInterface>(op))
        op->emitWarning("has no sharding rule; its operands and results are "
                        "replicated");
    bool changed = true;
    for (int sweep = 0; changed && sweep < 64; ++sweep) {
      changed = false;
      for (Operation *op : ops)
        if (!isa<ParamOp, InputOp>(op))
          changed |= visit(op);
      for (Operation *op : llvm::reverse(ops))
        if (!isa<ParamOp, InputOp>(op))
          changed |= visit(op);
    }
    // Whatever nothing reached is whole.
    for (Operation *op : ops) {
      SmallVector<Sharding> shardings;
      for (Value v : op->getResults()) {
        decide(v, whole(v));
        shardings.push_back(known[v]);
      }
      if (annotateRules)
        if (auto iface = dyn_cast<ShardingRuleOpInterface>(op))
          op->setAttr(
              "strata.sharding_rule",
              StringAttr::get(op->getContext(), iface.getShardingRule().str()));
      writeShardings(op, shardings);
    }
  }
};

} // namespace
