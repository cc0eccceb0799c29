//===- MemoryPlan.h - Static placement of buffers in one arena --*- C++ -*-===//
//
// The compiler knows every byte: each buffer gets an offset in a single arena
// before the program runs. Buffers whose lifetimes (intervals of instruction
// positions) overlap never share bytes; others may. Persistent buffers
// (parameters, gradients, optimizer state, inputs) live for the whole step.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_EMIT_MEMORYPLAN_H
#define STRATA_COMPILER_EMIT_MEMORYPLAN_H

#include <cstdint>
#include <vector>

namespace strata {

struct MemoryRequest {
  uint64_t bytes = 0;
  /// Inclusive interval of positions in which the buffer is live
  /// (firstUse <= lastUse; an inverted pair is read as [lastUse, firstUse]).
  int64_t firstUse = 0, lastUse = 0;
};

struct MemoryPlanResult {
  std::vector<uint64_t> offsets; ///< One per request.
  uint64_t arenaBytes = 0;
  /// Sum of all request sizes: what the arena would be without reuse.
  uint64_t unsharedBytes = 0;
  /// The most bytes (aligned sizes) live at one position: the least any
  /// placement needs. arenaBytes - peakLiveBytes is the packing slack.
  uint64_t peakLiveBytes = 0;
};

/// Greedy best-fit by decreasing size: each buffer takes the lowest aligned
/// offset that does not collide with an already placed buffer whose lifetime
/// overlaps its own. Deterministic for a given input; O(n log n) in the
/// number of requests times the number of gaps a placement has to consider
/// (MemoryPlan.cpp).
MemoryPlanResult planMemory(const std::vector<MemoryRequest> &requests,
                            uint64_t alignment);

} // namespace strata

#endif // STRATA_COMPILER_EMIT_MEMORYPLAN_H
