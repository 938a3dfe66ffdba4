// ModelEma: an exponential moving average of a model's weights and BatchNorm running
// statistics, as torchvision's reference recipe keeps it (`--model-ema`,
// utils.ExponentialMovingAverage, an AveragedModel over parameters and buffers).
//
// The first update copies the model; each later one sets ema = decay * ema + (1 - decay) *
// model, in float32 as torch does. The trainer updates it after the steps whose index in
// the epoch i has i % model_ema_steps == 0 (i = 0 included), and during the first
// warmup_epochs epochs every update copies (torchvision resets n_averaged to 0 there).
// The decay given by the user is adjusted as torchvision's train.py does, so that the
// average spans the same share of training whatever the batch and update interval:
//   alpha = min(1, (1 - decay) * world_size * batch * model_ema_steps / epochs)
//   decay_used = 1 - alpha
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/host_tensor.h"
#include "graph/ir.h"

namespace ot {

// torchvision's adjusted decay (see above). Throws ot::Error for decay outside (0, 1).
double AdjustedEmaDecay(double decay, int64_t batch, int world_size, int64_t ema_steps, int epochs);

class ModelEma {
 public:
  // `inference`: the model to average (its float initializers are the averaged tensors).
  ModelEma(const Model& inference, double decay);

  // One update from the model's current weights (its float initializers, by name).
  void Update(const Model& current);
  // The next update copies the model again (torchvision's warmup reset).
  void ResetCount() { updates_ = 0; }

  int64_t updates() const { return updates_; }
  double decay() const { return decay_; }
  // The averaged tensors, named as the model's initializers.
  const std::vector<HostTensor>& tensors() const { return tensors_; }
  // The inference model with the averaged weights in place of its own.
  Model AveragedModel(const Model& inference) const;

  // Checkpoint form: each tensor under the name "ema/<name>", the count as a scalar.
  static std::string StateName(const std::string& name) { return "ema/" + name; }
  void Restore(const std::vector<HostTensor>& saved, int64_t updates);

 private:
  double decay_;
  int64_t updates_ = 0;
  std::vector<HostTensor> tensors_;
};

}  // namespace ot
