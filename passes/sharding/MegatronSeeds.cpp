//===- MegatronSeeds.cpp - Megatron-LM's decisions as sharding seeds ------===//
//
// Runs strata-shard-tensor-parallel on a copy and reads its decisions off
// the parameters it split: a box of the checkpoint tensor or of a view of
// it (strata.shard_view) becomes a split of the parameter's dimension
// ("tp"), of a view of it ("tp@3x4x4:1", GPT-2's fused QKV by heads), or,
// for weights it keeps whole and cuts a group's kv heads out of, a split
// over a major part of the axis ("tp/2").
//
//===----------------------------------------------------------------------===//

#include "passes/sharding/MegatronSeeds.h"

#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Pass/PassManager.h"
#include "passes/Passes.h"
#include "passes/sharding/Sharding.h"

#include <map>
#include <vector>

using namespace mlir;

namespace strata {
namespace {

std::vector<int64_t> i64s(Operation *op, StringRef name) {
  auto attr = op->getAttrOfType<DenseI64ArrayAttr>(name);
  if (!attr)
    return {};
  return {attr.asArrayRef().begin(), attr.asArrayRef().end()};
}

struct Seeds {
  std::map<std::string, Sharding> params;
  std::map<std::string, std::vector<int64_t>> views;
  std::vector<std::string> inexpressible;
};

Seeds decisionsOf(ModuleOp matched) {
  Seeds seeds;
  matched.walk([&](ParamOp p) {
    std::vector<int64_t> global = i64s(p, "strata.global_shape");
    std::vector<int64_t> view = i64s(p, "strata.shard_view");
    if (seeds.params.count(p.getName().str()))
      return;
    if (global.empty()) {
      // A weight the matcher keeps whole and cuts a group's part of (kv
      // heads fewer than the ranks): split over a major part of the axis.
      auto type = cast<RankedTensorType>(p.getType());
      for (Operation *user : p->getUsers()) {
        auto rep = dyn_cast<ReplicateOp>(user);
        if (!rep || !rep->hasOneUse())
          continue;
        Operation *next = *rep->getUsers().begin();
        Sharding s(type.getRank());
        if (auto slice = dyn_cast<SliceOp>(next)) {
          int64_t axis = slice.getAxis();
          s[axis] =
              "tp/" + std::to_string(type.getShape()[axis] / slice.getSize());
        } else if (auto mm = dyn_cast<MatmulOp>(next);
                   mm && mm.getRhs() == rep.getResult()) {
          s[mm.getTransposeB() ? 0 : 1] = "tp/1";
        } else {
          continue;
        }
        seeds.params[p.getName().str()] = s;
        return;
      }
      return;
    }
    auto local = cast<RankedTensorType>(p.getType()).getShape();
    // The view refines the global dimensions; the parameter is declared in
    // the view's shape (or in the global one when they are the same). A
    // global dimension split along one view dimension by an exact division
    // is seeded split along it: plainly when that is the major one of its
    // group, else as a viewed split ("tp@3x4x4:1").
    bool seedable = local.size() == view.size();
    Sharding s(global.size());
    size_t v = 0;
    for (auto [d, size] : llvm::enumerate(global)) {
      int64_t product = 1;
      size_t major = v;
      int splits = 0;
      for (; seedable && v < view.size() && product < size; ++v) {
        product *= view[v];
        if (local[v] == view[v])
          continue;
        ++splits;
        // Split exactly, or padded (the vocabulary) when the view is the
        // dimension itself.
        if (view[v] % local[v] && view[v] != size)
          seedable = false;
        s[d] = v == major
                   ? "tp"
                   : viewedSplit("tp", ArrayRef<int64_t>(view).slice(major),
                                 int64_t(v - major));
      }
      seedable &= product == size && splits <= 1;
      if (seedable && !s[d].empty() && s[d] != "tp") {
        // The view of this dimension is its group only.
        std::vector<int64_t> group(view.begin() + major, view.begin() + v);
        s[d] = viewedSplit("tp", group, parseDimSplit(s[d]).index);
      }
    }
    if (!seedable || isReplicated(s)) {
      seeds.inexpressible.push_back(p.getName().str());
      return;
    }
    seeds.params[p.getName().str()] = s;
    if (view != global)
      seeds.views[p.getName().str()] = view;
  });
  return seeds;
}

} // namespace

LogicalResult seedMegatronDecisions(ModuleOp module, int64_t tp, int64_t rank,
                                    bool sp) {
  OwningOpRef<ModuleOp> matched = module.clone();
  PassManager pm(module->getContext(), ModuleOp::getOperationName());
  StrataShardTensorParallelOptions options;
  options.tp = tp;
  options.tpRank = rank;
  options.sp = sp;
  pm.addPass(createStrataShardTensorParallel(options));
  if (failed(pm.run(*matched)))
    return failure();
  Seeds seeds = decisionsOf(*matched);
  if (!seeds.inexpressible.empty()) {
    InFlightDiagnostic diag = module.emitError(
        "tensor parallelism: no sharding seed states how the Megatron "
        "decisions split parameter");
    for (const std::string &name : seeds.inexpressible)
      diag << " " << name;
    return diag;
  }
  MLIRContext *ctx = module->getContext();
  module.walk([&](Operation *op) {
    if (auto p = dyn_cast<ParamOp>(op)) {
      auto it = seeds.params.find(p.getName().str());
      if (it != seeds.params.end())
        writeShardings(op, {it->second});
      auto view = seeds.views.find(p.getName().str());
      if (view != seeds.views.end())
        op->setAttr("strata.shard_view",
                    DenseI64ArrayAttr::get(ctx, view->second));
    } else if (sp && isa<EmbeddingOp>(op)) {
      auto type = cast<RankedTensorType>(op->getResult(0).getType());
      Sharding s(type.getRank());
      s[1] = "tp"; // [batch, sequence, hidden]
      writeShardings(op, {s});
    }
  });
  return success();
}

} // namespace strata
