//===- PipelineUnits.cpp - An explicit graph's pipeline units -------------===//

#include "passes/partition/PipelineUnits.h"

#include "dialects/strata/StrataOps.h"

using namespace mlir;

namespace strata {

SmallVector<PipelineUnit> pipelineUnits(func::FuncOp forward) {
  SmallVector<PipelineUnit> units;
  std::optional<int64_t> current; // the layer of the open run, if any
  for (Operation &op : forward.getBody().front()) {
    if (isa<ParamOp, InputOp, func::ReturnOp>(op))
      continue;
    auto layer = op.getAttrOfType<IntegerAttr>("strata.layer");
    if (layer && current && *current == layer.getInt() && !units.empty()) {
      units.back().push_back(&op);
      continue;
    }
    units.emplace_back();
    units.back().push_back(&op);
    current = layer ? std::optional<int64_t>(layer.getInt()) : std::nullopt;
  }
  return units;
}

} // namespace strata
