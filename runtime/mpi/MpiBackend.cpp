//===- MpiBackend.cpp - Communicators over MPI ----------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/mpi/MpiBackend.h"

#include "runtime/kernels/Bf16Math.h"
#include "runtime/support/Error.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

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

/// Liveness of the ranks, independent of what the main threads do: every
/// rank's heartbeat thread sends rank 0 a message each period on its own
/// communicator and rank 0's answers each rank. A rank that hears nothing
/// from a peer (rank 0 from rank r, rank r from rank 0) for the timeout
/// names it and ends the job: the peer is stopped (SIGSTOP, a debugger),
/// swapped out or its node is unreachable. A slow rank still beats, so
/// only a rank that stops running is named; the per-step log names the
/// slowest one (docs/runtime.md).
class Heartbeat {
public:
  Heartbeat(MPI_Comm comm, double timeoutSeconds)
      : comm_(comm), timeout_(timeoutSeconds) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    period_ = std::min(1.0, timeout_ / 6.0);
    auto now = std::chrono::steady_clock::now();
    lastHeard_.assign(size_, now);
    lastLoop_ = now;
    sent_.assign(size_, 0);
    received_.assign(size_, 0);
    thread_ = std::thread([this] { loop(); });
  }
  /// Stops the thread and matches every message still in flight, so that
  /// MPI_Finalize finds nothing pending. Collective over the world.
  ~Heartbeat() {
    // Keep beating until every rank is here: one rank may reach the end
    // long before another (generation runs on rank 0 alone).
    MPI_Request barrier;
    MPI_Ibarrier(comm_, &barrier);
    for (int done = 0; !done;) {
      MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
      if (!done)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    // Each rank learns how many beats every peer sent it and receives the
    // rest; then its own sends complete.
    std::vector<int64_t> expected(size_, 0);
    MPI_Alltoall(sent_.data(), 1, MPI_INT64_T, expected.data(), 1, MPI_INT64_T,
                 comm_);
    for (int r = 0; r < size_; ++r)
      for (; received_[r] < expected[r]; ++received_[r]) {
        int64_t beat;
        MPI_Recv(&beat, 1, MPI_INT64_T, r, kTag, comm_, MPI_STATUS_IGNORE);
      }
    if (!requests_.empty())
      MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  }

private:
  static constexpr int kTag = 7;

  void beat(int peer) {
    // At most a few beats outstanding per peer: a stopped peer does not
    // receive, and the queue must not grow without bound.
    if (sent_[peer] - acknowledgedSends(peer) > 16)
      return;
    requests_.push_back(MPI_REQUEST_NULL);
    destinations_.push_back(peer);
    MPI_Isend(&payload_, 1, MPI_INT64_T, peer, kTag, comm_, &requests_.back());
    ++sent_[peer];
  }
  int64_t acknowledgedSends(int peer) {
    // Completed sends are dropped from the list; the rest are pending.
    int64_t pending = 0;
    for (size_t i = 0; i < requests_.size(); ++i)
      if (destinations_[i] == peer)
        ++pending;
    return sent_[peer] - pending;
  }
  void reap() {
    for (size_t i = 0; i < requests_.size();) {
      int done = 0;
      MPI_Test(&requests_[i], &done, MPI_STATUS_IGNORE);
      if (done) {
        requests_.erase(requests_.begin() + long(i));
        destinations_.erase(destinations_.begin() + long(i));
      } else {
        ++i;
      }
    }
  }
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      lock.unlock();
      auto now = std::chrono::steady_clock::now();
      // This thread itself did not run for a while (this process was
      // stopped, then continued): its peers' silence is its own, not theirs.
      if (std::chrono::duration<double>(now - lastLoop_).count() > timeout_ / 2)
        std::fill(lastHeard_.begin(), lastHeard_.end(), now);
      lastLoop_ = now;
      reap();
      if (rank_ == 0)
        for (int r = 1; r < size_; ++r)
          beat(r);
      else
        beat(0);
      while (true) {
        int flag = 0;
        MPI_Status status;
        MPI_Iprobe(MPI_ANY_SOURCE, kTag, comm_, &flag, &status);
        if (!flag)
          break;
        int64_t beat;
        MPI_Recv(&beat, 1, MPI_INT64_T, status.MPI_SOURCE, kTag, comm_,
                 MPI_STATUS_IGNORE);
        ++received_[status.MPI_SOURCE];
        lastHeard_[status.MPI_SOURCE] = now;
      }
      for (int r = 0; r < size_; ++r) {
        if (r == rank_ || (rank_ != 0 && r != 0))
          continue;
        double silent =
            std::chrono::duration<double>(now - lastHeard_[r]).count();
        if (silent < timeout_)
          continue;
        std::fprintf(stderr,
                     "strata: rank %d: no heartbeat from rank %d for %.0f s "
                     "(limit %.0f s): rank %d has stopped running (stopped "
                     "with SIGSTOP or a debugger, swapped out, or its node "
                     "is unreachable). Ending the job (set "
                     "STRATA_HEARTBEAT_TIMEOUT_S to change the limit, 0 to "
                     "disable).\n",
                     rank_, r, silent, timeout_, r);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
        ::_exit(1);
      }
      lock.lock();
      cv_.wait_for(lock, std::chrono::duration<double>(period_));
    }
  }

  MPI_Comm comm_;
  double timeout_, period_ = 1.0;
  int rank_ = 0, size_ = 1;
  int64_t payload_ = 0;
  std::vector<std::chrono::steady_clock::time_point> lastHeard_;
  std::chrono::steady_clock::time_point lastLoop_;
  std::vector<int64_t> sent_, received_;
  std::vector<MPI_Request> requests_;
  std::vector<int> destinations_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

