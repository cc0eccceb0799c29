//===- Bf16Math.h - bfloat16 <-> float32 conversion, per element ----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// bfloat16 is stored as the upper 16 bits of an IEEE float32 (uint16_t in
// buffers). Widening is exact; narrowing rounds to nearest, ties to even,
// and keeps NaNs NaN (a quiet bit is forced so that rounding cannot turn a
// NaN payload into infinity). The same rule as PyTorch's and oneDNN's.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_KERNELS_BF16MATH_H
#define STRATA_RUNTIME_KERNELS_BF16MATH_H

#include "runtime/kernels/HostDevice.h"

#include <cstdint>
#include <cstring>

namespace strata::kernels {

using bf16_t = uint16_t;

STRATA_HOST_DEVICE inline float bf16ToFloat(bf16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

/// Branch-free (a select), so that loops over it vectorise: the CPU
/// kernels that read and write bf16 buffers convert in registers.
STRATA_HOST_DEVICE inline bf16_t floatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  uint32_t rounded = (bits + rounding) >> 16;
  uint32_t quietNaN = (bits >> 16) | 0x40u; // NaN: keep it NaN, quiet.
  return bf16_t((bits & 0x7fffffffu) > 0x7f800000u ? quietNaN : rounded);
}

} // namespace strata::kernels

#endif // STRATA_RUNTIME_KERNELS_BF16MATH_H
