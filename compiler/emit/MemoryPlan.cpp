//===- MemoryPlan.cpp - Static placement of buffers in one arena ----------===//

#include "compiler/emit/MemoryPlan.h"

#include <algorithm>
#include <numeric>

using namespace strata;

MemoryPlanResult strata::planMemory(const std::vector<MemoryRequest> &requests,
                                    uint64_t alignment) {
  MemoryPlanResult result;
  result.offsets.assign(requests.size(), 0);
  auto alignUp = [&](uint64_t v) {
    return (v + alignment - 1) / alignment * alignment;
  };

  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  // Large, long-lived buffers first: they are the hardest to fit later.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (requests[a].bytes != requests[b].bytes)
      return requests[a].bytes > requests[b].bytes;
    return requests[a].firstUse < requests[b].firstUse;
  });

  struct Placed {
    uint64_t begin, end;
    int64_t first, last;
  };
  std::vector<Placed> placed;
  for (size_t idx : order) {
    const MemoryRequest &r = requests[idx];
    result.unsharedBytes += alignUp(r.bytes);
    // Occupied byte ranges of live-overlapping buffers, sorted by start.
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (const Placed &p : placed)
      if (p.first <= r.lastUse && r.firstUse <= p.last)
        busy.push_back({p.begin, p.end});
    std::sort(busy.begin(), busy.end());
    uint64_t size = std::max<uint64_t>(alignUp(r.bytes), alignment);
    // Best fit: the smallest gap that holds the buffer, else the end.
    uint64_t cursor = 0, best = UINT64_MAX, bestGap = UINT64_MAX;
    for (const auto &[b, e] : busy) {
      if (b > cursor && b - cursor >= size && b - cursor < bestGap) {
        best = cursor;
        bestGap = b - cursor;
      }
      cursor = std::max(cursor, alignUp(e));
    }
    uint64_t offset = best != UINT64_MAX ? best : cursor;
    result.offsets[idx] = offset;
    placed.push_back({offset, offset + size, r.firstUse, r.lastUse});
    result.arenaBytes = std::max(result.arenaBytes, offset + size);
  }
  return result;
}
