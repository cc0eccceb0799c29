//===- MpiBackend.cpp - Communicators over MPI ----------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/mpi/MpiBackend.h"

#include "runtime/kernels/Bf16Math.h"
#include "runtime/support/Error.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>

namespace strata::rt::mpi {

namespace {

MPI_Datatype mpiType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::F64:
    return MPI_DOUBLE;
  case DType::I32:
    return MPI_INT;
  case DType::BF16:
    return MPI_UINT16_T; // bit patterns; reductions use the ops below
  }
  return MPI_FLOAT;
}

/// bfloat16 reductions: each pair added (or compared) in float32 and
/// rounded once, so a bf16 all-reduce moves half the bytes of fp32.
template <bool Max>
void bf16Reduce(void *in, void *inout, int *len, MPI_Datatype *) {
  const auto *a = static_cast<const uint16_t *>(in);
  auto *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = kernels::bf16ToFloat(a[i]), y = kernels::bf16ToFloat(b[i]);
    b[i] = kernels::floatToBf16(Max ? (x > y ? x : y) : x + y);
  }
}

MPI_Op mpiOp(ReduceOp op, DType dtype = DType::F32) {
  if (dtype == DType::BF16) {
    static MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL;
    if (sum == MPI_OP_NULL) {
      MPI_Op_create(&bf16Reduce<false>, 1, &sum);
      MPI_Op_create(&bf16Reduce<true>, 1, &max);
    }
    return op == ReduceOp::Max ? max : sum;
  }
  return op == ReduceOp::Max ? MPI_MAX : MPI_SUM;
}

int mpiCount(int64_t count) {
  if (count < 0 || count > INT32_MAX)
    fail("internal error: transfer of ", count,
         " elements exceeds MPI's int count");
  return int(count);
}

/// Ends the process when a blocking operation outlives the timeout. Only
/// the main thread talks to MPI; this thread only reads a clock.
class Watchdog {
public:
  explicit Watchdog(double timeoutSeconds) : timeout_(timeoutSeconds) {
    if (timeout_ > 0)
      thread_ = std::thread([this] { loop(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
  }
  void begin(std::string what) {
    if (timeout_ <= 0)
      return;
    std::lock_guard<std::mutex> lock(mutex_);
    what_ = std::move(what);
    since_ = std::chrono::steady_clock::now();
    busy_ = true;
  }
  void end() {
    if (timeout_ <= 0)
      return;
    std::lock_guard<std::mutex> lock(mutex_);
    busy_ = false;
  }
  void setRank(int rank) { rank_ = rank; }

private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(250));
      if (stop_ || !busy_)
        continue;
      double waited = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - since_)
                          .count();
      if (waited < timeout_)
        continue;
      std::fprintf(stderr,
                   "strata: rank %d: %s has not completed after %.0f s; "
                   "another rank has probably died or is stuck. Aborting "
                   "the job (raise STRATA_COLLECTIVE_TIMEOUT_S if the "
                   "step is legitimately this slow).\n",
                   rank_, what_.c_str(), waited);
      std::fflush(stderr);
      ::_exit(124);
    }
  }

  double timeout_;
  int rank_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false, busy_ = false;
  std::string what_;
  std::chrono::steady_clock::time_point since_;
  std::thread thread_;
};

/// Shared by every communicator of the process.
struct MpiState {
  int worldRank = 0, worldSize = 1;
  std::unique_ptr<Watchdog> watchdog;
};

MpiState &state() {
  static MpiState s;
  return s;
}

class WatchScope {
public:
  WatchScope(std::string what) { state().watchdog->begin(std::move(what)); }
  ~WatchScope() { state().watchdog->end(); }
};

class MpiRequest final : public CommRequest {
public:
  MpiRequest(MPI_Request request, std::string what)
      : request_(request), what_(std::move(what)) {}
  bool test() override {
    if (request_ == MPI_REQUEST_NULL)
      return true;
    int done = 0;
    MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
    return done != 0;
  }
  void wait() override {
    if (request_ == MPI_REQUEST_NULL)
      return;
    WatchScope scope("wait for " + what_);
    MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }

private:
  MPI_Request request_;
  std::string what_;
};

