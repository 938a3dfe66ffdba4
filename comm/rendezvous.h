// Rendezvous: how the ranks of one run find each other before any connection exists.
//  - RendezvousStore: a key-value store scoped to one run id, on Gloo's FileStore (a
//    directory; the default, nothing to start) or Gloo's RedisStore (redis://HOST:PORT).
//  - JoinRun(): every rank announces itself with its world size and fingerprint; ranks
//    that never join, disagree, or claim a rank twice end in a CommError naming them.
//  - LaunchInfoFromEnvironment(): rank, world size and local rank from onnx-train's own
//    launcher or from torchrun, Slurm or Open MPI environments.
//
// torchrun without a store: torchrun's MASTER_ADDR:MASTER_PORT serves PyTorch's own
// TCPStore protocol, which we do not speak. On one host (LOCAL_WORLD_SIZE == WORLD_SIZE, or
// MASTER_ADDR on loopback) we fall back to a FileStore in a directory named after
// TORCHELASTIC_RUN_ID, MASTER_ADDR and MASTER_PORT, so every worker of that torchrun picks
// the same one and two torchruns apart. Across hosts ONNXTRAIN_RDZV must name a store
// (redis://HOST:PORT, or file:DIR on a shared file system); otherwise the error says so.
// Slurm and Open MPI runs are treated the same way (one node: FileStore; several: need
// ONNXTRAIN_RDZV).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace gloo {
namespace rendezvous {
class Store;
}
}  // namespace gloo

namespace ot {

class RendezvousStore {
 public:
  // spec: see CommConfig::rendezvous. Creates the FileStore directory; probes Redis with
  // a bounded connect. Throws CommError(kUnavailable) naming the rank and the store.
  static std::unique_ptr<RendezvousStore> Open(const std::string& spec,
                                               const std::string& run_id, int rank,
                                               std::chrono::milliseconds connect_timeout);
  virtual ~RendezvousStore();

  // Keys are set once; setting one again fails.
  void Set(const std::string& key, const std::string& value);
  // The value of a key that exists (check with Has or WaitFor first).
  std::string Get(const std::string& key);
  bool Has(const std::string& key);
  // Waits until every key exists or the timeout passes; returns the keys still missing.
  std::vector<std::string> WaitFor(const std::vector<std::string>& keys,
                                   std::chrono::milliseconds timeout);
  // A Gloo view of this run's store with keys under `scope`, for connectFullMesh (one
  // scope per Gloo context). It borrows this store, which must outlive it.
  std::unique_ptr<gloo::rendezvous::Store> GlooStore(const std::string& scope);
  // "FileStore /tmp/onnx-train-rdzv/RUN" or "RedisStore 127.0.0.1:6379 (run RUN)".
  const std::string& description() const { return description_; }
  // True for stores only this host can reach (a FileStore outside a shared file system).
  bool is_file_store() const { return is_file_store_; }

 private:
  class ScopedStore;
  RendezvousStore(std::unique_ptr<ScopedStore> store, std::string description, int rank,
                  bool is_file_store);
  [[noreturn]] void Rethrow(const char* what, const std::exception& e) const;

  std::unique_ptr<ScopedStore> store_;
  std::string description_;
  int rank_;
  bool is_file_store_;
};

// Directory of the default FileStore of a run: $TMPDIR (or /tmp)/onnx-train-rdzv/RUN_ID.
std::string DefaultRendezvousDir(const std::string& run_id);
// A run id unique on this host and across hosts with overwhelming odds.
std::string NewRunId();

// Announces this rank in the store and waits for all others (config.timeout). Checks that
// all agree on the world size and the fingerprint and that no rank is claimed twice.
void JoinRun(RendezvousStore& store, const CommConfig& config);

// What a launcher environment says about this process.
struct LaunchInfo {
  std::string source;  // "onnx-train", "torchrun", "slurm", "openmpi"; empty if none
  int rank = -1;
  int size = 0;
  int local_rank = 0;
  // Ranks of this run on this host (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, Slurm's
  // tasks over its nodes, every rank for onnx-train's own launcher); 0 when not known.
  int local_size = 0;
  std::string run_id;
  std::string rendezvous;  // a store spec when the environment names one
};
using EnvLookup = std::function<const char*(const char*)>;
// Reads, in this order, ONNXTRAIN_RANK/ONNXTRAIN_WORLD_SIZE/ONNXTRAIN_LOCAL_RANK/
// ONNXTRAIN_RUN_ID/ONNXTRAIN_RDZV, torchrun's RANK/WORLD_SIZE/LOCAL_RANK (+MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_RUN_ID, LOCAL_WORLD_SIZE), Slurm's SLURM_PROCID/SLURM_NTASKS/
// SLURM_LOCALID (+SLURM_JOB_ID, SLURM_STEP_ID, SLURM_NNODES) and Open MPI's
// OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK (+_LOCAL_SIZE). ONNXTRAIN_RDZV and
// ONNXTRAIN_RUN_ID override the store and run id of any launcher. Throws CommError(kInvalid)
// for malformed values, or a multi-host launch without a store when `store_needed` (the MPI
// backend finds its peers through MPI itself, across hosts too).
// `lookup` is the environment as the entry point reads it (comm/ reads none itself).
LaunchInfo LaunchInfoFromEnvironment(const EnvLookup& lookup, bool store_needed = true);

}  // namespace ot
