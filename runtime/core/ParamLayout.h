//===- ParamLayout.h - Where a rank's parameter lies in the whole tensor --===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// A rank holds a box of each parameter: local shape L starting at S in the
// view shape G (globalShape; L itself when unsharded), which shares its
// row-major bytes with the checkpoint shape C. The box may reach past G
// (padding); those elements are zero and never read or written from files.
// Under ZeRO-3 (valueSharded) the value buffer keeps only a flat range of
// the box's row-major elements. Initialisation, --init and checkpoints all
// go through these helpers so that values never depend on the sharding.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CORE_PARAMLAYOUT_H
#define STRATA_RUNTIME_CORE_PARAMLAYOUT_H

#include "runtime/format/Program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace strata::rt {

struct ParamLayout {
  std::vector<int64_t> local;      ///< L: the local box's shape.
  std::vector<int64_t> view;       ///< G: the whole tensor (view) shape.
  std::vector<int64_t> start;      ///< S: box start in G (zeros if unsharded).
  std::vector<int64_t> checkpoint; ///< C: shape in files.
  int64_t stateOffset = 0, stateCount = 0;
  /// The flat range of the box the value buffer holds: the whole box, or
  /// the state's range when valueSharded.
  bool valueSharded = false;
  int64_t valueOffset = 0, valueCount = 0;

  int64_t boxElements() const;

  /// Extent of the box inside G per dimension (the saved piece's shape).
  std::vector<int64_t> clipped() const;
  /// The box covers all of G (a one-rank program's usual case).
  bool coversWhole() const;
  bool operator==(const ParamLayout &o) const;
};

ParamLayout layoutOf(const RankProgram &rank, const ParamDesc &param);

/// Calls fn(boxIndex, globalIndex) for every element of the flat range
/// [begin, end) of the box that lies inside G, in row-major order; boxIndex
/// is row-major in the box, globalIndex row-major in G (and therefore in C).
template <typename Fn>
void forEachInFlatRange(const ParamLayout &l, int64_t begin, int64_t end,
                        Fn fn) {
  if (begin >= end)
    return;
  size_t rank = l.local.size();
  std::vector<int64_t> stride(rank, 1), idx(rank, 0);
  for (int d = int(rank) - 2; d >= 0; --d)
    stride[d] = stride[d + 1] * l.view[d + 1];
  for (int64_t d = int64_t(rank) - 1, rest = begin; d >= 0; --d) {
    idx[d] = rest % l.local[d];
    rest /= l.local[d];
  }
  for (int64_t i = begin; i < end; ++i) {
    int64_t g = 0;
    bool inside = true;
    for (size_t d = 0; d < rank; ++d) {
      int64_t x = idx[d] + l.start[d];
      inside = inside && x < l.view[d];
      g += x * stride[d];
    }
    if (inside)
      fn(i, g);
    for (int d = int(rank) - 1; d >= 0; --d) {
      if (++idx[d] < l.local[d])
        break;
      idx[d] = 0;
    }
  }
}

/// forEachInFlatRange over the whole box.
template <typename Fn> void forEachInRange(const ParamLayout &l, Fn fn) {
  forEachInFlatRange(l, 0, l.boxElements(), fn);
}

/// Calls fn(valueIndex, globalIndex) for every element the value buffer
/// holds that lies inside G; valueIndex indexes the value buffer.
template <typename Fn> void forEachHeldValue(const ParamLayout &l, Fn fn) {
  int64_t offset = l.valueOffset;
  forEachInFlatRange(l, offset, offset + l.valueCount,
                     [&](int64_t i, int64_t g) { fn(i - offset, g); });
}

/// The number of elements of the box's flat range [begin, end) inside G.
int64_t countInFlatRange(const ParamLayout &l, int64_t begin, int64_t end);

std::string shapeString(const std::vector<int64_t> &shape);

} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_PARAMLAYOUT_H
