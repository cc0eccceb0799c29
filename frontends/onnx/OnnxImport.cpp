//===- OnnxImport.cpp - An ONNX forward graph as an explicit graph --------===//
//
// Reads a ModelProto (libonnx's protobuf classes) and its YAML sidecar into
// the same ModelSpec an explicit `graph:` spec produces, so planning,
// compiling and training are those of explicit graphs. Nodes are visited in
// the file's (topological) order:
//
//  * constants (initializers used as constants, Constant nodes) and the
//    shape arithmetic torch.onnx.export emits (Shape, Gather, Unsqueeze,
//    Concat, Reshape, Cast, Slice, Expand, arithmetic on constants) are
//    folded at import, with the graph's real shapes: the first dim of the
//    token input is the batch the graph is built for;
//  * every other node becomes strata ops: float initializers used as
//    activations become parameters under their ONNX names; a MatMul whose
//    right operand is a Transpose of the last two dims reads the source with
//    transpose_b (torch exports nn.Linear as MatMul(x, Transpose(weight)));
//  * the loss is appended: cross_entropy(logits, targets), with `targets` a
//    new int32 input shaped like the logits without their last dim.
//
// An unsupported op, an unsupported form of a supported one, or a dynamic
// dim is an error naming the node (name and op type) and the file.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/OnnxImport.h"
#include "frontends/yaml/GraphShapes.h"
#include "frontends/yaml/GraphValidation.h"
#include "frontends/yaml/ModelSpec.h"

#include "onnx/onnx_pb.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <sys/stat.h>

namespace strata::frontend {
namespace {

constexpr int64_t kMaxOnnxBytes = int64_t(2) << 30;
constexpr int kMinOpset = 13, kMaxOpset = 17;

/// An ONNX value during import: a folded constant or a graph value.
struct Value {
  bool isConst = false;
  ConstTensor c; // isConst
  bool isInitializer = false;
  std::string name; // the graph value (for an initializer: its param)
  TensorType type;  // !isConst
};

class Importer {
public:
  Importer(std::string path, std::vector<Diagnostic> &diags,
           const OnnxSidecar &side, bool forward = false,
           const std::map<std::string, ConstTensor> *constInputs = nullptr)
      : path(std::move(path)), diags(diags), side(side), forward(forward),
        constInputs(constInputs) {}

  std::optional<ModelSpec> run(const onnx::ModelProto &model);
  /// The initializer of each parameter (after run).
  std::map<std::string, ConstTensor> paramValues() const {
    std::map<std::string, ConstTensor> out;
    for (const GraphParam &p : outParams)
      out[p.name] = values.at(p.name).c;
    return out;
  }

private:
  std::string path;
  std::vector<Diagnostic> &diags;
  const OnnxSidecar &side;
  /// loadOnnxForward: inputs and outputs as they are, no loss.
  bool forward;
  const std::map<std::string, ConstTensor> *constInputs;
  std::vector<GraphParam> outParams;

public:
  std::map<std::string, ConstTensor> constOutputs;

private:
  Graph g;
  std::map<std::string, Value> values;
  /// Output of a graph Transpose -> (its input, permutation).
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>>
      transposes;
  std::set<std::string> params;
  const onnx::NodeProto *node = nullptr; // the node being imported
  int fresh = 0;

  void error(const std::string &message) {
    diags.push_back(Diagnostic{SourceLoc{path, 0, 0}, message});
  }
  bool nodeError(const std::string &message) {
    std::string name = node->name().empty() ? "(unnamed)" : node->name();
    error("node '" + name + "' (" + node->op_type() + "): " + message);
    return false;
  }

  // --- attributes -----------------------------------------------------
  const onnx::AttributeProto *attr(const std::string &name) const {
    for (const onnx::AttributeProto &a : node->attribute())
      if (a.name() == name)
        return &a;
    return nullptr;
  }
  int64_t intAttr(const std::string &name, int64_t dflt) const {
    const onnx::AttributeProto *a = attr(name);
    return a ? a->i() : dflt;
  }
  double floatAttr(const std::string &name, double dflt) const {
    const onnx::AttributeProto *a = attr(name);
    return a ? a->f() : dflt;
  }
  std::optional<std::vector<int64_t>> intsAttr(const std::string &name) const {
    const onnx::AttributeProto *a = attr(name);
    if (!a)
      return std::nullopt;
    return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  }

