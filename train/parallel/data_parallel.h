// The data-parallel part of a training run, like DDP: which rank this process is, the
// communicator that joins the ranks, the gradient allreduce in buckets during backward, the
// start from rank 0's state, and the sums over ranks that epoch figures and stop requests
// need. With one rank every method is a no-op (or the identity).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/rendezvous.h"
#include "runtime/core/device.h"
#include "train/parallel/gradient_reducer.h"
#include "train/parallel/replica_sum.h"
#include "train/training_session.h"

namespace ot {

struct DataParallelOptions {
  std::string backend = "auto";
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // of joining and of each collective
  double bucket_cap_mb = 25;
  std::string bind_addr;  // the address this rank's connections listen on ("": the backend's default)
  // This process's rank, world size and store, as the entry point read them from the
  // launcher's environment (comm/rendezvous.h LaunchInfoFromEnvironment); default: alone.
  LaunchInfo launch;
};

class DataParallel {
 public:
  // The rank and world size from options.launch (torchrun, Slurm, Open MPI or onnx-train's
  // own launcher, as the entry point read them).
  explicit DataParallel(const DataParallelOptions& options);
  int rank() const { return rank_; }
  int world() const { return world_; }
  int local_rank() const { return launch_.local_rank; }
  bool lead() const { return rank_ == 0; }
  // Sync BatchNorm's sums over the ranks (bound to the communicator by Connect).
  CrossReplicaSum* replica_sum() { return &replica_sum_; }

  // Joins the other ranks (world > 1): fingerprint is compared across them, so that ranks of
  // different jobs or models refuse to connect; buckets the session's gradients.
  void Connect(TrainingSession& session, Device device, const std::string& fingerprint);
  // Every rank takes rank 0's state (weights, BatchNorm statistics, optimizer state).
  void BroadcastState(TrainingSession& session);
  bool connected() const { return comm_ != nullptr; }
  // "data parallel: 4 ranks over gloo, 3 gradient buckets; batch 32 per rank (128 global)".
  std::string Describe(int64_t batch) const;

  // The backward hooks that start each bucket's allreduce, and the wait after the step.
  RunOptions Hooks();
  void FinishStep();
  double last_wait_seconds() const;
  // ",\"allreduce_ms\":..." for the step's metrics line ("" with one rank).
  std::string StepJson() const;

  // In place: the sum of every rank's values (the same length on every rank).
  void Sum(std::vector<double>* values);
  // Every rank's text, in rank order (each rank calls it with its own).
  std::vector<std::string> GatherText(const std::string& text);
  // Whether a stop was requested on any rank (every rank must call it after the same step).
  bool AnyStop(bool here);
  void Barrier();

 private:
  DataParallelOptions options_;
  LaunchInfo launch_;
  int rank_ = 0, world_ = 1;
  CommunicatorReplicaSum replica_sum_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<GradientReducer> reducer_;
};

}  // namespace ot
