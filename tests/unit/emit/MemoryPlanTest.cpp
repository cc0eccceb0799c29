//===- MemoryPlanTest.cpp - The arena's memory planner --------------------===//
//
// planMemory finds the live-overlapping buffers through a segment tree of
// byte-range unions (near-linear); the reference below lists them for every
// placement (quadratic), which is what the planner did before. Both must give
// the same offsets, and no two buffers alive at once may share a byte.
//
//===----------------------------------------------------------------------===//

#include "compiler/emit/MemoryPlan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

using namespace strata;

namespace {

/// The quadratic best fit the planner must agree with.
MemoryPlanResult referencePlan(const std::vector<MemoryRequest> &requests,
                               uint64_t alignment) {
  MemoryPlanResult result;
  result.offsets.assign(requests.size(), 0);
  auto alignUp = [&](uint64_t v) {
    return (v + alignment - 1) / alignment * alignment;
  };
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
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
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (const Placed &p : placed)
      if (p.first <= r.lastUse && r.firstUse <= p.last)
        busy.push_back({p.begin, p.end});
    std::sort(busy.begin(), busy.end());
    uint64_t size = std::max<uint64_t>(alignUp(r.bytes), alignment);
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

void expectNoLiveOverlap(const std::vector<MemoryRequest> &requests,
                         const MemoryPlanResult &plan, uint64_t alignment) {
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % alignment, 0u);
    EXPECT_LE(plan.offsets[i] + requests[i].bytes, plan.arenaBytes);
    for (size_t j = i + 1; j < requests.size(); ++j) {
      const MemoryRequest &a = requests[i], &b = requests[j];
      if (a.lastUse < b.firstUse || b.lastUse < a.firstUse || !a.bytes ||
          !b.bytes)
        continue;
      bool apart = plan.offsets[i] + a.bytes <= plan.offsets[j] ||
                   plan.offsets[j] + b.bytes <= plan.offsets[i];
      ASSERT_TRUE(apart) << "requests " << i << " and " << j
                         << " are alive together and share bytes";
    }
  }
}

/// A training step's shape: persistent state, activations saved from the
/// forward pass until their backward (nested lifetimes), short temporaries,
/// in sizes drawn from a few values like a model's repeated layers.
std::vector<MemoryRequest> stepLike(std::mt19937 &rng, int layers) {
  std::vector<uint64_t> sizes = {256, 1024, 4096, 4096, 16384, 100, 64, 4000};
  auto pick = [&] { return sizes[rng() % sizes.size()]; };
  std::vector<MemoryRequest> r;
  int64_t end = 4 * layers + 10;
  for (int l = 0; l < layers; ++l)
    for (int k = 0; k < 4; ++k)
      r.push_back({pick(), -1, end});
  for (int l = 0; l < layers; ++l) {
    int64_t fwd = 2 * l, bwd = end - 2 * l - 2;
    for (int k = 0; k < 3; ++k)
      r.push_back({pick(), fwd + int64_t(rng() % 2), bwd - int64_t(rng() % 2)});
    for (int k = 0; k < 3; ++k) {
      int64_t t = rng() % end;
      r.push_back({pick(), t, t + int64_t(rng() % 3)});
    }
  }
  return r;
}

std::vector<MemoryRequest> uniform(std::mt19937 &rng, int n, int64_t span) {
  std::vector<MemoryRequest> r;
  for (int i = 0; i < n; ++i) {
    int64_t a = rng() % span, b = a + rng() % (span / 4 + 1);
    r.push_back({uint64_t(rng() % 5000), a, b});
  }
  return r;
}

void expectSameAsReference(const std::vector<MemoryRequest> &requests,
                           uint64_t alignment) {
  MemoryPlanResult want = referencePlan(requests, alignment);
  MemoryPlanResult got = planMemory(requests, alignment);
  EXPECT_EQ(got.offsets, want.offsets);
  EXPECT_EQ(got.arenaBytes, want.arenaBytes);
  EXPECT_EQ(got.unsharedBytes, want.unsharedBytes);
  expectNoLiveOverlap(requests, got, alignment);
  // The liveness peak: the most aligned bytes live at any one position,
  // counted position by position; no placement needs less.
  uint64_t peak = 0;
  for (const MemoryRequest &at : requests)
    for (int64_t t : {at.firstUse, at.lastUse}) {
      uint64_t live = 0;
      for (const MemoryRequest &r : requests)
        if (std::min(r.firstUse, r.lastUse) <= t &&
            t <= std::max(r.firstUse, r.lastUse))
          live += std::max<uint64_t>(
              (r.bytes + alignment - 1) / alignment * alignment, alignment);
      peak = std::max(peak, live);
    }
  EXPECT_EQ(got.peakLiveBytes, peak);
  EXPECT_LE(got.peakLiveBytes, got.arenaBytes);
}

TEST(MemoryPlan, MatchesTheQuadraticReferenceOnStepShapedInputs) {
  std::mt19937 rng(7);
  for (int layers : {1, 2, 5, 17, 60})
    for (uint64_t alignment : {1, 64, 4096})
      expectSameAsReference(stepLike(rng, layers), alignment);
}

TEST(MemoryPlan, MatchesTheQuadraticReferenceOnRandomLifetimes) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial)
    expectSameAsReference(uniform(rng, 1 + trial * 7, 1 + trial * 3),
                          trial % 2 ? 64 : 1);
}

TEST(MemoryPlan, EdgeCases) {
  EXPECT_TRUE(planMemory({}, 64).offsets.empty());
  EXPECT_EQ(planMemory({}, 64).arenaBytes, 0u);
  // Zero-byte requests still take one aligned slot; a single position.
  expectSameAsReference({{0, 3, 3}, {0, 3, 3}, {10, 3, 3}}, 64);
  // Disjoint lifetimes share bytes; overlapping ones do not.
  MemoryPlanResult p = planMemory({{100, 0, 1}, {100, 2, 3}, {100, 1, 2}}, 64);
  EXPECT_EQ(p.offsets[0], p.offsets[1]);
  EXPECT_NE(p.offsets[2], p.offsets[0]);
  EXPECT_EQ(p.arenaBytes, 256u);
}

} // namespace
