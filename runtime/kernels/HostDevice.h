//===- HostDevice.h - Kernel math shared by the CPU and GPU backends ------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The headers in runtime/kernels/ hold the arithmetic of elementwise and
// normalisation kernels once, as small inline functions that the CPU
// backend calls from its vectorised loops and a CUDA backend would call from
// its kernels; the CPU unit tests therefore test the math a GPU would run.
// They include nothing heavier than <cstdint> and <cmath>. Transcendentals
// that a backend evaluates its own way (exp for sigmoid) are arguments.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_KERNELS_HOSTDEVICE_H
#define STRATA_RUNTIME_KERNELS_HOSTDEVICE_H

#if defined(__CUDACC__) || defined(__HIPCC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

#endif // STRATA_RUNTIME_KERNELS_HOSTDEVICE_H
