//===- NcclBackend.h - Process groups on NCCL -----------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The communicators of a CUDA job whose ranks each have their own GPU: one
// NCCL communicator per process group (ncclCommInitRank; the unique id is
// gathered over the group's MPI communicator, so MPI stays the launcher and
// bootstrap). Collectives take device pointers and run on the
// communication stream, ordered against the compute stream with events:
// blocking forms make the compute stream wait, non-blocking forms return a
// request whose wait() does, so compute overlaps them without the host
// waiting. The world communicator stays MPI's (host-side agreement, and the
// pipeline's point-to-point transfers, staged through host memory by the
// CUDA device).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_NCCL_NCCLBACKEND_H
#define STRATA_RUNTIME_NCCL_NCCLBACKEND_H

#include "runtime/core/Communicator.h"

#include <memory>
#include <string>

namespace strata::rt::nccl {

/// Why NCCL cannot serve this job (library missing, more ranks on this node
/// than GPUs, STRATA_COMM=mpi), or empty. Every rank must get the same
/// answer, so only job-wide facts count.
std::string ncclUnavailableReason();

/// Process groups on NCCL, bootstrapped over `mpi` (which stays the world).
std::unique_ptr<CommBackend>
createNcclBackend(std::shared_ptr<CommBackend> mpi);

} // namespace strata::rt::nccl

#endif // STRATA_RUNTIME_NCCL_NCCLBACKEND_H
