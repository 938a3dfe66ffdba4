// MpiCommunicator: the Communicator on Open MPI (libmpi), registered as backend "mpi".
// Built only when CMake finds MPI (ONNXTRAIN_MPI, like ONNXTRAIN_CUDA), as the plugin
// libonnxtrain_mpi.so that runtime/core/plugin.h loads when "mpi" is first asked for: a run on
// another backend never maps libmpi.
//
// Ranks come from MPI itself (MPI_COMM_WORLD), so they must be started by `mpirun -np N`
// (or srun with PMIx, or onnx-train's launcher with --backend mpi, which runs mpirun); no
// rendezvous store is used. At connect the world size and rank are checked against the
// CommConfig and the fingerprints compared (kMismatch names the ranks that differ).
//
// Collectives are MPI's non-blocking ones (MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather,
// MPI_Ireduce_scatter_block, MPI_Ibarrier), started on the calling thread in call order
// (every rank must call them in the same order, as with any backend). They progress
// through MPI_Test: in Work::Wait on the waiting thread (lowest latency) and on a progress
// thread for collectives nobody waits on yet (overlap with backward). MPI is used at
// MPI_THREAD_SERIALIZED: one mutex orders every MPI call.
//
// Allreduces larger than 4 MiB run as a chain of 4 MiB pieces, each started when the one
// before completes (each piece stays in cache: 64 MiB at 4.7 GB/s busbw instead of 0.6);
// collectives called meanwhile wait in line so every rank starts them in the same order.
// Open MPI defaults set before MPI_Init unless the environment sets them: libnbc's ring
// iallreduce and a 16 KiB shared-memory eager limit (measured, see mpi_communicator.cc);
// no single-copy (CMA) transport where process_vm_readv is forbidden (containers).
//
// Types: float32 and float64 reduce with MPI_SUM; float16 and bfloat16 with user-defined
// MPI_Ops that add in float32 and round back (comm/reduction.h, the Gloo backend's sums).
// Average = sum, then scaled on completion.
//
// Failures: the communicator's error handler is MPI_ERRORS_RETURN, so an MPI error becomes
// a CommError (kPeerLost for process/communication failures, else kInvalid) instead of
// aborting the job silently. A collective older than its timeout fails with kTimeout and
// breaks the communicator (MPI cannot cancel a collective). A rank that dies is seen by
// mpirun, which ends the other ranks at once and names the rank that died; this process
// then leaves without MPI_Finalize.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace ot {

// Initialises MPI on first use (MPI_Init_thread), connects and returns the communicator;
// throws CommError.
std::unique_ptr<Communicator> CreateMpiCommunicator(const CommConfig& config);

}  // namespace ot
