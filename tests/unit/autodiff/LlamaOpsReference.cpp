//===- LlamaOpsReference.cpp - float64 semantics of the Llama ops ---------===//

#include "tests/unit/autodiff/LlamaOpsReference.h"

#include <cmath>

namespace strata::reference {

namespace {

/// [outer, n, inner] around `axis`.
void around(const std::vector<int64_t> &shape, int64_t axis, int64_t &outer,
            int64_t &n, int64_t &inner) {
  outer = inner = 1;
  n = shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d)
    inner *= shape[d];
}

} // namespace

Tensor rmsNorm(const Tensor &x, const Tensor &w, double eps) {
  int64_t n = x.shape.back(), rows = x.numElements() / n;
  Tensor y(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < n; ++i)
      ms += x.data[r * n + i] * x.data[r * n + i];
    double inv = 1.0 / std::sqrt(ms / double(n) + eps);
    for (int64_t i = 0; i < n; ++i)
      y.data[r * n + i] = x.data[r * n + i] * inv * w.data[i];
  }
  return y;
}

void rmsNormGrad(const Tensor &dy, const Tensor &x, const Tensor &w, double eps,
                 Tensor &dx, Tensor &dw) {
  // y_i = w_i x_i s with s = (m + eps)^(-1/2), m = mean(x^2), so
  // dy_i/dx_j = w_i (delta_ij s - x_i s^3 x_j / n).
  int64_t n = x.shape.back(), rows = x.numElements() / n;
  dx = Tensor(x.shape);
  dw = Tensor(w.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const double *xr = &x.data[r * n], *gr = &dy.data[r * n];
    double ms = 0, dot = 0;
    for (int64_t i = 0; i < n; ++i) {
      ms += xr[i] * xr[i];
      dot += gr[i] * w.data[i] * xr[i];
    }
    double s = 1.0 / std::sqrt(ms / double(n) + eps);
    for (int64_t j = 0; j < n; ++j) {
      dx.data[r * n + j] =
          gr[j] * w.data[j] * s - xr[j] * s * s * s * dot / double(n);
      dw.data[j] += gr[j] * xr[j] * s;
    }
  }
}

Tensor rotary(const Tensor &x, double theta, double sign) {
  int64_t d = x.shape.back(), seq = x.shape[x.shape.size() - 2];
  int64_t half = d / 2, rows = x.numElements() / d;
  Tensor y(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t p = r % seq;
    for (int64_t i = 0; i < half; ++i) {
      double angle = sign * double(p) / std::pow(theta, 2.0 * double(i) / d);
      double a = x.data[r * d + i], b = x.data[r * d + i + half];
      y.data[r * d + i] = a * std::cos(angle) - b * std::sin(angle);
      y.data[r * d + i + half] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
  return y;
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

double siluDerivative(double x) {
  double s = 1.0 / (1.0 + std::exp(-x));
  return s + x * s * (1.0 - s);
}

Tensor repeatInterleave(const Tensor &x, int64_t axis, int64_t repeats) {
  int64_t outer, n, inner;
  around(x.shape, axis, outer, n, inner);
  std::vector<int64_t> shape = x.shape;
  shape[axis] *= repeats;
  Tensor y(shape);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n * repeats; ++j)
      for (int64_t i = 0; i < inner; ++i)
        y.data[(o * n * repeats + j) * inner + i] =
            x.data[(o * n + j / repeats) * inner + i];
  return y;
}

Tensor repeatInterleaveGrad(const Tensor &dy, int64_t axis, int64_t repeats) {
  int64_t outer, big, inner;
  around(dy.shape, axis, outer, big, inner);
  std::vector<int64_t> shape = dy.shape;
  shape[axis] /= repeats;
  Tensor dx(shape);
  int64_t n = shape[axis];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < big; ++j)
      for (int64_t i = 0; i < inner; ++i)
        dx.data[(o * n + j / repeats) * inner + i] +=
            dy.data[(o * big + j) * inner + i];
  return dx;
}

} // namespace strata::reference
