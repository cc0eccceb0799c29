//===- GraphParser.cpp - The explicit `graph:` section --------------------===//

#include "frontends/yaml/GraphParser.h"

#include "frontends/yaml/GraphShapes.h"

#include <cmath>

namespace strata::frontend {

namespace {

const std::vector<std::string> kAllDTypes = {"float32", "bfloat16", "float16",
                                             "int32"};
const std::vector<std::string> kFloatDTypes = {"float32", "bfloat16",
                                               "float16"};

/// A dim: a positive integer or `batch`; with `allowInferred`, also -1.
std::optional<int64_t> readDim(SpecReader &r, const YamlNode *n,
                               const std::string &what, int64_t batch,
                               bool allowInferred) {
  if (n->isScalar() && !n->quoted && n->value == "batch")
    return batch;
  if (n->isScalar() && !n->value.empty() &&
      (std::isalpha((unsigned char)n->value[0]) || n->quoted)) {
    std::string hint = didYouMean(n->value, {"batch"});
    r.error(n, what + " is '" + n->value + "'" + (hint.empty() ? ";" : hint) +
                   " expected a positive integer or 'batch'" +
                   (allowInferred ? " (or one -1)" : ""));
    return std::nullopt;
  }
  return r.readInt(n, what, allowInferred ? -1 : 1, kMaxElements);
}

std::optional<std::vector<int64_t>> readShape(SpecReader &r, const YamlNode *n,
                                              const std::string &what,
                                              int64_t batch,
                                              bool allowInferred) {
  if (!r.expectList(n, what, "dims (positive integers or 'batch')"))
    return std::nullopt;
  std::vector<int64_t> shape;
  bool ok = true;
  for (size_t i = 0; i < n->items.size(); ++i) {
    std::optional<int64_t> d =
        readDim(r, n->items[i], what + "[" + std::to_string(i) + "]", batch,
                allowInferred);
    if (!d || (allowInferred && *d == 0)) {
      if (d)
        r.error(n->items[i], what + "[" + std::to_string(i) +
                                 "] is 0; expected a positive integer, "
                                 "'batch' or -1");
      ok = false;
      continue;
    }
    shape.push_back(*d);
  }
  if (!ok)
    return std::nullopt;
  return shape;
}

/// A list of value names.
std::optional<std::vector<std::string>>
readNames(SpecReader &r, const YamlNode *n, const std::string &what,
          std::vector<SourceLoc> *locs) {
  if (!r.expectList(n, what, "value names"))
    return std::nullopt;
  std::vector<std::string> names;
  bool ok = true;
  for (size_t i = 0; i < n->items.size(); ++i) {
    std::optional<std::string> name =
        r.readString(n->items[i], what + "[" + std::to_string(i) + "]");
    if (!name) {
      ok = false;
      continue;
    }
    names.push_back(*name);
    if (locs)
      locs->push_back(r.loc(n->items[i]));
  }
  if (!ok)
    return std::nullopt;
  return names;
}

bool readTensorDecl(MapReader &m, GraphTensor &t, const std::string &what,
                    const std::vector<std::string> &dtypes, DType dflt,
                    int64_t batch) {
  SpecReader &r = m.r;
  t.loc = r.loc(m.mapNode());
  bool ok = true;
  if (const YamlNode *n = m.require("name", "a value name")) {
    if (auto name = r.readString(n, "'name'"))
      t.name = *name;
    else
      ok = false;
  } else {
    ok = false;
  }
  if (const YamlNode *n =
          m.require("shape", "a list of dims like [batch, 64]")) {
    if (auto shape = readShape(r, n, "shape", batch, false))
      t.shape = *shape;
    else
      ok = false;
  } else {
    ok = false;
  }
  if (auto dt = m.getChoice("dtype", dtypes, std::string(dtypeName(dflt))))
    t.dtype = *parseDType(*dt);
  else
    ok = false;
  (void)what;
  return ok;
}

std::optional<AttrValue> readAttr(SpecReader &r, const YamlNode *n,
                                  const AttrSpec &spec, int64_t batch) {
  std::string what = spec.name;
  switch (spec.kind) {
  case AttrKind::Bool:
    if (auto v = r.readBool(n, what))
      return AttrValue(*v);
    return std::nullopt;
  case AttrKind::String:
    if (auto v = r.readString(n, what))
      return AttrValue(*v);
    return std::nullopt;
  case AttrKind::Int:
    if (auto v = r.readInt(n, what, -kMaxElements, kMaxElements))
      return AttrValue(*v);
    return std::nullopt;
  case AttrKind::Float:
    if (auto v = r.readFloat(n, what, -HUGE_VAL, HUGE_VAL))
      return AttrValue(*v);
    return std::nullopt;
  case AttrKind::IntList: {
    if (!r.expectList(n, what, "integers"))
      return std::nullopt;
    std::vector<int64_t> values;
    for (size_t i = 0; i < n->items.size(); ++i) {
      auto v = r.readInt(n->items[i], what + "[" + std::to_string(i) + "]",
                         -kMaxElements, kMaxElements);
      if (!v)
        return std::nullopt;
      values.push_back(*v);
    }
    return AttrValue(values);
  }
  case AttrKind::Shape:
    if (auto shape = readShape(r, n, what, batch, true))
      return AttrValue(*shape);
    return std::nullopt;
  }
  return std::nullopt;
}

bool readOp(SpecReader &r, const YamlNode *n, int64_t batch, GraphOp &op) {
  MapReader m(r, n, "an op", {"op", "inputs", "outputs", "attrs", "layer"});
  if (!m.valid())
    return false;
  op.loc = r.loc(n);
  bool ok = true;
  const OpRule *rule = nullptr;
  if (const YamlNode *name = m.require("op", "an op name such as matmul")) {
    if (auto s = r.readString(name, "'op'")) {
      op.op = *s;
      rule = findOpRule(op.op);
      if (!rule) {
        std::string hint = didYouMean(op.op, opNames());
        r.error(name, "unknown op '" + op.op + "'" +
                          (hint.empty() ? ";" : hint) +
                          " expected one of: " + joinChoices(opNames()));
        ok = false;
      }
    } else {
      ok = false;
    }
  } else {
    ok = false;
  }
  if (const YamlNode *in = m.require("inputs", "a list of value names")) {
    if (auto names = readNames(r, in, "'inputs'", &op.inputLocs))
      op.inputs = *names;
    else
      ok = false;
  } else {
    ok = false;
  }
  if (const YamlNode *out = m.require("outputs", "a list of value names")) {
    if (auto names = readNames(r, out, "'outputs'", &op.outputLocs))
      op.outputs = *names;
    else
      ok = false;
  } else {
    ok = false;
  }
  if (const YamlNode *layer = m.find("layer")) {
    if (auto v = r.readInt(layer, "'layer'", 0, kMaxElements))
      op.layer = *v;
    else
      ok = false;
  }
  const YamlNode *attrs = m.find("attrs");
  if (attrs && rule) {
    std::vector<std::string> known;
    for (const AttrSpec &spec : rule->attrs)
      known.push_back(spec.name);
    if (known.empty() && !(attrs->isMap() && attrs->entries.empty()) &&
        !attrs->isNull()) {
      r.error(attrs, rule->name + " takes no attributes; remove 'attrs'");
      return false;
    }
    if (known.empty())
      return ok;
    MapReader a(r, attrs, "the attributes of " + rule->name, known);
    if (!a.valid())
      return false;
    for (const AttrSpec &spec : rule->attrs) {
      const YamlNode *v = a.find(spec.name);
      if (!v)
        continue;
      if (auto value = readAttr(r, v, spec, batch))
        op.attrs[spec.name] = *value;
      else
        ok = false;
    }
  }
  return ok;
}

} // namespace

bool readExplicitGraph(SpecReader &r, const YamlNode *node, DType defaultDType,
                       int64_t batch, Graph &graph) {
  MapReader g(r, node, "'graph'", {"inputs", "params", "ops", "outputs"});
  if (!g.valid())
    return false;
  graph.loc = r.loc(node);
  bool ok = true;
  if (const YamlNode *inputs = g.find("inputs")) {
    if (r.expectList(inputs, "'inputs'", "{name, shape, dtype} mappings")) {
      for (const YamlNode *item : inputs->items) {
        MapReader m(r, item, "an input", {"name", "shape", "dtype"});
        GraphTensor t;
        if (!m.valid() ||
            !readTensorDecl(m, t, "input", kAllDTypes, defaultDType, batch)) {
          ok = false;
          continue;
        }
        graph.inputs.push_back(t);
      }
    } else {
      ok = false;
    }
  }
  if (const YamlNode *params = g.find("params")) {
    if (r.expectList(params, "'params'",
                     "{name, shape, dtype, init, std} mappings")) {
      for (const YamlNode *item : params->items) {
        MapReader m(r, item, "a param",
                    {"name", "shape", "dtype", "init", "std", "layer"});
        GraphParam p;
        if (!m.valid() ||
            !readTensorDecl(m, p, "param", kFloatDTypes, defaultDType, batch)) {
          ok = false;
          continue;
        }
        auto init = m.getChoice("init", {"normal", "zeros", "ones"},
                                std::string("normal"));
        if (!init) {
          ok = false;
          continue;
        }
        p.init.kind = *init == "normal"  ? ParamInit::Kind::Normal
                      : *init == "zeros" ? ParamInit::Kind::Zeros
                                         : ParamInit::Kind::Ones;
        if (p.init.kind != ParamInit::Kind::Normal && m.has("std")) {
          r.error(m.keyNode("std"), "'std' applies only to init: normal, "
                                    "but this param's init is " +
                                        *init + "; remove 'std'");
          ok = false;
          continue;
        }
        auto stddev = m.getFloat("std", 0.0, HUGE_VAL, 0.02);
        if (!stddev) {
          ok = false;
          continue;
        }
        p.init.std = p.init.kind == ParamInit::Kind::Normal ? *stddev : 0.0;
        if (const YamlNode *layer = m.find("layer")) {
          if (auto v = r.readInt(layer, "'layer'", 0, kMaxElements))
            p.layer = *v;
          else
            ok = false;
        }
        graph.params.push_back(p);
      }
    } else {
      ok = false;
    }
  }
  if (const YamlNode *ops = g.require("ops", "a list of ops")) {
    if (r.expectList(ops, "'ops'", "{op, inputs, outputs, attrs} mappings")) {
      for (const YamlNode *item : ops->items) {
        GraphOp op;
        if (!readOp(r, item, batch, op))
          ok = false;
        graph.ops.push_back(std::move(op));
      }
    } else {
      ok = false;
    }
  } else {
    ok = false;
  }
  if (const YamlNode *outs = g.require("outputs", "a list such as [loss]")) {
    if (auto names = readNames(r, outs, "'outputs'", &graph.outputLocs))
      graph.outputs = *names;
    else
      ok = false;
    if (ok && outs->items.empty()) {
      r.error(outs, "'outputs' is empty; expected the scalar loss first, "
                    "as in [loss]");
      ok = false;
    }
  } else {
    ok = false;
  }
  return ok;
}

} // namespace strata::frontend
