//===- GpuProbeUnavailable.cpp - probeGpu without CUDA --------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/calibrate/GpuProbe.h"

#include "runtime/support/Error.h"

namespace strata::rt::calibrate {

nlohmann::json probeGpu(bool) {
  fail("this strata-calibrate-probe was built without CUDA (STRATA_CUDA=OFF); "
       "rebuild with the CUDA toolkit to measure a GPU");
}

} // namespace strata::rt::calibrate
