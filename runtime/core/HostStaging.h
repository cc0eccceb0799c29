//===- HostStaging.h - Collectives on device memory through the host ------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// A communicator that only takes host memory (MPI) serves a device whose
// arena it cannot read (CUDA) by staging: inputs are copied to host buffers,
// the communicator runs on those, and results are copied back — for the
// non-blocking forms when the request completes, so the device buffer only
// changes at `wait`, as the program expects. The device's copies are
// behind `DeviceCopier`, so this logic is tested on the host.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CORE_HOSTSTAGING_H
#define STRATA_RUNTIME_CORE_HOSTSTAGING_H

#include "runtime/core/Communicator.h"

#include <cstddef>
#include <memory>

namespace strata::rt {

/// Synchronous copies between device memory and host memory: when a call
/// returns, the destination holds the bytes.
class DeviceCopier {
public:
  virtual ~DeviceCopier() = default;
  virtual void toHost(void *host, const void *device, size_t bytes) = 0;
  virtual void toDevice(void *device, const void *host, size_t bytes) = 0;
};

/// The Communicator operations on device buffers, through host copies.
/// Counts and meanings are Communicator's.
namespace staged {

void allReduce(Communicator &comm, DeviceCopier &copier, void *buf,
               int64_t count, DType dtype, ReduceOp op);
void reduceScatter(Communicator &comm, DeviceCopier &copier, const void *in,
                   void *out, int64_t count, DType dtype);
void allGather(Communicator &comm, DeviceCopier &copier, const void *in,
               void *out, int64_t count, DType dtype);
void send(Communicator &comm, DeviceCopier &copier, const void *buf,
          int64_t count, DType dtype, int peer, int tag);
void recv(Communicator &comm, DeviceCopier &copier, void *buf, int64_t count,
          DType dtype, int peer, int tag);

std::unique_ptr<CommRequest> startAllReduce(Communicator &comm,
                                            DeviceCopier &copier, void *buf,
                                            int64_t count, DType dtype,
                                            ReduceOp op);
std::unique_ptr<CommRequest> startReduceScatter(Communicator &comm,
                                                DeviceCopier &copier,
                                                const void *in, void *out,
                                                int64_t count, DType dtype);
std::unique_ptr<CommRequest> startAllGather(Communicator &comm,
                                            DeviceCopier &copier,
                                            const void *in, void *out,
                                            int64_t count, DType dtype);
std::unique_ptr<CommRequest> startSend(Communicator &comm, DeviceCopier &copier,
                                       const void *buf, int64_t count,
                                       DType dtype, int peer, int tag);
std::unique_ptr<CommRequest> startRecv(Communicator &comm, DeviceCopier &copier,
                                       void *buf, int64_t count, DType dtype,
                                       int peer, int tag);

} // namespace staged
} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_HOSTSTAGING_H
