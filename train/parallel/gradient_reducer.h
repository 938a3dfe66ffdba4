// GradientReducer: data-parallel gradient averaging, like PyTorch DDP's reducer. The
// parameters' gradients are grouped into buckets in the order backward produces them
// (reverse parameter order; the first bucket small, 1 MiB, the rest up to 25 MiB). As each
// gradient is produced the executor hands it over (RunOptions::on_value_ready); when a
// bucket is full its allreduce (average) starts at once, on the communicator's thread,
// while backward goes on. Before an optimizer node reads a gradient
// (RunOptions::before_node) the reducer waits for that gradient's bucket only and copies
// the average back.
// Device gradients with the NCCL backend use device buckets: the copies in and out run on
// the compute stream, the allreduce on the comm stream after an event, and the optimizer's
// kernels wait for the bucket's event (Work::WaitOnStream) instead of the host; FinishStep
// then waits on the host, bounded by the timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/executor/executor.h"

namespace ot {

struct BucketOptions {
  size_t first_bucket_bytes = 1 << 20;
  size_t bucket_bytes = 25 << 20;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

class GradientReducer {
 public:
  // grads: (gradient value name, element count) in parameter order.
  GradientReducer(Communicator& comm, const std::vector<std::pair<std::string, int64_t>>& grads,
                  const BucketOptions& options = {});
  // The hooks to pass to one training step; they refer to this reducer.
  RunOptions Hooks();
  // After the step: every bucket must have been reduced and consumed.
  void FinishStep();
  size_t NumBuckets() const { return buckets_.size(); }
  // Seconds spent blocked in Wait during the last step (allreduce not hidden by backward).
  double last_wait_seconds() const { return wait_seconds_; }
  // Overlap counters of the last step (steady clock, taken in FinishStep):
  //  - allreduce_seconds: wall time during which at least one bucket allreduce was in
  //    flight (union of [start, completion] over the buckets; completion as the backend
  //    recorded it, else when this reducer first saw it complete);
  //  - wait_seconds: time the step was blocked waiting for allreduces (before optimizer
  //    nodes and in FinishStep);
  //  - hidden fraction = 1 - wait / allreduce (the share of allreduce time behind backward).
  struct StepStats {
    double allreduce_seconds = 0;
    double wait_seconds = 0;
    size_t buckets = 0;
  };
  const StepStats& last_stats() const { return stats_; }

 private:
  struct Bucket {
    std::vector<float> buffer;
    Tensor device_buffer;  // NCCL and device gradients: the bucket on their device
    size_t pending = 0;  // gradients not yet copied in this step
    WorkPtr work;
    bool reduced = false;
    std::chrono::steady_clock::time_point started, completed;  // this step's allreduce
  };
  struct Slot {
    size_t bucket = 0;
    size_t offset = 0;  // elements
    int64_t count = 0;
    Tensor tensor;      // this step's gradient (shares the executor's buffer)
  };
  void OnValue(const std::string& name, const Tensor& value);
  // The slot's span of its bucket (device bucket when there is one, else the host one).
  static Tensor BucketSlice(const Bucket& b, const Slot& s);
  void BeforeNode(const Node& node);
  // Marks completion times of allreduces seen done (fallback for backends without one).
  void NoteCompleted();

  Communicator& comm_;
  BucketOptions options_;
  std::vector<Bucket> buckets_;
  std::map<std::string, Slot> slots_;
  double wait_seconds_ = 0;
  StepStats stats_;
};

}  // namespace ot
