//===- OnnxUnavailable.cpp - loadOnnxModel without libonnx ----------------===//
//
// Compiled instead of OnnxImport.cpp when CMake did not find libonnx-dev and
// protobuf: an ONNX model is refused with what to install.
//
//===----------------------------------------------------------------------===//

#include "frontends/yaml/ModelSpec.h"

namespace strata::frontend {

std::optional<ModelSpec> loadOnnxModel(const std::string &path,
                                       std::vector<Diagnostic> &diags,
                                       const LoadOptions &) {
  diags.push_back(Diagnostic{
      SourceLoc{path, 0, 0},
      "this strata was built without ONNX support; install libonnx-dev, "
      "libprotobuf-dev and protobuf-compiler (scripts/install-deps.sh) and "
      "reconfigure"});
  return std::nullopt;
}

std::optional<std::vector<std::pair<std::string, std::vector<float>>>>
loadOnnxWeights(const std::string &path, std::vector<Diagnostic> &diags) {
  loadOnnxModel(path, diags, {});
  return std::nullopt;
}

} // namespace strata::frontend