  // --- values ---------------------------------------------------------
  int numInputs() const {
    int n = node->input_size();
    while (n > 0 && node->input(n - 1).empty())
      --n;
    return n;
  }
  bool hasInput(int i) const {
    return i < node->input_size() && !node->input(i).empty();
  }
  const Value *input(int i) {
    if (!hasInput(i)) {
      nodeError("input " + std::to_string(i) + " is missing");
      return nullptr;
    }
    auto it = values.find(node->input(i));
    if (it == values.end()) {
      nodeError("input '" + node->input(i) +
                "' is not defined before the node (is the graph sorted?)");
      return nullptr;
    }
    return &it->second;
  }
  /// Input `i` as a folded constant (an error if it is computed).
  const ConstTensor *constInput(int i, const std::string &what) {
    const Value *v = input(i);
    if (!v)
      return nullptr;
    if (!v->isConst) {
      nodeError(what + " (input '" + node->input(i) +
                "') is computed from the model's inputs; Strata needs it "
                "constant at import (static shapes only)");
      return nullptr;
    }
    return &v->c;
  }
  /// Input `i` as a graph value; a float initializer becomes a parameter.
  std::optional<std::string> graphInput(int i) {
    const Value *v = input(i);
    if (!v)
      return std::nullopt;
    if (!v->isConst)
      return v->name;
    if (v->isInitializer && v->c.isFloat) {
      if (!params.count(v->name))
        addParam(v->name, v->c);
      return v->name;
    }
    nodeError("input '" + node->input(i) +
              "' is a constant tensor used as an activation; Strata takes "
              "float initializers (parameters) and values computed from the "
              "inputs here");
    return std::nullopt;
  }
  const TensorType &typeOf(const std::string &name) {
    auto it = values.find(name);
    return it != values.end() && !it->second.isConst ? it->second.type
                                                     : paramTypes[name];
  }
  std::map<std::string, TensorType> paramTypes;

  void addParam(const std::string &name, const ConstTensor &c) {
    GraphParam p;
    p.name = name;
    p.shape = c.shape;
    p.dtype = DType::F32;
    p.loc = SourceLoc{path, 0, 0};
    // The exported values are the usual recipes; keep the ones a plain
    // recipe reproduces (zeros, ones) and otherwise draw with their spread.
    bool zeros = true, ones = true;
    double sum = 0, sumSq = 0;
    for (double d : c.data) {
      zeros &= d == 0.0;
      ones &= d == 1.0;
      sum += d;
      sumSq += d * d;
    }
    double n = std::max<double>(1, c.data.size());
    double var = std::max(0.0, sumSq / n - (sum / n) * (sum / n));
    if (zeros)
      p.init.kind = ParamInit::Kind::Zeros;
    else if (ones)
      p.init.kind = ParamInit::Kind::Ones;
    else
      p.init.std = std::sqrt(var);
    g.params.push_back(p);
    params.insert(name);
    paramTypes[name] = TensorType{c.shape, DType::F32};
  }
  void setConst(const std::string &name, ConstTensor c) {
    Value v;
    v.isConst = true;
    v.c = std::move(c);
    values[name] = std::move(v);
  }
  void alias(const std::string &name, const Value &v) { values[name] = v; }

  /// Appends a strata op; its output types are inferred now. `outs` empty:
  /// one fresh name.
  std::optional<std::vector<std::string>> emit(const std::string &op,
                                               std::vector<std::string> ins,
                                               OpAttrs attrs,
                                               std::vector<std::string> outs) {
    const OpRule *rule = findOpRule(op);
    if (auto err = completeOpAttrs(*rule, attrs)) {
      nodeError(*err);
      return std::nullopt;
    }
    std::vector<TensorType> inTypes;
    for (const std::string &in : ins)
      inTypes.push_back(typeOf(in));
    GraphOp gop;
    gop.op = op;
    gop.inputs = ins;
    gop.attrs = attrs;
    gop.loc = SourceLoc{path, 0, 0};
    if (auto err = rule->infer(inTypes, gop.attrs, gop.outputTypes)) {
      nodeError("as strata." + op + ": " + *err);
      return std::nullopt;
    }
    if (outs.empty())
      for (size_t i = 0; i < gop.outputTypes.size(); ++i)
        outs.push_back(node->output(0) + "/strata." + op + "." +
                       std::to_string(fresh++));
    gop.outputs = outs;
    for (size_t i = 0; i < outs.size(); ++i) {
      Value v;
      v.name = outs[i];
      v.type = gop.outputTypes[i];
      values[outs[i]] = v;
    }
    g.ops.push_back(std::move(gop));
    return outs;
  }
  bool emit1(const std::string &op, std::vector<std::string> ins,
             OpAttrs attrs = {}) {
    return emit(op, std::move(ins), std::move(attrs), {node->output(0)})
        .has_value();
  }
  std::optional<std::string> emitTmp(const std::string &op,
                                     std::vector<std::string> ins,
                                     OpAttrs attrs = {}) {
    auto outs = emit(op, std::move(ins), std::move(attrs), {});
    if (!outs)
      return std::nullopt;
    return (*outs)[0];
  }

