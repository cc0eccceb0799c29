//===- MpiTestSupport.h - Shared state of the MPI unit tests --------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TESTS_UNIT_RUNTIME_MPITESTSUPPORT_H
#define STRATA_TESTS_UNIT_RUNTIME_MPITESTSUPPORT_H

#include "runtime/core/Communicator.h"

#include <memory>

namespace strata::rt::mpitest {

/// The job's MPI backend, created by MpiTestMain before the tests run.
std::shared_ptr<CommBackend> &mpiComms();

} // namespace strata::rt::mpitest

#endif // STRATA_TESTS_UNIT_RUNTIME_MPITESTSUPPORT_H
