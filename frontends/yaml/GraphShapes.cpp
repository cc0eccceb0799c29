//===- GraphShapes.cpp - Per-op arity, attributes and shape rules ---------===//
//
// Shape rules name operands as the op reference does (docs/model-spec.md),
// and say what was expected, e.g. for matmul:
//   contraction dims differ: a is [8,64] (K=64), b is [32,16] (K=32);
//   expected b's dim 0 to be 64
//
//===----------------------------------------------------------------------===//

#include "frontends/yaml/GraphShapes.h"

#include "frontends/yaml/YamlFields.h"
#include "runtime/kernels/BinaryMath.h"
#include "runtime/kernels/UnaryMath.h"

#include <algorithm>
#include <cmath>

namespace strata::frontend {

std::string formatShape(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string formatType(const TensorType &t) {
  return std::string(dtypeName(t.dtype)) + formatShape(t.shape);
}

namespace {

using Err = std::optional<std::string>;
using Shape = std::vector<int64_t>;

int64_t intAttr(const OpAttrs &a, const char *name) {
  return std::get<int64_t>(a.at(name));
}
double floatAttr(const OpAttrs &a, const char *name) {
  return std::get<double>(a.at(name));
}
bool boolAttr(const OpAttrs &a, const char *name) {
  return std::get<bool>(a.at(name));
}
const Shape &listAttr(const OpAttrs &a, const char *name) {
  return std::get<Shape>(a.at(name));
}

Err requireFloat(const TensorType &t, const char *operand) {
  if (isFloatDType(t.dtype))
    return std::nullopt;
  return std::string(operand) + " is " + formatType(t) +
         "; expected a floating-point tensor (float32, bfloat16 or float16)";
}

Err requireSameDType(const TensorType &a, const char *an, const TensorType &b,
                     const char *bn) {
  if (a.dtype == b.dtype)
    return std::nullopt;
  return std::string("dtypes differ: ") + an + " is " + formatType(a) + ", " +
         bn + " is " + formatType(b) + "; expected both " + dtypeName(a.dtype);
}

Err requireRankAtLeast(const TensorType &t, const char *operand, size_t rank,
                       const char *form) {
  if (t.shape.size() >= rank)
    return std::nullopt;
  return std::string(operand) + " is " + formatShape(t.shape) + " (rank " +
         std::to_string(t.shape.size()) +
         "); expected rank >= " + std::to_string(rank) + " " + form;
}

/// Normalises a possibly negative axis; false if out of range.
bool normaliseAxis(int64_t axis, size_t rank, int64_t &out) {
  int64_t r = (int64_t)rank;
  if (axis < -r || axis >= r)
    return false;
  out = axis < 0 ? axis + r : axis;
  return true;
}

/// The `axis` attribute normalised for x, or why it is out of range.
Err readAxis(const OpAttrs &attrs, const TensorType &x, int64_t &axis) {
  if (normaliseAxis(intAttr(attrs, "axis"), x.shape.size(), axis))
    return std::nullopt;
  return "axis " + std::to_string(intAttr(attrs, "axis")) +
         " is out of range for x " + formatShape(x.shape) +
         "; expected an axis in [" + std::to_string(-(int64_t)x.shape.size()) +
         ", " + std::to_string(x.shape.size()) + ")";
}

Err inferEmbedding(const std::vector<TensorType> &in, const OpAttrs &,
                   std::vector<TensorType> &out) {
  const TensorType &table = in[0], &ids = in[1];
  if (table.shape.size() != 2)
    return "table is " + formatShape(table.shape) +
           "; expected rank 2 [vocab, hidden]";
  if (Err e = requireFloat(table, "table"))
    return e;
  if (ids.dtype != DType::I32)
    return "ids is " + formatType(ids) + "; expected int32 token ids";
  Shape s = ids.shape;
  s.push_back(table.shape[1]);
  out = {TensorType{s, table.dtype}};
  return std::nullopt;
}

Err inferMatmul(const std::vector<TensorType> &in, const OpAttrs &attrs,
                std::vector<TensorType> &out) {
  const TensorType &a = in[0], &b = in[1];
  if (Err e = requireFloat(a, "a"))
    return e;
  if (Err e = requireSameDType(a, "a", b, "b"))
    return e;
  if (Err e = requireRankAtLeast(a, "a", 2, "[..., M, K]"))
    return e;
  if (Err e = requireRankAtLeast(b, "b", 2, "[..., K, N]"))
    return e;
  bool ta = boolAttr(attrs, "transpose_a"), tb = boolAttr(attrs, "transpose_b");
  size_t ra = a.shape.size(), rb = b.shape.size();
  int64_t m = a.shape[ra - (ta ? 1 : 2)], ka = a.shape[ra - (ta ? 2 : 1)];
  size_t kbDim = rb - (tb ? 1 : 2), nDim = rb - (tb ? 2 : 1);
  int64_t kb = b.shape[kbDim], n = b.shape[nDim];
  if (ka != kb)
    return "contraction dims differ: a is " + formatShape(a.shape) +
           " (K=" + std::to_string(ka) + "), b is " + formatShape(b.shape) +
           " (K=" + std::to_string(kb) + "); expected b's dim " +
           std::to_string(kbDim) + " to be " + std::to_string(ka);
  Shape batch(a.shape.begin(), a.shape.end() - 2);
  if (rb != 2) {
    Shape bBatch(b.shape.begin(), b.shape.end() - 2);
    if (bBatch != batch)
      return "batch dims differ: a is " + formatShape(a.shape) + ", b is " +
             formatShape(b.shape) +
             "; expected b to be rank 2 [K, N] or "
             "to have a's batch dims " +
             formatShape(batch);
  }
  Shape s = batch;
  s.push_back(m);
  s.push_back(n);
  out = {TensorType{s, a.dtype}};
  return std::nullopt;
}

Err inferBiasAdd(const std::vector<TensorType> &in, const OpAttrs &,
                 std::vector<TensorType> &out) {
  const TensorType &x = in[0], &b = in[1];
  if (Err e = requireFloat(x, "x"))
    return e;
  if (Err e = requireSameDType(x, "x", b, "b"))
    return e;
  if (Err e = requireRankAtLeast(x, "x", 1, "[..., N]"))
    return e;
  if (b.shape.size() != 1 || b.shape[0] != x.shape.back())
    return "b is " + formatShape(b.shape) + " but x is " +
           formatShape(x.shape) + "; expected b to be [" +
           std::to_string(x.shape.back()) + "] (x's last dim)";
  out = {x};
  return std::nullopt;
}

Err inferElementwiseBinary(const std::vector<TensorType> &in, const OpAttrs &,
                           std::vector<TensorType> &out) {
  const TensorType &a = in[0], &b = in[1];
  if (Err e = requireFloat(a, "a"))
    return e;
  if (Err e = requireSameDType(a, "a", b, "b"))
    return e;
  if (a.shape != b.shape)
    return "shapes differ: a is " + formatShape(a.shape) + ", b is " +
           formatShape(b.shape) +
           "; expected equal shapes (there is no implicit broadcasting)";
  out = {a};
  return std::nullopt;
}

Err inferUnaryFloat(const std::vector<TensorType> &in, const OpAttrs &,
                    std::vector<TensorType> &out) {
  if (Err e = requireFloat(in[0], "x"))
    return e;
  out = {in[0]};
  return std::nullopt;
}

/// unary: a float x and a kind the kernels know.
Err inferUnaryKind(const std::vector<TensorType> &in, const OpAttrs &attrs,
                   std::vector<TensorType> &out) {
  const std::string &kind = std::get<std::string>(attrs.at("kind"));
  if (kernels::unaryKindCode(kind) < 0) {
    std::string names;
    for (std::string_view n : kernels::kUnaryKindNames)
      names += (names.empty() ? "" : ", ") + std::string(n);
    return "kind '" + kind + "' is not a unary function; expected one of " +
           names;
  }
  return inferUnaryFloat(in, attrs, out);
}

/// binary: float x and y, y broadcast over one run of x's dims, and a kind
/// the kernels know.
Err inferBinaryKind(const std::vector<TensorType> &in, const OpAttrs &attrs,
                    std::vector<TensorType> &out) {
  const std::string &kind = std::get<std::string>(attrs.at("kind"));
  if (kernels::binaryKindCode(kind) < 0) {
    std::string names;
    for (std::string_view n : kernels::kBinaryKindNames)
      names += (names.empty() ? "" : ", ") + std::string(n);
    return "kind '" + kind + "' is not a binary function; expected one of " +
           names;
  }
  const TensorType &x = in[0], &y = in[1];
  if (Err e = requireFloat(x, "x"))
    return e;
  if (Err e = requireSameDType(x, "x", y, "y"))
    return e;
  if (!kernels::binaryBroadcast(x.shape.data(), x.shape.size(), y.shape.data(),
                                y.shape.size()))
    return "y is " + formatShape(y.shape) + " but x is " +
           formatShape(x.shape) +
           "; expected y (aligned to the right), past its leading 1s, to have "
           "x's dims but for one run of 1s";
  out = {x};
  return std::nullopt;
}

/// constant: a float32 scalar.
Err inferConstant(const std::vector<TensorType> &, const OpAttrs &,
                  std::vector<TensorType> &out) {
  out = {TensorType{{}, DType::F32}};
  return std::nullopt;
}

/// layer_norm and rms_norm: x [..., N], then vectors [N] (`names`), and a
/// positive epsilon.
Err inferNorm(const std::vector<TensorType> &in, const OpAttrs &attrs,
              std::vector<TensorType> &out,
              std::initializer_list<const char *> names) {
  const TensorType &x = in[0];
  if (Err e = requireFloat(x, "x"))
    return e;
  if (Err e = requireRankAtLeast(x, "x", 1, "[..., N]"))
    return e;
  size_t i = 1;
  for (const char *name : names) {
    const TensorType &v = in[i++];
    if (Err e = requireSameDType(x, "x", v, name))
      return e;
    if (v.shape != Shape{x.shape.back()})
      return std::string(name) + " is " + formatShape(v.shape) + " but x is " +
             formatShape(x.shape) + "; expected [" +
             std::to_string(x.shape.back()) + "] (x's last dim)";
  }
  double eps = floatAttr(attrs, "epsilon");
  if (!(eps > 0) || !std::isfinite(eps))
    return "epsilon is " + std::to_string(eps) + "; expected a positive number";
  out = {x};
  return std::nullopt;
}

Err inferLayerNorm(const std::vector<TensorType> &in, const OpAttrs &attrs,
                   std::vector<TensorType> &out) {
  return inferNorm(in, attrs, out, {"gamma", "beta"});
}

Err inferSoftmax(const std::vector<TensorType> &in, const OpAttrs &attrs,
                 std::vector<TensorType> &out) {
  const TensorType &x = in[0];
  if (Err e = requireFloat(x, "x"))
    return e;
  if (Err e = requireRankAtLeast(x, "x", 1, "[..., N]"))
    return e;
  if (boolAttr(attrs, "causal")) {
    size_t r = x.shape.size();
    if (r < 2 || x.shape[r - 1] != x.shape[r - 2])
      return "x is " + formatShape(x.shape) +
             "; a causal softmax expects square trailing dims [..., S, S]";
  }
  if (!std::isfinite(floatAttr(attrs, "scale")))
    return "scale is not finite; expected a finite number";
  out = {x};
  return std::nullopt;
}

Err inferScale(const std::vector<TensorType> &in, const OpAttrs &attrs,
               std::vector<TensorType> &out) {
  if (Err e = requireFloat(in[0], "x"))
    return e;
  if (!std::isfinite(floatAttr(attrs, "factor")))
    return "factor is not finite; expected a finite number";
  out = {in[0]};
  return std::nullopt;
}

Err inferReshape(const std::vector<TensorType> &in, const OpAttrs &attrs,
                 std::vector<TensorType> &out) {
  const TensorType &x = in[0];
  Shape target = listAttr(attrs, "shape");
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (inferred >= 0)
        return "shape " + formatShape(target) +
               " has more than one -1; expected at most one inferred dim";
      inferred = (int)i;
      continue;
    }
    if (target[i] < 1)
      return "shape " + formatShape(target) + " has dim " +
             std::to_string(target[i]) + "; expected positive dims (or one -1)";
    std::optional<int64_t> p = checkedMul(known, target[i]);
    if (!p)
      return "shape " + formatShape(target) +
             " has more than 2^62 elements; expected " +
             std::to_string(numElements(x.shape)) + " elements like x";
    known = *p;
  }
  int64_t total = numElements(x.shape);
  if (inferred >= 0) {
    if (total % known != 0)
      return "x is " + formatShape(x.shape) + " (" + std::to_string(total) +
             " elements), which cannot be reshaped to " + formatShape(target) +
             "; expected the known dims' product to divide " +
             std::to_string(total);
    target[inferred] = total / known;
  } else if (known != total) {
    return "x is " + formatShape(x.shape) + " (" + std::to_string(total) +
           " elements) but shape " + formatShape(target) + " has " +
           std::to_string(known) + "; expected the same number of elements";
  }
  out = {TensorType{target, x.dtype}};
  return std::nullopt;
}

Err inferTranspose(const std::vector<TensorType> &in, const OpAttrs &attrs,
                   std::vector<TensorType> &out) {
  const TensorType &x = in[0];
  const Shape &perm = listAttr(attrs, "permutation");
  std::vector<bool> seen(x.shape.size(), false);
  bool ok = perm.size() == x.shape.size();
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    ok = perm[i] >= 0 && perm[i] < (int64_t)perm.size() && !seen[perm[i]];
    if (ok)
      seen[perm[i]] = true;
  }
  if (!ok)
    return "permutation " + formatShape(perm) + " does not fit x " +
           formatShape(x.shape) + "; expected a permutation of 0.." +
           std::to_string((int64_t)x.shape.size() - 1);
  Shape s(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    s[i] = x.shape[perm[i]];
  out = {TensorType{s, x.dtype}};
  return std::nullopt;
}

Err inferSplit(const std::vector<TensorType> &in, const OpAttrs &attrs,
               std::vector<TensorType> &out) {
  const TensorType &x = in[0];
  int64_t axis;
  if (Err e = readAxis(attrs, x, axis))
    return e;
  int64_t num = intAttr(attrs, "num");
  if (num < 1 || x.shape[axis] % num != 0)
    return "x is " + formatShape(x.shape) + ", whose dim " +
           std::to_string(axis) + " (" + std::to_string(x.shape[axis]) +
           ") cannot be split into " + std::to_string(num) +
           " equal parts; expected num to divide it";
  TensorType part = x;
  part.shape[axis] /= num;
  out.assign(num, part);
  return std::nullopt;
}

Err inferConcat(const std::vector<TensorType> &in, const OpAttrs &attrs,
                std::vector<TensorType> &out) {
  const TensorType &first = in[0];
  int64_t axis;
  if (!normaliseAxis(intAttr(attrs, "axis"), first.shape.size(), axis))
    return "axis " + std::to_string(intAttr(attrs, "axis")) +
           " is out of range for " + formatShape(first.shape) +
           "; expected an axis in [" +
           std::to_string(-(int64_t)first.shape.size()) + ", " +
           std::to_string(first.shape.size()) + ")";
  TensorType result = first;
  for (size_t i = 1; i < in.size(); ++i) {
    const TensorType &t = in[i];
    bool compatible =
        t.dtype == first.dtype && t.shape.size() == first.shape.size();
    for (size_t d = 0; compatible && d < t.shape.size(); ++d)
      compatible = d == (size_t)axis || t.shape[d] == first.shape[d];
    if (!compatible)
      return "input " + std::to_string(i) + " is " + formatType(t) +
             " but input 0 is " + formatType(first) +
             "; expected the same dtype and dims except dim " +
             std::to_string(axis);
    std::optional<int64_t> sum = checkedAdd(result.shape[axis], t.shape[axis]);
    if (!sum)
      return "the result would have more than 2^62 elements";
    result.shape[axis] = *sum;
  }
  out = {result};
  return std::nullopt;
}

Err inferCrossEntropy(const std::vector<TensorType> &in, const OpAttrs &,
                      std::vector<TensorType> &out) {
  const TensorType &logits = in[0], &targets = in[1];
  if (Err e = requireFloat(logits, "logits"))
    return e;
  if (Err e = requireRankAtLeast(logits, "logits", 1, "[..., C]"))
    return e;
  Shape expected(logits.shape.begin(), logits.shape.end() - 1);
  if (targets.dtype != DType::I32 || targets.shape != expected)
    return "targets is " + formatType(targets) + " but logits is " +
           formatShape(logits.shape) + "; expected targets int32" +
           formatShape(expected) + " (logits without the class dim)";
  out = {TensorType{{}, DType::F32}};
  return std::nullopt;
}

Err inferRmsNorm(const std::vector<TensorType> &in, const OpAttrs &attrs,
                 std::vector<TensorType> &out) {
  return inferNorm(in, attrs, out, {"weight"});
}

Err inferRotary(const std::vector<TensorType> &in, const OpAttrs &attrs,
                std::vector<TensorType> &out) {
  const TensorType &x = in[0];
  if (Err e = requireFloat(x, "x"))
    return e;
  if (Err e = requireRankAtLeast(x, "x", 2, "[..., S, D]"))
    return e;
  if (x.shape.back() % 2 != 0)
    return "x is " + formatShape(x.shape) + ", whose last dim (" +
           std::to_string(x.shape.back()) +
           ") is odd; expected an even head dim (features rotate in pairs)";
  double theta = floatAttr(attrs, "theta");
  if (!(theta > 0) || !std::isfinite(theta))
    return "theta is " + std::to_string(theta) + "; expected a positive number";
  out = {x};
  return std::nullopt;
}

Err inferRepeatInterleave(const std::vector<TensorType> &in,
                          const OpAttrs &attrs, std::vector<TensorType> &out) {
  const TensorType &x = in[0];
  int64_t axis;
  if (Err e = readAxis(attrs, x, axis))
    return e;
  int64_t repeats = intAttr(attrs, "repeats");
  if (repeats < 1)
    return "repeats is " + std::to_string(repeats) +
           "; expected a positive integer";
  TensorType result = x;
  std::optional<int64_t> size = checkedMul(x.shape[axis], repeats);
  std::optional<int64_t> total =
      size ? checkedMul(numElements(x.shape), repeats) : std::nullopt;
  if (!total)
    return "the result would have more than 2^62 elements";
  result.shape[axis] = *size;
  out = {result};
  return std::nullopt;
}

/// reduce_mean: a float x, the axis kept with size 1.
Err inferReduceMean(const std::vector<TensorType> &in, const OpAttrs &attrs,
                    std::vector<TensorType> &out) {
  const TensorType &x = in[0];
  if (Err e = requireFloat(x, "x"))
    return e;
  int64_t axis;
  if (Err e = readAxis(attrs, x, axis))
    return e;
  TensorType result = x;
  result.shape[axis] = 1;
  out = {result};
  return std::nullopt;
}

Err inferCausalAttention(const std::vector<TensorType> &in,
                         const OpAttrs &attrs, std::vector<TensorType> &out) {
  const TensorType &q = in[0], &k = in[1], &v = in[2];
  if (Err e = requireFloat(q, "q"))
    return e;
  if (Err e = requireSameDType(q, "q", k, "k"))
    return e;
  if (Err e = requireSameDType(q, "q", v, "v"))
    return e;
  if (q.shape.size() != 4 || k.shape.size() != 4 || k.shape != v.shape ||
      q.shape[0] != k.shape[0] || q.shape[2] != k.shape[2] ||
      q.shape[3] != k.shape[3] || k.shape[1] < 1 ||
      q.shape[1] % k.shape[1] != 0)
    return "q is " + formatShape(q.shape) + ", k " + formatShape(k.shape) +
           ", v " + formatShape(v.shape) +
           "; expected q [B, heads, S, D] and k, v [B, kv_heads, S, D] with "
           "kv_heads dividing heads";
  double scale = floatAttr(attrs, "scale");
  if (!(scale > 0) || !std::isfinite(scale))
    return "scale is " + std::to_string(scale) +
           "; expected a positive number (usually 1/sqrt(head_dim))";
  out = {q, TensorType{{q.shape[0], q.shape[1], q.shape[2]}, DType::F32}};
  return std::nullopt;
}

std::vector<OpRule> buildRules() {
  AttrValue f = false;
  return {
      {"embedding",
       {"table", "ids"},
       false,
       1,
       {},
       inferEmbedding,
       "table[V,H], ids[...] int32 -> [..., H]: rows of table"},
      {"matmul",
       {"a", "b"},
       false,
       1,
       {{"transpose_a", AttrKind::Bool, f}, {"transpose_b", AttrKind::Bool, f}},
       inferMatmul,
       "a[..., M, K] x b[..., K, N] (or b[K, N]) -> [..., M, N]"},
      {"bias_add",
       {"x", "b"},
       false,
       1,
       {},
       inferBiasAdd,
       "x[..., N] + b[N] -> [..., N]"},
      {"add",
       {"a", "b"},
       false,
       1,
       {},
       inferElementwiseBinary,
       "a + b, same shapes"},
      {"mul",
       {"a", "b"},
       false,
       1,
       {},
       inferElementwiseBinary,
       "a * b, same shapes"},
      {"scale",
       {"x"},
       false,
       1,
       {{"factor", AttrKind::Float, std::nullopt}},
       inferScale,
       "factor * x"},
      {"gelu",
       {"x"},
       false,
       1,
       {},
       inferUnaryFloat,
       "GELU, tanh approximation"},
      {"relu", {"x"}, false, 1, {}, inferUnaryFloat, "max(x, 0)"},
      {"layer_norm",
       {"x", "gamma", "beta"},
       false,
       1,
       {{"epsilon", AttrKind::Float, AttrValue(1e-5)}},
       inferLayerNorm,
       "normalise x's last dim N; gamma[N], beta[N]"},
      {"softmax",
       {"x"},
       false,
       1,
       {{"causal", AttrKind::Bool, f},
        {"scale", AttrKind::Float, AttrValue(1.0)}},
       inferSoftmax,
       "softmax(scale * x) over the last dim; causal masks j > i"},
      {"reshape",
       {"x"},
       false,
       1,
       {{"shape", AttrKind::Shape, std::nullopt}},
       inferReshape,
       "same elements, new shape (one dim may be -1)"},
      {"transpose",
       {"x"},
       false,
       1,
       {{"permutation", AttrKind::IntList, std::nullopt}},
       inferTranspose,
       "out dim i = x dim permutation[i]"},
      {"split",
       {"x"},
       false,
       -1,
       {{"axis", AttrKind::Int, std::nullopt},
        {"num", AttrKind::Int, std::nullopt}},
       inferSplit,
       "num equal parts along axis -> num outputs"},
      {"concat",
       {"xs"},
       true,
       1,
       {{"axis", AttrKind::Int, std::nullopt}},
       inferConcat,
       "join one or more tensors along axis"},
      {"cross_entropy",
       {"logits", "targets"},
       false,
       1,
       {},
       inferCrossEntropy,
       "logits[..., C], targets[...] int32 -> float32 scalar mean loss"},
      // Llama family.
      {"rms_norm",
       {"x", "weight"},
       false,
       1,
       {{"epsilon", AttrKind::Float, AttrValue(1e-5)}},
       inferRmsNorm,
       "x * rsqrt(mean(x^2) + epsilon) * weight over the last dim"},
      {"rotary_embedding",
       {"x"},
       false,
       1,
       {{"theta", AttrKind::Float, AttrValue(10000.0)}},
       inferRotary,
       "rotary position embedding of x[..., S, D] (rotate_half convention)"},
      {"silu", {"x"}, false, 1, {}, inferUnaryFloat, "x * sigmoid(x)"},
      {"unary",
       {"x"},
       false,
       1,
       {{"kind", AttrKind::String, std::nullopt}},
       inferUnaryKind,
       "f(x) elementwise, kind: sqrt, reciprocal, erf, tanh, sigmoid, exp, "
       "neg"},
      {"binary",
       {"x", "y"},
       false,
       1,
       {{"kind", AttrKind::String, std::nullopt}},
       inferBinaryKind,
       "x op y elementwise, kind: add, sub, mul, div; y repeated over its "
       "leading 1s and one run of 1s past them"},
      {"constant",
       {},
       false,
       1,
       {{"value", AttrKind::Float, std::nullopt}},
       inferConstant,
       "a float32 scalar `value` (a binary op's rhs)"},
      {"reduce_mean",
       {"x"},
       false,
       1,
       {{"axis", AttrKind::Int, std::nullopt}},
       inferReduceMean,
       "mean over dim axis, kept with size 1"},
      {"silu_mul",
       {"gate", "up"},
       false,
       1,
       {},
       inferElementwiseBinary,
       "silu(gate) * up, same shapes (SwiGLU)"},
      {"repeat_interleave",
       {"x"},
       false,
       1,
       {{"axis", AttrKind::Int, std::nullopt},
        {"repeats", AttrKind::Int, std::nullopt}},
       inferRepeatInterleave,
       "each entry along axis repeated `repeats` times in place"},
      {"causal_attention",
       {"q", "k", "v"},
       false,
       2,
       {{"scale", AttrKind::Float, std::nullopt}},
       inferCausalAttention,
       "softmax(scale * q k^T, causal) v, fused; outputs the context and "
       "the per-row log-sum-exp [B, heads, S] (float32)"},
  };
}

bool attrHasKind(const AttrValue &v, AttrKind kind) {
  switch (kind) {
  case AttrKind::Bool:
    return std::holds_alternative<bool>(v);
  case AttrKind::Int:
    return std::holds_alternative<int64_t>(v);
  case AttrKind::Float:
    return std::holds_alternative<double>(v);
  case AttrKind::IntList:
  case AttrKind::Shape:
    return std::holds_alternative<std::vector<int64_t>>(v);
  case AttrKind::String:
    return std::holds_alternative<std::string>(v);
  }
  return false;
}

const char *attrKindName(AttrKind kind) {
  switch (kind) {
  case AttrKind::Bool:
    return "true or false";
  case AttrKind::Int:
    return "an integer";
  case AttrKind::Float:
    return "a number";
  case AttrKind::IntList:
    return "a list of integers";
  case AttrKind::Shape:
    return "a list of dims";
  case AttrKind::String:
    return "a name";
  }
  return "a value";
}

} // namespace