  bool normAxis(int64_t &axis, size_t rank) {
    if (axis < 0)
      axis += (int64_t)rank;
    if (axis < 0 || axis >= (int64_t)rank)
      return nodeError("axis out of range for rank " + std::to_string(rank));
    return true;
  }

  bool importInputs(const onnx::GraphProto &graph);
  bool importForwardInputs(const onnx::GraphProto &graph);
  bool finishForward(const onnx::GraphProto &graph, ModelSpec &spec);
  bool importNode();
  bool foldConstNode(bool &handled);
  bool importBinary();
  bool importMatMul();
  bool importGemm();
  bool importReshapeLike();
  bool importSplit();
  bool finish(ModelSpec &spec);
};

std::string shapeStr(const std::vector<int64_t> &s) { return formatShape(s); }

bool Importer::importForwardInputs(const onnx::GraphProto &graph) {
  for (const onnx::ValueInfoProto &in : graph.input()) {
    if (values.count(in.name()))
      continue; // an initializer
    if (constInputs && constInputs->count(in.name())) {
      setConst(in.name(), constInputs->at(in.name()));
      continue;
    }
    const onnx::TypeProto::Tensor &tt = in.type().tensor_type();
    GraphTensor t;
    t.name = in.name();
    t.loc = SourceLoc{path, 0, 0};
    switch (tt.elem_type()) {
    case onnx::TensorProto::FLOAT:
      t.dtype = DType::F32;
      break;
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::INT32:
      t.dtype = DType::I32;
      break;
    default:
      error("graph input '" + in.name() + "' has element type " +
            onnx::TensorProto::DataType_Name(
                (onnx::TensorProto::DataType)tt.elem_type()) +
            "; Strata takes float32 and integer inputs");
      return false;
    }
    for (const onnx::TensorShapeProto::Dimension &d : tt.shape().dim()) {
      if (!d.has_dim_value()) {
        error("graph input '" + in.name() + "' has a dynamic dim ('" +
              d.dim_param() + "'); Strata needs static shapes");
        return false;
      }
      t.shape.push_back(d.dim_value());
    }
    g.inputs.push_back(t);
    Value v;
    v.name = t.name;
    v.type = TensorType{t.shape, t.dtype};
    values[t.name] = v;
  }
  return true;
}

bool Importer::importInputs(const onnx::GraphProto &graph) {
  std::set<std::string> inits;
  for (const onnx::TensorProto &t : graph.initializer()) {
    Value v;
    v.isConst = true;
    v.isInitializer = true;
    v.name = t.name();
    if (auto err = decodeTensor(t, v.c)) {
      error(*err);
      return false;
    }
    inits.insert(t.name());
    values[t.name()] = std::move(v);
  }
  if (forward)
    return importForwardInputs(graph);
  std::vector<const onnx::ValueInfoProto *> real;
  for (const onnx::ValueInfoProto &in : graph.input())
    if (!inits.count(in.name()))
      real.push_back(&in);
  const onnx::ValueInfoProto *tokens = nullptr;
  for (const onnx::ValueInfoProto *in : real)
    if (side.tokens.empty() ? real.size() == 1 : in->name() == side.tokens)
      tokens = in;
  if (!tokens) {
    std::string names;
    for (const onnx::ValueInfoProto *in : real)
      names += (names.empty() ? "" : ", ") + in->name();
    error(side.tokens.empty()
              ? "the graph has " + std::to_string(real.size()) + " inputs (" +
                    names +
                    "); name the token-id input with 'onnx: {tokens: NAME}' "
                    "in " +
                    side.path
              : "the graph has no input '" + side.tokens + "' (" + side.path +
                    " names it); its inputs are: " + names);
    return false;
  }
  for (const onnx::ValueInfoProto *in : real)
    if (in != tokens) {
      error("graph input '" + in->name() +
            "': Strata feeds one input, the token ids ('" + tokens->name() +
            "'); fold the others into the model or make them initializers");
      return false;
    }
  const onnx::TypeProto::Tensor &tt = tokens->type().tensor_type();
  int et = tt.elem_type();
  if (et != onnx::TensorProto::INT64 && et != onnx::TensorProto::INT32) {
    error("graph input '" + tokens->name() +
          "' holds token ids and must be int64 or int32");
    return false;
  }
  if (!tt.has_shape() || tt.shape().dim_size() != 2) {
    error("graph input '" + tokens->name() +
          "' must have shape [batch, seq_len]");
    return false;
  }
  const onnx::TensorShapeProto::Dimension &seq = tt.shape().dim(1);
  if (!seq.has_dim_value() || seq.dim_value() < 1) {
    error("graph input '" + tokens->name() + "' has a dynamic dim 1 ('" +
          seq.dim_param() +
          "'); only the batch dim may be dynamic: re-export with a fixed "
          "sequence length");
    return false;
  }
  GraphTensor in;
  in.name = "tokens";
  in.shape = {side.batch, seq.dim_value()};
  in.dtype = DType::I32;
  in.loc = SourceLoc{path, 0, 0};
  g.inputs.push_back(in);
  Value v;
  v.name = "tokens";
  v.type = TensorType{in.shape, DType::I32};
  values[tokens->name()] = v;
  return true;
}

double addFn(double a, double b) { return a + b; }
double subFn(double a, double b) { return a - b; }
double mulFn(double a, double b) { return a * b; }
double divFloat(double a, double b) { return a / b; }
double divInt(double a, double b) { return b == 0 ? 0 : std::trunc(a / b); }
double powFn(double a, double b) { return std::pow(a, b); }
double eqFn(double a, double b) { return a == b ? 1.0 : 0.0; }

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
    setConst(out, in(0));
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

const char *kSupported =
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

/// Forward mode: the ONNX outputs are the graph's outputs.
bool Importer::finishForward(const onnx::GraphProto &graph, ModelSpec &spec) {
  for (const onnx::ValueInfoProto &out : graph.output()) {
    auto it = values.find(out.name());
    if (it == values.end()) {
      error("graph output '" + out.name() + "' is not computed by any node");
      return false;
    }
    if (it->second.isConst)
      constOutputs[out.name()] = it->second.c;
    else
      g.outputs.push_back(it->second.name);
  }
  for (const GraphTensor &in : g.inputs)
    g.values[in.name] = TensorType{in.shape, in.dtype};
  for (const GraphParam &p : g.params)
    g.values[p.name] = TensorType{p.shape, p.dtype};
  for (const GraphOp &op : g.ops)
    for (size_t i = 0; i < op.outputs.size(); ++i)
      g.values[op.outputs[i]] = op.outputTypes[i];
  g.loc = SourceLoc{path, 0, 0};
  outParams = g.params;
  spec.graph = std::move(g);
  return true;
}

/// Drops ops and params the logits do not depend on (folded shape
/// subgraphs, transposes MatMul read through), then appends the loss.
bool Importer::finish(ModelSpec &spec) {
  auto it = values.find(side.logits);
  if (it == values.end()) {
    diags.push_back(Diagnostic{side.logitsLoc,
                               "the ONNX graph has no value '" + side.logits +
                                   "'; expected the name of its logits "
                                   "output"});
    return false;
  }
  if (it->second.isConst) {
    diags.push_back(
        Diagnostic{side.logitsLoc, "'" + side.logits +
                                       "' is a constant; expected the logits "
                                       "computed from the token ids"});
    return false;
  }
  std::string logits = it->second.name;
  std::set<std::string> live{logits};
  std::vector<GraphOp> kept;
  for (auto op = g.ops.rbegin(); op != g.ops.rend(); ++op) {
    bool used = false;
    for (const std::string &o : op->outputs)
      used |= live.count(o) > 0;
    if (!used)
      continue;
    live.insert(op->inputs.begin(), op->inputs.end());
    kept.push_back(*op);
  }
  g.ops.assign(kept.rbegin(), kept.rend());
  std::vector<GraphParam> keptParams;
  for (const GraphParam &p : g.params)
    if (live.count(p.name))
      keptParams.push_back(p);
  g.params = keptParams;
  const TensorType &lt = values[side.logits].type;
  const std::vector<int64_t> &tokShape = g.inputs[0].shape;
  if (lt.shape.size() != tokShape.size() + 1 ||
      !std::equal(tokShape.begin(), tokShape.end(), lt.shape.begin())) {
    diags.push_back(Diagnostic{
        side.logitsLoc, "the logits '" + side.logits + "' are " +
                            formatType(lt) + "; expected [batch, seq_len, " +
                            "vocab] for token ids " + shapeStr(tokShape)});
    return false;
  }
  for (const char *reserved : {"targets", "loss"})
    if (values.count(reserved) || params.count(reserved)) {
      error(std::string("the ONNX graph has a value named '") + reserved +
            "', a name Strata reserves for the loss it appends; rename it "
            "in the export");
      return false;
    }
  GraphTensor targets;
  targets.name = "targets";
  targets.shape = tokShape;
  targets.dtype = DType::I32;
  targets.loc = SourceLoc{path, 0, 0};
  g.inputs.push_back(targets);
  GraphOp ce;
  ce.op = "cross_entropy";
  ce.inputs = {logits, "targets"};
  ce.outputs = {"loss"};
  ce.loc = SourceLoc{path, 0, 0};
  g.ops.push_back(ce);
  g.outputs = {"loss"};
  g.loc = SourceLoc{path, 0, 0};
  spec.graph = std::move(g);
  return true;
}

std::optional<ModelSpec> Importer::run(const onnx::ModelProto &model) {
  int64_t opset = -1;
  for (const onnx::OperatorSetIdProto &o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx")
      opset = o.version();
  if (opset < kMinOpset || opset > kMaxOpset) {
    error("the model uses ONNX opset " + std::to_string(opset) +
          "; Strata imports opsets " + std::to_string(kMinOpset) + " to " +
          std::to_string(kMaxOpset) +
          " (torch.onnx.export(..., opset_version=13..17))");
    return std::nullopt;
  }
  const onnx::GraphProto &graph = model.graph();
  if (!importInputs(graph))
    return std::nullopt;
  for (const onnx::NodeProto &n : graph.node()) {
    node = &n;
    if (!importNode())
      return std::nullopt;
  }
  ModelSpec spec;
  spec.path = path;
  spec.family = "graph";
  spec.batch = side.batch;
  spec.training = side.training;
  if (forward)
    return finishForward(graph, spec) ? std::optional<ModelSpec>(spec)
                                      : std::nullopt;
  if (!finish(spec))
    return std::nullopt;
  if (!validateGraph(spec.graph, path, diags))
    return std::nullopt;
  return spec;
}

} // namespace

namespace {

bool readModelProto(const std::string &path, std::vector<Diagnostic> &diags,
                    onnx::ModelProto &model) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    diags.push_back(Diagnostic{SourceLoc{path, 0, 0},
                               std::string("cannot open the ONNX model: ") +
                                   std::strerror(errno)});
    return false;
  }
  if (!S_ISREG(st.st_mode) || st.st_size > kMaxOnnxBytes) {
    diags.push_back(Diagnostic{
        SourceLoc{path, 0, 0},
        S_ISREG(st.st_mode) ? "the file is larger than 2 GiB; expected an "
                              "ONNX model with its weights inside"
                            : "is not a regular file; expected an ONNX "
                              "model file"});
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in || !model.ParseFromIstream(&in)) {
    diags.push_back(Diagnostic{SourceLoc{path, 0, 0},
                               "cannot parse the file as an ONNX "
                               "ModelProto (is it an .onnx model?)"});
    return false;
  }
  return true;
}

} // namespace

