//===- OnnxImport.h - ONNX graphs as explicit graphs ------------*- C++ -*-===//
//
// loadOnnxModel (declared in ModelSpec.h) is the training path: a language
// model's forward graph plus the loss. loadOnnxForward is the ONNX backend
// node tests' path: any graph, imported as it is.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_FRONTENDS_ONNX_ONNXIMPORT_H
#define STRATA_FRONTENDS_ONNX_ONNXIMPORT_H

#include "frontends/onnx/OnnxTensors.h"
#include "frontends/yaml/ModelSpec.h"

#include <map>

namespace strata::frontend {

/// What loadOnnxForward produces besides the graph.
struct OnnxForwardExtras {
  /// Each parameter's initializer.
  std::map<std::string, ConstTensor> paramValues;
  /// ONNX outputs folded to constants at import (absent from the graph's
  /// outputs), by name.
  std::map<std::string, ConstTensor> constOutputs;
};

/// Imports the ONNX model at `path` without a sidecar: every graph input
/// kept under its ONNX name (all dims static) unless `constInputs` gives
/// its value (then it is a constant, as torch exports have shape operands),
/// the ONNX outputs computed from the inputs as the graph's outputs (in
/// order), no loss. `graph.values` is filled; the graph is not checked for
/// a loss.
std::optional<ModelSpec>
loadOnnxForward(const std::string &path, std::vector<Diagnostic> &diags,
                OnnxForwardExtras &extras,
                const std::map<std::string, ConstTensor> &constInputs = {});

} // namespace strata::frontend

#endif // STRATA_FRONTENDS_ONNX_ONNXIMPORT_H
