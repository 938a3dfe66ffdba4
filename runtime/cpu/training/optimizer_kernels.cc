// Optimizer update ops of ONNX's ai.onnx.preview.training domain on the CPU: Momentum
// (standard and Nesterov; PyTorch's SGD with momentum and weight decay), Adam and Adagrad;
// and org.onnxtrain's SGD (momentum 0: the same update as Momentum without its buffer),
// AdamW and RMSprop (PyTorch's formulas, which ONNX's ops cannot express: AdamW's decay
// scales with the learning rate and comes before the step; RMSprop is not in ONNX).
// Each node updates n tensors: inputs R (learning rate), T (step count), then n X, n G
// and the per-tensor state; outputs the new X and new state. Elementwise loops over
// OpenMP (no library routine exists for these updates).
#include <algorithm>
#include <cmath>

#include "graph/op_domains.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/cpu/elementwise/vector_loops.h"
#include "runtime/ops/math/optimizer_math.h"
#include "runtime/ops/checks/train_checks.h"

namespace ot {
namespace cpu {
namespace {

// Tensors smaller than this are updated by the calling thread: waking the OpenMP team
// costs more than it saves on a bias or a small layer (SimpleNN's 10 + 7840 values).
constexpr int64_t kParallelUpdate = 32768;

class OptimizerKernel : public OpKernel {
 public:
  OptimizerKernel(const KernelInfo& info, int state_per_tensor)
      : OpKernel(info), states_(state_per_tensor) {}

  void Prepare(KernelContext& ctx) override {
    n_ = PrepareOptimizerOutputs(node_, ctx, states_);
  }

  int InPlaceInput(int output) const override { return OptimizerInPlaceInput(output, n_, states_); }
  void Compute(KernelContext& ctx) override {
    const float r = ctx.Input(0).data<float>()[0];
    const int64_t t = ctx.Input(1).data<int64_t>()[0];
    for (int i = 0; i < n_; ++i) {
      const Slots s = OptimizerSlotsOf(ctx, i, n_, states_);
      Update(r, t, ctx.Input(2 + i).numel(), s);
    }
  }

 protected:
  using Slots = OptimizerSlots;
  // Outputs that are not requested are written to a scratch value and dropped.
  virtual void Update(float r, int64_t t, int64_t n, const Slots& s) = 0;

 private:
  int states_;
  int n_ = 0;
};

class MomentumKernel final : public OptimizerKernel {
 public:
  explicit MomentumKernel(const KernelInfo& info) : OptimizerKernel(info, 1), p_(ReadMomentumParams(node_)) {}

 private:
  void Update(float r, int64_t t, int64_t n, const Slots& s) override {
    const float beta = t > 0 ? p_.beta : 1.f;
    const float alpha = p_.alpha, norm = p_.norm;
    const bool nesterov = p_.nesterov;
#pragma omp parallel for schedule(static) if (n >= kParallelUpdate)
    for (int64_t i = 0; i < n; ++i) {
      const float g = norm * s.x[i] + s.g[i];
      const float v = alpha * s.state[0][i] + beta * g;
      const float x = nesterov ? s.x[i] - r * (g + alpha * v) : s.x[i] - r * v;
      if (s.state_new[0]) s.state_new[0][i] = v;
      if (s.x_new) s.x_new[i] = x;
    }
  }
  const MomentumParams p_;
};

// X' = X - R * (G + norm_coefficient * X): Momentum with alpha 0, bit for bit.
class SgdKernel final : public OptimizerKernel {
 public:
  explicit SgdKernel(const KernelInfo& info) : OptimizerKernel(info, 0), norm_(node_.GetFloat("norm_coefficient", 0.f)) {}

 private:
  void Update(float r, int64_t t, int64_t n, const Slots& s) override {
    const float norm = norm_;
#pragma omp parallel for schedule(static) if (n >= kParallelUpdate)
    for (int64_t i = 0; i < n; ++i) {
      const float g = norm * s.x[i] + s.g[i];
      if (s.x_new) s.x_new[i] = s.x[i] - r * g;
    }
  }
  const float norm_;
};

class AdagradKernel final : public OptimizerKernel {
 public:
  explicit AdagradKernel(const KernelInfo& info) : OptimizerKernel(info, 1), p_(ReadAdagradParams(node_)) {}

 private:
  void Update(float r, int64_t t, int64_t n, const Slots& s) override {
    const float rate = r / (1.f + static_cast<float>(t) * p_.decay);
    const float eps = p_.epsilon, norm = p_.norm;
#pragma omp parallel for schedule(static) if (n >= kParallelUpdate)
    for (int64_t i = 0; i < n; ++i) {
      const float g = norm * s.x[i] + s.g[i];
      const float h = s.state[0][i] + g * g;
      if (s.state_new[0]) s.state_new[0][i] = h;
      if (s.x_new) s.x_new[i] = s.x[i] - rate * g / (std::sqrt(h) + eps);
    }
  }
  const AdagradParams p_;
};

class AdamKernel final : public OptimizerKernel {
 public:
  explicit AdamKernel(const KernelInfo& info) : OptimizerKernel(info, 2), p_(ReadAdamParams(node_)) {}

