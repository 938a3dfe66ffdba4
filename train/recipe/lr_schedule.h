// Learning-rate schedules as torchvision's reference script composes them: an optional
// warmup (LinearLR or ConstantLR from `warmup_decay` times the base rate) followed by the
// main schedule (constant, StepLR, CosineAnnealingLR to zero, ExponentialLR), as
// torch.optim.lr_scheduler.SequentialLR with the milestone at the warmup's end. The
// schedule is evaluated per epoch (torchvision's scheduler.step() once an epoch; the
// default) or per optimizer step (timm's and the ViT recipes' per-update stepping).
//
// In units u (epochs, or optimizer steps when per step; S steps per epoch), with
// W = warmup_epochs (x S), T = total_epochs (x S), base rate B, d = warmup_decay, i the
// units done before this one (0-based):
//   i < W, linear:   B * (d + (1 - d) * i / W)       (LinearLR(start_factor=d, total_iters=W))
//   i < W, constant: B * d                           (ConstantLR(factor=d, total_iters=W))
//   then j = i - W:  constant B; step B * gamma^floor(j / (step_size (x S)));
//                    cosine B * (1 + cos(pi * j / (T - W))) / 2;
//                    exponential B * gamma^j per epoch, B * gamma^(j / S) per step
// The rate is a function of the step count alone, so a resumed run gets the same rate at
// every step.
#pragma once

#include <cstdint>
#include <string>

namespace ot {

struct LrSchedule {
  enum class Kind { kConstant, kStep, kCosine, kExponential };
  enum class Warmup { kLinear, kConstant };
  Kind kind = Kind::kConstant;
  double base_lr = 0.01;
  int step_size = 5;     // StepLR, in epochs
  double gamma = 0.1;    // StepLR, ExponentialLR (per epoch)
  int total_epochs = 1;  // cosine
  int warmup_epochs = 0;
  Warmup warmup = Warmup::kLinear;
  double warmup_decay = 0.01;  // torchvision's --lr-warmup-decay default
  bool per_step = false;       // evaluated per optimizer step, not per epoch

  // Learning rate of the optimizer step `step` (0-based, counted over the whole run)
  // when an epoch has `steps_per_epoch` optimizer steps.
  double AtStep(int64_t step, int64_t steps_per_epoch) const;
  // Learning rate of epoch `epoch`'s first step (0-based).
  double At(int epoch) const { return AtStep(epoch, 1); }
  std::string Describe() const;
  // Throws ot::Error for a warmup that does not fit in the run.
  void Check() const;
};

// Parses "constant", "step" (or "steplr"), "cosine" (or "cosineannealinglr"),
// "exponential" (or "exponentiallr"); throws ot::Error otherwise.
LrSchedule::Kind ParseLrScheduleKind(const std::string& name);
// Parses "linear" or "constant"; throws ot::Error otherwise.
LrSchedule::Warmup ParseLrWarmupMethod(const std::string& name);

}  // namespace ot
