// The host side of --amp fp16's loss scaling: the scale, torch.amp.GradScaler's
// skip/grow/backoff rule, and its state for checkpoints. The graph side (scaled seed,
// unscaled gradients, the all-finite flag, the gated updates) is
// graph/passes/fp16/loss_scale_pass.h.
//
// --loss-scale dynamic[:S0] (initial scale S0, 65536 by default): a step whose gradients
// hold an inf or NaN is skipped and the scale halves; after 2000 finite steps in a row it
// doubles. static:S keeps S (a non-finite step is still skipped). none: no scaling nodes.
#pragma once

#include <cstdint>
#include <string>

namespace ot {

struct LossScaleOptions {
  enum class Kind { kDefault, kNone, kStatic, kDynamic };
  Kind kind = Kind::kDefault;  // kDefault: dynamic for --amp fp16, none otherwise
  float initial = 65536.f;
  float growth_factor = 2.f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
};

// "dynamic", "dynamic:S0", "static:S" or "none"; throws ot::Error, one line naming the
// value and the accepted forms, for anything else (S not a positive finite number).
LossScaleOptions ParseLossScale(const std::string& text);
std::string LossScaleName(const LossScaleOptions& o);  // "dynamic:65536", "static:1024", "none"

class LossScaler {
 public:
  LossScaler() = default;
  explicit LossScaler(const LossScaleOptions& o);
  bool enabled() const { return enabled_; }
  float scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t skipped_steps() const { return skipped_; }
  // After a step: `finite` is the graph's all-finite flag. Returns whether the step's
  // update was applied (false: skipped). GradScaler.update()'s rule for dynamic scales.
  bool Update(bool finite);
  // "scale_bits growth_tracker skipped" (the float's bits: a resume is bitwise), and back;
  // Load throws ot::Error on text Save did not write.
  std::string Save() const;
  void Load(const std::string& text);

 private:
  bool enabled_ = false;
  bool dynamic_ = false;
  float scale_ = 1.f;
  float growth_factor_ = 2.f, backoff_factor_ = 0.5f;
  int64_t growth_interval_ = 2000;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace ot
