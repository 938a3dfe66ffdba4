// One optimizer step made of `accumulate` equal micro-batches (gradient accumulation, as
// torchvision's and nanoGPT's loops do it): the micro-batches before the last only add
// their gradients; the last one also allreduces (data parallel) and updates the weights.
// With accumulate 1 every batch is a step. The batch's figures go to the epoch's tally.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "runtime/core/device.h"
#include "train/loader/batch_loader.h"
#include "train/parallel/data_parallel.h"
#include "train/recipe/mix_batch.h"
#include "train/task.h"
#include "train/training_session.h"

namespace ot {

struct StepOutcome {
  bool stepped = false;  // the batch was the step's last: the weights were updated
  float loss = 0.f;      // the step's loss: the mean of its micro-batches' (when stepped)
  int64_t targets = 0;   // the step's targets (label elements) over its micro-batches
  std::string json;      // the step's metrics fields (",\"step_ms\":..."), when stepped
};

class StepAccumulator {
 public:
  StepAccumulator(TrainingSession& session, DataParallel& dp, int64_t accumulate, const MixOptions& mix,
                  const TaskSpec& spec, Device device)
      : session_(session), dp_(dp), accumulate_(accumulate), mix_(mix), spec_(spec), device_(device) {}

  // Trains on the epoch's batch number `s` (its micro-batch s % accumulate); `lr` is the
  // rate of the step it completes. Adds the batch's loss and scores to `tally`. Throws
  // ot::Error when the loss is not finite (naming a sample whose input is not, if any).
  // `between_kernels`, if set, runs before each of the step's kernels (the loader's prefetch
  // of the next batch: work that waits on memory, done while the step computes).
  StepOutcome Feed(Batch& batch, int64_t epoch, int64_t s, double lr, TaskFigures* tally,
                   const std::function<void()>& between_kernels = {});

 private:
  TrainingSession& session_;
  DataParallel& dp_;
  int64_t accumulate_;
  MixOptions mix_;
  TaskSpec spec_;
  Device device_;
  std::chrono::steady_clock::time_point start_;
  double group_loss_ = 0;  // the step's micro-batch losses so far
  int64_t group_n_ = 0;
};

}  // namespace ot
