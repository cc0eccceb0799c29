//===- MemoryPlan.cpp - Static placement of buffers in one arena ----------===//
//
// The placement is a greedy best fit by decreasing size: each buffer goes
// into the smallest gap left by the already placed buffers whose lifetimes
// overlap its own, else on top of them. What costs time is finding those
// buffers: a 1,000-layer model has tens of thousands of buffers alive at once,
// and listing them for every placement is quadratic.
//
// So the placed buffers are kept in a segment tree over (compressed) time
// positions, and each node holds *unions of byte ranges* rather than lists of
// buffers: `own` is the union of the buffers whose lifetime covers the node
// (stored there, as in an interval segment tree), `below` the union of every
// buffer stored in the node's subtree. The byte ranges busy during [first,
// last] are then the union of `below` over the O(log T) nodes that tile the
// interval and of `own` over their O(log T) ancestors. Buffers packed side by
// side collapse into one range, so the work per placement follows the number
// of gaps, not the number of live buffers. The result is the same placement
// as listing every overlapping buffer (tests/unit/emit checks it against that
// reference on random inputs).
//
//===----------------------------------------------------------------------===//

#include "compiler/emit/MemoryPlan.h"

#include <algorithm>
#include <map>
#include <numeric>

using namespace strata;

namespace {

/// A union of disjoint, non-touching half-open byte ranges [begin, end).
class RangeUnion {
public:
  void add(uint64_t begin, uint64_t end) {
    // The first range that ends at or after `begin` (touching ranges merge).
    auto it = ranges.upper_bound(begin);
    if (it != ranges.begin()) {
      auto prev = std::prev(it);
      if (prev->second >= begin)
        it = prev;
    }
    while (it != ranges.end() && it->first <= end) {
      begin = std::min(begin, it->first);
      end = std::max(end, it->second);
      it = ranges.erase(it);
    }
    ranges.emplace_hint(it, begin, end);
  }
  void appendTo(std::vector<std::pair<uint64_t, uint64_t>> &out) const {
    out.insert(out.end(), ranges.begin(), ranges.end());
  }
  bool empty() const { return ranges.empty(); }

private:
  std::map<uint64_t, uint64_t> ranges;
};

/// Byte ranges of placed buffers by lifetime, over time slots [0, slots).
class BusyRanges {
public:
  explicit BusyRanges(size_t slots) : slots(slots), nodes(4 * slots) {}

  /// Marks [begin, end) busy during slots [first, last].
  void add(size_t first, size_t last, uint64_t begin, uint64_t end) {
    add(1, 0, slots - 1, first, last, begin, end);
  }

  /// Every busy range overlapping slots [first, last], sorted, possibly
  /// overlapping one another.
  void collect(size_t first, size_t last,
               std::vector<std::pair<uint64_t, uint64_t>> &out) const {
    out.clear();
    collect(1, 0, slots - 1, first, last, out);
    std::sort(out.begin(), out.end());
  }

private:
  struct Node {
    RangeUnion own, below;
  };

  void add(size_t n, size_t lo, size_t hi, size_t first, size_t last,
           uint64_t begin, uint64_t end) {
    nodes[n].below.add(begin, end);
    if (first <= lo && hi <= last) {
      nodes[n].own.add(begin, end);
      return;
    }
    size_t mid = lo + (hi - lo) / 2;
    if (first <= mid)
      add(2 * n, lo, mid, first, last, begin, end);
    if (last > mid)
      add(2 * n + 1, mid + 1, hi, first, last, begin, end);
  }

  void collect(size_t n, size_t lo, size_t hi, size_t first, size_t last,
               std::vector<std::pair<uint64_t, uint64_t>> &out) const {
    if (first <= lo && hi <= last) {
      nodes[n].below.appendTo(out);
      return;
    }
    nodes[n].own.appendTo(out);
    size_t mid = lo + (hi - lo) / 2;
    if (first <= mid && !nodes[2 * n].below.empty())
      collect(2 * n, lo, mid, first, last, out);
    if (last > mid && !nodes[2 * n + 1].below.empty())
      collect(2 * n + 1, mid + 1, hi, first, last, out);
  }

  size_t slots;
  std::vector<Node> nodes;
};

} // namespace

MemoryPlanResult strata::planMemory(const std::vector<MemoryRequest> &requests,
                                    uint64_t alignment) {
  MemoryPlanResult result;
  result.offsets.assign(requests.size(), 0);
  if (requests.empty())
    return result;
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

  // Lifetimes overlap exactly when their compressed slot intervals do.
  std::vector<int64_t> times;
  times.reserve(2 * requests.size());
  for (const MemoryRequest &r : requests) {
    times.push_back(r.firstUse);
    times.push_back(r.lastUse);
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  auto slot = [&](int64_t t) {
    return size_t(std::lower_bound(times.begin(), times.end(), t) -
                  times.begin());
  };

  BusyRanges placed(times.size());
  std::vector<std::pair<uint64_t, uint64_t>> busy;
  for (size_t idx : order) {
    const MemoryRequest &r = requests[idx];
    result.unsharedBytes += alignUp(r.bytes);
    // An inverted interval is taken as the positions between its ends.
    size_t first = slot(std::min(r.firstUse, r.lastUse)),
           last = slot(std::max(r.firstUse, r.lastUse));
    uint64_t size = std::max<uint64_t>(alignUp(r.bytes), alignment);
    // Occupied byte ranges of live-overlapping buffers, sorted by start.
    placed.collect(first, last, busy);
    // Best fit: the smallest gap that holds the buffer, else the end.
    uint64_t cursor = 0, best = UINT64_MAX, bestGap = UINT64_MAX;
    for (const auto &[b, e] : busy) {
      if (b > cursor && b - cursor >= size && b - cursor < bestGap) {
        best = cursor;
        bestGap = b - cursor;
      }
      cursor = std::max(cursor, e);
    }
    uint64_t offset = best != UINT64_MAX ? best : cursor;
    placed.add(first, last, offset, offset + size);
    result.offsets[idx] = offset;
    result.arenaBytes = std::max(result.arenaBytes, offset + size);
  }

  // The liveness peak: sweep the compressed positions, adding each buffer
  // at its first slot and removing it after its last.
  std::vector<int64_t> delta(times.size() + 1, 0);
  for (const MemoryRequest &r : requests) {
    int64_t size = int64_t(std::max<uint64_t>(alignUp(r.bytes), alignment));
    delta[slot(std::min(r.firstUse, r.lastUse))] += size;
    delta[slot(std::max(r.firstUse, r.lastUse)) + 1] -= size;
  }
  int64_t live = 0;
  for (int64_t d : delta) {
    live += d;
    result.peakLiveBytes = std::max(result.peakLiveBytes, uint64_t(live));
  }
  return result;
}
