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

DimSplit parseDimSplit(StringRef entry) {
  DimSplit split;
  for (char mark : {'/', '%'}) {
    auto [axis, parts] = entry.split(mark);
    int64_t k = 0;
    if (!parts.empty() && !parts.getAsInteger(10, k) && k > 0) {
      split.axis = axis.str();
      (mark == '/' ? split.major : split.minor) = k;
      return split;
    }
  }
  auto [axis, rest] = entry.split('@');
  split.axis = axis.str();
  if (rest.empty())
    return split;
  auto [view, index] = rest.split(':');
  SmallVector<StringRef> sizes;
  view.split(sizes, 'x');
  for (StringRef size : sizes) {
    int64_t n = 0;
    if (size.getAsInteger(10, n) || n < 1)
      return DimSplit{split.axis, {}, -1};
    split.view.push_back(n);
  }
  if (index.getAsInteger(10, split.index) || split.index < 0 ||
      split.index >= int64_t(split.view.size()))
    return DimSplit{split.axis, {}, -1};
  return split;
}

void normalizeSharding(Sharding &s, int64_t n) {
  for (std::string &entry : s) {
    DimSplit split = parseDimSplit(entry);
    if (split.major == n || split.minor == 1)
      entry = split.axis;
  }
}

std::string viewedSplit(StringRef axis, ArrayRef<int64_t> view, int64_t index) {
  std::string out = axis.str() + "@";
  for (auto [i, size] : llvm::enumerate(view))
    out += (i ? "x" : "") + std::to_string(size);
  return out + ":" + std::to_string(index);
}

SmallVector<std::string>
assignFactors(Operation *op, const ShardingRule &rule, int64_t meshSize,
              llvm::function_ref<const Sharding *(Value)> known) {
  SmallVector<std::string> axis(rule.factorSizes.size());
  auto taken = [&](StringRef name) {
    return llvm::any_of(axis, [&](const std::string &a) {
      return !a.empty() && parseDimSplit(a).axis == name;
    });
  };
  auto take = [&](const ShardingRule::TensorFactors &dims, const Sharding &s,
                  ArrayRef<int64_t> shape) {
    for (auto [d, a] : llvm::enumerate(s)) {
      if (a.empty() || d >= dims.size() || dims[d].empty())
        continue;
      DimSplit split = parseDimSplit(a);
      int64_t f = dims[d].front(), size = rule.factorSizes[f];
      std::string value = a;
      if (split.minor)
        continue; // only with its major, below
      if (split.major) {
        if (!axis[f].empty() || taken(split.axis) || size % split.major)
          continue;
        axis[f] = a;
        continue;
      }
      // A composite dimension whose major factor is smaller than the mesh:
      // the factor takes a major part of the axis, the next one the rest
      // (query heads (kv g) split over more members than kv heads).
      if (!split.viewed() && dims[d].size() >= 2 && size < meshSize &&
          meshSize % size == 0 &&
          rule.factorSizes[dims[d][1]] % (meshSize / size) == 0) {
        int64_t g = dims[d][1];
        std::string major = split.axis + "/" + std::to_string(size);
        // The major factor may have its part already (from the operand the
        // repeated kv heads come from).
        bool has = axis[f] == major;
        if ((!axis[f].empty() && !has) || !axis[g].empty() ||
            (!has && taken(split.axis)))
          continue;
        axis[f] = major;
        axis[g] = split.axis + "%" + std::to_string(size);
        continue;
      }
      if (split.viewed()) {
        SmallVector<int64_t> sizes;
        for (int64_t g : dims[d])
          sizes.push_back(rule.factorSizes[g]);
        if (ArrayRef<int64_t>(sizes) == ArrayRef<int64_t>(split.view)) {
          // The rule splits the dimension into the view's factors.
          f = dims[d][split.index];
          size = rule.factorSizes[f];
          value = split.axis;
        } else if (dims[d].size() == 1) {
          size = split.view[split.index]; // the factor carries the view
        } else {
          continue;
        }
      }
      // A size the mesh does not divide is split with padding, where the
      // op allows it for a dimension of that one factor.
      bool padded = !split.viewed() && dims[d].size() == 1 &&
                    llvm::is_contained(rule.paddable, f);
      if (!axis[f].empty() || taken(split.axis) ||
          (!padded && (size % meshSize || shape[d] % meshSize)))
        continue;
      axis[f] = value;
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

Sharding shardingFrom(const ShardingRule &rule,
                      const ShardingRule::TensorFactors &dims,
                      ArrayRef<std::string> factorAxis) {
  Sharding s;
  for (const ShardingRule::DimFactors &d : dims) {
    std::string entry;
    if (!d.empty())
      entry = factorAxis[d.front()];
    // A major part of the axis and its minor complement: the whole axis.
    if (d.size() >= 2 && !entry.empty()) {
      DimSplit major = parseDimSplit(entry);
      DimSplit minor = parseDimSplit(factorAxis[d[1]]);
      if (major.major && minor.minor == major.major && minor.axis == major.axis)
        entry = major.axis;
    }
    if (!entry.empty() && parseDimSplit(entry).minor) {
      // A lone minor part: after a one-part major it is the whole axis,
      // else not expressible (whole).
      DimSplit minor = parseDimSplit(entry);
      entry = minor.minor == 1 ? minor.axis : std::string();
    }
    for (size_t i = 1; entry.empty() && i < d.size(); ++i) {
      const std::string &a = factorAxis[d[i]];
      DimSplit split = parseDimSplit(a);
      if (a.empty() || split.viewed() || split.major || split.minor)
        continue;
      SmallVector<int64_t> view;
      for (int64_t f : d)
        view.push_back(rule.factorSizes[f]);
      entry = viewedSplit(a, view, int64_t(i));
    }
    s.push_back(entry);
  }
  return s;
}

} // namespace strata
