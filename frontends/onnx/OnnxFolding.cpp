//===- OnnxFolding.cpp - Constants and shape arithmetic at import ---------===//
//
// Nodes whose inputs are all constants are evaluated here (Constant, Shape,
// Gather, Concat, arithmetic, Cast, Slice, Expand, ConstantOfShape, ...), as
// are the reshapes of constants; Reshape, Flatten, Unsqueeze and Squeeze of
// graph values become strata.reshape to the shape resolved here.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/OnnxImporter.h"

#include <algorithm>
#include <cmath>

namespace strata::frontend::onnx_import {

namespace {

double addFn(double a, double b) { return a + b; }
double subFn(double a, double b) { return a - b; }
double mulFn(double a, double b) { return a * b; }
double divFloat(double a, double b) { return a / b; }
double divInt(double a, double b) { return b == 0 ? 0 : std::trunc(a / b); }
double powFn(double a, double b) { return std::pow(a, b); }
double eqFn(double a, double b) { return a == b ? 1.0 : 0.0; }

} // namespace

/// Folds a node whose inputs are all constants (or Shape of anything).
bool Importer::foldConstNode(bool &handled) {
  handled = true;
  const std::string &op = node->op_type();
  const std::string &out = node->output(0);
  if (op == "Constant") {
    ConstTensor c;
    if (const onnx::AttributeProto *a = attr("value")) {
      if (auto err = decodeTensor(a->t(), c))
        return nodeError(*err);
    } else if (const onnx::AttributeProto *a = attr("value_float")) {
      c.isFloat = true, c.data = {a->f()};
    } else if (const onnx::AttributeProto *a = attr("value_int")) {
      c.data = {(double)a->i()};
    } else if (auto ints = intsAttr("value_ints")) {
      c.shape = {(int64_t)ints->size()};
      c.data.assign(ints->begin(), ints->end());
    } else if (const onnx::AttributeProto *a = attr("value_floats")) {
      c.isFloat = true;
      c.shape = {a->floats_size()};
      c.data.assign(a->floats().begin(), a->floats().end());
    } else {
      return nodeError("a Constant without value/value_float/value_int(s)/"
                       "value_floats is not supported");
    }
    setConst(out, c);
    return true;
  }
  if (op == "Shape") {
    const Value *v = input(0);
    if (!v)
      return false;
    std::vector<int64_t> shape = v->isConst ? v->c.shape : v->type.shape;
    int64_t r = shape.size(), start = intAttr("start", 0),
            end = intAttr("end", r);
    start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
    end = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
    ConstTensor c;
    for (int64_t i = start; i < end; ++i)
      c.data.push_back(shape[i]);
    c.shape = {(int64_t)c.data.size()};
    setConst(out, c);
    return true;
  }
  // The rest fold only when every input is a constant.
  for (int i = 0; i < numInputs(); ++i) {
    if (!hasInput(i))
      continue;
    const Value *v = input(i);
    if (!v)
      return false;
    if (!v->isConst) {
      handled = false;
      return true;
    }
  }
  auto in = [&](int i) -> const ConstTensor & {
    return values[node->input(i)].c;
  };
  if (op == "Identity") {
    // torch.onnx.export shares one initializer among parameters with equal
    // initial values (zero biases, unit norms) and names the others by an
    // Identity of it: each name stays a parameter of its own.
    Value v = values[node->input(0)];
    v.name = out;
    values[out] = v;
  } else if (op == "Not") {
    ConstTensor c = in(0);
    for (double &d : c.data)
      d = d == 0.0 ? 1.0 : 0.0;
    setConst(out, c);
  } else if (op == "Range") {
    double start = in(0).data.at(0), limit = in(1).data.at(0),
           delta = in(2).data.at(0);
    if (delta == 0)
      return nodeError("Range with delta 0");
    ConstTensor c;
    c.isFloat = in(0).isFloat;
    for (double v = start; delta > 0 ? v < limit : v > limit; v += delta)
      c.data.push_back(v);
    c.shape = {(int64_t)c.data.size()};
    setConst(out, c);
  } else if (op == "Trilu") {
    ConstTensor c = in(0);
    int64_t k = hasInput(1) ? (int64_t)in(1).data.at(0) : 0;
    bool upper = intAttr("upper", 1) != 0;
    size_t r = c.shape.size();
    if (r < 2)
      return nodeError("Trilu needs a rank >= 2 input");
    int64_t rows = c.shape[r - 2], cols = c.shape[r - 1];
    for (size_t idx = 0; idx < c.data.size(); ++idx) {
      int64_t i = (idx / cols) % rows, j = idx % cols;
      bool keep = upper ? j - i >= k : j - i <= k;
      if (!keep)
        c.data[idx] = 0;
    }
    setConst(out, c);
  } else if (op == "Cast") {
    ConstTensor c = in(0);
    int64_t to = intAttr("to", onnx::TensorProto::FLOAT);
    c.isFloat = to == onnx::TensorProto::FLOAT ||
                to == onnx::TensorProto::DOUBLE ||
                to == onnx::TensorProto::FLOAT16;
    if (!c.isFloat)
      for (double &d : c.data)
        d = to == onnx::TensorProto::BOOL ? (d != 0) : std::trunc(d);
    setConst(out, c);
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" ||
             op == "Pow" || op == "Equal") {
    bool isFloat = in(0).isFloat;
    double (*fn)(double, double) = op == "Add"     ? addFn
                                   : op == "Sub"   ? subFn
                                   : op == "Mul"   ? mulFn
                                   : op == "Pow"   ? powFn
                                   : op == "Equal" ? eqFn
                                   : isFloat       ? divFloat
                                                   : divInt;
    auto c = broadcastBinary(in(0), in(1), fn, op == "Equal" ? false : isFloat);
    if (!c)
      return nodeError("shapes " + shapeStr(in(0).shape) + " and " +
                       shapeStr(in(1).shape) + " do not broadcast");
    setConst(out, *c);
  } else if (op == "Gather") {
    int64_t axis = intAttr("axis", 0);
    if (!normAxis(axis, in(0).shape.size()))
      return false;
    auto c = gatherConst(in(0), in(1), axis);
    if (!c)
      return nodeError("an index is out of range");
    setConst(out, *c);
  } else if (op == "Concat") {
    std::vector<ConstTensor> parts;
    for (int i = 0; i < numInputs(); ++i)
      parts.push_back(in(i));
    int64_t axis = intAttr("axis", 0);
    if (!normAxis(axis, in(0).shape.size()))
      return false;
    auto c = concatConst(parts, axis);
    if (!c)
      return nodeError("the parts' shapes do not concatenate");
    setConst(out, *c);
  } else if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" ||
             op == "Flatten") {
    handled = false; // shapes are computed with the graph form below
  } else if (op == "Expand") {
    auto c = expandTo(in(0), in(1).ints());
    if (!c)
      return nodeError("shape " + shapeStr(in(0).shape) +
                       " does not broadcast to " + shapeStr(in(1).ints()));
    setConst(out, *c);
  } else if (op == "Slice") {
    const ConstTensor &data = in(0);
    std::vector<int64_t> starts = in(1).ints(), ends = in(2).ints(), axes,
                         steps(starts.size(), 1);
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(i);
    if (hasInput(3))
      axes = in(3).ints();
    if (hasInput(4))
      steps = in(4).ints();
    if (data.shape.size() != 1 || axes.size() != 1 || steps[0] < 1)
      return nodeError("Strata folds Slice of 1-D constants with a positive "
                       "step only");
    int64_t n = data.shape[0];
    int64_t s = starts[0] < 0 ? starts[0] + n : starts[0];
    int64_t e = ends[0] < 0 ? ends[0] + n : ends[0];
    s = std::clamp<int64_t>(s, 0, n), e = std::clamp<int64_t>(e, 0, n);
    ConstTensor c;
    c.isFloat = data.isFloat;
    for (int64_t i = s; i < e; i += steps[0])
      c.data.push_back(data.data[i]);
    c.shape = {(int64_t)c.data.size()};
    setConst(out, c);
  } else if (op == "ConstantOfShape") {
    ConstTensor c;
    c.shape = in(0).ints();
    int64_t n = 1;
    for (int64_t d : c.shape)
      n *= d;
    double fill = 0;
    if (const onnx::AttributeProto *a = attr("value")) {
      ConstTensor v;
      if (auto err = decodeTensor(a->t(), v))
        return nodeError(*err);
      c.isFloat = v.isFloat;
      fill = v.data.empty() ? 0 : v.data[0];
    } else {
      c.isFloat = true;
    }
    c.data.assign(n, fill);
    setConst(out, c);
  } else {
    handled = false;
  }
  return true;
}

