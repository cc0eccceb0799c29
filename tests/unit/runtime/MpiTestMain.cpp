//===- MpiTestMain.cpp - GoogleTest main for tests run under mpirun -------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Every rank runs every test; the tests' collectives line up because all
// ranks execute the same test sequence. Rank 0 prints the usual report; the
// other ranks print only their failures, prefixed with the rank.
//
//===----------------------------------------------------------------------===//

#include "MpiTestSupport.h"

#include "runtime/mpi/MpiBackend.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <unistd.h>

namespace strata::rt::mpitest {

std::shared_ptr<CommBackend> &mpiComms() {
  static std::shared_ptr<CommBackend> comms;
  return comms;
}

std::filesystem::path sharedTempDir(const std::string &name) {
  auto comms = mpiComms();
  double pid = comms->worldRank() == 0 ? double(::getpid()) : 0.0;
  comms->world().allReduce(&pid, 1, DType::F64, ReduceOp::Max);
  return std::filesystem::temp_directory_path() /
         ("strata-mpi-" + name + "-" + std::to_string(int64_t(pid)));
}

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult &result) override {
    if (result.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_,
                   result.file_name() ? result.file_name() : "?",
                   result.line_number(), result.summary());
  }

private:
  int rank_;
};

} // namespace
} // namespace strata::rt::mpitest

int main(int argc, char **argv) {
  using namespace strata::rt;
  ::testing::InitGoogleTest(&argc, argv);
  mpitest::mpiComms() = mpi::createMpiBackend();
  int rank = mpitest::mpiComms()->worldRank();
  if (rank != 0) {
    auto &listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new mpitest::RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS();
  // The job fails if any rank failed.
  double any = failed ? 1.0 : 0.0;
  mpitest::mpiComms()->world().allReduce(&any, 1, DType::F64, ReduceOp::Max);
  mpitest::mpiComms().reset();
  mpi::finalizeMpi();
  return any > 0 ? 1 : 0;
}