const std::vector<OpRule> &opRules() {
  static const std::vector<OpRule> rules = buildRules();
  return rules;
}

const OpRule *findOpRule(const std::string &name) {
  for (const OpRule &rule : opRules())
    if (rule.name == name)
      return &rule;
  return nullptr;
}

std::vector<std::string> opNames() {
  std::vector<std::string> names;
  for (const OpRule &rule : opRules())
    names.push_back(rule.name);
  return names;
}

std::string opSignature(const OpRule &rule) {
  std::string s = rule.name + "(";
  for (size_t i = 0; i < rule.operands.size(); ++i)
    s += (i ? ", " : "") + rule.operands[i];
  return s + (rule.variadic ? "...)" : ")");
}

int expectedOutputs(const OpRule &rule, const OpAttrs &attrs) {
  if (rule.numOutputs >= 0)
    return rule.numOutputs;
  auto it = attrs.find("num");
  if (it == attrs.end() || !std::holds_alternative<int64_t>(it->second))
    return -1;
  return (int)std::clamp<int64_t>(std::get<int64_t>(it->second), -1, 1 << 20);
}

std::optional<std::string> completeOpAttrs(const OpRule &rule, OpAttrs &attrs) {
  std::vector<std::string> known;
  for (const AttrSpec &spec : rule.attrs)
    known.push_back(spec.name);
  for (const auto &[name, value] : attrs) {
    if (std::find(known.begin(), known.end(), name) != known.end())
      continue;
    std::string msg = "unknown attribute '" + name + "' for " + rule.name;
    std::string hint = didYouMean(name, known);
    return msg + (hint.empty() ? "; " : hint + " ") +
           (known.empty() ? std::string("it takes no attributes")
                          : "expected " + joinChoices(known));
  }
  for (const AttrSpec &spec : rule.attrs) {
    auto it = attrs.find(spec.name);
    if (it == attrs.end()) {
      if (!spec.defaultValue)
        return rule.name + " needs the attribute '" + spec.name + "' (" +
               attrKindName(spec.kind) + ")";
      attrs[spec.name] = *spec.defaultValue;
      continue;
    }
    if (!attrHasKind(it->second, spec.kind))
      return "attribute '" + spec.name + "' of " + rule.name +
             " has the wrong type; expected " + attrKindName(spec.kind);
  }
  return std::nullopt;
}

} // namespace strata::frontend
