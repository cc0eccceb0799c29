//===- BinaryMath.h - strata.binary's functions ---------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The elementwise functions of strata.binary (docs/dialect.md), one code per
// kind, shared by the CPU and CUDA kernels, and the broadcasting: x viewed
// as [lead, outer, mid, inner] op y [1, outer, 1, inner], y repeated over
// its leading 1s and one run of x's dims (a scalar, a [H] weight, a [S, 1]
// or [B, S, 1] norm).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_KERNELS_BINARYMATH_H
#define STRATA_RUNTIME_KERNELS_BINARYMATH_H

#include "runtime/kernels/HostDevice.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace strata::kernels {

/// The runtime code of each kind (the `kind` attribute of binary_fwd).
enum class BinaryKind : int64_t { Add = 0, Sub = 1, Mul = 2, Div = 3 };
inline constexpr int64_t kNumBinaryKinds = 4;

/// The IR name of each kind, indexed by its code.
inline constexpr std::string_view kBinaryKindNames[kNumBinaryKinds] = {
    "add", "sub", "mul", "div"};

/// The code of an IR kind name, or -1.
inline int64_t binaryKindCode(std::string_view name) {
  for (int64_t i = 0; i < kNumBinaryKinds; ++i)
    if (kBinaryKindNames[i] == name)
      return i;
  return -1;
}

/// {lead, outer, mid, inner} of x (rank xr) op y (rank yr <= xr, aligned
/// to the right): x viewed as [lead, outer, mid, inner] and y as [1, outer,
/// 1, inner]; y's leading 1s repeat over lead, and past them y's dims equal
/// x's except one contiguous run of 1s (mid). nullopt otherwise.
inline std::optional<std::array<int64_t, 4>>
binaryBroadcast(const int64_t *x, size_t xr, const int64_t *y, size_t yr) {
  if (yr > xr)
    return std::nullopt;
  size_t pad = xr - yr;
  auto yd = [&](size_t d) { return d < pad ? int64_t(1) : y[d - pad]; };
  size_t k = 0;
  while (k < xr && yd(k) == 1)
    ++k;
  // First and last dims past k where y repeats (y 1, x not).
  size_t first = xr, last = 0;
  for (size_t d = k; d < xr; ++d) {
    if (yd(d) == x[d])
      continue;
    if (yd(d) != 1)
      return std::nullopt;
    first = first == xr ? d : first;
    last = d;
  }
  std::array<int64_t, 4> v = {1, 1, 1, 1};
  for (size_t d = 0; d < xr; ++d) {
    bool inRun = first < xr && d >= first && d <= last;
    if (inRun && yd(d) != 1)
      return std::nullopt; // two separate runs
    v[d < k ? 0 : first == xr || d < first ? 1 : inRun ? 2 : 3] *= x[d];
  }
  return v;
}

/// One IEEE operation per element, so x / y is bit-identical to torch's.
STRATA_HOST_DEVICE inline float binaryValue(BinaryKind k, float x, float y) {
  switch (k) {
  case BinaryKind::Add:
    return x + y;
  case BinaryKind::Sub:
    return x - y;
  case BinaryKind::Mul:
    return x * y;
  case BinaryKind::Div:
    return x / y;
  }
  return x;
}

} // namespace strata::kernels

#endif // STRATA_RUNTIME_KERNELS_BINARYMATH_H
