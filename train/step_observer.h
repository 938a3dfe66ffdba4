// Something that watches a training run step by step without taking part in it: the
// launcher's heartbeat and the chaos tests' fault injection (tools/worker_observers.h) are
// installed by onnx-train's worker; the trainer only calls them.
#pragma once

#include <cstdint>

namespace ot {

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // After optimizer step `global_step` (counted over the whole run) of rank `rank`.
  virtual void AfterStep(int64_t global_step, int rank) = 0;
};

}  // namespace ot
