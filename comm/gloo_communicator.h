// GlooCommunicator: the Communicator for host (CPU) buffers on Gloo's TCP transport.
// Collectives run one after another on a background thread, so every Work is truly
// asynchronous; their order is the order of the calls, which must match on all ranks.
// A failed collective makes the communicator unusable; its CommError names the rank(s)
// that did not report the failure to the rendezvous store (see GlooCommunicator.cc).
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace ot {

class RendezvousStore;

// Connects (rendezvous, join, full mesh) and returns the communicator; throws CommError.
std::unique_ptr<Communicator> CreateGlooCommunicator(const CommConfig& config);

// A Gloo full mesh of this run's ranks under `scope` (no timeout) that carries only a
// PeerWatch's goodbyes; the NCCL backend watches its peers through one. Throws CommError.
std::shared_ptr<gloo::Context> ConnectPeerWatchMesh(RendezvousStore& store,
                                                    const CommConfig& config,
                                                    const std::string& scope);

// The allreduce algorithm AllreduceAlgorithm::kAuto runs for a message of this many bytes
// on this many ranks (float32 and float64; other dtypes always use the ring).
AllreduceAlgorithm GlooAutoAllreduceAlgorithm(size_t bytes, int world_size);

}  // namespace ot