 private:
  void Update(float r, int64_t t, int64_t n, const Slots& s) override {
    float rate = r;
    if (t > 0) {
      const double tt = static_cast<double>(t);
      rate = static_cast<float>(r * std::sqrt(1.0 - std::pow(double(p_.beta), tt)) /
                                (1.0 - std::pow(double(p_.alpha), tt)));
    }
    const float alpha = p_.alpha, beta = p_.beta, eps = p_.epsilon, norm = p_.norm, post = 1.f - p_.norm_post;
#pragma omp parallel for schedule(static) if (n >= kParallelUpdate)
    for (int64_t i = 0; i < n; ++i) {
      const float g = norm * s.x[i] + s.g[i];
      const float v = alpha * s.state[0][i] + (1.f - alpha) * g;
      const float h = beta * s.state[1][i] + (1.f - beta) * g * g;
      if (s.state_new[0]) s.state_new[0][i] = v;
      if (s.state_new[1]) s.state_new[1][i] = h;
      if (s.x_new) s.x_new[i] = post * (s.x[i] - rate * (v / (std::sqrt(h) + eps)));
    }
  }
  const AdamParams p_;
};

// AdamWElement over a range, vectorised (the file is built with -fno-math-errno, so sqrtf
// is an instruction). Outputs may be their inputs (an in-place update): element i is read
// before it is written, which `omp simd` keeps.
OT_VECTOR_CLONES void AdamWRange(AdamWParams p, AdamWStep st, const float* x, const float* g, const float* m,
                                 const float* v, float* x_new, float* m_new, float* v_new, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) AdamWElement(p, st, x[i], g[i], m[i], v[i], x_new + i, m_new + i, v_new + i);
}

// org.onnxtrain AdamW, torch.optim.AdamW's update (runtime/ops/math/optimizer_math.h, shared with
// the CUDA kernel). States: M, V.
class AdamWKernel final : public OptimizerKernel {
 public:
  explicit AdamWKernel(const KernelInfo& info) : OptimizerKernel(info, 2), p_(ReadAdamWParams(node_)) {}

 private:
  void Update(float r, int64_t t, int64_t n, const Slots& s) override {
    const AdamWStep step = AdamWStepFor(p_, r, t);
    const AdamWParams p = p_;
    if (s.x_new && s.state_new[0] && s.state_new[1]) {  // the training step's case: every output
      ForEachChunk(n, kParallelUpdate, [&](int64_t b, int64_t e) {
        AdamWRange(p, step, s.x + b, s.g + b, s.state[0] + b, s.state[1] + b, s.x_new + b, s.state_new[0] + b,
                   s.state_new[1] + b, e - b);
      });
      return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      AdamWElement(p, step, s.x[i], s.g[i], s.state[0][i], s.state[1][i], s.x_new ? s.x_new + i : nullptr,
                   s.state_new[0] ? s.state_new[0] + i : nullptr, s.state_new[1] ? s.state_new[1] + i : nullptr);
  }
  const AdamWParams p_;
};

// org.onnxtrain RMSprop, torch.optim.RMSprop's update (runtime/ops/math/optimizer_math.h, shared
// with the CUDA kernel). States: S, then A if centered, then B if momentum > 0.
class RmspropKernel final : public OptimizerKernel {
 public:
  explicit RmspropKernel(const KernelInfo& info)
      : OptimizerKernel(info, ReadRmspropParams(info.node).States()), p_(ReadRmspropParams(node_)) {}

 private:
  void Update(float r, int64_t t, int64_t n, const Slots& s) override {
    (void)t;
    const RmspropParams p = p_;
    const int states = p.States();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float old[3] = {};
      float* out[3] = {};
      for (int k = 0; k < states; ++k) {
        old[k] = s.state[k][i];
        out[k] = s.state_new[k] ? s.state_new[k] + i : nullptr;
      }
      RmspropElement(p, r, s.x[i], s.g[i], old, out, s.x_new ? s.x_new + i : nullptr);
    }
  }
  const RmspropParams p_;
};

OT_REGISTER_KERNEL(kTrainingOpsDomain, "Momentum", 1, kLatestOpset, DeviceType::kCPU, MomentumKernel);
OT_REGISTER_KERNEL(kGradDomain, "SGD", 1, kLatestOpset, DeviceType::kCPU, SgdKernel);
OT_REGISTER_KERNEL(kTrainingOpsDomain, "Adagrad", 1, kLatestOpset, DeviceType::kCPU, AdagradKernel);
OT_REGISTER_KERNEL(kTrainingOpsDomain, "Adam", 1, kLatestOpset, DeviceType::kCPU, AdamKernel);
OT_REGISTER_KERNEL(kGradDomain, "AdamW", 1, kLatestOpset, DeviceType::kCPU, AdamWKernel);
OT_REGISTER_KERNEL(kGradDomain, "RMSprop", 1, kLatestOpset, DeviceType::kCPU, RmspropKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
