//===- Threads.cpp - Thread count of the CPU backend ----------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Threads.h"

#include <omp.h>

namespace strata::rt::cpu {

void setNumThreads(int threads) {
  omp_set_num_threads(threads < 1 ? 1 : threads);
}

} // namespace strata::rt::cpu
