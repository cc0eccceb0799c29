//===- Random.h - Counter-based random numbers ----------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Every random value is a pure function of (seed, what, index), so it does
// not depend on the order values are drawn in, on how a tensor is sharded
// across ranks, or on where a run was resumed. docs/runtime.md spells the
// formulas out so that a reference implementation can reproduce them.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CORE_RANDOM_H
#define STRATA_RUNTIME_CORE_RANDOM_H

#include <cstdint>
#include <string>

namespace strata::rt {

/// The splitmix64 output function of state x (Steele et al.): x is first
/// advanced by the golden-ratio increment, then mixed.
uint64_t splitmix64(uint64_t x);

/// (bits >> 11) + 0.5 scaled by 2^-53: uniform in the open interval (0, 1).
double uniformOpen01(uint64_t bits);

/// Key of a parameter's init stream:
/// splitmix64(seed ^ 0x494E4954) ^ fnv1a64(name).
uint64_t initKey(uint64_t seed, const std::string &paramName);

/// Standard normal value of element `index` of the stream `key`, by
/// Box-Muller over the pair p = index / 2:
///   u1 = uniformOpen01(splitmix64(key + 2p)), u2 = ... (key + 2p + 1),
///   r = sqrt(-2 ln u1); even index: r cos(2 pi u2), odd: r sin(2 pi u2).
double standardNormal(uint64_t key, uint64_t index);

} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_RANDOM_H
