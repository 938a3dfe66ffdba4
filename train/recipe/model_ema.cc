// ModelEma.
#include "train/recipe/model_ema.h"

#include <algorithm>
#include <cmath>

#include "graph/error.h"

namespace ot {

double AdjustedEmaDecay(double decay, int64_t batch, int world_size, int64_t ema_steps, int epochs) {
  OT_CHECK(decay > 0.0 && decay < 1.0, "--model-ema-decay %g is outside (0, 1); torchvision's default is 0.99998",
           decay);
  OT_CHECK(ema_steps >= 1, "--model-ema-steps must be at least 1");
  const double adjust = static_cast<double>(world_size) * static_cast<double>(batch) *
                        static_cast<double>(ema_steps) / static_cast<double>(std::max(epochs, 1));
  const double alpha = std::min(1.0, (1.0 - decay) * adjust);
  return 1.0 - alpha;
}

ModelEma::ModelEma(const Model& inference, double decay) : decay_(decay) {
  for (const HostTensor& t : inference.graph.initializers)
    if (t.dtype == DType::kFloat32) tensors_.push_back(t);
}

void ModelEma::Update(const Model& current) {
  // torch: decay * avg + (1 - decay) * param, with the scalars as float32.
  const float keep = static_cast<float>(decay_), take = static_cast<float>(1.0 - decay_);
  for (HostTensor& avg : tensors_) {
    const HostTensor* now = current.graph.FindInitializer(avg.name);
    OT_CHECK(now && now->dims == avg.dims && now->dtype == avg.dtype, "model EMA: tensor '%s' changed its shape",
             avg.name.c_str());
    float* a = avg.Data<float>();
    const float* p = now->Data<float>();
    const int64_t n = avg.NumElements();
    if (updates_ == 0) {
      std::copy(p, p + n, a);
    } else {
      for (int64_t i = 0; i < n; ++i) a[i] = keep * a[i] + take * p[i];
    }
  }
  ++updates_;
}

Model ModelEma::AveragedModel(const Model& inference) const {
  Model m = inference;
  for (HostTensor& t : m.graph.initializers)
    for (const HostTensor& avg : tensors_)
      if (avg.name == t.name) t = avg;
  return m;
}

void ModelEma::Restore(const std::vector<HostTensor>& saved, int64_t updates) {
  for (HostTensor& avg : tensors_) {
    const auto it = std::find_if(saved.begin(), saved.end(),
                                 [&](const HostTensor& t) { return t.name == StateName(avg.name); });
    OT_CHECK(it != saved.end(),
             "the checkpoint has no model EMA tensor '%s'; it was not made with --model-ema (resume without it)",
             avg.name.c_str());
    OT_CHECK(it->dims == avg.dims && it->dtype == avg.dtype, "the checkpoint's model EMA tensor '%s' has another shape",
             avg.name.c_str());
    const std::string name = avg.name;
    avg = *it;
    avg.name = name;
  }
  updates_ = updates;
}

}  // namespace ot
