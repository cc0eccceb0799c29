//===- MpiBackend.h - Communicators over MPI ------------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The MPI implementation of CommBackend/Communicator: one MPI_Comm per
// process group (MPI_Comm_split of a duplicate of MPI_COMM_WORLD, in group
// table order, key = index in the group, so group rank = that index). Errors
// are fatal (MPI_ERRORS_ARE_FATAL). A watchdog thread ends the process,
// naming the operation, when a blocking collective or a wait has not
// completed after STRATA_COLLECTIVE_TIMEOUT_S seconds (default 1800, 0 = off)
// so that a stalled job cannot hang forever even when no rank died.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_MPI_MPIBACKEND_H
#define STRATA_RUNTIME_MPI_MPIBACKEND_H

#include "runtime/core/Communicator.h"

#include <memory>

namespace strata::rt::mpi {

/// True when an MPI launcher (mpirun, srun, hydra) started this process.
bool launchedByMpiLauncher();

/// Initialises MPI once (MPI_Init_thread, FUNNELED) and returns the world.
/// Later calls return new backends over the same MPI world.
std::unique_ptr<CommBackend> createMpiBackend();

/// MPI_Finalize if MPI was initialised and not yet finalised. Only call it
/// when every rank gets there (the normal end of a run).
void finalizeMpi();

/// Seconds from STRATA_COLLECTIVE_TIMEOUT_S (default 1800; 0 disables).
double collectiveTimeoutSeconds();

} // namespace strata::rt::mpi

#endif // STRATA_RUNTIME_MPI_MPIBACKEND_H
