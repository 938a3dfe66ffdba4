// Optimizer update ops of ONNX's ai.onnx.preview.training domain on the CPU: Momentum
// (standard and Nesterov; PyTorch's SGD with momentum and weight decay), Adam and Adagrad.
// Each node updates n tensors: inputs R (learning rate), T (step count), then n X, n G
// and the per-tensor state; outputs the new X and new state. Elementwise loops over
// OpenMP (no library routine exists for these updates).
#include <cmath>

#include "runtime/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

class OptimizerKernel : public OpKernel {
 public:
  OptimizerKernel(const KernelInfo& info, int state_per_tensor)
      : OpKernel(info), states_(state_per_tensor) {}

  void Prepare(KernelContext& ctx) override {
    const int groups = 2 + states_;  // X, G, states
    if (ctx.NumInputs() < 2 + groups || (ctx.NumInputs() - 2) % groups != 0)
      Fail("expects R, T and then X, G and " + std::to_string(states_) + " state tensor(s) per updated tensor");
    n_ = (ctx.NumInputs() - 2) / groups;
    if (ctx.Input(0).numel() != 1 || ctx.Input(0).dtype() != DType::kFloat32) Fail("R must be a float scalar");
    if (ctx.Input(1).numel() != 1 || ctx.Input(1).dtype() != DType::kInt64) Fail("T must be an int64 scalar");
    for (int i = 0; i < n_; ++i) {
      const Tensor& x = ctx.Input(2 + i);
      for (int k = 1; k < groups; ++k) {
        const Tensor& t = ctx.Input(2 + k * n_ + i);
        if (t.shape() != x.shape()) Fail("tensor " + std::to_string(i) + ": shapes of X and its gradient/state differ");
      }
      if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
      for (int k = 0; k < 1 + states_; ++k) ctx.SetOutput(k * n_ + i, DType::kFloat32, x.shape());
    }
  }

  // Output k*n+i (k = 0: X, k >= 1: state k-1) may overwrite its own input: every
  // update below reads all of an element's inputs before writing that element.
  int InPlaceInput(int output) const override {
    if (n_ == 0 || output < 0 || output >= (1 + states_) * n_) return -1;
    const int k = output / n_, i = output % n_;
    return k == 0 ? 2 + i : 2 + (1 + k) * n_ + i;
  }
  void Compute(KernelContext& ctx) override {
    const float r = ctx.Input(0).data<float>()[0];
    const int64_t t = ctx.Input(1).data<int64_t>()[0];
    for (int i = 0; i < n_; ++i) {
      Slots s;
      s.x = ctx.Input(2 + i).data<float>();
      s.g = ctx.Input(2 + n_ + i).data<float>();
      for (int k = 0; k < states_; ++k) s.state[k] = ctx.Input(2 + (2 + k) * n_ + i).data<float>();
      s.x_new = ctx.HasOutput(i) ? ctx.Output(i).data<float>() : nullptr;
      for (int k = 0; k < states_; ++k)
        s.state_new[k] = ctx.HasOutput((1 + k) * n_ + i) ? ctx.Output((1 + k) * n_ + i).data<float>() : nullptr;
      Update(r, t, ctx.Input(2 + i).numel(), s);
    }
  }

 protected:
  struct Slots {
    const float* x = nullptr;
    const float* g = nullptr;
    const float* state[2] = {nullptr, nullptr};
    float* x_new = nullptr;
    float* state_new[2] = {nullptr, nullptr};
  };
  // Outputs that are not requested are written to a scratch value and dropped.
  virtual void Update(float r, int64_t t, int64_t n, const Slots& s) = 0;

 private:
  int states_;
  int n_ = 0;
};