class MpiCommunicator final : public Communicator {
public:
  MpiCommunicator(MPI_Comm comm, std::string name)
      : comm_(comm), name_(std::move(name)) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  const std::string &name() const override { return name_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm comm() const { return comm_; }

  void allReduce(void *buf, int64_t count, DType dtype, ReduceOp op) override {
    WatchScope scope(describe("all_reduce", count, dtype));
    MPI_Allreduce(MPI_IN_PLACE, buf, mpiCount(count), mpiType(dtype),
                  mpiOp(op, dtype), comm_);
  }
  void reduceScatter(const void *in, void *out, int64_t count,
                     DType dtype) override {
    WatchScope scope(describe("reduce_scatter", count, dtype));
    MPI_Reduce_scatter_block(in, out, mpiCount(count), mpiType(dtype),
                             mpiOp(ReduceOp::Sum, dtype), comm_);
  }
  void allGather(const void *in, void *out, int64_t count,
                 DType dtype) override {
    WatchScope scope(describe("all_gather", count, dtype));
    MPI_Allgather(inPlace(in, out, count, dtype), mpiCount(count),
                  mpiType(dtype), out, mpiCount(count), mpiType(dtype), comm_);
  }
  void send(const void *buf, int64_t count, DType dtype, int peer,
            int tag) override {
    WatchScope scope(describePeer("send to", peer, tag, count, dtype));
    MPI_Send(buf, mpiCount(count), mpiType(dtype), peer, tag, comm_);
  }
  void recv(void *buf, int64_t count, DType dtype, int peer, int tag) override {
    WatchScope scope(describePeer("recv from", peer, tag, count, dtype));
    MPI_Recv(buf, mpiCount(count), mpiType(dtype), peer, tag, comm_,
             MPI_STATUS_IGNORE);
  }
  void barrier() override {
    WatchScope scope("barrier in group '" + name_ + "'");
    MPI_Barrier(comm_);
  }

  std::unique_ptr<CommRequest>
  startAllReduce(void *buf, int64_t count, DType dtype, ReduceOp op) override {
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, buf, mpiCount(count), mpiType(dtype),
                   mpiOp(op, dtype), comm_, &r);
    return std::make_unique<MpiRequest>(r,
                                        describe("all_reduce", count, dtype));
  }
  std::unique_ptr<CommRequest> startReduceScatter(const void *in, void *out,
                                                  int64_t count,
                                                  DType dtype) override {
    MPI_Request r;
    MPI_Ireduce_scatter_block(in, out, mpiCount(count), mpiType(dtype),
                              mpiOp(ReduceOp::Sum, dtype), comm_, &r);
    return std::make_unique<MpiRequest>(
        r, describe("reduce_scatter", count, dtype));
  }
  std::unique_ptr<CommRequest> startAllGather(const void *in, void *out,
                                              int64_t count,
                                              DType dtype) override {
    MPI_Request r;
    MPI_Iallgather(inPlace(in, out, count, dtype), mpiCount(count),
                   mpiType(dtype), out, mpiCount(count), mpiType(dtype), comm_,
                   &r);
    return std::make_unique<MpiRequest>(r,
                                        describe("all_gather", count, dtype));
  }
  std::unique_ptr<CommRequest> startSend(const void *buf, int64_t count,
                                         DType dtype, int peer,
                                         int tag) override {
    MPI_Request r;
    MPI_Isend(buf, mpiCount(count), mpiType(dtype), peer, tag, comm_, &r);
    return std::make_unique<MpiRequest>(
        r, describePeer("send to", peer, tag, count, dtype));
  }
  std::unique_ptr<CommRequest> startRecv(void *buf, int64_t count, DType dtype,
                                         int peer, int tag) override {
    MPI_Request r;
    MPI_Irecv(buf, mpiCount(count), mpiType(dtype), peer, tag, comm_, &r);
    return std::make_unique<MpiRequest>(
        r, describePeer("recv from", peer, tag, count, dtype));
  }

private:
  /// all_gather whose input already sits in this rank's chunk of the output.
  const void *inPlace(const void *in, void *out, int64_t count,
                      DType dtype) const {
    const char *chunk = static_cast<const char *>(out) +
                        int64_t(rank_) * count * int64_t(dtypeBytes(dtype));
    return in == chunk ? MPI_IN_PLACE : in;
  }
  std::string describe(const char *op, int64_t count, DType dtype) const {
    return std::string(op) + " of " + std::to_string(count) + " " +
           dtypeName(dtype) + " in group '" + name_ + "'";
  }
  std::string describePeer(const char *op, int peer, int tag, int64_t count,
                           DType dtype) const {
    return std::string(op) + " rank " + std::to_string(peer) + " (tag " +
           std::to_string(tag) + ", " + std::to_string(count) + " " +
           dtypeName(dtype) + ")";
  }

  // Communicators are not freed: MPI_Comm_free can block when a peer has
  // died, and MPI_Finalize releases them at the end of a run.
  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
};

class MpiBackend final : public CommBackend {
public:
  MpiBackend() {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    world_ = std::make_unique<MpiCommunicator>(dup, "world");
  }
  const char *name() const override { return "mpi"; }
  int worldRank() const override { return state().worldRank; }
  int worldSize() const override { return state().worldSize; }
  Communicator &world() override { return *world_; }
  std::unique_ptr<Communicator>
  createGroup(const ProcessGroup &group) override {
    int index = group.indexOf(uint32_t(state().worldRank));
    MPI_Comm comm;
    MPI_Comm_split(world_->comm(), index >= 0 ? 0 : MPI_UNDEFINED,
                   index >= 0 ? index : 0, &comm);
    if (index < 0)
      return nullptr;
    return std::make_unique<MpiCommunicator>(comm, group.name);
  }

private:
  std::unique_ptr<MpiCommunicator> world_;
};

} // namespace

bool launchedByMpiLauncher() {
  for (const char *var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                          "PMI_SIZE", "MPI_LOCALNRANKS"})
    if (std::getenv(var))
      return true;
  return false;
}

double collectiveTimeoutSeconds() {
  const char *env = std::getenv("STRATA_COLLECTIVE_TIMEOUT_S");
  if (!env || !*env)
    return 1800.0;
  char *end = nullptr;
  double v = std::strtod(env, &end);
  if (*end != '\0' || !(v >= 0))
    fail("STRATA_COLLECTIVE_TIMEOUT_S=", env,
         " must be a number of seconds >= 0 (0 disables the watchdog)");
  return v;
}

std::unique_ptr<CommBackend> createMpiBackend() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    double timeout = collectiveTimeoutSeconds();
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_rank(MPI_COMM_WORLD, &state().worldRank);
    MPI_Comm_size(MPI_COMM_WORLD, &state().worldSize);
    state().watchdog = std::make_unique<Watchdog>(timeout);
    state().watchdog->setRank(state().worldRank);
  }
  return std::make_unique<MpiBackend>();
}

void finalizeMpi() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (initialised && !finalised) {
    state().watchdog.reset();
    MPI_Finalize();
  }
}

} // namespace strata::rt::mpi
