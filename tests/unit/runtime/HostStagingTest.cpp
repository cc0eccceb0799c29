//===- HostStagingTest.cpp - Collectives staged through host memory -------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The CUDA device runs MPI collectives on its arena through host copies
// (runtime/core/HostStaging.h). Here the "device" is host memory behind a
// copier that counts its copies, and the communicator is a two-rank group
// whose peer holds known values, so the staging (buffer sizes, what is
// copied back, and when) is checked on every machine.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/HostStaging.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

using namespace strata::rt;

namespace {

class CountingCopier final : public DeviceCopier {
public:
  void toHost(void *host, const void *device, size_t bytes) override {
    std::memcpy(host, device, bytes);
    ++toHostCalls;
  }
  void toDevice(void *device, const void *host, size_t bytes) override {
    std::memcpy(device, host, bytes);
    ++toDeviceCalls;
  }
  int toHostCalls = 0, toDeviceCalls = 0;
};

/// Runs its operation when waited on, as a slow network would.
class DeferredRequest final : public CommRequest {
public:
  explicit DeferredRequest(std::function<void()> op) : op_(std::move(op)) {}
  bool test() override { return false; }
  void wait() override {
    if (op_)
      op_();
    op_ = nullptr;
  }

private:
  std::function<void()> op_;
};

/// Rank 0 of two; the peer's buffers hold 100 + the index. Only f32.
class TwoRankComm final : public Communicator {
public:
  const std::string &name() const override { return name_; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allReduce(void *buf, int64_t count, DType, ReduceOp) override {
    float *x = static_cast<float *>(buf);
    for (int64_t i = 0; i < count; ++i)
      x[i] += 100.0f + float(i);
  }
  void reduceScatter(const void *in, void *out, int64_t count, DType) override {
    const float *x = static_cast<const float *>(in);
    float *y = static_cast<float *>(out);
    for (int64_t i = 0; i < count; ++i) // Rank 0's chunk is the first.
      y[i] = x[i] + 100.0f + float(i);
  }
  void allGather(const void *in, void *out, int64_t count, DType) override {
    const float *x = static_cast<const float *>(in);
    float *y = static_cast<float *>(out);
    for (int64_t i = 0; i < count; ++i) {
      y[i] = x[i];
      y[count + i] = 100.0f + float(i);
    }
  }
  void send(const void *buf, int64_t count, DType, int, int) override {
    const float *x = static_cast<const float *>(buf);
    sent.assign(x, x + count);
  }
  void recv(void *buf, int64_t count, DType, int, int) override {
    float *y = static_cast<float *>(buf);
    for (int64_t i = 0; i < count; ++i)
      y[i] = 100.0f + float(i);
  }
  void barrier() override {}
  std::unique_ptr<CommRequest>
  startAllReduce(void *buf, int64_t count, DType dtype, ReduceOp op) override {
    return defer([=] { allReduce(buf, count, dtype, op); });
  }
  std::unique_ptr<CommRequest> startReduceScatter(const void *in, void *out,
                                                  int64_t count,
                                                  DType dtype) override {
    return defer([=] { reduceScatter(in, out, count, dtype); });
  }
  std::unique_ptr<CommRequest> startAllGather(const void *in, void *out,
                                              int64_t count,
                                              DType dtype) override {
    return defer([=] { allGather(in, out, count, dtype); });
  }
  std::unique_ptr<CommRequest> startSend(const void *buf, int64_t count,
                                         DType dtype, int peer,
                                         int tag) override {
    return defer([=] { send(buf, count, dtype, peer, tag); });
  }
  std::unique_ptr<CommRequest> startRecv(void *buf, int64_t count, DType dtype,
                                         int peer, int tag) override {
    return defer([=] { recv(buf, count, dtype, peer, tag); });
  }

  std::vector<float> sent;

private:
  std::unique_ptr<CommRequest> defer(std::function<void()> op) {
    return std::make_unique<DeferredRequest>(std::move(op));
  }
  std::string name_ = "pair";
};

std::vector<float> iota(int64_t n, float start) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = start + float(i);
  return v;
}

} // namespace

