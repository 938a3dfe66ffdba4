// CUDA kernels of the classification losses and the optimizer updates (launching
// loss_optimizer.cu): SoftmaxCrossEntropyLoss (default domain from opset 12, and the
// org.onnxtrain one the autodiff pass attaches to older models), NegativeLogLikelihoodLoss,
// their org.onnxtrain gradients, and Momentum, Adagrad and Adam of
// ai.onnx.preview.training. Semantics follow runtime/cpu/loss.cc, gradient_kernels.cc and
// optimizer_kernels.cc. Labels outside [0, C) (and not ignore_index) are never read
// through: the kernels skip them and raise a device flag that the next run of the node
// reports, since Compute never waits for the device.
#include "graph/gradient_registry.h"
#include "graph/optimizer_pass.h"
#include "runtime/cpu/kernel_util.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"

namespace ot::cuda {
namespace {

constexpr int64_t kLatest = 1 << 30;

// The loss attributes shared by the forward kernels and the gradients.
math::LossParams ReadLossAttributes(const Node& node) {
  math::LossParams p;
  const std::string reduction = node.GetString("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    throw Error(node.Describe() + ": reduction must be none, sum or mean, got '" + reduction + "'");
  p.reduce = reduction != "none";
  p.mean = reduction == "mean";
  p.has_ignore_index = node.HasAttr("ignore_index");
  p.ignore_index = node.GetInt("ignore_index", 0);
  return p;
}

// The error for a label the GPU found outside [0, C): flag = 1 + flat position.
std::string BadLabelMessage(long long flag, const math::LossParams& p) {
  const int64_t pos = static_cast<int64_t>(flag - 1);
  std::string where = "batch index " + std::to_string(pos / std::max<int64_t>(p.d, 1));
  if (p.d > 1) where += ", flat position " + std::to_string(pos % p.d);
  return "a label at " + where + " was outside [0, " + std::to_string(p.c) + ")" +
         (p.has_ignore_index ? " and not ignore_index " + std::to_string(p.ignore_index) : std::string()) +
         " (found on the GPU in an earlier run of this node; that position was left out of the loss)";
}

// Checks the labels against scores [N, C, d1, ...] and fills N, C, D.
void CheckLabels(const Node& node, const Tensor& scores, const Tensor& labels, math::LossParams* p) {
  if (labels.dtype() != DType::kInt64 && labels.dtype() != DType::kInt32)
    throw Error(node.Describe() + ": labels must be int32 or int64, got " + labels.Describe());
  if (scores.rank() < 2)
    throw Error(node.Describe() + ": scores must be [N, C] or [N, C, d1, ...], got " + scores.Describe());
  Shape expected = scores.shape();
  expected.erase(expected.begin() + 1);
  if (labels.shape() != expected)
    throw Error(node.Describe() + ": labels " + labels.Describe() + " do not match scores " + scores.Describe() +
                " (expected " + ShapeString(expected) + ")");
  p->n = scores.dim(0);
  p->c = scores.dim(1);
  p->d = NumElements(Shape(expected.begin() + 1, expected.end()));
}

class ClassificationLossKernel final : public OpKernel {
 public:
  explicit ClassificationLossKernel(const KernelInfo& info)
      : OpKernel(info), softmax_(info.node.op_type == "SoftmaxCrossEntropyLoss") {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& scores = ctx.Input(0);
    const Tensor* weight = ctx.OptionalInput(2);
    const DType t = scores.dtype();
    if (t != DType::kFloat32 && t != DType::kFloat64) Unsupported("data type " + DTypeName(t));
    params_ = ReadLossAttributes(node_);
    params_.softmax = softmax_;
    CheckLabels(node_, scores, ctx.Input(1), &params_);
    if (weight && (weight->dtype() != t || weight->shape() != Shape{params_.c}))
      Fail("weight must be " + DTypeName(t) + "[" + std::to_string(params_.c) + "], got " + weight->Describe());
    Shape loss_shape = params_.reduce ? Shape{} : ctx.Input(1).shape();
    scratch_ = Tensor::Empty(DType::kFloat64, {std::max<int64_t>(2 * params_.n * params_.d, 1)}, device_);
    flag_.Init(device_.index);
    ctx.SetOutput(0, t, loss_shape);
    if (softmax_) ctx.SetOutput(1, t, scores.shape());
  }

  void Compute(KernelContext& ctx) override {
    if (long long bad = flag_.Poll()) Fail(BadLabelMessage(bad, params_));
    const Tensor* weight = ctx.OptionalInput(2);
    cudaStream_t stream = math::ComputeStream(device_.index);
    math::LaunchClassificationLoss(params_, ctx.Input(0).dtype(), ctx.Input(0).raw(), ctx.Input(1).raw(),
                                   ctx.Input(1).dtype() == DType::kInt64, weight ? weight->raw() : nullptr,
                                   ctx.Output(0).raw(), softmax_ && ctx.HasOutput(1) ? ctx.Output(1).raw() : nullptr,
                                   scratch_.data<double>(), flag_.device_ptr(), stream);
    math::CheckLaunch(node_.op_type.c_str());
    flag_.Publish(stream);
  }

 private:
  const bool softmax_;
  math::LossParams params_;
  Tensor scratch_;  // per-position losses and weights for sum/mean
  math::DeviceErrorFlag flag_;
};

// SoftmaxCrossEntropyLossGrad(dY, log_prob, labels[, weight]) and
// NegativeLogLikelihoodLossGrad(dY, input, labels[, weight]) -> dScores.
class LossGradKernel final : public OpKernel {
 public:
  explicit LossGradKernel(const KernelInfo& info)
      : OpKernel(info), softmax_(info.node.op_type == "SoftmaxCrossEntropyLossGrad") {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    if (x.dtype() != DType::kFloat32 || dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    params_ = ReadLossAttributes(node_);
    params_.softmax = softmax_;
    CheckLabels(node_, x, ctx.Input(2), &params_);
    if (const Tensor* w = ctx.OptionalInput(3))
      if (w->dtype() != DType::kFloat32 || w->shape() != Shape{params_.c})
        Fail("weight must be float[" + std::to_string(params_.c) + "], got " + w->Describe());
    if (params_.reduce ? dy.numel() < 1 : dy.numel() != params_.n * params_.d)
      Fail("gradient " + dy.Describe() + " does not match the labels " + ctx.Input(2).Describe());
    scratch_ = Tensor::Empty(DType::kFloat64, {1}, device_);
    flag_.Init(device_.index);
    ctx.SetOutput(0, DType::kFloat32, x.shape());
  }

  void Compute(KernelContext& ctx) override {
    if (long long bad = flag_.Poll()) Fail(BadLabelMessage(bad, params_));
    const Tensor* w = ctx.OptionalInput(3);
    cudaStream_t stream = math::ComputeStream(device_.index);
    math::LaunchClassificationLossGrad(
        params_, ctx.Input(0).data<float>(), softmax_ ? ctx.Input(1).data<float>() : nullptr, ctx.Input(2).raw(),
        ctx.Input(2).dtype() == DType::kInt64, w ? w->data<float>() : nullptr, ctx.Output(0).data<float>(),
        scratch_.data<double>(), flag_.device_ptr(), stream);
    math::CheckLaunch(node_.op_type.c_str());
    flag_.Publish(stream);
  }

 private:
  const bool softmax_;
  math::LossParams params_;
  Tensor scratch_;  // the weight sum
  math::DeviceErrorFlag flag_;
};

// ---------------------------------------------------------------------------------------
// Optimizers: inputs R (learning rate), T (step count), then n X, n G and the per-tensor
// state; outputs the new X and new state. R and T stay on the device.
class OptimizerKernel : public OpKernel {
 public:
  OptimizerKernel(const KernelInfo& info, int state_per_tensor) : OpKernel(info), states_(state_per_tensor) {}

  void Prepare(KernelContext& ctx) override {
    const int groups = 2 + states_;  // X, G, states
    if (ctx.NumInputs() < 2 + groups || (ctx.NumInputs() - 2) % groups != 0)
      Fail("expects R, T and then X, G and " + std::to_string(states_) + " state tensor(s) per updated tensor");
    n_ = (ctx.NumInputs() - 2) / groups;
    if (ctx.Input(0).numel() != 1 || ctx.Input(0).dtype() != DType::kFloat32) Fail("R must be a float scalar");
    if (ctx.Input(1).numel() != 1 || ctx.Input(1).dtype() != DType::kInt64) Fail("T must be an int64 scalar");
    for (int i = 0; i < n_; ++i) {
      const Tensor& x = ctx.Input(2 + i);
      for (int k = 1; k < groups; ++k)
        if (ctx.Input(2 + k * n_ + i).shape() != x.shape())
          Fail("tensor " + std::to_string(i) + ": shapes of X and its gradient/state differ");
      if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
      for (int k = 0; k < 1 + states_; ++k) ctx.SetOutput(k * n_ + i, DType::kFloat32, x.shape());
    }
  }

  // Output k*n+i (k = 0: X, k >= 1: state k-1) may overwrite its own input: every
  // update reads all of an element's inputs before writing that element.
  int InPlaceInput(int output) const override {
    if (n_ == 0 || output < 0 || output >= (1 + states_) * n_) return -1;
    const int k = output / n_, i = output % n_;
    return k == 0 ? 2 + i : 2 + (1 + k) * n_ + i;
  }

  void Compute(KernelContext& ctx) override {
    const float* r = ctx.Input(0).data<float>();
    const int64_t* t = ctx.Input(1).data<int64_t>();
    cudaStream_t stream = math::ComputeStream(device_.index);
    for (int i = 0; i < n_; ++i) {
      Slots s;
      s.x = ctx.Input(2 + i).data<float>();
      s.g = ctx.Input(2 + n_ + i).data<float>();
      for (int k = 0; k < states_; ++k) s.state[k] = ctx.Input(2 + (2 + k) * n_ + i).data<float>();
      s.x_new = ctx.HasOutput(i) ? ctx.Output(i).data<float>() : nullptr;
      for (int k = 0; k < states_; ++k)
        s.state_new[k] = ctx.HasOutput((1 + k) * n_ + i) ? ctx.Output((1 + k) * n_ + i).data<float>() : nullptr;
      Update(r, t, ctx.Input(2 + i).numel(), s, stream);
    }
    math::CheckLaunch(node_.op_type.c_str());
  }

 protected:
  struct Slots {
    const float* x = nullptr;
    const float* g = nullptr;
    const float* state[2] = {nullptr, nullptr};
    float* x_new = nullptr;
    float* state_new[2] = {nullptr, nullptr};
  };
  virtual void Update(const float* r, const int64_t* t, int64_t n, const Slots& s, cudaStream_t stream) = 0;

 private:
  int states_;
  int n_ = 0;
};

class MomentumKernel final : public OptimizerKernel {
 public:
  explicit MomentumKernel(const KernelInfo& info) : OptimizerKernel(info, 1) {
    const std::string mode = node_.GetString("mode", "standard");
    if (mode != "standard" && mode != "nesterov") Fail("unknown mode '" + mode + "' (standard or nesterov)");
    p_.nesterov = mode == "nesterov";
    p_.alpha = node_.GetFloat("alpha", 0.f);
    p_.beta = node_.GetFloat("beta", 0.f);
    p_.norm = node_.GetFloat("norm_coefficient", 0.f);
  }

 private:
  void Update(const float* r, const int64_t* t, int64_t n, const Slots& s, cudaStream_t stream) override {
    math::LaunchMomentum(p_, r, t, s.x, s.g, s.state[0], s.x_new, s.state_new[0], n, stream);
  }
  math::MomentumParams p_;
};

class AdagradKernel final : public OptimizerKernel {
 public:
  explicit AdagradKernel(const KernelInfo& info) : OptimizerKernel(info, 1) {
    p_.decay = node_.GetFloat("decay_factor", 0.f);
    p_.epsilon = node_.GetFloat("epsilon", 0.f);
    p_.norm = node_.GetFloat("norm_coefficient", 0.f);
  }

 private:
  void Update(const float* r, const int64_t* t, int64_t n, const Slots& s, cudaStream_t stream) override {
    math::LaunchAdagrad(p_, r, t, s.x, s.g, s.state[0], s.x_new, s.state_new[0], n, stream);
  }
  math::AdagradParams p_;
};

class AdamKernel final : public OptimizerKernel {
 public:
  explicit AdamKernel(const KernelInfo& info) : OptimizerKernel(info, 2) {
    p_.alpha = node_.GetFloat("alpha", 0.9f);
    p_.beta = node_.GetFloat("beta", 0.999f);
    p_.epsilon = node_.GetFloat("epsilon", 1e-6f);
    p_.norm = node_.GetFloat("norm_coefficient", 0.f);
    p_.norm_post = node_.GetFloat("norm_coefficient_post", 0.f);
  }

 private:
  void Update(const float* r, const int64_t* t, int64_t n, const Slots& s, cudaStream_t stream) override {
    math::LaunchAdam(p_, r, t, s.x, s.g, s.state[0], s.state[1], s.x_new, s.state_new[0], s.state_new[1], n, stream);
  }
  math::AdamParams p_;
};

OT_REGISTER_CUDA_KERNEL("SoftmaxCrossEntropyLoss", 12, kLatest, ClassificationLossKernel);
OT_REGISTER_CUDA_KERNEL("NegativeLogLikelihoodLoss", 12, kLatest, ClassificationLossKernel);
// The loss the autodiff pass attaches to models older than opset 12.
OT_REGISTER_KERNEL(kGradDomain, "SoftmaxCrossEntropyLoss", 1, kLatest, ::ot::DeviceType::kCUDA,
                   ClassificationLossKernel);
OT_REGISTER_KERNEL(kGradDomain, "SoftmaxCrossEntropyLossGrad", 1, kLatest, ::ot::DeviceType::kCUDA, LossGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "NegativeLogLikelihoodLossGrad", 1, kLatest, ::ot::DeviceType::kCUDA, LossGradKernel);
OT_REGISTER_KERNEL(kTrainingOpsDomain, "Momentum", 1, kLatest, ::ot::DeviceType::kCUDA, MomentumKernel);
OT_REGISTER_KERNEL(kTrainingOpsDomain, "Adagrad", 1, kLatest, ::ot::DeviceType::kCUDA, AdagradKernel);
OT_REGISTER_KERNEL(kTrainingOpsDomain, "Adam", 1, kLatest, ::ot::DeviceType::kCUDA, AdamKernel);

}  // namespace
}  // namespace ot::cuda
