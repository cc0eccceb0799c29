//===- OnnxNodes.cpp - ONNX nodes as strata ops ---------------------------===//
//
// The nodes that compute from the inputs: each becomes one or a few strata
// graph ops (docs/model-spec.md, "ONNX models", has the table), or an error
// naming the node and what Strata supports instead.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/OnnxImporter.h"
#include "runtime/kernels/BinaryMath.h"

#include <algorithm>

namespace strata::frontend::onnx_import {

std::optional<std::string>
Importer::broadcastTo(const std::string &x, const std::vector<int64_t> &shape) {
  std::vector<int64_t> s = typeOf(x).shape;
  if (s == shape)
    return x;
  if (s.size() > shape.size()) {
    nodeError("cannot broadcast " + shapeStr(s) + " to " + shapeStr(shape));
    return std::nullopt;
  }
  std::string cur = x;
  if (s.size() < shape.size()) {
    s.insert(s.begin(), shape.size() - s.size(), 1);
    auto r = emitTmp("reshape", {cur}, {{"shape", s}});
    if (!r)
      return std::nullopt;
    cur = *r;
  }
  // Each broadcast dim: that many copies concatenated (exact, like Expand).
  for (size_t i = 0; i < shape.size(); ++i) {
    if (s[i] == shape[i])
      continue;
    if (s[i] != 1 || shape[i] > 4096) {
      nodeError("cannot broadcast " + shapeStr(typeOf(x).shape) + " to " +
                shapeStr(shape) + " (at most 4096 copies per dim)");
      return std::nullopt;
    }
    auto r = emitTmp("concat", std::vector<std::string>(shape[i], cur),
                     {{"axis", (int64_t)i}});
    if (!r)
      return std::nullopt;
    cur = *r;
    s[i] = shape[i];
  }
  return cur;
}

/// Whether `small` broadcasts to `big` as strata.binary's rhs (big's dims,
/// aligned to the right, but for one run of 1s).
static bool repeatsOver(const std::vector<int64_t> &small,
                        const std::vector<int64_t> &big) {
  return kernels::binaryBroadcast(big.data(), big.size(), small.data(),
                                  small.size())
      .has_value();
}

bool Importer::importBinary() {
  std::string op = node->op_type();
  const Value *a = input(0), *b = input(1);
  if (!a || !b)
    return false;
  std::string kind = op == "Add"   ? "add"
                     : op == "Sub" ? "sub"
                     : op == "Mul" ? "mul"
                                   : "div";
  auto binary = [&](const std::string &x, const std::string &y,
                    const std::string &k) {
    return emit1("binary", {x, y}, {{"kind", k}});
  };
  // x op c, c op x with a scalar constant c: x * c as strata.scale, the
  // others strata.binary by a strata.constant scalar (one float32 operation
  // per element, as torch computes them); c - x as (-x) + c, c / x as
  // c * reciprocal(x).
  auto scalar = [](const Value *v) {
    return v->isConst && v->c.isFloat && v->c.numElements() == 1 &&
           !(v->isInitializer && v->c.shape.size() > 0);
  };
  if (scalar(a) || scalar(b)) {
    bool constFirst = scalar(a);
    double c = constFirst ? a->c.data[0] : b->c.data[0];
    auto x = graphInput(constFirst ? 1 : 0);
    if (!x)
      return false;
    if (op == "Mul")
      return emit1("scale", {*x}, {{"factor", c}});
    if (op == "Div" && constFirst) {
      auto r = emitTmp("unary", {*x}, {{"kind", std::string("reciprocal")}});
      return r && emit1("scale", {*r}, {{"factor", c}});
    }
    auto cst = emitTmp("constant", {}, {{"value", c}});
    if (!cst)
      return false;
    if (op == "Sub" && constFirst) {
      auto negX = emitTmp("unary", {*x}, {{"kind", std::string("neg")}});
      return negX && binary(*negX, *cst, "add");
    }
    return binary(*x, *cst, kind);
  }
  {
    auto x = graphInput(0), y = graphInput(1);
    if (!x || !y)
      return false;
    const TensorType tx = typeOf(*x), ty = typeOf(*y);
    if (tx.shape == ty.shape && (op == "Add" || op == "Mul"))
      return emit1(op == "Add" ? "add" : "mul", {*x, *y});
    // A bias: a 1-D operand as long as the other's last dim (tensor
    // parallelism splits it with its column).
    if (op == "Add" && ty.shape.size() == 1 && !tx.shape.empty() &&
        tx.shape.back() == ty.shape[0])
      return emit1("bias_add", {*x, *y});
    if (op == "Add" && tx.shape.size() == 1 && !ty.shape.empty() &&
        ty.shape.back() == tx.shape[0])
      return emit1("bias_add", {*y, *x});
    // y repeated over a run of x's dims (a [H] weight, a [B, S, 1] norm, a
    // scalar tensor): strata.binary, x / y the real division.
    if (repeatsOver(ty.shape, tx.shape))
      return binary(*x, *y, kind);
    // x repeated over y's: the operands swapped (x - y as -(y - x)).
    if (op != "Div" && repeatsOver(tx.shape, ty.shape)) {
      if (op != "Sub")
        return binary(*y, *x, kind);
      auto d = emitTmp("binary", {*y, *x}, {{"kind", std::string("sub")}});
      return d && emit1("unary", {*d}, {{"kind", std::string("neg")}});
    }
  }
  auto x = graphInput(0), y = graphInput(1);
  if (!x || !y)
    return false;
  auto shape = broadcastShape(typeOf(*x).shape, typeOf(*y).shape);
  if (!shape)
    return nodeError("shapes " + shapeStr(typeOf(*x).shape) + " and " +
                     shapeStr(typeOf(*y).shape) + " do not broadcast");
  // One operand has the result's shape and the other two runs of 1s (a
  // [S, 1] parameter over [batch, S, H]): the other expanded by copies past
  // its leading 1s only, then repeated over the leading dims by
  // strata.binary, so the graph does not depend on the batch size.
  bool xFull = typeOf(*x).shape == *shape, yFull = typeOf(*y).shape == *shape;
  if (xFull != yFull && (xFull || op != "Div")) {
    std::string full = xFull ? *x : *y, small = xFull ? *y : *x;
    std::vector<int64_t> s = typeOf(small).shape;
    s.insert(s.begin(), shape->size() - s.size(), 1);
    size_t k = 0;
    while (k < s.size() && s[k] == 1)
      ++k;
    std::vector<int64_t> own(s.begin() + k, s.end());
    auto st = own == typeOf(small).shape
                  ? std::optional<std::string>(small)
                  : emitTmp("reshape", {small}, {{"shape", own}});
    auto sb = st ? broadcastTo(*st, std::vector<int64_t>(shape->begin() + k,
                                                         shape->end()))
                 : std::nullopt;
    if (!sb)
      return false;
    if (xFull || op != "Sub") // x op y, or y + x, y * x
      return binary(full, *sb, kind);
    auto d = emitTmp("binary", {full, *sb}, {{"kind", std::string("sub")}});
    return d && emit1("unary", {*d}, {{"kind", std::string("neg")}});
  }
  // Both operands repeated: both expanded to the result's shape by
  // concatenated copies (exact, like Expand).
  auto bx = broadcastTo(*x, *shape);
  auto by = bx ? broadcastTo(*y, *shape) : std::nullopt;
  return by && binary(*bx, *by, kind);
}

/// Pow by a constant exponent 1, 2 or 3: products (exact to rounding).
bool Importer::importPow() {
  const Value *e = input(1);
  if (!e)
    return false;
  if (!e->isConst || e->c.numElements() != 1)
    return nodeError("Pow needs a constant scalar exponent");
  double n = e->c.data[0];
  auto x = graphInput(0);
  if (!x)
    return false;
  if (n == 1.0) {
    alias(node->output(0), values[node->input(0)]);
    return true;
  }
  if (n == 2.0)
    return emit1("mul", {*x, *x});
  if (n == 3.0) {
    auto sq = emitTmp("mul", {*x, *x});
    return sq && emit1("mul", {*sq, *x});
  }
  return nodeError("Pow with exponent " + std::to_string(n) +
                   " is not supported (exponents 1, 2 and 3 are)");
}

/// Expand of a graph value: copies concatenated along each broadcast dim.
bool Importer::importExpand() {
  auto x = graphInput(0);
  const ConstTensor *s = x ? constInput(1, "the target shape") : nullptr;
  if (!s)
    return false;
  auto shape = broadcastShape(typeOf(*x).shape, s->ints());
  if (!shape)
    return nodeError("shape " + shapeStr(typeOf(*x).shape) +
                     " does not broadcast to " + shapeStr(s->ints()));
  auto out = broadcastTo(*x, *shape);
  if (!out)
    return false;
  alias(node->output(0), values[*out]);
  return true;
}

/// The ONNX elementwise functions that are one strata.unary kind.
static const char *unaryKindOf(const std::string &op) {
  static const std::pair<const char *, const char *> kinds[] = {
      {"Sqrt", "sqrt"}, {"Reciprocal", "reciprocal"}, {"Erf", "erf"},
      {"Tanh", "tanh"}, {"Sigmoid", "sigmoid"},       {"Exp", "exp"},
      {"Neg", "neg"}};
  for (const auto &[onnx, kind] : kinds)
    if (op == onnx)
      return kind;
  return nullptr;
}

/// ReduceMean over one axis: strata.reduce_mean (the axis kept with size
/// 1), and a reshape without it unless keepdims.
bool Importer::importReduceMean() {
  auto x = graphInput(0);
  if (!x)
    return false;
  std::vector<int64_t> shape = typeOf(*x).shape;
  std::optional<std::vector<int64_t>> axes = intsAttr("axes");
  if (!axes || axes->size() != 1)
    return nodeError("ReduceMean over " +
                     std::string(axes ? "several axes" : "all axes") +
                     " is not supported; Strata reduces one axis (axes=[d])");
  int64_t axis = (*axes)[0];
  if (!normAxis(axis, shape.size()))
    return false;
  if (intAttr("keepdims", 1) != 0)
    return emit1("reduce_mean", {*x}, {{"axis", axis}});
  auto mean = emitTmp("reduce_mean", {*x}, {{"axis", axis}});
  shape.erase(shape.begin() + axis);
  return mean && emit1("reshape", {*mean}, {{"shape", shape}});
}

static int64_t gcd(int64_t a, int64_t b) { return b == 0 ? a : gcd(b, a % b); }

/// Slice of a graph value with step 1: an equal split at the gcd of the
/// bounds and the dim, and the parts in range concatenated.
bool Importer::importSlice() {
  auto x = graphInput(0);
  if (!x)
    return false;
  const ConstTensor *starts = constInput(1, "starts");
  const ConstTensor *ends = starts ? constInput(2, "ends") : nullptr;
  if (!ends)
    return false;
  std::vector<int64_t> st = starts->ints(), en = ends->ints(), axes, steps;
  for (size_t i = 0; i < st.size(); ++i)
    axes.push_back(i);
  if (hasInput(3)) {
    const ConstTensor *a = constInput(3, "axes");
    if (!a)
      return false;
    axes = a->ints();
  }
  steps.assign(st.size(), 1);
  if (hasInput(4)) {
    const ConstTensor *a = constInput(4, "steps");
    if (!a)
      return false;
    steps = a->ints();
  }
  std::string cur = *x;
  for (size_t k = 0; k < st.size(); ++k) {
    std::vector<int64_t> shape = typeOf(cur).shape;
    int64_t axis = axes[k];
    if (!normAxis(axis, shape.size()))
      return false;
    if (steps[k] != 1)
      return nodeError("Slice with a step other than 1 is not supported");
    int64_t dim = shape[axis];
    int64_t b = st[k] < 0 ? st[k] + dim : st[k];
    int64_t e = en[k] < 0 ? en[k] + dim : en[k];
    b = std::clamp<int64_t>(b, 0, dim), e = std::clamp<int64_t>(e, 0, dim);
    if (e <= b)
      return nodeError("an empty Slice is not supported");
    if (b == 0 && e == dim)
      continue;
    int64_t g = gcd(b, gcd(e, dim));
    auto parts = emit("split", {cur}, {{"axis", axis}, {"num", dim / g}}, {});
    if (!parts)
      return false;
    std::vector<std::string> keep(parts->begin() + b / g,
                                  parts->begin() + e / g);
    if (keep.size() == 1) {
      cur = keep[0];
      continue;
    }
    auto joined = emitTmp("concat", keep, {{"axis", axis}});
    if (!joined)
      return false;
    cur = *joined;
  }
  alias(node->output(0), values[cur]);
  return true;
}

bool Importer::importMatMul() {
  auto a = graphInput(0), b = graphInput(1);
  if (!a || !b)
    return false;
  OpAttrs attrs;
  auto t = transposes.find(*b);
  if (t != transposes.end()) {
    const std::vector<int64_t> &perm = t->second.second;
    size_t r = perm.size();
    bool swapsLast = r >= 2 && perm[r - 1] == (int64_t)r - 2 &&
                     perm[r - 2] == (int64_t)r - 1;
    for (size_t i = 0; i + 2 < r; ++i)
      swapsLast &= perm[i] == (int64_t)i;
    if (swapsLast) {
      b = t->second.first;
      attrs["transpose_b"] = true;
    }
  }
  return emit1("matmul", {*a, *b}, attrs);
}

bool Importer::importGemm() {
  auto a = graphInput(0), b = graphInput(1);
  if (!a || !b)
    return false;
  double alpha = floatAttr("alpha", 1.0), beta = floatAttr("beta", 1.0);
  OpAttrs attrs{{"transpose_a", intAttr("transA", 0) != 0},
                {"transpose_b", intAttr("transB", 0) != 0}};
  std::optional<std::string> y;
  bool hasBias = hasInput(2);
  if (alpha == 1.0 && !hasBias)
    return emit1("matmul", {*a, *b}, attrs);
  y = emitTmp("matmul", {*a, *b}, attrs);
  if (!y)
    return false;
  if (alpha != 1.0) {
    if (!hasBias)
      return emit1("scale", {*y}, {{"factor", alpha}});
    y = emitTmp("scale", {*y}, {{"factor", alpha}});
    if (!y)
      return false;
  }
  auto c = graphInput(2);
  if (!c)
    return false;
  if (beta != 1.0) {
    c = emitTmp("scale", {*c}, {{"factor", beta}});
    if (!c)
      return false;
  }
  std::vector<int64_t> cs = typeOf(*c).shape, ys = typeOf(*y).shape;
  if (cs.size() == 2 && cs[0] == 1) {
    c = emitTmp("reshape", {*c}, {{"shape", std::vector<int64_t>{cs[1]}}});
    if (!c)
      return false;
    cs = {cs[1]};
  }
  if (cs.size() == 1 && cs[0] == ys.back() && cs[0] != 1)
    return emit1("bias_add", {*y, *c});
  auto bc = broadcastTo(*c, ys);
  return bc && emit1("add", {*y, *bc});
}

bool Importer::importSplit() {
  auto x = graphInput(0);
  if (!x)
    return false;
  const TensorType &t = typeOf(*x);
  int64_t axis = intAttr("axis", 0);
  if (!normAxis(axis, t.shape.size()))
    return false;
  std::vector<int64_t> sizes;
  if (hasInput(1)) {
    const ConstTensor *s = constInput(1, "the split sizes");
    if (!s)
      return false;
    sizes = s->ints();
  } else if (auto v = intsAttr("split")) {
    sizes = *v;
  }
  for (int64_t s : sizes)
    if (s != sizes[0])
      return nodeError("unequal split sizes " + shapeStr(sizes) +
                       " are not supported (strata.split makes equal parts)");
  std::vector<std::string> outs(node->output().begin(), node->output().end());
  return emit("split", {*x}, {{"axis", axis}, {"num", (int64_t)outs.size()}},
              outs)
      .has_value();
}

static const char *kSupported =
    "MatMul, Gemm, Add, Sub, Mul, Div, Pow (by 1, 2 or 3), Relu, Sqrt, "
    "Reciprocal, Erf, Tanh, Sigmoid, Exp, Neg, ReduceMean (one axis), "
    "Softmax, LayerNormalization, Reshape, Flatten, "
    "Transpose, Split, "
    "Slice, Concat, Expand, Gather (embedding), Unsqueeze, Squeeze, Cast, "
    "Identity, Constant, and shape "
    "arithmetic on constants (Shape, Gather, Concat, Slice, Expand, "
    "ConstantOfShape, Equal, Pow)";

bool Importer::importNode() {
  const std::string &op = node->op_type();
  if (!node->domain().empty() && node->domain() != "ai.onnx")
    return nodeError("ops of domain '" + node->domain() +
                     "' are not supported (only the default ONNX domain)");
  if (node->output_size() == 0)
    return nodeError("the node has no outputs");
  bool handled = false;
  if (!importPattern(handled))
    return false;
  if (handled)
    return true;
  if (!foldConstNode(handled))
    return false;
  if (handled)
    return true;
  if (op == "Identity" || op == "Cast") {
    const Value *v = input(0);
    if (!v)
      return false;
    if (op == "Cast") {
      int64_t to = intAttr("to", 0);
      bool toFloat = to == onnx::TensorProto::FLOAT;
      bool toInt =
          to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32;
      bool isFloat = isFloatDType(v->isConst ? DType::F32 : v->type.dtype);
      if (!(toFloat && isFloat) && !(toInt && !isFloat))
        return nodeError("Cast to element type " + std::to_string(to) +
                         " changes the value's type family; Strata casts "
                         "float32 to float32 and integers to int64/int32 "
                         "only");
    }
    alias(node->output(0), *v);
    return true;
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div")
    return importBinary();
  if (op == "MatMul")
    return importMatMul();
  if (op == "Gemm")
    return importGemm();
  if (op == "Reshape" || op == "Flatten" || op == "Unsqueeze" ||
      op == "Squeeze")
    return importReshapeLike();
  if (op == "Split")
    return importSplit();
  if (op == "Pow")
    return importPow();
  if (op == "ReduceMean")
    return importReduceMean();
  if (const char *kind = unaryKindOf(op)) {
    auto x = graphInput(0);
    return x && emit1("unary", {*x}, {{"kind", std::string(kind)}});
  }
  if (op == "Expand")
    return importExpand();
  if (op == "Slice")
    return importSlice();
  if (op == "Relu") {
    auto x = graphInput(0);
    return x && emit1("relu", {*x});
  }
  if (op == "Softmax") {
    auto x = graphInput(0);
    if (!x)
      return false;
    int64_t axis = intAttr("axis", -1);
    if (!normAxis(axis, typeOf(*x).shape.size()))
      return false;
    int64_t last = (int64_t)typeOf(*x).shape.size() - 1;
    if (axis == last)
      return emit1("softmax", {*x});
    // Over another dim: swap it with the last, softmax, swap back.
    std::vector<int64_t> perm;
    for (int64_t i = 0; i <= last; ++i)
      perm.push_back(i == axis ? last : i == last ? axis : i);
    auto t = emitTmp("transpose", {*x}, {{"permutation", perm}});
    auto sm = t ? emitTmp("softmax", {*t}) : std::nullopt;
    return sm && emit1("transpose", {*sm}, {{"permutation", perm}});
  }
  if (op == "LayerNormalization") {
    auto x = graphInput(0);
    if (!x)
      return false;
    int64_t axis = intAttr("axis", -1);
    if (!normAxis(axis, typeOf(*x).shape.size()))
      return false;
    std::vector<int64_t> shape = typeOf(*x).shape;
    for (int i = 1; i < node->output_size(); ++i)
      if (!node->output(i).empty())
        return nodeError("the Mean / InvStdDev outputs are not supported");
    if (!hasInput(2))
      return nodeError("LayerNormalization without a bias B is not "
                       "supported");
    auto gamma = graphInput(1), beta = graphInput(2);
    if (!gamma || !beta)
      return false;
    OpAttrs eps{{"epsilon", floatAttr("epsilon", 1e-5)}};
    if (axis == (int64_t)shape.size() - 1)
      return emit1("layer_norm", {*x, *gamma, *beta}, eps);
    // Over dims axis..: those merged into one, and back.
    int64_t n = 1;
    for (size_t i = axis; i < shape.size(); ++i)
      n *= shape[i];
    std::vector<int64_t> merged(shape.begin(), shape.begin() + axis);
    merged.push_back(n);
    auto xm = emitTmp("reshape", {*x}, {{"shape", merged}});
    auto gm =
        xm ? emitTmp("reshape", {*gamma}, {{"shape", std::vector<int64_t>{n}}})
           : std::nullopt;
    auto bm =
        gm ? emitTmp("reshape", {*beta}, {{"shape", std::vector<int64_t>{n}}})
           : std::nullopt;
    auto ln = bm ? emitTmp("layer_norm", {*xm, *gm, *bm}, eps) : std::nullopt;
    return ln && emit1("reshape", {*ln}, {{"shape", shape}});
  }
  if (op == "Transpose") {
    auto x = graphInput(0);
    if (!x)
      return false;
    std::vector<int64_t> perm;
    size_t r = typeOf(*x).shape.size();
    if (auto p = intsAttr("perm"))
      perm = *p;
    else
      for (size_t i = 0; i < r; ++i)
        perm.push_back(r - 1 - i);
    transposes[node->output(0)] = {*x, perm};
    return emit1("transpose", {*x}, {{"permutation", perm}});
  }
  if (op == "Concat") {
    std::vector<std::string> ins;
    for (int i = 0; i < numInputs(); ++i) {
      auto x = graphInput(i);
      if (!x)
        return false;
      ins.push_back(*x);
    }
    int64_t axis = intAttr("axis", 0);
    if (!normAxis(axis, typeOf(ins[0]).shape.size()))
      return false;
    return emit1("concat", ins, {{"axis", axis}});
  }
  if (op == "Gather") {
    const Value *data = input(0), *idx = input(1);
    if (!data || !idx)
      return false;
    if (intAttr("axis", 0) != 0 || idx->isConst)
      return nodeError("Strata imports Gather as an embedding lookup: axis "
                       "0 of a [V, H] table by token ids computed from the "
                       "input");
    auto table = graphInput(0);
    if (!table)
      return false;
    if (typeOf(*table).shape.size() != 2)
      return nodeError("the embedding table must be [V, H]; got " +
                       shapeStr(typeOf(*table).shape));
    return emit1("embedding", {*table, idx->name});
  }
  return nodeError(
      "op type '" + op +
      "' is not supported by Strata's ONNX import; supported: " + kSupported);
}

} // namespace strata::frontend::onnx_import