std::optional<ModelSpec> loadOnnxModel(const std::string &path,
                                       std::vector<Diagnostic> &diags,
                                       const LoadOptions &options) {
  if (options.decode) {
    diags.push_back(Diagnostic{SourceLoc{path, 0, 0},
                               "generation needs a preset model; an ONNX "
                               "graph is built for its own sequence length"});
    return std::nullopt;
  }
  std::optional<OnnxSidecar> side = loadOnnxSidecar(path, diags, options);
  if (!side)
    return std::nullopt;
  onnx::ModelProto model;
  if (!readModelProto(path, diags, model))
    return std::nullopt;
  try {
    Importer importer(path, diags, *side);
    return importer.run(model);
  } catch (const std::exception &e) {
    diags.push_back(Diagnostic{SourceLoc{path, 0, 0},
                               std::string("cannot import: ") + e.what()});
  }
  return std::nullopt;
}

std::optional<ModelSpec>
loadOnnxForward(const std::string &path, std::vector<Diagnostic> &diags,
                OnnxForwardExtras &extras,
                const std::map<std::string, ConstTensor> &constInputs) {
  onnx::ModelProto model;
  if (!readModelProto(path, diags, model))
    return std::nullopt;
  OnnxSidecar none;
  try {
    Importer importer(path, diags, none, /*forward=*/true, &constInputs);
    std::optional<ModelSpec> spec = importer.run(model);
    if (spec) {
      extras.paramValues = importer.paramValues();
      extras.constOutputs = importer.constOutputs;
    }
    return spec;
  } catch (const std::exception &e) {
    diags.push_back(Diagnostic{SourceLoc{path, 0, 0},
                               std::string("cannot import: ") + e.what()});
  }
  return std::nullopt;
}

} // namespace strata::frontend
