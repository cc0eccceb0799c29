//===- MpiTestSupport.h - Shared state of the MPI unit tests --------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TESTS_UNIT_RUNTIME_MPITESTSUPPORT_H
#define STRATA_TESTS_UNIT_RUNTIME_MPITESTSUPPORT_H

#include "runtime/core/Communicator.h"

#include <filesystem>
#include <memory>
#include <string>

namespace strata::rt::mpitest {

/// The job's MPI backend, created by MpiTestMain before the tests run.
std::shared_ptr<CommBackend> &mpiComms();

/// A temporary directory name every rank agrees on (rank 0's pid);
/// collective over the world. Nothing is created.
std::filesystem::path sharedTempDir(const std::string &name);

} // namespace strata::rt::mpitest

#endif // STRATA_TESTS_UNIT_RUNTIME_MPITESTSUPPORT_H
