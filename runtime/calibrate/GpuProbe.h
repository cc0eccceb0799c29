//===- GpuProbe.h - The calibration probe's GPU measurements ----*- C++ -*-===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// `strata-calibrate-probe --gpu` measures this process's GPU (GpuProbe.cpp;
// GpuProbeUnavailable.cpp in a build without CUDA) for `strata calibrate
// --gpu` / `--probe-json`.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CALIBRATE_GPUPROBE_H
#define STRATA_RUNTIME_CALIBRATE_GPUPROBE_H

#include <nlohmann/json.hpp>

namespace strata::rt::calibrate {

/// The GPU's bf16 GEMM rate by depth (and its fit), the runtime kernels'
/// memory bandwidth, a graph-launched kernel's fixed cost and the bf16
/// attention kernels' rates. Throws RuntimeError when there is no usable
/// GPU.
nlohmann::json probeGpu(bool quick);

} // namespace strata::rt::calibrate

#endif // STRATA_RUNTIME_CALIBRATE_GPUPROBE_H
