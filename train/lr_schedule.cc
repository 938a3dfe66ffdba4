// Learning-rate schedules.
#include "train/lr_schedule.h"

#include <cmath>

#include "graph/error.h"

namespace ot {

double LrSchedule::At(int epoch) const {
  switch (kind) {
    case Kind::kConstant: return base_lr;
    case Kind::kStep: return base_lr * std::pow(gamma, epoch / std::max(step_size, 1));
    case Kind::kCosine: {
      const double pi = std::acos(-1.0);
      return base_lr * 0.5 * (1.0 + std::cos(pi * epoch / std::max(total_epochs, 1)));
    }
  }
  return base_lr;
}

std::string LrSchedule::Describe() const {
  switch (kind) {
    case Kind::kConstant: return "constant";
    case Kind::kStep: return StrFormat("step (every %d epochs x%g)", step_size, gamma);
    case Kind::kCosine: return StrFormat("cosine over %d epochs", total_epochs);
  }
  return "";
}

LrSchedule::Kind ParseLrScheduleKind(const std::string& name) {
  if (name == "constant") return LrSchedule::Kind::kConstant;
  if (name == "step") return LrSchedule::Kind::kStep;
  if (name == "cosine") return LrSchedule::Kind::kCosine;
  throw Error("unknown --lr-schedule '" + name + "'; choose constant, step or cosine");
}

}  // namespace ot
