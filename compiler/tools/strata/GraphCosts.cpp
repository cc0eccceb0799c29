//===- GraphCosts.cpp - An explicit graph, costed op by op for the planner ===//
//
// The planner has no MLIR; this is where an explicit graph meets it. The
// graph is imported twice, for micro-batches of one and two samples, and
// every op of each pipeline unit (passes/partition/PipelineUnits.h) is asked
// for its FLOPs and bytes through CostOpInterface; the difference of the two
// imports is the per-sample part (every op here is linear in the batch).
// A unit whose ops and types repeat an earlier unit's (a stack of identical
// layers) reuses that unit's costs.
//
//===----------------------------------------------------------------------===//

#include "compiler/tools/strata/Commands.h"
#include "compiler/tools/strata/ToolSupport.h"

#include "compiler/planner/ModelDesc.h"
#include "dialects/strata/StrataOps.h"
#include "frontends/import/ImportModel.h"
#include "passes/partition/PipelineUnits.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace strata {

namespace {

double bytesOf(Type t) {
  auto tt = llvm::dyn_cast<RankedTensorType>(t);
  if (!tt)
    return 0;
  return double(tt.getNumElements()) *
         double((tt.getElementTypeBitWidth() + 7) / 8);
}

struct OpFacts {
  double flops = 0, bytes = 0, results = 0;
  bool contraction = false;
};

OpFacts factsOf(Operation *op) {
  OpFacts f;
  if (auto cost = dyn_cast<CostOpInterface>(op)) {
    f.flops = double(cost.getFlops());
    f.bytes = double(cost.getBytesAccessed());
  } else {
    for (Type t : op->getOperandTypes())
      f.bytes += bytesOf(t);
    for (Type t : op->getResultTypes())
      f.bytes += bytesOf(t);
  }
  for (Type t : op->getResultTypes())
    f.results += bytesOf(t);
  f.contraction = isa<MatmulOp>(op);
  return f;
}

/// The unit's ops and types, which fix its costs.
std::string signatureOf(const PipelineUnit &unit) {
  std::string s;
  llvm::raw_string_ostream os(s);
  for (Operation *op : unit) {
    os << op->getName() << "(";
    for (Type t : op->getOperandTypes())
      os << t << ",";
    os << ")->(";
    for (Type t : op->getResultTypes())
      os << t << ",";
    os << ")";
    // The op's own attributes; annotations such as strata.layer differ
    // between repeated layers without changing their cost.
    for (NamedAttribute a : op->getAttrs())
      if (!a.getName().strref().starts_with("strata."))
        os << a.getName().strref() << "=" << a.getValue() << ",";
    os << ";";
  }
  return s;
}

} // namespace

bool costExplicitGraph(const frontend::ModelSpec &spec, planner::ModelDesc &d,
                       std::string &error) {
  ToolContext tool;
  std::vector<OwningOpRef<ModuleOp>> modules;
  for (int64_t batch : {1, 2}) {
    frontend::LoadOptions load;
    load.batch = batch;
    std::optional<frontend::ModelSpec> sized = loadSpec(spec.path, error, load);
    if (!sized)
      return false;
    modules.push_back(importModel(*sized, tool.ctx));
    if (!modules.back()) {
      error = spec.path + ": the graph does not import (see above)";
      return false;
    }
  }
  auto forward1 = modules[0]->lookupSymbol<func::FuncOp>("forward");
  auto forward2 = modules[1]->lookupSymbol<func::FuncOp>("forward");
  SmallVector<PipelineUnit> units1 = pipelineUnits(forward1);
  SmallVector<PipelineUnit> units2 = pipelineUnits(forward2);
  if (units1.size() != units2.size()) {
    error = spec.path + ": the graph's ops change with the batch size";
    return false;
  }
  llvm::StringMap<std::vector<planner::GraphOpCost>> seen;
  llvm::DenseSet<Value> counted; // parameters already given to a unit
  d.units.clear();
  d.repeatedUnits = 0;
  for (size_t k = 0; k < units1.size(); ++k) {
    const PipelineUnit &u1 = units1[k], &u2 = units2[k];
    planner::GraphUnit unit;
    Operation *head = u1.front();
    if (auto l = head->getAttrOfType<IntegerAttr>("strata.layer"))
      unit.name = "layer " + std::to_string(l.getInt());
    else
      unit.name = "op " + std::to_string(k) + " (" +
                  head->getName().getStringRef().str() + ")";
    std::string sig = signatureOf(u1) + "|" + signatureOf(u2);
    auto it = seen.find(sig);
    if (it != seen.end()) {
      unit.ops = it->second;
      ++d.repeatedUnits;
    } else {
      for (size_t i = 0; i < u1.size() && i < u2.size(); ++i) {
        OpFacts a = factsOf(u1[i]), b = factsOf(u2[i]);
        planner::GraphOpCost c;
        c.flopsPerSample = b.flops - a.flops;
        c.flops = a.flops - c.flopsPerSample;
        c.bytesPerSample = b.bytes - a.bytes;
        c.bytes = a.bytes - c.bytesPerSample;
        c.savedPerSample = b.results - a.results;
        c.contraction = a.contraction;
        unit.ops.push_back(c);
      }
      seen[sig] = unit.ops;
    }
    llvm::DenseSet<Operation *> members1(u1.begin(), u1.end());
    for (Operation *op : u1)
      for (Value v : op->getOperands())
        if (isa_and_nonnull<ParamOp>(v.getDefiningOp()) &&
            counted.insert(v).second)
          unit.params += double(
              llvm::cast<RankedTensorType>(v.getType()).getNumElements());
    // Values read outside the unit cross a stage boundary when one falls
    // after it.
    for (size_t i = 0; i < u1.size() && i < u2.size(); ++i)
      for (unsigned r = 0; r < u1[i]->getNumResults(); ++r) {
        bool escapes =
            llvm::any_of(u1[i]->getResult(r).getUsers(), [&](Operation *user) {
              return !members1.count(user) && !isa<func::ReturnOp>(user);
            });
        if (escapes)
          unit.boundaryPerSample += bytesOf(u2[i]->getResult(r).getType()) -
                                    bytesOf(u1[i]->getResult(r).getType());
      }
    d.units.push_back(std::move(unit));
  }
  return true;
}

} // namespace strata
