//===- OnnxTensors.h - Constant tensors of an ONNX graph --------*- C++ -*-===//
//
// The values an ONNX importer folds: initializers, Constant nodes and the
// shape arithmetic torch.onnx.export emits (Shape, Gather, Unsqueeze,
// Concat, ...). Elements are held as doubles (int64 shape values are exact
// below 2^53); `isFloat` says which ONNX element type family they came from.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_FRONTENDS_ONNX_ONNXTENSORS_H
#define STRATA_FRONTENDS_ONNX_ONNXTENSORS_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace onnx {
class TensorProto;
} // namespace onnx

namespace strata::frontend {

struct ConstTensor {
  std::vector<int64_t> shape;
  bool isFloat = false;
  std::vector<double> data;
  int64_t numElements() const { return (int64_t)data.size(); }
  /// The elements as integers (shape arithmetic).
  std::vector<int64_t> ints() const;
};

/// Decodes `t` (float, double, float16 excluded; int32/64, bool); returns an
/// error message for external data or other element types.
std::optional<std::string> decodeTensor(const onnx::TensorProto &t,
                                        ConstTensor &out);

/// Numpy-style broadcast of `a` and `b` through `fn`; nullopt if the shapes
/// do not broadcast.
std::optional<ConstTensor> broadcastBinary(const ConstTensor &a,
                                           const ConstTensor &b,
                                           double (*fn)(double, double),
                                           bool isFloat);

/// `a` broadcast to `shape` (ONNX Expand: the result shape is the broadcast
/// of both); nullopt if they do not broadcast.
std::optional<ConstTensor> expandTo(const ConstTensor &a,
                                    const std::vector<int64_t> &shape);

/// Numpy broadcasting of two shapes; nullopt if they do not broadcast.
std::optional<std::vector<int64_t>>
broadcastShape(const std::vector<int64_t> &a, const std::vector<int64_t> &b);

/// ONNX Gather along `axis` (already non-negative); indices may be negative.
std::optional<ConstTensor>
gatherConst(const ConstTensor &data, const ConstTensor &indices, int64_t axis);

/// ONNX Concat along `axis` (non-negative).
std::optional<ConstTensor> concatConst(const std::vector<ConstTensor> &parts,
                                       int64_t axis);

} // namespace strata::frontend

#endif // STRATA_FRONTENDS_ONNX_ONNXTENSORS_H