/// Reshape, Flatten, Unsqueeze, Squeeze: on constants folded, on graph
/// values a strata.reshape to the resolved shape.
bool Importer::importReshapeLike() {
  const std::string &op = node->op_type();
  const Value *x = input(0);
  if (!x)
    return false;
  std::vector<int64_t> in = x->isConst ? x->c.shape : x->type.shape, shape;
  int64_t count = 1;
  for (int64_t d : in)
    count *= d;
  if (op == "Reshape") {
    const ConstTensor *s = constInput(1, "the target shape");
    if (!s)
      return false;
    shape = s->ints();
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0 && !intAttr("allowzero", 0)) {
        if (i >= in.size())
          return nodeError("shape entry 0 at " + std::to_string(i) +
                           " has no input dim to copy");
        shape[i] = in[i];
      }
      if (shape[i] == -1)
        infer = i;
      else
        known *= shape[i];
    }
    if (infer >= 0) {
      if (known == 0 || count % known)
        return nodeError("cannot infer -1 in " + shapeStr(shape) + " for " +
                         shapeStr(in));
      shape[infer] = count / known;
    }
  } else if (op == "Flatten") {
    int64_t axis = intAttr("axis", 1);
    if (axis < 0)
      axis += in.size();
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i)
      outer *= in[i];
    shape = {outer, outer ? count / outer : 0};
  } else {
    std::vector<int64_t> axes;
    if (hasInput(1)) {
      const ConstTensor *a = constInput(1, "axes");
      if (!a)
        return false;
      axes = a->ints();
    } else if (auto v = intsAttr("axes")) {
      axes = *v;
    }
    if (op == "Unsqueeze") {
      size_t r = in.size() + axes.size();
      std::vector<bool> isNew(r, false);
      for (int64_t a : axes) {
        if (a < 0)
          a += r;
        if (a < 0 || a >= (int64_t)r)
          return nodeError("axis out of range");
        isNew[a] = true;
      }
      size_t j = 0;
      for (size_t i = 0; i < r; ++i)
        shape.push_back(isNew[i] ? 1 : in[j++]);
    } else {
      std::vector<bool> drop(in.size(), axes.empty());
      for (int64_t a : axes)
        drop[a < 0 ? a + in.size() : a] = true;
      for (size_t i = 0; i < in.size(); ++i)
        if (!drop[i] || in[i] != 1)
          shape.push_back(in[i]);
    }
  }
  if (x->isConst) {
    ConstTensor c = x->c;
    c.shape = shape;
    setConst(node->output(0), c);
    return true;
  }
  return emit1("reshape", {x->name}, {{"shape", shape}});
}

} // namespace strata::frontend::onnx_import
