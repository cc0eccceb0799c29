//===- HostStaging.cpp - Collectives on device memory through the host ----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/HostStaging.h"

#include <cstdint>
#include <vector>

namespace strata::rt::staged {

namespace {

size_t bytesOf(int64_t count, DType dtype) {
  return size_t(count) * dtypeBytes(dtype);
}

/// Owns the host buffers of one non-blocking operation; completing the inner
/// request copies `out` to the device result, if any.
class StagedRequest final : public CommRequest {
public:
  StagedRequest(DeviceCopier &copier, size_t inBytes, size_t outBytes,
                void *deviceResult)
      : copier_(copier), in_(inBytes), out_(outBytes),
        deviceResult_(deviceResult) {}
  uint8_t *in() { return in_.data(); }
  uint8_t *out() { return out_.data(); }
  void start(std::unique_ptr<CommRequest> inner) { inner_ = std::move(inner); }
  bool test() override { return inner_->test(); }
  void wait() override {
    inner_->wait();
    if (deviceResult_ && !done_)
      copier_.toDevice(deviceResult_, out_.data(), out_.size());
    done_ = true;
  }

private:
  DeviceCopier &copier_;
  std::vector<uint8_t> in_, out_;
  void *deviceResult_;
  std::unique_ptr<CommRequest> inner_;
  bool done_ = false;
};

} // namespace

void allReduce(Communicator &comm, DeviceCopier &copier, void *buf,
               int64_t count, DType dtype, ReduceOp op) {
  std::vector<uint8_t> host(bytesOf(count, dtype));
  copier.toHost(host.data(), buf, host.size());
  comm.allReduce(host.data(), count, dtype, op);
  copier.toDevice(buf, host.data(), host.size());
}

void reduceScatter(Communicator &comm, DeviceCopier &copier, const void *in,
                   void *out, int64_t count, DType dtype) {
  std::vector<uint8_t> hostIn(bytesOf(count * comm.size(), dtype)),
      hostOut(bytesOf(count, dtype));
  copier.toHost(hostIn.data(), in, hostIn.size());
  comm.reduceScatter(hostIn.data(), hostOut.data(), count, dtype);
  copier.toDevice(out, hostOut.data(), hostOut.size());
}

void allGather(Communicator &comm, DeviceCopier &copier, const void *in,
               void *out, int64_t count, DType dtype) {
  std::vector<uint8_t> hostIn(bytesOf(count, dtype)),
      hostOut(bytesOf(count * comm.size(), dtype));
  copier.toHost(hostIn.data(), in, hostIn.size());
  comm.allGather(hostIn.data(), hostOut.data(), count, dtype);
  copier.toDevice(out, hostOut.data(), hostOut.size());
}

void send(Communicator &comm, DeviceCopier &copier, const void *buf,
          int64_t count, DType dtype, int peer, int tag) {
  std::vector<uint8_t> host(bytesOf(count, dtype));
  copier.toHost(host.data(), buf, host.size());
  comm.send(host.data(), count, dtype, peer, tag);
}

void recv(Communicator &comm, DeviceCopier &copier, void *buf, int64_t count,
          DType dtype, int peer, int tag) {
  std::vector<uint8_t> host(bytesOf(count, dtype));
  comm.recv(host.data(), count, dtype, peer, tag);
  copier.toDevice(buf, host.data(), host.size());
}

std::unique_ptr<CommRequest> startAllReduce(Communicator &comm,
                                            DeviceCopier &copier, void *buf,
                                            int64_t count, DType dtype,
                                            ReduceOp op) {
  auto req =
      std::make_unique<StagedRequest>(copier, 0, bytesOf(count, dtype), buf);
  copier.toHost(req->out(), buf, bytesOf(count, dtype));
  req->start(comm.startAllReduce(req->out(), count, dtype, op));
  return req;
}

std::unique_ptr<CommRequest> startReduceScatter(Communicator &comm,
                                                DeviceCopier &copier,
                                                const void *in, void *out,
                                                int64_t count, DType dtype) {
  size_t inBytes = bytesOf(count * comm.size(), dtype);
  auto req = std::make_unique<StagedRequest>(copier, inBytes,
                                             bytesOf(count, dtype), out);
  copier.toHost(req->in(), in, inBytes);
  req->start(comm.startReduceScatter(req->in(), req->out(), count, dtype));
  return req;
}

std::unique_ptr<CommRequest> startAllGather(Communicator &comm,
                                            DeviceCopier &copier,
                                            const void *in, void *out,
                                            int64_t count, DType dtype) {
  size_t inBytes = bytesOf(count, dtype);
  auto req = std::make_unique<StagedRequest>(
      copier, inBytes, bytesOf(count * comm.size(), dtype), out);
  copier.toHost(req->in(), in, inBytes);
  req->start(comm.startAllGather(req->in(), req->out(), count, dtype));
  return req;
}

std::unique_ptr<CommRequest> startSend(Communicator &comm, DeviceCopier &copier,
                                       const void *buf, int64_t count,
                                       DType dtype, int peer, int tag) {
  size_t bytes = bytesOf(count, dtype);
  auto req = std::make_unique<StagedRequest>(copier, bytes, 0, nullptr);
  copier.toHost(req->in(), buf, bytes);
  req->start(comm.startSend(req->in(), count, dtype, peer, tag));
  return req;
}

std::unique_ptr<CommRequest> startRecv(Communicator &comm, DeviceCopier &copier,
                                       void *buf, int64_t count, DType dtype,
                                       int peer, int tag) {
  auto req =
      std::make_unique<StagedRequest>(copier, 0, bytesOf(count, dtype), buf);
  req->start(comm.startRecv(req->out(), count, dtype, peer, tag));
  return req;
}

} // namespace strata::rt::staged
