// GradientReducer: data-parallel gradient averaging, like PyTorch DDP's reducer. The
// parameters' gradients are grouped into buckets in the order backward produces them
// (reverse parameter order; the first bucket small, 1 MiB, the rest up to 25 MiB). As each
// gradient is produced the executor hands it over (RunOptions::on_value_ready); when a
// bucket is full its allreduce (average) starts at once, on the communicator's thread,
// while backward goes on. Before an optimizer node reads a gradient
// (RunOptions::before_node) the reducer waits for that gradient's bucket only and copies
// the average back.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/executor.h"

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

 private:
  struct Bucket {
    std::vector<float> buffer;
    size_t pending = 0;  // gradients not yet copied in this step
    WorkPtr work;
    bool reduced = false;
  };
  struct Slot {
    size_t bucket = 0;
    size_t offset = 0;  // elements
    int64_t count = 0;
    Tensor tensor;      // this step's gradient (shares the executor's buffer)
  };
  void OnValue(const std::string& name, const Tensor& value);
  void BeforeNode(const Node& node);

  Communicator& comm_;
  BucketOptions options_;
  std::vector<Bucket> buckets_;
  std::map<std::string, Slot> slots_;
  double wait_seconds_ = 0;
};

}  // namespace ot
