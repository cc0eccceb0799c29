//===- OnnxTensors.cpp - Constant tensors of an ONNX graph ----------------===//

#include "frontends/onnx/OnnxTensors.h"

#include "onnx/onnx_pb.h"

#include <cstring>

namespace strata::frontend {

std::vector<int64_t> ConstTensor::ints() const {
  std::vector<int64_t> v;
  v.reserve(data.size());
  for (double d : data)
    v.push_back((int64_t)d);
  return v;
}

template <typename T>
static void fromRaw(const std::string &raw, std::vector<double> &out) {
  size_t n = raw.size() / sizeof(T);
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
    out[i] = (double)v;
  }
}

std::optional<std::string> decodeTensor(const onnx::TensorProto &t,
                                        ConstTensor &out) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return std::string("tensor '") + t.name() +
           "' keeps its data in an external file; re-export with the data "
           "inside the model (models under 2 GiB)";
  out.shape.assign(t.dims().begin(), t.dims().end());
  int64_t n = 1;
  for (int64_t d : out.shape) {
    if (d < 0)
      return std::string("tensor '") + t.name() + "' has a negative dim";
    n *= d;
  }
  bool raw = t.has_raw_data();
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
    out.isFloat = true;
    if (raw)
      fromRaw<float>(t.raw_data(), out.data);
    else
      out.data.assign(t.float_data().begin(), t.float_data().end());
    break;
  case onnx::TensorProto::DOUBLE:
    out.isFloat = true;
    if (raw)
      fromRaw<double>(t.raw_data(), out.data);
    else
      out.data.assign(t.double_data().begin(), t.double_data().end());
    break;
  case onnx::TensorProto::INT64:
    if (raw)
      fromRaw<int64_t>(t.raw_data(), out.data);
    else
      out.data.assign(t.int64_data().begin(), t.int64_data().end());
    break;
  case onnx::TensorProto::INT32:
    if (raw)
      fromRaw<int32_t>(t.raw_data(), out.data);
    else
      out.data.assign(t.int32_data().begin(), t.int32_data().end());
    break;
  case onnx::TensorProto::BOOL:
    if (raw)
      fromRaw<uint8_t>(t.raw_data(), out.data);
    else
      out.data.assign(t.int32_data().begin(), t.int32_data().end());
    break;
  default:
    return std::string("tensor '") + t.name() + "' has element type " +
           onnx::TensorProto::DataType_Name(
               (onnx::TensorProto::DataType)t.data_type()) +
           "; Strata folds float, double, int32, int64 and bool constants";
  }
  if ((int64_t)out.data.size() != n)
    return std::string("tensor '") + t.name() + "' holds " +
           std::to_string(out.data.size()) + " elements for its " +
           std::to_string(n) + "-element shape";
  return std::nullopt;
}

static std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = (int)shape.size() - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

std::optional<std::vector<int64_t>>
broadcastShape(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/// The flat index into `shape` (right-aligned to `outShape`, size-1 dims
/// broadcast) of the output element at `flat`.
static int64_t sourceIndex(int64_t flat, const std::vector<int64_t> &outShape,
                           const std::vector<int64_t> &shape) {
  std::vector<int64_t> outStrides = stridesOf(outShape),
                       strides = stridesOf(shape);
  size_t off = outShape.size() - shape.size();
  int64_t idx = 0;
  for (size_t i = 0; i < outShape.size(); ++i) {
    int64_t coord = (flat / outStrides[i]) % outShape[i];
    if (i >= off && shape[i - off] != 1)
      idx += coord * strides[i - off];
  }
  return idx;
}

std::optional<ConstTensor> broadcastBinary(const ConstTensor &a,
                                           const ConstTensor &b,
                                           double (*fn)(double, double),
                                           bool isFloat) {
  auto shape = broadcastShape(a.shape, b.shape);
  if (!shape)
    return std::nullopt;
  ConstTensor out;
  out.shape = *shape;
  out.isFloat = isFloat;
  int64_t n = 1;
  for (int64_t d : out.shape)
    n *= d;
  out.data.resize(n);
  for (int64_t i = 0; i < n; ++i)
    out.data[i] = fn(a.data[sourceIndex(i, out.shape, a.shape)],
                     b.data[sourceIndex(i, out.shape, b.shape)]);
  return out;
}

std::optional<ConstTensor> expandTo(const ConstTensor &a,
                                    const std::vector<int64_t> &shape) {
  ConstTensor ones;
  ones.shape = shape;
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  ones.data.assign(n, 0.0);
  return broadcastBinary(
      a, ones, [](double x, double) { return x; }, a.isFloat);
}

std::optional<ConstTensor>
gatherConst(const ConstTensor &data, const ConstTensor &indices, int64_t axis) {
  if (axis < 0 || axis >= (int64_t)data.shape.size())
    return std::nullopt;
  int64_t outer = 1, inner = 1, dim = data.shape[axis];
  for (int64_t i = 0; i < axis; ++i)
    outer *= data.shape[i];
  for (size_t i = axis + 1; i < data.shape.size(); ++i)
    inner *= data.shape[i];
  ConstTensor out;
  out.isFloat = data.isFloat;
  out.shape.assign(data.shape.begin(), data.shape.begin() + axis);
  out.shape.insert(out.shape.end(), indices.shape.begin(), indices.shape.end());
  out.shape.insert(out.shape.end(), data.shape.begin() + axis + 1,
                   data.shape.end());
  for (int64_t o = 0; o < outer; ++o)
    for (double di : indices.data) {
      int64_t idx = (int64_t)di;
      if (idx < 0)
        idx += dim;
      if (idx < 0 || idx >= dim)
        return std::nullopt;
      for (int64_t i = 0; i < inner; ++i)
        out.data.push_back(data.data[(o * dim + idx) * inner + i]);
    }
  return out;
}

std::optional<ConstTensor> concatConst(const std::vector<ConstTensor> &parts,
                                       int64_t axis) {
  if (parts.empty() || axis < 0 || axis >= (int64_t)parts[0].shape.size())
    return std::nullopt;
  ConstTensor out;
  out.shape = parts[0].shape;
  out.isFloat = parts[0].isFloat;
  out.shape[axis] = 0;
  for (const ConstTensor &p : parts) {
    if (p.shape.size() != out.shape.size())
      return std::nullopt;
    for (size_t i = 0; i < p.shape.size(); ++i)
      if ((int64_t)i != axis && p.shape[i] != parts[0].shape[i])
        return std::nullopt;
    out.shape[axis] += p.shape[axis];
  }
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= out.shape[i];
  for (int64_t o = 0; o < outer; ++o)
    for (const ConstTensor &p : parts) {
      int64_t chunk = outer ? (int64_t)p.data.size() / outer : 0;
      out.data.insert(out.data.end(), p.data.begin() + o * chunk,
                      p.data.begin() + (o + 1) * chunk);
    }
  return out;
}

} // namespace strata::frontend
