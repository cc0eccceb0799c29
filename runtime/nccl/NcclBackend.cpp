//===- NcclBackend.cpp - Process groups on NCCL ---------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/nccl/NcclBackend.h"

#include "runtime/cuda/CudaDevice.h"
#include "runtime/cuda/CudaLibraries.h"
#include "runtime/support/Error.h"

#include <cstdlib>
#include <cstring>

namespace strata::rt::nccl {

using cuda::check;
using cuda::streams;

namespace {

const cuda::NcclApi &api() {
  std::string why;
  const cuda::NcclApi *a = cuda::nccl(why);
  if (!a)
    fail(why);
  return *a;
}

void checkNccl(ncclResult_t result, const char *what) {
  if (result != ncclSuccess)
    fail("NCCL ", what, ": ", api().errorString(result));
}

ncclDataType_t ncclType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return ncclFloat32;
  case DType::F64:
    return ncclFloat64;
  case DType::I32:
    return ncclInt32;
  }
  return ncclFloat32;
}

/// A collective issued on the communication stream; wait() orders the
/// compute stream after it (the host does not wait).
class NcclRequest final : public CommRequest {
public:
  explicit NcclRequest(cudaEvent_t done) : done_(done) {}
  ~NcclRequest() override { cudaEventDestroy(done_); }
  bool test() override { return cudaEventQuery(done_) == cudaSuccess; }
  void wait() override {
    check(cudaStreamWaitEvent(streams().compute, done_, 0),
          "waiting for a collective");
  }

private:
  cudaEvent_t done_;
};

class NcclCommunicator final : public Communicator {
public:
  NcclCommunicator(std::unique_ptr<Communicator> mpi, ncclComm_t comm)
      : mpi_(std::move(mpi)), comm_(comm) {}
  ~NcclCommunicator() override { api().commDestroy(comm_); }
  const std::string &name() const override { return mpi_->name(); }
  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  bool acceptsDeviceMemory() const override { return true; }

  void allReduce(void *buf, int64_t count, DType dtype, ReduceOp op) override {
    startAllReduce(buf, count, dtype, op)->wait();
  }
  void reduceScatter(const void *in, void *out, int64_t count,
                     DType dtype) override {
    startReduceScatter(in, out, count, dtype)->wait();
  }
  void allGather(const void *in, void *out, int64_t count,
                 DType dtype) override {
    startAllGather(in, out, count, dtype)->wait();
  }
  void send(const void *, int64_t, DType, int, int) override { p2p(); }
  void recv(void *, int64_t, DType, int, int) override { p2p(); }
  void barrier() override {
    check(cudaStreamSynchronize(streams().compute), "barrier");
    check(cudaStreamSynchronize(streams().comm), "barrier");
    mpi_->barrier();
  }

  std::unique_ptr<CommRequest>
  startAllReduce(void *buf, int64_t count, DType dtype, ReduceOp op) override {
    enter();
    checkNccl(api().allReduce(buf, buf, size_t(count), ncclType(dtype),
                              op == ReduceOp::Max ? ncclMax : ncclSum, comm_,
                              streams().comm),
              "all-reduce");
    return leave();
  }
  std::unique_ptr<CommRequest> startReduceScatter(const void *in, void *out,
                                                  int64_t count,
                                                  DType dtype) override {
    enter();
    checkNccl(api().reduceScatter(in, out, size_t(count), ncclType(dtype),
                                  ncclSum, comm_, streams().comm),
              "reduce-scatter");
    return leave();
  }
  std::unique_ptr<CommRequest> startAllGather(const void *in, void *out,
                                              int64_t count,
                                              DType dtype) override {
    enter();
    checkNccl(api().allGather(in, out, size_t(count), ncclType(dtype), comm_,
                              streams().comm),
              "all-gather");
    return leave();
  }
  std::unique_ptr<CommRequest> startSend(const void *, int64_t, DType, int,
                                         int) override {
    p2p();
  }
  std::unique_ptr<CommRequest> startRecv(void *, int64_t, DType, int,
                                         int) override {
    p2p();
  }

private:
  /// The communication stream waits for what the compute stream has
  /// issued so far (the collective's inputs).
  void enter() {
    cudaEvent_t ready;
    check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
          "creating an event");
    check(cudaEventRecord(ready, streams().compute), "recording an event");
    check(cudaStreamWaitEvent(streams().comm, ready, 0), "ordering streams");
    cudaEventDestroy(ready); // Safe: destroyed once the wait is enqueued.
  }
  std::unique_ptr<CommRequest> leave() {
    cudaEvent_t done;
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
          "creating an event");
    check(cudaEventRecord(done, streams().comm), "recording an event");
    return std::make_unique<NcclRequest>(done);
  }
  [[noreturn]] void p2p() {
    fail("internal error: point-to-point transfers use the world "
         "communicator, not group ",
         name());
  }

  std::unique_ptr<Communicator> mpi_;
  ncclComm_t comm_;
};

class NcclBackend final : public CommBackend {
public:
  explicit NcclBackend(std::shared_ptr<CommBackend> mpi)
      : mpi_(std::move(mpi)) {}
  const char *name() const override { return "nccl"; }
  int worldRank() const override { return mpi_->worldRank(); }
  int worldSize() const override { return mpi_->worldSize(); }
  Communicator &world() override { return mpi_->world(); }

  std::unique_ptr<Communicator>
  createGroup(const ProcessGroup &group) override {
    std::unique_ptr<Communicator> mpi = mpi_->createGroup(group);
    if (!mpi)
      return nullptr;
    cuda::selectGpu();
    // Member 0's unique id reaches every member through the MPI group.
    ncclUniqueId id{};
    if (mpi->rank() == 0)
      checkNccl(api().getUniqueId(&id), "ncclGetUniqueId");
    static_assert(sizeof(ncclUniqueId) % sizeof(float) == 0);
    const int64_t words = sizeof(ncclUniqueId) / sizeof(float);
    std::vector<uint8_t> all(sizeof(ncclUniqueId) * size_t(mpi->size()));
    mpi->allGather(&id, all.data(), words, DType::F32);
    std::memcpy(&id, all.data(), sizeof(id));
    ncclComm_t comm = nullptr;
    checkNccl(api().commInitRank(&comm, mpi->size(), id, mpi->rank()),
              "ncclCommInitRank");
    return std::make_unique<NcclCommunicator>(std::move(mpi), comm);
  }

private:
  std::shared_ptr<CommBackend> mpi_;
};

} // namespace

std::string ncclUnavailableReason() {
  if (const char *env = std::getenv("STRATA_COMM"))
    if (std::strcmp(env, "mpi") == 0)
      return "STRATA_COMM=mpi";
  std::string why;
  if (!cuda::nccl(why))
    return why;
  int gpus = 0;
  check(cudaGetDeviceCount(&gpus), "cudaGetDeviceCount");
  if (cuda::localRanks() > gpus)
    return std::to_string(cuda::localRanks()) + " ranks share this node's " +
           std::to_string(gpus) + " GPU(s) and NCCL needs one GPU per rank";
  return "";
}

std::unique_ptr<CommBackend>
createNcclBackend(std::shared_ptr<CommBackend> mpi) {
  return std::make_unique<NcclBackend>(std::move(mpi));
}

} // namespace strata::rt::nccl

namespace strata::rt {

std::shared_ptr<CommBackend>
createCudaCommBackend(std::shared_ptr<CommBackend> mpi, std::string &why) {
  why = nccl::ncclUnavailableReason();
  if (!why.empty())
    return mpi;
  return nccl::createNcclBackend(std::move(mpi));
}

} // namespace strata::rt
