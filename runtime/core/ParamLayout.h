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
// Initialisation, --init and checkpoints all go through these helpers so
// that values never depend on the sharding.
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
  std::vector<int64_t> local;      ///< L: the value buffer's shape.
  std::vector<int64_t> view;       ///< G: the whole tensor (view) shape.
  std::vector<int64_t> start;      ///< S: box start in G (zeros if unsharded).
  std::vector<int64_t> checkpoint; ///< C: shape in files.
  int64_t stateOffset = 0, stateCount = 0;

  /// Extent of the box inside G per dimension (the saved piece's shape).
  std::vector<int64_t> clipped() const;
  /// The box covers all of G (a one-rank program's usual case).
  bool coversWhole() const;
  bool operator==(const ParamLayout &o) const;
};

ParamLayout layoutOf(const RankProgram &rank, const ParamDesc &param);

/// Calls fn(localIndex, globalIndex) for every element of the box that lies
/// inside G, in local row-major order; globalIndex is row-major in G (and
/// therefore in C).
template <typename Fn> void forEachInRange(const ParamLayout &l, Fn fn) {
  size_t rank = l.local.size();
  int64_t count = 1;
  for (int64_t d : l.local)
    count *= d;
  if (count == 0)
    return;
  std::vector<int64_t> stride(rank, 1), idx(rank, 0);
  for (int d = int(rank) - 2; d >= 0; --d)
    stride[d] = stride[d + 1] * l.view[d + 1];
  for (int64_t i = 0; i < count; ++i) {
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

std::string shapeString(const std::vector<int64_t> &shape);

} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_PARAMLAYOUT_H
