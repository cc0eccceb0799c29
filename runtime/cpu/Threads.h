//===- Threads.h - Thread count of the CPU backend ------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CPU_THREADS_H
#define STRATA_RUNTIME_CPU_THREADS_H

namespace strata::rt::cpu {

/// Sets the threads oneDNN (OpenMP) may use. The runtime's own kernels are
/// single-threaded for now.
void setNumThreads(int threads);

} // namespace strata::rt::cpu

#endif // STRATA_RUNTIME_CPU_THREADS_H
