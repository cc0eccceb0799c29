//===- StrataShardingRules.cpp - The sharding rule of every forward op ----===//
//
// One rule per op, in Shardy's factor form (StrataSharding.h). A dimension
// an op needs whole gets no factor: the normalised dimension of the norms,
// the class dimension of softmax and of the loss, the rotated dimensions of
// rotary embeddings, the split/concat/slice axis. The loss keeps every
// dimension whole: its mean over shards would need their counts.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataSharding.h"

#include "dialects/strata/StrataDialect.h"
#include "dialects/strata/StrataOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <numeric>

using namespace mlir;

namespace strata {

#include "dialects/strata/StrataShardingInterface.cpp.inc"

bool ShardingRule::isReduction(int64_t factor) const {
  auto uses = [&](ArrayRef<TensorFactors> tensors) {
    for (const TensorFactors &t : tensors)
      for (const DimFactors &d : t)
        if (llvm::is_contained(d, factor))
          return true;
    return false;
  };
  return uses(operands) && !uses(results);
}

static std::string factorName(int64_t f) {
  std::string name(1, char('i' + f % 18));
  if (f >= 18)
    name += std::to_string(f / 18);
  return name;
}

std::string ShardingRule::str() const {
  auto tensors = [&](ArrayRef<TensorFactors> list) {
    std::string s = "(";
    for (auto [n, t] : llvm::enumerate(list)) {
      s += n ? ", [" : "[";
      for (auto [k, d] : llvm::enumerate(t)) {
        s += k ? ", " : "";
        if (d.empty())
          s += "_";
        else if (d.size() == 1)
          s += factorName(d[0]);
        else {
          s += "(";
          for (auto [j, f] : llvm::enumerate(d))
            s += (j ? " " : "") + factorName(f);
          s += ")";
        }
      }
      s += "]";
    }
    return s + ")";
  };
  std::string s = tensors(operands) + " -> " + tensors(results) + " {";
  for (auto [f, size] : llvm::enumerate(factorSizes))
    s += (f ? ", " : "") + factorName(int64_t(f)) + "=" + std::to_string(size);
  s += "}";
  std::string reductions;
  for (int64_t f = 0; f < int64_t(factorSizes.size()); ++f)
    if (isReduction(f))
      reductions += (reductions.empty() ? "" : ", ") + factorName(f);
  if (!reductions.empty())
    s += " reduction={" + reductions + "}";
  return s;
}

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return llvm::cast<RankedTensorType>(v.getType()).getShape();
}

/// Builds a rule: a new factor per dimension unless told to share one.
struct RuleBuilder {
  ShardingRule rule;
  int64_t factor(int64_t size) {
    rule.factorSizes.push_back(size);
    return int64_t(rule.factorSizes.size()) - 1;
  }
  /// Fresh factors for every dimension of `shape` but those in `whole`.
  ShardingRule::TensorFactors fresh(ArrayRef<int64_t> shape,
                                    ArrayRef<int64_t> whole = {}) {
    ShardingRule::TensorFactors t;
    for (auto [d, size] : llvm::enumerate(shape)) {
      t.emplace_back();
      if (!llvm::is_contained(whole, int64_t(d)))
        t.back().push_back(factor(size));
    }
    return t;
  }
  static ShardingRule::TensorFactors whole(ArrayRef<int64_t> shape) {
    return ShardingRule::TensorFactors(shape.size());
  }
};

