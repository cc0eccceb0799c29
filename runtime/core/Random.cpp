//===- Random.cpp - Counter-based random numbers --------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Random.h"

#include "runtime/format/Program.h"

#include <cmath>

namespace strata::rt {

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double uniformOpen01(uint64_t bits) {
  return (double(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

uint64_t initKey(uint64_t seed, const std::string &paramName) {
  return splitmix64(seed ^ 0x494E4954ULL) ^
         fnv1a64(reinterpret_cast<const uint8_t *>(paramName.data()),
                 paramName.size());
}

double standardNormal(uint64_t key, uint64_t index) {
  uint64_t pair = index >> 1;
  double u1 = uniformOpen01(splitmix64(key + 2 * pair));
  double u2 = uniformOpen01(splitmix64(key + 2 * pair + 1));
  double r = std::sqrt(-2.0 * std::log(u1));
  double angle = 2.0 * M_PI * u2;
  return (index & 1) ? r * std::sin(angle) : r * std::cos(angle);
}

} // namespace strata::rt
