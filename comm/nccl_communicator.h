// NcclCommunicator: the Communicator for CUDA buffers on NCCL. Compiled only when
// ONNXTRAIN_HAVE_CUDA (CMake's ONNXTRAIN_CUDA finds the toolkit with NCCL); registered
// as backend "nccl", which "auto" picks for CUDA devices.
//
// One GPU per rank: cuda:K when CommConfig::device is cuda:K (the model's device), else
// cuda:(local_rank % device count). Rank 0 makes the NCCL unique id and shares it through
// the same rendezvous store as the Gloo backend (after JoinRun's world-size and
// fingerprint check). The NCCL communicator is non-blocking, so no NCCL call waits
// without a deadline.
//
// Streams: collectives run on the device context's `comm` stream (or
// CollectiveOptions::stream). Each collective first makes its stream wait for an event
// recorded on the `compute` stream, so it sees every gradient the kernels have queued;
// Work::WaitOnStream(compute) makes later kernels (the optimizer) wait for the collective
// without blocking the host. Host (CPU) buffers are staged through device memory and
// copied back in Wait().
//
// Failures: Work::Wait polls the collective's event and ncclCommGetAsyncError; a watchdog
// thread does the same for collectives nobody waits on. A NCCL error, a peer process that
// died (seen at once through a Gloo "goodbye" connection, comm/peer_watch.h), or a
// collective older than its timeout aborts the NCCL communicator (ncclCommAbort, which
// ends its kernels, so no stream waits for ever) and fails every pending collective with
// the CommError kinds of the Gloo backend (kTimeout, kPeerLost, kAborted).
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace ot {

// Connects (rendezvous, join, NCCL init) and returns the communicator; throws CommError.
// Without a usable GPU: CommError(kInvalid) "nccl backend needs a CUDA device: <reason>".
std::unique_ptr<Communicator> CreateNcclCommunicator(const CommConfig& config);

// CUDA devices this process could use, counted in a forked child so that this process
// does not initialise CUDA (a CUDA context does not survive fork(): a launcher that
// forks its ranks must not touch CUDA first). *reason gets NoDeviceReason() when 0.

}  // namespace ot
