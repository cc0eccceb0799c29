//===- Communicator.h - Backend interface: collectives of one group -------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// A Communicator is one process group's channel, the equivalent of an
// MPI_Comm or ncclComm_t (IREE's hal/channel.h has the same shape): the
// executor creates one per group the rank belongs to at start-up and the
// collective kernels call it with device pointers. Ranks and peers are
// positions within the group; for the world communicator that is the global
// rank. Errors are fatal (MPI_ERRORS_ARE_FATAL), never silently ignored.
//
// A CommBackend creates the communicators of one job: MPI (runtime/mpi/) or
// the in-process single-rank backend below, used when a one-rank program is
// started without mpirun.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CORE_COMMUNICATOR_H
#define STRATA_RUNTIME_CORE_COMMUNICATOR_H

#include "runtime/format/Program.h"

#include <cstdint>
#include <memory>
#include <string>

namespace strata::rt {

/// An outstanding non-blocking operation.
class CommRequest {
public:
  virtual ~CommRequest() = default;
  /// Lets the operation progress without blocking; true once complete.
  virtual bool test() = 0;
  /// Blocks until complete.
  virtual void wait() = 0;
};

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual const std::string &name() const = 0;
  /// This process's index in the group, and the group size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Whether buffers may be device (GPU) memory: NCCL's. Otherwise a GPU
  /// backend stages them through host memory (MPI under the CUDA device).
  virtual bool acceptsDeviceMemory() const { return false; }

  /// buf[0:count] = op over the group of buf[0:count] (f32 or f64).
  virtual void allReduce(void *buf, int64_t count, DType dtype,
                         ReduceOp op) = 0;
  /// out[0:count] = sum over the group of in[rank*count : (rank+1)*count].
  virtual void reduceScatter(const void *in, void *out, int64_t count,
                             DType dtype) = 0;
  /// out[r*count : (r+1)*count] = in of group rank r.
  virtual void allGather(const void *in, void *out, int64_t count,
                         DType dtype) = 0;
  virtual void send(const void *buf, int64_t count, DType dtype, int peer,
                    int tag) = 0;
  virtual void recv(void *buf, int64_t count, DType dtype, int peer,
                    int tag) = 0;
  virtual void barrier() = 0;

  /// Non-blocking forms: the buffers must stay untouched until the request
  /// completes.
  virtual std::unique_ptr<CommRequest>
  startAllReduce(void *buf, int64_t count, DType dtype, ReduceOp op) = 0;
  virtual std::unique_ptr<CommRequest>
  startReduceScatter(const void *in, void *out, int64_t count, DType dtype) = 0;
  virtual std::unique_ptr<CommRequest>
  startAllGather(const void *in, void *out, int64_t count, DType dtype) = 0;
  virtual std::unique_ptr<CommRequest>
  startSend(const void *buf, int64_t count, DType dtype, int peer, int tag) = 0;
  virtual std::unique_ptr<CommRequest>
  startRecv(void *buf, int64_t count, DType dtype, int peer, int tag) = 0;
};

/// The communicators of one job.
class CommBackend {
public:
  virtual ~CommBackend() = default;
  virtual const char *name() const = 0;
  virtual int worldRank() const = 0;
  virtual int worldSize() const = 0;
  /// All ranks, in rank order.
  virtual Communicator &world() = 0;
  /// Creates the communicator of `group`. Collective over the world: every
  /// rank calls it for every group in the same order; non-members get
  /// nullptr.
  virtual std::unique_ptr<Communicator>
  createGroup(const ProcessGroup &group) = 0;
};

/// A world of one rank, in-process: reductions over one member are copies,
/// point-to-point transfers have no peer and fail.
std::unique_ptr<CommBackend> createSingleRankBackend();

/// The communicators of a CUDA program's ranks (runtime/nccl/): NCCL for the
/// program's groups when every rank of a node has its own GPU, else `mpi`
/// itself, whose host buffers the CUDA device stages collectives through.
/// `why` says why NCCL was not used (empty when it is).
std::shared_ptr<CommBackend>
createCudaCommBackend(std::shared_ptr<CommBackend> mpi, std::string &why);

} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_COMMUNICATOR_H