class MomentumKernel final : public OptimizerKernel {
 public:
  explicit MomentumKernel(const KernelInfo& info) : OptimizerKernel(info, 1) {
    const std::string mode = node_.GetString("mode", "standard");
    if (mode != "standard" && mode != "nesterov") Fail("unknown mode '" + mode + "' (standard or nesterov)");
    nesterov_ = mode == "nesterov";
    alpha_ = node_.GetFloat("alpha", 0.f);
    beta_ = node_.GetFloat("beta", 0.f);
    norm_ = node_.GetFloat("norm_coefficient", 0.f);
  }

 private:
  void Update(float r, int64_t t, int64_t n, const Slots& s) override {
    const float beta = t > 0 ? beta_ : 1.f;
    const float alpha = alpha_, norm = norm_;
    const bool nesterov = nesterov_;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float g = norm * s.x[i] + s.g[i];
      const float v = alpha * s.state[0][i] + beta * g;
      const float x = nesterov ? s.x[i] - r * (g + alpha * v) : s.x[i] - r * v;
      if (s.state_new[0]) s.state_new[0][i] = v;
      if (s.x_new) s.x_new[i] = x;
    }
  }
  bool nesterov_ = false;
  float alpha_, beta_, norm_;
};

class AdagradKernel final : public OptimizerKernel {
 public:
  explicit AdagradKernel(const KernelInfo& info) : OptimizerKernel(info, 1) {
    decay_ = node_.GetFloat("decay_factor", 0.f);
    epsilon_ = node_.GetFloat("epsilon", 0.f);
    norm_ = node_.GetFloat("norm_coefficient", 0.f);
  }

 private:
  void Update(float r, int64_t t, int64_t n, const Slots& s) override {
    const float rate = r / (1.f + static_cast<float>(t) * decay_);
    const float eps = epsilon_, norm = norm_;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float g = norm * s.x[i] + s.g[i];
      const float h = s.state[0][i] + g * g;
      if (s.state_new[0]) s.state_new[0][i] = h;
      if (s.x_new) s.x_new[i] = s.x[i] - rate * g / (std::sqrt(h) + eps);
    }
  }
  float decay_, epsilon_, norm_;
};

class AdamKernel final : public OptimizerKernel {
 public:
  explicit AdamKernel(const KernelInfo& info) : OptimizerKernel(info, 2) {
    alpha_ = node_.GetFloat("alpha", 0.9f);
    beta_ = node_.GetFloat("beta", 0.999f);
    epsilon_ = node_.GetFloat("epsilon", 1e-6f);
    norm_ = node_.GetFloat("norm_coefficient", 0.f);
    norm_post_ = node_.GetFloat("norm_coefficient_post", 0.f);
  }

 private:
  void Update(float r, int64_t t, int64_t n, const Slots& s) override {
    float rate = r;
    if (t > 0) {
      const double tt = static_cast<double>(t);
      rate = static_cast<float>(r * std::sqrt(1.0 - std::pow(double(beta_), tt)) / (1.0 - std::pow(double(alpha_), tt)));
    }
    const float alpha = alpha_, beta = beta_, eps = epsilon_, norm = norm_, post = 1.f - norm_post_;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float g = norm * s.x[i] + s.g[i];
      const float v = alpha * s.state[0][i] + (1.f - alpha) * g;
      const float h = beta * s.state[1][i] + (1.f - beta) * g * g;
      if (s.state_new[0]) s.state_new[0][i] = v;
      if (s.state_new[1]) s.state_new[1][i] = h;
      if (s.x_new) s.x_new[i] = post * (s.x[i] - rate * (v / (std::sqrt(h) + eps)));
    }
  }
  float alpha_, beta_, epsilon_, norm_, norm_post_;
};

OT_REGISTER_KERNEL(kTrainingDomain, "Momentum", 1, 1 << 30, DeviceType::kCPU, MomentumKernel);
OT_REGISTER_KERNEL(kTrainingDomain, "Adagrad", 1, 1 << 30, DeviceType::kCPU, AdagradKernel);
OT_REGISTER_KERNEL(kTrainingDomain, "Adam", 1, 1 << 30, DeviceType::kCPU, AdamKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