TEST(HostStaging, BlockingCollectivesCopyInAndOut) {
  TwoRankComm comm;
  CountingCopier copier;
  std::vector<float> buf = iota(5, 1.0f);
  staged::allReduce(comm, copier, buf.data(), 5, DType::F32, ReduceOp::Sum);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(buf[i], 1.0f + i + 100.0f + i);

  // reduce_scatter reads count x size elements and writes count.
  std::vector<float> in = iota(6, 0.0f), out(3, -1.0f);
  staged::reduceScatter(comm, copier, in.data(), out.data(), 3, DType::F32);
  EXPECT_EQ(out, (std::vector<float>{100.0f, 102.0f, 104.0f}));

  // all_gather reads count and writes count x size.
  std::vector<float> chunk = iota(2, 7.0f), all(4, -1.0f);
  staged::allGather(comm, copier, chunk.data(), all.data(), 2, DType::F32);
  EXPECT_EQ(all, (std::vector<float>{7.0f, 8.0f, 100.0f, 101.0f}));

  std::vector<float> msg = iota(3, 5.0f);
  staged::send(comm, copier, msg.data(), 3, DType::F32, 1, 0);
  EXPECT_EQ(comm.sent, msg);
  std::vector<float> got(3, -1.0f);
  staged::recv(comm, copier, got.data(), 3, DType::F32, 1, 0);
  EXPECT_EQ(got, (std::vector<float>{100.0f, 101.0f, 102.0f}));
  EXPECT_EQ(copier.toHostCalls, 4);   // No copy in for recv.
  EXPECT_EQ(copier.toDeviceCalls, 4); // No copy back for send.
}

TEST(HostStaging, NonBlockingResultsReachTheDeviceAtWaitOnce) {
  TwoRankComm comm;
  CountingCopier copier;
  std::vector<float> buf = iota(4, 1.0f);
  auto req = staged::startAllReduce(comm, copier, buf.data(), 4, DType::F32,
                                    ReduceOp::Sum);
  EXPECT_EQ(buf, iota(4, 1.0f)); // Untouched until wait.
  EXPECT_FALSE(req->test());
  req->wait();
  EXPECT_EQ(buf, (std::vector<float>{101.0f, 103.0f, 105.0f, 107.0f}));
  req->wait(); // A second wait copies nothing again.
  EXPECT_EQ(copier.toDeviceCalls, 1);

  std::vector<float> in = iota(4, 0.0f), out(2, -1.0f);
  auto rs = staged::startReduceScatter(comm, copier, in.data(), out.data(), 2,
                                       DType::F32);
  in.assign(4, 1e9f); // The staged input was taken at start.
  EXPECT_EQ(out, std::vector<float>(2, -1.0f));
  rs->wait();
  EXPECT_EQ(out, (std::vector<float>{100.0f, 102.0f}));

  std::vector<float> chunk = iota(2, 3.0f), all(4, -1.0f);
  auto ag = staged::startAllGather(comm, copier, chunk.data(), all.data(), 2,
                                   DType::F32);
  ag->wait();
  EXPECT_EQ(all, (std::vector<float>{3.0f, 4.0f, 100.0f, 101.0f}));

  std::vector<float> msg = iota(2, 9.0f);
  auto s = staged::startSend(comm, copier, msg.data(), 2, DType::F32, 1, 3);
  msg.assign(2, 0.0f); // Sent what the buffer held at start.
  s->wait();
  EXPECT_EQ(comm.sent, (std::vector<float>{9.0f, 10.0f}));

  std::vector<float> got(2, -1.0f);
  auto r = staged::startRecv(comm, copier, got.data(), 2, DType::F32, 1, 3);
  EXPECT_EQ(got, std::vector<float>(2, -1.0f));
  r->wait();
  EXPECT_EQ(got, (std::vector<float>{100.0f, 101.0f}));
}
