//===- OnnxPatterns.cpp - Multi-node forms torch exports ------------------===//
//
// Some of what a GPT-2-style torch export computes has no one-node ONNX
// form but is one strata op:
//
//  * GELU's tanh approximation, exported as
//      a = x * 0.5; p = x ^ 3; b = p * 0.044715; c = x + b;
//      d = c * sqrt(2/pi); t = tanh(d); e = t + 1; out = a * e
//    becomes strata.gelu(x) (findPatterns matches the nodes up front, the
//    intermediate ones are skipped and the constants checked at `out`);
//  * masked_fill of the scores above the diagonal with a very negative
//    constant (Where(Not(Trilu(ones)), min, scores)) followed by Softmax
//    becomes softmax(scores, causal = true);
//  * position embeddings `table[arange(S)][None]` added to the token
//    embeddings become embedding(table, positions) (the `positions` input
//    the runtime fills with 0..S-1 per row) added with equal shapes.
//
// The intermediate values are "deferred": any other consumer is an error.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/OnnxImporter.h"

#include <cmath>

namespace strata::frontend::onnx_import {

void Importer::findPatterns(const onnx::GraphProto &graph) {
  std::map<std::string, const onnx::NodeProto *> producer;
  std::map<std::string, std::vector<const onnx::NodeProto *>> consumers;
  for (const onnx::NodeProto &n : graph.node()) {
    for (const std::string &o : n.output())
      producer[o] = &n;
    for (const std::string &i : n.input())
      consumers[i].push_back(&n);
  }
  auto prod = [&](const std::string &name,
                  const char *op) -> const onnx::NodeProto * {
    auto it = producer.find(name);
    return it != producer.end() && it->second->op_type() == op &&
                   it->second->input_size() >= 1
               ? it->second
               : nullptr;
  };
  auto only = [&](const onnx::NodeProto *n,
                  const char *op) -> const onnx::NodeProto * {
    const auto &c = consumers[n->output(0)];
    return c.size() == 1 && c[0]->op_type() == op ? c[0] : nullptr;
  };
  // The input of binary node `n` other than `name` ("" if neither is).
  auto other = [](const onnx::NodeProto *n, const std::string &name) {
    if (n->input_size() != 2)
      return std::string();
    return n->input(0) == name   ? n->input(1)
           : n->input(1) == name ? n->input(0)
                                 : std::string();
  };
  for (const onnx::NodeProto &t : graph.node()) {
    if (t.op_type() != "Tanh" || t.input_size() != 1)
      continue;
    const onnx::NodeProto *d = prod(t.input(0), "Mul");
    if (!d || d->input_size() != 2)
      continue;
    const onnx::NodeProto *c = prod(d->input(0), "Add");
    std::string sqrtConst = d->input(1);
    if (!c) {
      c = prod(d->input(1), "Add");
      sqrtConst = d->input(0);
    }
    if (!c || c->input_size() != 2)
      continue;
    const onnx::NodeProto *b = nullptr, *p = nullptr;
    std::string x;
    for (int side = 0; side < 2 && !p; ++side) {
      b = prod(c->input(side), "Mul");
      if (!b || b->input_size() != 2)
        continue;
      for (int bs = 0; bs < 2 && !p; ++bs) {
        p = prod(b->input(bs), "Pow");
        if (p && (p->input_size() != 2 || p->input(0) != c->input(1 - side)))
          p = nullptr;
      }
      if (p)
        x = c->input(1 - side);
    }
    if (!p)
      continue;
    const onnx::NodeProto *e = only(&t, "Add");
    const onnx::NodeProto *out = e ? only(e, "Mul") : nullptr;
    if (!out)
      continue;
    const onnx::NodeProto *a = prod(other(out, e->output(0)), "Mul");
    if (!a || other(a, x).empty() || !only(p, "Mul") || !only(b, "Add") ||
        !only(c, "Mul") || !only(d, "Tanh"))
      continue;
    GeluMatch m;
    m.x = x;
    m.constants = {{sqrtConst, std::sqrt(2.0 / M_PI)},
                   {other(b, p->output(0)), 0.044715},
                   {p->input(1), 3.0},
                   {other(e, t.output(0)), 1.0},
                   {other(a, x), 0.5}};
    for (const onnx::NodeProto *n : {p, b, c, d, &t, e})
      skipped.insert(n);
    geluAt[out] = m;
  }
}

/// Whether `c` holds the single value `want` (to float32 precision).
static bool isScalar(const ConstTensor &c, double want) {
  return c.isFloat && c.numElements() == 1 &&
         std::fabs(c.data[0] - want) <= 1e-6 * std::max(1.0, std::fabs(want));
}

bool Importer::importPattern(bool &handled) {
  handled = true;
  const std::string &op = node->op_type();
  const std::string &out = node->output(0);
  if (skipped.count(node))
    return true;
  if (auto it = geluAt.find(node); it != geluAt.end()) {
    for (const auto &[name, want] : it->second.constants) {
      auto v = values.find(name);
      if (v == values.end() || !v->second.isConst ||
          !isScalar(v->second.c, want))
        return nodeError("a Tanh expression of GELU's form whose constant '" +
                         name + "' is not " + std::to_string(want) +
                         "; Strata imports this form only as GELU's tanh "
                         "approximation");
    }
    auto x = values.find(it->second.x);
    if (x == values.end() || x->second.isConst)
      return nodeError("GELU of a constant is not supported");
    return emit1("gelu", {x->second.name});
  }
  auto deferredInput = [&](int i, const char *kind) -> const Deferred * {
    if (i >= node->input_size())
      return nullptr;
    auto it = deferred.find(node->input(i));
    return it != deferred.end() && it->second.kind == kind ? &it->second
                                                           : nullptr;
  };
  // table[arange(S)] (shape [S] or [1, S] of indices): position embeddings.
  if (op == "Gather" && !forward && node->input_size() == 2 &&
      values.count(node->input(1)) && values[node->input(1)].isConst &&
      !values[node->input(1)].c.isFloat && intAttr("axis", 0) == 0) {
    const ConstTensor &idx = values[node->input(1)].c;
    int64_t seq = g.inputs[0].shape[1];
    bool arange =
        idx.numElements() == seq && (idx.shape == std::vector<int64_t>{seq} ||
                                     idx.shape == std::vector<int64_t>{1, seq});
    for (int64_t k = 0; arange && k < seq; ++k)
      arange = idx.data[k] == (double)k;
    const Value *table = input(0);
    if (arange && table && (!table->isConst || table->c.isFloat)) {
      if (!positionsAdded) {
        GraphTensor pos;
        pos.name = "positions";
        pos.shape = g.inputs[0].shape;
        pos.dtype = DType::I32;
        pos.loc = g.inputs[0].loc;
        g.inputs.push_back(pos);
        Value v;
        v.name = "positions";
        v.type = TensorType{pos.shape, DType::I32};
        values["positions"] = v;
        positionsAdded = true;
      }
      auto t = graphInput(0);
      if (!t)
        return false;
      auto held = emitTmp("embedding", {*t, "positions"});
      if (!held)
        return false;
      values.erase(out);
      deferred[out] =
          Deferred{idx.shape.size() == 1 ? "positions[S]" : "positions[1,S]",
                   *held, "a position embedding (table[arange(S)])",
                   "x + table[arange(S)][None] with x [batch, S, "
                   "H]"};
      return true;
    }
  }
  if (op == "Unsqueeze") {
    if (const Deferred *d = deferredInput(0, "positions[S]")) {
      const Value *axes = hasInput(1) ? input(1) : nullptr;
      std::vector<int64_t> ax =
          axes && axes->isConst
              ? axes->c.ints()
              : intsAttr("axes").value_or(std::vector<int64_t>{});
      if (ax != std::vector<int64_t>{0})
        return nodeError("a position embedding may only be unsqueezed at "
                         "dim 0 (table[arange(S)][None])");
      Deferred n = *d;
      n.kind = "positions[1,S]";
      deferred[out] = n;
      return true;
    }
  }
  if (op == "Add" && node->input_size() == 2) {
    for (int side = 0; side < 2; ++side) {
      const Deferred *d = deferredInput(side, "positions[1,S]");
      if (!d)
        continue;
      Deferred pos = *d;
      auto x = graphInput(1 - side);
      if (!x)
        return false;
      if (typeOf(*x).shape != typeOf(pos.held).shape)
        return nodeError(
            "position embeddings " + shapeStr(typeOf(pos.held).shape) +
            " added to a value of shape " + shapeStr(typeOf(*x).shape));
      return side == 0 ? emit1("add", {pos.held, *x})
                       : emit1("add", {*x, pos.held});
    }
  }
  // Where(cond, very negative, scores) with cond true above the diagonal
  // (or Where(cond, scores, very negative) with cond true on and below it).
  if (op == "Where" && node->input_size() == 3) {
    const Value *cond = input(0), *a = input(1), *b = input(2);
    if (!cond || !a || !b)
      return false;
    bool constTrue = a->isConst && !b->isConst;
    bool constFalse = b->isConst && !a->isConst;
    const Value *fill = constTrue ? a : b, *x = constTrue ? b : a;
    if (cond->isConst && (constTrue || constFalse) &&
        fill->c.numElements() == 1 && fill->c.data[0] <= -1e30 &&
        !deferred.count(constTrue ? node->input(2) : node->input(1))) {
      const std::vector<int64_t> &s = x->type.shape;
      const ConstTensor &c = cond->c;
      size_t r = c.shape.size();
      bool causal = s.size() >= 2 && r >= 2 &&
                    s[s.size() - 1] == s[s.size() - 2] &&
                    c.shape[r - 1] == s.back() && c.shape[r - 2] == s.back() &&
                    c.numElements() == s.back() * s.back();
      for (int64_t k = 0; causal && k < c.numElements(); ++k) {
        int64_t i = k / s.back(), j = k % s.back();
        bool masked = constTrue ? c.data[k] != 0 : c.data[k] == 0;
        causal = masked == (j > i);
      }
      if (causal) {
        deferred[out] = Deferred{"causal", x->name, "causal-masked scores",
                                 "the input of a Softmax over the last dim"};
        return true;
      }
    }
  }
  if (op == "Softmax") {
    if (const Deferred *d = deferredInput(0, "causal")) {
      int64_t axis = intAttr("axis", -1);
      int64_t rank = typeOf(d->held).shape.size();
      if (axis != -1 && axis != rank - 1)
        return nodeError("a causal Softmax must be over the last dim");
      return emit1("softmax", {d->held}, {{"causal", true}});
    }
  }
  handled = false;
  return true;
}

} // namespace strata::frontend::onnx_import