/// Shared by every communicator of the process.
struct MpiState {
  int worldRank = 0, worldSize = 1;
  std::unique_ptr<Watchdog> watchdog;
  std::unique_ptr<Heartbeat> heartbeat;
  /// Seconds the main thread spent blocked in collectives and waits.
  double blockedSeconds = 0.0;
};

MpiState &state() {
  static MpiState s;
  return s;
}

/// A blocking operation: watched by the watchdog, its time counted as
/// blocked (waiting for other ranks) rather than busy.
class WatchScope {
public:
  WatchScope(std::string what) : start_(std::chrono::steady_clock::now()) {
    state().watchdog->begin(std::move(what));
  }
  ~WatchScope() {
    state().watchdog->end();
    state().blockedSeconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
            .count();
  }

private:
  std::chrono::steady_clock::time_point start_;
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
  double blockedSeconds() const override { return state().blockedSeconds; }
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

double heartbeatTimeoutSeconds() {
  const char *env = std::getenv("STRATA_HEARTBEAT_TIMEOUT_S");
  if (!env || !*env)
    return 30.0;
  char *end = nullptr;
  double v = std::strtod(env, &end);
  if (*end != '\0' || !(v >= 0) || (v > 0 && v < 1))
    fail("STRATA_HEARTBEAT_TIMEOUT_S=", env,
         " must be a number of seconds >= 1 (0 disables the heartbeat)");
  return v;
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
    double heartbeat = heartbeatTimeoutSeconds();
    // The heartbeat thread talks to MPI beside the main thread.
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr,
                    heartbeat > 0 ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED,
                    &provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_rank(MPI_COMM_WORLD, &state().worldRank);
    MPI_Comm_size(MPI_COMM_WORLD, &state().worldSize);
    state().watchdog = std::make_unique<Watchdog>(timeout);
    state().watchdog->setRank(state().worldRank);
    if (heartbeat > 0 && provided >= MPI_THREAD_MULTIPLE &&
        state().worldSize > 1) {
      MPI_Comm comm;
      MPI_Comm_dup(MPI_COMM_WORLD, &comm);
      state().heartbeat = std::make_unique<Heartbeat>(comm, heartbeat);
    }
  }
  return std::make_unique<MpiBackend>();
}

void finalizeMpi() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (initialised && !finalised) {
    state().heartbeat.reset();
    state().watchdog.reset();
    MPI_Finalize();
  }
}

} // namespace strata::rt::mpi
