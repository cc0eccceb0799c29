//===- SingleRankComm.cpp - The one-rank, in-process CommBackend ----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Lets a single-rank program run without mpirun and without initialising
// MPI: every collective over a group of one is the identity (or a copy).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Communicator.h"

#include "runtime/support/Error.h"

#include <cstring>

namespace strata::rt {

namespace {

class DoneRequest final : public CommRequest {
public:
  bool test() override { return true; }
  void wait() override {}
};

class SelfCommunicator final : public Communicator {
public:
  explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}
  const std::string &name() const override { return name_; }
  int rank() const override { return 0; }
  int size() const override { return 1; }

  void allReduce(void *, int64_t, DType, ReduceOp) override {}
  void reduceScatter(const void *in, void *out, int64_t count,
                     DType dtype) override {
    std::memmove(out, in, count * dtypeBytes(dtype));
  }
  void allGather(const void *in, void *out, int64_t count,
                 DType dtype) override {
    std::memmove(out, in, count * dtypeBytes(dtype));
  }
  void send(const void *, int64_t, DType, int peer, int) override {
    noPeer(peer);
  }
  void recv(void *, int64_t, DType, int peer, int) override { noPeer(peer); }
  void barrier() override {}

  std::unique_ptr<CommRequest>
  startAllReduce(void *buf, int64_t count, DType dtype, ReduceOp op) override {
    allReduce(buf, count, dtype, op);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<CommRequest> startReduceScatter(const void *in, void *out,
                                                  int64_t count,
                                                  DType dtype) override {
    reduceScatter(in, out, count, dtype);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<CommRequest> startAllGather(const void *in, void *out,
                                              int64_t count,
                                              DType dtype) override {
    allGather(in, out, count, dtype);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<CommRequest> startSend(const void *, int64_t, DType, int peer,
                                         int) override {
    noPeer(peer);
  }
  std::unique_ptr<CommRequest> startRecv(void *, int64_t, DType, int peer,
                                         int) override {
    noPeer(peer);
  }

private:
  [[noreturn]] void noPeer(int peer) {
    fail("send/recv to rank ", peer,
         " in a one-rank world; this program "
         "needs more ranks (launch it with mpirun)");
  }
  std::string name_;
};

class SingleRankBackend final : public CommBackend {
public:
  const char *name() const override { return "single-rank"; }
  int worldRank() const override { return 0; }
  int worldSize() const override { return 1; }
  Communicator &world() override { return world_; }
  std::unique_ptr<Communicator>
  createGroup(const ProcessGroup &group) override {
    if (group.indexOf(0) < 0)
      return nullptr;
    return std::make_unique<SelfCommunicator>(group.name);
  }

private:
  SelfCommunicator world_{"world"};
};

} // namespace

std::unique_ptr<CommBackend> createSingleRankBackend() {
  return std::make_unique<SingleRankBackend>();
}

} // namespace strata::rt
