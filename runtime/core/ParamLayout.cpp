//===- ParamLayout.cpp - Where a rank's parameter lies in the whole tensor ===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/ParamLayout.h"

#include <algorithm>

namespace strata::rt {

ParamLayout layoutOf(const RankProgram &rank, const ParamDesc &param) {
  ParamLayout l;
  l.local = paramBoxShape(rank, param);
  l.view = param.globalShape.empty() ? l.local : param.globalShape;
  l.start = param.shardStart.empty() ? std::vector<int64_t>(l.local.size(), 0)
                                     : param.shardStart;
  l.checkpoint = param.checkpointShape.empty() ? l.view : param.checkpointShape;
  l.stateOffset = param.stateOffset;
  l.stateCount =
      param.state.empty() ? 0 : rank.buffers[param.state[0]].numElements();
  l.valueSharded = param.valueSharded;
  l.valueOffset = param.valueSharded ? param.stateOffset : 0;
  l.valueCount = rank.buffers[param.value].numElements();
  return l;
}

int64_t ParamLayout::boxElements() const {
  int64_t count = 1;
  for (int64_t d : local)
    count *= d;
  return count;
}

int64_t countInFlatRange(const ParamLayout &l, int64_t begin, int64_t end) {
  int64_t count = 0;
  forEachInFlatRange(l, begin, end, [&](int64_t, int64_t) { ++count; });
  return count;
}

std::vector<int64_t> ParamLayout::clipped() const {
  std::vector<int64_t> e(local.size());
  for (size_t d = 0; d < local.size(); ++d)
    e[d] = std::max<int64_t>(0, std::min(local[d], view[d] - start[d]));
  return e;
}

bool ParamLayout::coversWhole() const {
  for (size_t d = 0; d < local.size(); ++d)
    if (start[d] != 0 || local[d] < view[d])
      return false;
  return true;
}

bool ParamLayout::operator==(const ParamLayout &o) const {
  return local == o.local && view == o.view && start == o.start &&
         checkpoint == o.checkpoint && stateOffset == o.stateOffset &&
         stateCount == o.stateCount && valueSharded == o.valueSharded &&
         valueOffset == o.valueOffset && valueCount == o.valueCount;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace strata::rt