int64_t normAxis(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

/// Same shape in and out, dimension by dimension (elementwise ops); the
/// dimensions in `whole` stay whole.
ShardingRule elementwise(Operation *op, ArrayRef<int64_t> whole = {}) {
  RuleBuilder b;
  ShardingRule::TensorFactors t = b.fresh(shapeOf(op->getResult(0)), whole);
  for (unsigned i = 0; i < op->getNumOperands(); ++i)
    b.rule.operands.push_back(t);
  for (unsigned i = 0; i < op->getNumResults(); ++i)
    b.rule.results.push_back(t);
  return b.rule;
}

ShardingRule matmulRule(MatmulOp op) {
  RuleBuilder b;
  ArrayRef<int64_t> a = shapeOf(op.getLhs()), w = shapeOf(op.getRhs());
  int64_t ra = int64_t(a.size()), rw = int64_t(w.size());
  ShardingRule::TensorFactors lhs(ra), rhs(rw), out;
  for (int64_t d = 0; d + 2 < ra; ++d) {
    int64_t f = b.factor(a[d]);
    lhs[d].push_back(f);
    out.push_back({f});
    if (rw == ra)
      rhs[d].push_back(f);
  }
  int64_t m = b.factor(op.getTransposeA() ? a[ra - 1] : a[ra - 2]);
  int64_t k = b.factor(op.getTransposeA() ? a[ra - 2] : a[ra - 1]);
  int64_t n = b.factor(op.getTransposeB() ? w[rw - 2] : w[rw - 1]);
  lhs[op.getTransposeA() ? ra - 1 : ra - 2].push_back(m);
  lhs[op.getTransposeA() ? ra - 2 : ra - 1].push_back(k);
  rhs[op.getTransposeB() ? rw - 1 : rw - 2].push_back(k);
  rhs[op.getTransposeB() ? rw - 2 : rw - 1].push_back(n);
  out.push_back({m});
  out.push_back({n});
  b.rule.operands = {lhs, rhs};
  b.rule.results = {out};
  b.rule.paddable = {n};
  return b.rule;
}

/// table [V, H], ids [...] -> [..., H]: V is a reduction factor (a member
/// holding rows [r, r + V/n) looks up only its ids and leaves zeros).
ShardingRule embeddingRule(EmbeddingOp op) {
  RuleBuilder b;
  ArrayRef<int64_t> table = shapeOf(op.getTable());
  ShardingRule::TensorFactors ids = b.fresh(shapeOf(op.getIds()));
  int64_t v = b.factor(table[0]), h = b.factor(table[1]);
  ShardingRule::TensorFactors out = ids;
  out.push_back({h});
  b.rule.operands = {{{v}, {h}}, ids};
  b.rule.results = {out};
  b.rule.paddable = {v};
  return b.rule;
}

/// x [..., N] with per-feature operands [N] (bias, or the norms' weights).
ShardingRule featureRule(Operation *op, bool featureWhole) {
  RuleBuilder b;
  ArrayRef<int64_t> x = shapeOf(op->getOperand(0));
  int64_t last = int64_t(x.size()) - 1;
  ShardingRule::TensorFactors t =
      featureWhole ? b.fresh(x, {last}) : b.fresh(x);
  b.rule.operands.push_back(t);
  for (unsigned i = 1; i < op->getNumOperands(); ++i)
    b.rule.operands.push_back({t[last]});
  b.rule.results = {t};
  if (!featureWhole) // a bias: padding features stay padding
    b.rule.paddable = {t[last].front()};
  return b.rule;
}

/// strata.binary: lhs's factors; rhs (aligned to the right) shares those of
/// the dims it matches, its broadcast 1s whole.
ShardingRule binaryRule(ElementwiseBinaryOp op) {
  RuleBuilder b;
  ArrayRef<int64_t> x = shapeOf(op.getLhs()), y = shapeOf(op.getRhs());
  ShardingRule::TensorFactors t = b.fresh(x);
  ShardingRule::TensorFactors r(y.size());
  for (size_t d = 0; d < y.size(); ++d) {
    size_t xd = x.size() - y.size() + d;
    if (y[d] == x[xd])
      r[d] = t[xd];
  }
  b.rule.operands = {t, r};
  b.rule.results = {t};
  return b.rule;
}

/// Reshape: the common refinement of the two shapes; a dimension made of
/// several factors is composite (sharding it shards its major factor).
ShardingRule reshapeRule(ReshapeOp op) {
  RuleBuilder b;
  ArrayRef<int64_t> in = shapeOf(op.getInput()), out = shapeOf(op.getResult());
  ShardingRule::TensorFactors ti(in.size()), to(out.size());
  size_t i = 0, j = 0;
  int64_t remIn = in.empty() ? 1 : in[0], remOut = out.empty() ? 1 : out[0];
  while (i < in.size() && j < out.size()) {
    if (remIn == 1) {
      if (++i < in.size())
        remIn = in[i];
      continue;
    }
    if (remOut == 1) {
      // A unit dimension inserted into an input dimension is a unit factor
      // of it ([.., 4] -> [.., 1, 4]: one kv head), so a split of that one
      // part can follow it.
      if (out[j] == 1 && to[j].empty()) {
        int64_t f = b.factor(1);
        ti[i].push_back(f);
        to[j].push_back(f);
      }
      if (++j < out.size())
        remOut = out[j];
      continue;
    }
    int64_t g = std::gcd(remIn, remOut);
    if (g == 1 || (remIn % remOut && remOut % remIn))
      break; // no common refinement from here: the rest stays whole
    int64_t size = std::min(remIn, remOut);
    int64_t f = b.factor(size);
    ti[i].push_back(f);
    to[j].push_back(f);
    remIn /= size;
    remOut /= size;
  }
  // Dimensions cut short stay whole; a partial factor list would shard the
  // wrong elements.
  auto complete = [&](ShardingRule::TensorFactors &t, ArrayRef<int64_t> shape) {
    for (auto [d, list] : llvm::enumerate(t)) {
      int64_t product = 1;
      for (int64_t f : list)
        product *= b.rule.factorSizes[f];
      if (product != shape[d])
        list.clear();
    }
  };
  complete(ti, in);
  complete(to, out);
  b.rule.operands = {ti};
  b.rule.results = {to};
  return b.rule;
}

ShardingRule transposeRule(TransposeOp op) {
  RuleBuilder b;
  ShardingRule::TensorFactors in = b.fresh(shapeOf(op.getInput())), out;
  for (int64_t p : op.getPermutation())
    out.push_back(in[p]);
  b.rule.operands = {in};
  b.rule.results = {out};
  return b.rule;
}

/// x [..., n] -> [..., n * repeats]: the result dimension is (i r), r a
/// factor only the result has.
ShardingRule repeatInterleaveRule(RepeatInterleaveOp op) {
  RuleBuilder b;
  ArrayRef<int64_t> x = shapeOf(op.getInput());
  int64_t axis = normAxis(op.getAxis(), int64_t(x.size()));
  ShardingRule::TensorFactors in = b.fresh(x), out = in;
  if (in[axis].empty())
    return b.rule;
  out[axis].push_back(b.factor(op.getRepeats()));
  b.rule.operands = {in};
  b.rule.results = {out};
  return b.rule;
}

/// q [B, (kv g), S, D], k and v [B, kv, S, D] -> output like q, lse
/// [B, (kv g), S]: query head h reads kv head h / g, so the query heads are
/// the composite (kv g) with kv major; the sequence (causal) and head
/// dimensions stay whole.
ShardingRule causalAttentionRule(CausalAttentionOp op) {
  RuleBuilder b;
  ArrayRef<int64_t> q = shapeOf(op.getQuery()), k = shapeOf(op.getKey());
  int64_t batch = b.factor(q[0]), kv = b.factor(k[1]);
  int64_t group = b.factor(q[1] / k[1]);
  ShardingRule::TensorFactors query = {{batch}, {kv, group}, {}, {}};
  ShardingRule::TensorFactors keys = {{batch}, {kv}, {}, {}};
  b.rule.operands = {query, keys, keys};
  b.rule.results = {query, {{batch}, {kv, group}, {}}};
  return b.rule;
}

/// logits [..., V], targets [...] -> loss []: the classes V are a factor of
/// the logits only (a member holding classes [r, r + V/n) computes the loss
/// as the vocabulary-parallel cross-entropy, whose result every member
/// holds whole); the positions stay whole (the loss is their mean).
ShardingRule crossEntropyRule(CrossEntropyOp op) {
  RuleBuilder b;
  ArrayRef<int64_t> logits = shapeOf(op.getLogits());
  ShardingRule::TensorFactors l = RuleBuilder::whole(logits);
  int64_t classes = b.factor(logits.back());
  l.back().push_back(classes);
  b.rule.operands = {l, RuleBuilder::whole(shapeOf(op.getTargets()))};
  b.rule.results = {{}};
  b.rule.paddable = {classes};
  return b.rule;
}

/// Every dimension whole: the op runs replicated.
ShardingRule wholeRule(Operation *op) {
  ShardingRule r;
  for (Value v : op->getOperands())
    r.operands.push_back(RuleBuilder::whole(shapeOf(v)));
  for (Value v : op->getResults())
    r.results.push_back(RuleBuilder::whole(shapeOf(v)));
  return r;
}

ShardingRule ruleOf(Operation *op) {
  auto last = [&](Value v) { return int64_t(shapeOf(v).size()) - 1; };
  return llvm::TypeSwitch<Operation *, ShardingRule>(op)
      .Case([](MatmulOp o) { return matmulRule(o); })
      .Case([](EmbeddingOp o) { return embeddingRule(o); })
      .Case<BiasAddOp>([](auto o) { return featureRule(o, false); })
      .Case([](ElementwiseBinaryOp o) { return binaryRule(o); })
      .Case<LayerNormOp, RmsNormOp>([](auto o) { return featureRule(o, true); })
      .Case<AddOp, MulOp, ScaleOp, GeluOp, ReluOp, SiluOp, SiluMulOp,
            AllReduceOp, ReplicateOp, CastOp, ElementwiseUnaryOp>(
          [](auto o) { return elementwise(o); })
      .Case([&](SoftmaxOp o) {
        int64_t l = last(o.getInput());
        if (o.getCausal())
          return elementwise(o, {l - 1, l});
        return elementwise(o, {l});
      })
      .Case([&](RotaryEmbeddingOp o) {
        int64_t l = last(o.getInput());
        return elementwise(o, {l - 1, l});
      })
      .Case([](CausalAttentionOp o) { return causalAttentionRule(o); })
      .Case([](CrossEntropyOp o) { return crossEntropyRule(o); })
      .Case([](ReshapeOp o) { return reshapeRule(o); })
      .Case([](TransposeOp o) { return transposeRule(o); })
      .Case([](RepeatInterleaveOp o) { return repeatInterleaveRule(o); })
      .Case([&](SplitOp o) {
        RuleBuilder b;
        ArrayRef<int64_t> x = shapeOf(o.getInput());
        int64_t axis = normAxis(o.getAxis(), int64_t(x.size()));
        ShardingRule::TensorFactors t = b.fresh(x, {axis});
        b.rule.operands = {t};
        b.rule.results.assign(o->getNumResults(), t);
        return b.rule;
      })
      .Case([&](ConcatOp o) {
        RuleBuilder b;
        ArrayRef<int64_t> x = shapeOf(o.getResult());
        int64_t axis = normAxis(o.getAxis(), int64_t(x.size()));
        ShardingRule::TensorFactors t = b.fresh(x, {axis});
        b.rule.operands.assign(o->getNumOperands(), t);
        b.rule.results = {t};
        return b.rule;
      })
      .Case([&](SliceOp o) {
        RuleBuilder b;
        ArrayRef<int64_t> x = shapeOf(o.getInput());
        int64_t axis = normAxis(o.getAxis(), int64_t(x.size()));
        ShardingRule::TensorFactors t = b.fresh(x, {axis});
        b.rule.operands = {t};
        b.rule.results = {t};
        return b.rule;
      })
      .Case([](ReduceMeanOp o) {
        // The other dims shared factors; the reduced one whole (the kernel
        // divides by the size it holds, so a shard's mean is not a partial
        // sum of the global one).
        RuleBuilder b;
        ShardingRule::TensorFactors x =
            b.fresh(shapeOf(o.getInput()), {o.getNormalizedAxis()});
        ShardingRule::TensorFactors y = x;
        b.rule.operands = {x};
        b.rule.results = {y};
        return b.rule;
      })
      .Case([](ConstantOp o) {
        RuleBuilder b;
        b.rule.results = {b.fresh(shapeOf(o.getResult()))};
        return b.rule;
      })
      .Default([](Operation *o) { return wholeRule(o); });
}

template <typename OpT>
struct RuleModel
    : public ShardingRuleOpInterface::ExternalModel<RuleModel<OpT>, OpT> {
  ShardingRule getShardingRule(Operation *op) const { return ruleOf(op); }
};

template <typename... Ops> void attach(MLIRContext *ctx) {
  (Ops::template attachInterface<RuleModel<Ops>>(*ctx), ...);
}

} // namespace

void attachShardingRules(MLIRContext *ctx) {
  attach<MatmulOp, EmbeddingOp, BiasAddOp, LayerNormOp, RmsNormOp, AddOp, MulOp,
         ScaleOp, GeluOp, ReluOp, SiluOp, SiluMulOp, AllReduceOp, ReplicateOp,
         SoftmaxOp, RotaryEmbeddingOp, ReshapeOp, TransposeOp,
         RepeatInterleaveOp, SplitOp, ConcatOp, SliceOp, ConstantOp,
         CrossEntropyOp, CausalAttentionOp, CastOp, ElementwiseUnaryOp,
         ElementwiseBinaryOp, ReduceMeanOp>(ctx);
}

} // namespace strata
