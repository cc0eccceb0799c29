//===- PlanAttr.cpp - Plan <-> IR attribute -------------------------------===//

#include "compiler/planner/PlanAttr.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace strata::planner;

DictionaryAttr strata::planner::planToAttr(const Plan &plan, MLIRContext *ctx) {
  Builder b(ctx);
  SmallVector<Attribute> placement;
  for (Axis a : plan.axisOrder)
    placement.push_back(b.getStringAttr(axisName(a)));
  SmallVector<NamedAttribute> attrs = {
      b.getNamedAttr("dp", b.getI64IntegerAttr(plan.dp)),
      b.getNamedAttr("tp", b.getI64IntegerAttr(plan.tp)),
      b.getNamedAttr("pp", b.getI64IntegerAttr(plan.pp)),
      b.getNamedAttr("vpp", b.getI64IntegerAttr(plan.vpp)),
      b.getNamedAttr("micro_batch", b.getI64IntegerAttr(plan.microBatch)),
      b.getNamedAttr("num_microbatches",
                     b.getI64IntegerAttr(plan.numMicrobatches)),
      b.getNamedAttr("schedule", b.getStringAttr(scheduleName(plan.schedule))),
      b.getNamedAttr("zero", b.getI64IntegerAttr(plan.zero)),
      b.getNamedAttr("recompute",
                     b.getStringAttr(recomputeName(plan.recompute))),
      b.getNamedAttr("sp", b.getBoolAttr(plan.sp)),
      b.getNamedAttr("bucket_bytes", b.getI64IntegerAttr(plan.bucketBytes)),
      b.getNamedAttr("placement", b.getArrayAttr(placement)),
      b.getNamedAttr("stage_layers", b.getDenseI64ArrayAttr(plan.stageLayers)),
  };
  // Only when not the default, so float32 plans print as before.
  if (plan.bf16GradReduce)
    attrs.push_back(
        b.getNamedAttr("grad_reduce_dtype", b.getStringAttr("bfloat16")));
  return b.getDictionaryAttr(attrs);
}

std::optional<Plan> strata::planner::planFromAttr(DictionaryAttr attr,
                                                  std::string &error) {
  Plan plan;
  auto getInt = [&](StringRef key, int64_t &out) {
    auto v = attr.getAs<IntegerAttr>(key);
    if (!v) {
      error = "strata.plan needs an integer '" + key.str() + "'";
      return false;
    }
    out = v.getInt();
    return true;
  };
  auto getStr = [&](StringRef key) -> std::optional<std::string> {
    auto v = attr.getAs<StringAttr>(key);
    if (!v) {
      error = "strata.plan needs a string '" + key.str() + "'";
      return std::nullopt;
    }
    return v.getValue().str();
  };
  int64_t zero = 0;
  if (!getInt("dp", plan.dp) || !getInt("tp", plan.tp) ||
      !getInt("pp", plan.pp) || !getInt("vpp", plan.vpp) ||
      !getInt("micro_batch", plan.microBatch) ||
      !getInt("num_microbatches", plan.numMicrobatches) ||
      !getInt("zero", zero) || !getInt("bucket_bytes", plan.bucketBytes))
    return std::nullopt;
  plan.zero = static_cast<int>(zero);
  if (auto g = attr.getAs<StringAttr>("grad_reduce_dtype"))
    plan.bf16GradReduce = g.getValue() == "bfloat16";
  auto schedule = getStr("schedule");
  auto recompute = getStr("recompute");
  if (!schedule || !recompute)
    return std::nullopt;
  auto s = parseSchedule(*schedule);
  auto r = parseRecompute(*recompute);
  if (!s || !r) {
    error = "strata.plan has an unknown schedule or recompute value";
    return std::nullopt;
  }
  plan.schedule = *s;
  plan.recompute = *r;
  auto sp = attr.getAs<BoolAttr>("sp");
  if (!sp) {
    error = "strata.plan needs a boolean 'sp'";
    return std::nullopt;
  }
  plan.sp = sp.getValue();
  auto placement = attr.getAs<ArrayAttr>("placement");
  if (!placement || placement.size() != 3) {
    error = "strata.plan needs 'placement', three of \"tp\", \"dp\", \"pp\"";
    return std::nullopt;
  }
  for (auto [i, a] : llvm::enumerate(placement)) {
    auto name = dyn_cast<StringAttr>(a);
    auto axis = name ? parseAxis(name.getValue().str()) : std::nullopt;
    if (!axis) {
      error =
          "strata.plan 'placement' entries must be \"tp\", \"dp\" or \"pp\"";
      return std::nullopt;
    }
    plan.axisOrder[i] = *axis;
  }
  if (auto layers = attr.getAs<DenseI64ArrayAttr>("stage_layers"))
    plan.stageLayers.assign(layers.asArrayRef().begin(),
                            layers.asArrayRef().end());
  return plan;
}

void strata::planner::attachPlan(ModuleOp module, const Plan &plan) {
  module->setAttr(kPlanAttrName, planToAttr(plan, module.getContext()));
}
