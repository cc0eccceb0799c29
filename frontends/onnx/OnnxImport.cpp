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

#include "frontends/onnx/OnnxImporter.h"
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
namespace onnx_import {

constexpr int64_t kMaxOnnxBytes = int64_t(2) << 30;
constexpr int kMinOpset = 13, kMaxOpset = 17;

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
  outParams = g.params;
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
  findPatterns(graph);
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

} // namespace onnx_import

using onnx_import::Importer;
using onnx_import::kMaxOnnxBytes;

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

namespace {

/// loadOnnxModel, also handing back the parameters' initializers.
std::optional<ModelSpec>
loadTrainingModel(const std::string &path, std::vector<Diagnostic> &diags,
                  const LoadOptions &options,
                  std::map<std::string, ConstTensor> *paramValues) {
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
    std::optional<ModelSpec> spec = importer.run(model);
    if (spec && paramValues)
      *paramValues = importer.paramValues();
    return spec;
  } catch (const std::exception &e) {
    diags.push_back(Diagnostic{SourceLoc{path, 0, 0},
                               std::string("cannot import: ") + e.what()});
  }
  return std::nullopt;
}

} // namespace

std::optional<ModelSpec> loadOnnxModel(const std::string &path,
                                       std::vector<Diagnostic> &diags,
                                       const LoadOptions &options) {
  return loadTrainingModel(path, diags, options, nullptr);
}

std::optional<std::vector<std::pair<std::string, std::vector<float>>>>
loadOnnxWeights(const std::string &path, std::vector<Diagnostic> &diags) {
  std::map<std::string, ConstTensor> values;
  std::optional<ModelSpec> spec =
      loadTrainingModel(path, diags, LoadOptions{}, &values);
  if (!spec)
    return std::nullopt;
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const GraphParam &p : spec->graph.params) {
    const ConstTensor &c = values.at(p.name);
    out.emplace_back(p.name, std::vector<float>(c.data.begin(), c.data.end()));
  }
  return out;
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