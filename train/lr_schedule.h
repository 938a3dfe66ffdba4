// Learning-rate schedules, stepped per epoch like PyTorch's schedulers: constant, StepLR
// (multiply by gamma every step_size epochs) and cosine annealing to zero over the run.
#pragma once

#include <string>

namespace ot {

struct LrSchedule {
  enum class Kind { kConstant, kStep, kCosine };
  Kind kind = Kind::kConstant;
  double base_lr = 0.01;
  int step_size = 5;     // StepLR
  double gamma = 0.1;    // StepLR
  int total_epochs = 1;  // cosine

  // Learning rate during epoch `epoch` (0-based).
  double At(int epoch) const;
  std::string Describe() const;
};

// Parses "constant", "step" or "cosine"; throws ot::Error otherwise.
LrSchedule::Kind ParseLrScheduleKind(const std::string& name);

}  // namespace ot
