//===- Sharding.cpp - Shardings of values and factor assignments ----------===//

#include "passes/sharding/Sharding.h"

#include "dialects/strata/StrataOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;

namespace strata {

std::optional<SmallVector<Sharding>> readShardings(Operation *op) {
  auto list = op->getAttrOfType<ArrayAttr>(kShardingAttr);
  if (!list || list.size() != op->getNumResults())
    return std::nullopt;
  SmallVector<Sharding> out;
  for (auto [attr, result] : llvm::zip(list, op->getResults())) {
    auto dims = llvm::dyn_cast<ArrayAttr>(attr);
    auto type = llvm::dyn_cast<RankedTensorType>(result.getType());
    if (!dims || !type || int64_t(dims.size()) != type.getRank())
      return std::nullopt;
    Sharding s;
    for (Attribute d : dims) {
      auto axis = llvm::dyn_cast<StringAttr>(d);
      if (!axis)
        return std::nullopt;
      s.push_back(axis.str());
    }
    out.push_back(std::move(s));
  }
  return out;
}

void writeShardings(Operation *op, ArrayRef<Sharding> shardings) {
  Builder b(op->getContext());
  SmallVector<Attribute> list;
  for (const Sharding &s : shardings) {
    SmallVector<Attribute> dims;
    for (const std::string &axis : s)
      dims.push_back(b.getStringAttr(axis));
    list.push_back(b.getArrayAttr(dims));
  }
  op->setAttr(kShardingAttr, b.getArrayAttr(list));
}

bool isReplicated(const Sharding &s) {
  return llvm::all_of(s, [](const std::string &a) { return a.empty(); });
}

std::string shardingStr(const Sharding &s) {
  std::string out = "[";
  for (auto [i, a] : llvm::enumerate(s))
    out += (i ? ", " : "") + (a.empty() ? std::string("_") : a);
  return out + "]";
}

SmallVector<std::string>
assignFactors(Operation *op, const ShardingRule &rule, int64_t meshSize,
              llvm::function_ref<const Sharding *(Value)> known) {
  SmallVector<std::string> axis(rule.factorSizes.size());
  auto take = [&](const ShardingRule::TensorFactors &dims, const Sharding &s,
                  ArrayRef<int64_t> shape) {
    for (auto [d, a] : llvm::enumerate(s)) {
      if (a.empty() || d >= dims.size() || dims[d].empty())
        continue;
      int64_t f = dims[d].front();
      if (!axis[f].empty() || llvm::is_contained(axis, a) ||
          rule.factorSizes[f] % meshSize || shape[d] % meshSize)
        continue;
      axis[f] = a;
    }
  };
  auto shapeOf = [](Value v) {
    return llvm::cast<RankedTensorType>(v.getType()).getShape();
  };
  // Parameters, then the other operands, then the results.
  for (int pass = 0; pass < 2; ++pass)
    for (auto [i, v] : llvm::enumerate(op->getOperands())) {
      bool param = isa_and_nonnull<ParamOp>(v.getDefiningOp());
      if (param != (pass == 0) || i >= rule.operands.size())
        continue;
      if (const Sharding *s = known(v))
        take(rule.operands[i], *s, shapeOf(v));
    }
  for (auto [i, v] : llvm::enumerate(op->getResults()))
    if (i < rule.results.size())
      if (const Sharding *s = known(v))
        take(rule.results[i], *s, shapeOf(v));
  return axis;
}

Sharding shardingFrom(const ShardingRule::TensorFactors &dims,
                      ArrayRef<std::string> factorAxis) {
  Sharding s;
  for (const ShardingRule::DimFactors &d : dims)
    s.push_back(d.empty() ? std::string() : factorAxis[d.front()]);
  return s;
}

} // namespace strata
