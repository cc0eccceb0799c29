//===- OnnxImporter.h - The ONNX importer's state (internal) ----*- C++ -*-===//
//
// Shared by OnnxImport.cpp (inputs, outputs, the entry points),
// OnnxFolding.cpp (constants and shape arithmetic) and OnnxNodes.cpp (nodes
// as strata ops). Not part of any public interface.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_FRONTENDS_ONNX_ONNXIMPORTER_H
#define STRATA_FRONTENDS_ONNX_ONNXIMPORTER_H

#include "frontends/onnx/OnnxImport.h"
#include "frontends/yaml/GraphShapes.h"
#include "frontends/yaml/ModelSpec.h"

#include "onnx/onnx_pb.h"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace strata::frontend::onnx_import {

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

  // --- patterns (OnnxPatterns.cpp) --------------------------------------
  /// A value the importer holds in a form only some consumers take: the
  /// causal-masked scores (taken by Softmax), position embeddings (taken by
  /// Unsqueeze(0) and Add). `held` is the strata value standing for it.
  struct Deferred {
    std::string kind, held, what, use;
  };
  std::map<std::string, Deferred> deferred;
  /// GELU's tanh approximation as torch exports it: the nodes folded into
  /// the final Mul, and that Mul's input x and constants to check.
  struct GeluMatch {
    std::string x;
    std::vector<std::pair<std::string, double>> constants;
  };
  std::set<const onnx::NodeProto *> skipped;
  std::map<const onnx::NodeProto *, GeluMatch> geluAt;
  bool positionsAdded = false;

  void findPatterns(const onnx::GraphProto &graph);
  /// Handles `node` if it belongs to a pattern; sets `handled`.
  bool importPattern(bool &handled);

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
    auto d = deferred.find(node->input(i));
    if (d != deferred.end()) {
      nodeError("input '" + node->input(i) + "' is " + d->second.what +
                "; Strata imports it only as " + d->second.use);
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
  bool importPow();
  bool importExpand();
  bool importSlice();
  bool importReduceMean();
  /// `x` broadcast to `shape` (reshape to the rank, then copies
  /// concatenated along each size-1 dim); an error names the node.
  std::optional<std::string> broadcastTo(const std::string &x,
                                         const std::vector<int64_t> &shape);
  bool finish(ModelSpec &spec);
};

inline std::string shapeStr(const std::vector<int64_t> &s) {
  return formatShape(s);
}

} // namespace strata::frontend::onnx_import

#endif // STRATA_FRONTENDS_ONNX_ONNXIMPORTER_H
