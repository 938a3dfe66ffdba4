// Learning-rate schedules.
#include "train/recipe/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "graph/error.h"

namespace ot {

double LrSchedule::AtStep(int64_t step, int64_t steps_per_epoch) const {
  // Units: epochs, or steps when per step (At(epoch) passes steps_per_epoch 1).
  const int64_t s = per_step ? std::max<int64_t>(steps_per_epoch, 1) : 1;
  const int64_t i = per_step ? step : step / std::max<int64_t>(steps_per_epoch, 1);
  const int64_t w = static_cast<int64_t>(warmup_epochs) * s;
  if (i < w) {
    const double factor = warmup == Warmup::kConstant
                              ? warmup_decay
                              : warmup_decay + (1.0 - warmup_decay) * static_cast<double>(i) / static_cast<double>(w);
    return base_lr * factor;
  }
  const int64_t j = i - w;
  switch (kind) {
    case Kind::kConstant: return base_lr;
    case Kind::kStep: return base_lr * std::pow(gamma, static_cast<double>(j / (std::max(step_size, 1) * s)));
    case Kind::kCosine: {
      const double pi = std::acos(-1.0);
      const int64_t span = std::max<int64_t>(static_cast<int64_t>(total_epochs) * s - w, 1);
      return base_lr * 0.5 * (1.0 + std::cos(pi * static_cast<double>(j) / static_cast<double>(span)));
    }
    case Kind::kExponential:
      return base_lr * std::pow(gamma, static_cast<double>(j) / static_cast<double>(s));
  }
  return base_lr;
}

std::string LrSchedule::Describe() const {
  std::string main;
  switch (kind) {
    case Kind::kConstant: main = "constant"; break;
    case Kind::kStep: main = StrFormat("step (every %d epochs x%g)", step_size, gamma); break;
    case Kind::kCosine: main = StrFormat("cosine over %d epochs", total_epochs - warmup_epochs); break;
    case Kind::kExponential: main = StrFormat("exponential x%g per epoch", gamma); break;
  }
  if (warmup_epochs > 0)
    main = StrFormat("%s warmup over %d epoch%s from x%g, then ", warmup == Warmup::kLinear ? "linear" : "constant",
                     warmup_epochs, warmup_epochs == 1 ? "" : "s", warmup_decay) + main;
  return main + (per_step ? ", per step" : "");
}

void LrSchedule::Check() const {
  OT_CHECK(warmup_epochs >= 0, "--lr-warmup-epochs must be 0 or more");
  OT_CHECK(warmup_epochs == 0 || warmup_epochs < total_epochs,
           "--lr-warmup-epochs %d is not shorter than --epochs %d; the warmup must leave epochs to train at the "
           "scheduled rate",
           warmup_epochs, total_epochs);
  OT_CHECK(warmup_decay > 0 && warmup_decay <= 1, "--lr-warmup-decay must be in (0, 1], got %g", warmup_decay);
  OT_CHECK(gamma > 0 && std::isfinite(gamma), "--lr-gamma must be a positive number");
  OT_CHECK(step_size >= 1, "--lr-step must be at least 1");
}

LrSchedule::Kind ParseLrScheduleKind(const std::string& name) {
  if (name == "constant") return LrSchedule::Kind::kConstant;
  if (name == "step" || name == "steplr") return LrSchedule::Kind::kStep;
  if (name == "cosine" || name == "cosineannealinglr") return LrSchedule::Kind::kCosine;
  if (name == "exponential" || name == "exponentiallr") return LrSchedule::Kind::kExponential;
  throw Error("unknown learning-rate schedule '" + name +
              "'; choose constant, step (steplr), cosine (cosineannealinglr) or exponential (exponentiallr)");
}

LrSchedule::Warmup ParseLrWarmupMethod(const std::string& name) {
  if (name == "linear") return LrSchedule::Warmup::kLinear;
  if (name == "constant") return LrSchedule::Warmup::kConstant;
  throw Error("unknown --lr-warmup-method '" + name + "'; choose linear or constant");
}

}  // namespace ot
