//===- OnnxNodes.cpp - ONNX nodes as strata ops ---------------------------===//
//
// The nodes that compute from the inputs: each becomes one or a few strata
// graph ops (docs/model-spec.md, "ONNX models", has the table), or an error
// naming the node and what Strata supports instead.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/OnnxImporter.h"

namespace strata::frontend::onnx_import {

bool Importer::importBinary() {
  const std::string &op = node->op_type();
  const Value *a = input(0), *b = input(1);
  if (!a || !b)
    return false;
  // x * c, c * x, x / c with a scalar constant c: strata.scale.
  auto scalar = [](const Value *v) {
    return v->isConst && v->c.isFloat && v->c.numElements() == 1 &&
           !(v->isInitializer && v->c.shape.size() > 0);
  };
  if ((op == "Mul" || op == "Div") && (scalar(a) || scalar(b))) {
    if (op == "Div" && scalar(a))
      return nodeError("dividing a constant by a tensor is not supported");
    bool constFirst = scalar(a);
    double c = constFirst ? a->c.data[0] : b->c.data[0];
    auto x = graphInput(constFirst ? 1 : 0);
    if (!x)
      return false;
    return emit1("scale", {*x}, {{"factor", op == "Div" ? 1.0 / c : c}});
  }
  auto x = graphInput(0), y = graphInput(1);
  if (!x || !y)
    return false;
  const TensorType tx = typeOf(*x), ty = typeOf(*y);
  if (op == "Div")
    return nodeError("Div of two tensors is not supported (a constant "
                     "scalar divisor is)");
  if (tx.shape == ty.shape) {
    if (op == "Sub") {
      auto neg = emitTmp("scale", {*y}, {{"factor", -1.0}});
      return neg && emit1("add", {*x, *neg});
    }
    return emit1(op == "Add" ? "add" : "mul", {*x, *y});
  }
  // A bias: a 1-D operand as long as the other's last dim.
  if (op == "Add") {
    if (ty.shape.size() == 1 && !tx.shape.empty() &&
        tx.shape.back() == ty.shape[0])
      return emit1("bias_add", {*x, *y});
    if (tx.shape.size() == 1 && !ty.shape.empty() &&
        ty.shape.back() == tx.shape[0])
      return emit1("bias_add", {*y, *x});
  }
  return nodeError("broadcasting " + op + " of shapes " + shapeStr(tx.shape) +
                   " and " + shapeStr(ty.shape) +
                   " is not supported (equal shapes, a bias [N] added to "
                   "[..., N], or a constant scalar factor are)");
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
  if (beta != 1.0)
    return nodeError("Gemm with beta != 1 is not supported");
  auto c = graphInput(2);
  if (!c)
    return false;
  if (typeOf(*c).shape.size() != 1)
    return nodeError("Gemm's C must be a bias [N]; got " +
                     shapeStr(typeOf(*c).shape));
  return emit1("bias_add", {*y, *c});
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
    "MatMul, Gemm, Add, Sub, Mul, Div (by a constant), Relu, Softmax, "
    "LayerNormalization, Reshape, Flatten, Transpose, Split, Concat, Gather "
    "(embedding), Unsqueeze, Squeeze, Cast, Identity, Constant, and shape "
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
    if (axis != (int64_t)typeOf(*x).shape.size() - 1)
      return nodeError("Softmax over a dim other than the last is not "
                       "supported");
    return emit1("softmax", {*x});
  }
  if (op == "LayerNormalization") {
    auto x = graphInput(0);
    if (!x)
      return false;
    int64_t axis = intAttr("axis", -1);
    if (!normAxis(axis, typeOf(*x).shape.size()))
      return false;
    if (axis != (int64_t)typeOf(*x).shape.size() - 1)
      return nodeError("LayerNormalization over more than the last dim is "
                       "not supported");
    for (int i = 1; i < node->output_size(); ++i)
      if (!node->output(i).empty())
        return nodeError("the Mean / InvStdDev outputs are not supported");
    if (!hasInput(2))
      return nodeError("LayerNormalization without a bias B is not "
                       "supported");
    auto gamma = graphInput(1), beta = graphInput(2);
    return gamma && beta &&
           emit1("layer_norm", {*x, *gamma, *beta},
                 {{"epsilon", floatAttr("epsilon", 1e-5)}});
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
