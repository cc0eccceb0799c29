//===- CreateDevice.cpp - The device of a program's target ----------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Device.h"

namespace strata::rt {

std::unique_ptr<Device> createDevice(const TargetDesc &target) {
  switch (target.kind) {
  case TargetKind::Cpu:
    return createCpuDevice();
  case TargetKind::Cuda:
    return createCudaDevice(target);
  }
  return createCpuDevice();
}

} // namespace strata::rt
