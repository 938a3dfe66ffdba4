// CUDA kernels of the classification losses and the optimizer updates (launching
// loss_optimizer.cu): SoftmaxCrossEntropyLoss (default domain from opset 12, and the
// org.onnxtrain one the autodiff pass attaches to older models), NegativeLogLikelihoodLoss,
// their org.onnxtrain gradients, and Momentum, Adagrad and Adam of
// ai.onnx.preview.training. Semantics follow runtime/cpu/training/loss.cc, gradient_kernels.cc and
// optimizer_kernels.cc. Labels outside [0, C) (and not ignore_index) are never read
// through: the kernels skip them and raise a device flag that the next run of the node
// reports, since Compute never waits for the device.
#include "graph/op_domains.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/ops/checks/train_checks.h"

namespace ot::cuda {
namespace {

// The loss parameters of scores [N, C, d1, ...] and their labels, checked as on the CPU
// (labels, then weight, then the attributes).
math::LossParams ReadLossParams(const Node& node, bool softmax, const Tensor& scores, const Tensor& labels,
                                const Tensor* weight, DType weight_type) {
  const Shape labels_shape = CheckLossLabels(node, scores, labels);
  math::LossParams p;
  p.n = scores.dim(0);
  p.c = scores.dim(1);
  p.d = NumElements(Shape(labels_shape.begin() + 1, labels_shape.end()));
  if (weight && (weight->dtype() != weight_type || weight->shape() != Shape{p.c}))
    throw Error(node.Describe() + ": weight must be " + DTypeName(weight_type) + "[" + std::to_string(p.c) +
                "], got " + weight->Describe());
  const LossAttrs attrs = ReadLossAttrs(node);
  p.softmax = softmax;
  p.reduce = attrs.reduce;
  p.mean = attrs.mean;
  p.has_ignore_index = attrs.has_ignore_index;
  p.ignore_index = attrs.ignore_index;
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

class ClassificationLossKernel final : public OpKernel {
 public:
  explicit ClassificationLossKernel(const KernelInfo& info)
      : OpKernel(info), softmax_(info.node.op_type == "SoftmaxCrossEntropyLoss") {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& scores = ctx.Input(0);
    const Tensor* weight = ctx.OptionalInput(2);
    const DType t = scores.dtype();
    if (t != DType::kFloat32 && t != DType::kFloat64) Unsupported("data type " + DTypeName(t));
    params_ = ReadLossParams(node_, softmax_, scores, ctx.Input(1), weight, t);
    Shape loss_shape = params_.reduce ? Shape{} : ctx.Input(1).shape();
    scratch_ = Tensor::Empty(DType::kFloat64, {std::max<int64_t>(2 * params_.n * params_.d, 1)}, device_);
    flag_.Init(device_.index);
    ctx.SetOutput(0, t, loss_shape);
    if (softmax_) ctx.SetOutput(1, t, scores.shape());
  }

  void CheckDeviceErrors() const override {
    if (long long bad = flag_.Poll()) Fail(BadLabelMessage(bad, params_));
  }

  void Compute(KernelContext& ctx) override {
    CheckDeviceErrors();
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
    params_ = ReadLossParams(node_, softmax_, x, ctx.Input(2), ctx.OptionalInput(3), DType::kFloat32);
    if (params_.reduce ? dy.numel() < 1 : dy.numel() != params_.n * params_.d)
      Fail("gradient " + dy.Describe() + " does not match the labels " + ctx.Input(2).Describe());
    scratch_ = Tensor::Empty(DType::kFloat64, {1}, device_);
    flag_.Init(device_.index);
    ctx.SetOutput(0, DType::kFloat32, x.shape());
  }

  void CheckDeviceErrors() const override {
    if (long long bad = flag_.Poll()) Fail(BadLabelMessage(bad, params_));
  }

  void Compute(KernelContext& ctx) override {
    CheckDeviceErrors();
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
    n_ = PrepareOptimizerOutputs(node_, ctx, states_);
  }

  int InPlaceInput(int output) const override { return OptimizerInPlaceInput(output, n_, states_); }

  void Compute(KernelContext& ctx) override {
    const float* r = ctx.Input(0).data<float>();
    const int64_t* t = ctx.Input(1).data<int64_t>();
    cudaStream_t stream = math::ComputeStream(device_.index);
    for (int i = 0; i < n_; ++i) {
      const Slots s = OptimizerSlotsOf(ctx, i, n_, states_);
      Update(r, t, ctx.Input(2 + i).numel(), s, stream);
    }
    math::CheckLaunch(node_.op_type.c_str());
  }

 protected:
  using Slots = OptimizerSlots;
  virtual void Update(const float* r, const int64_t* t, int64_t n, const Slots& s, cudaStream_t stream) = 0;

 private:
  int states_;
  int n_ = 0;
};

class MomentumKernel final : public OptimizerKernel {
 public:
  explicit MomentumKernel(const KernelInfo& info) : OptimizerKernel(info, 1), p_(ReadMomentumParams(node_)) {}

 private:
  void Update(const float* r, const int64_t* t, int64_t n, const Slots& s, cudaStream_t stream) override {
    math::LaunchMomentum(p_, r, t, s.x, s.g, s.state[0], s.x_new, s.state_new[0], n, stream);
  }
  const MomentumParams p_;
};

// org.onnxtrain SGD (momentum 0, no buffer): the Momentum kernel with alpha 0 and beta 1,
// reading the gradient in place of the (absent) buffer, which alpha 0 multiplies away.
class SgdKernel final : public OptimizerKernel {
 public:
  explicit SgdKernel(const KernelInfo& info) : OptimizerKernel(info, 0) {
    p_.alpha = 0.f;
    p_.beta = 1.f;
    p_.norm = node_.GetFloat("norm_coefficient", 0.f);
    p_.nesterov = false;
  }

 private:
  void Update(const float* r, const int64_t* t, int64_t n, const Slots& s, cudaStream_t stream) override {
    math::LaunchMomentum(p_, r, t, s.x, s.g, s.g, s.x_new, nullptr, n, stream);
  }
  MomentumParams p_;
};

class AdagradKernel final : public OptimizerKernel {
 public:
  explicit AdagradKernel(const KernelInfo& info) : OptimizerKernel(info, 1), p_(ReadAdagradParams(node_)) {}

 private:
  void Update(const float* r, const int64_t* t, int64_t n, const Slots& s, cudaStream_t stream) override {
    math::LaunchAdagrad(p_, r, t, s.x, s.g, s.state[0], s.x_new, s.state_new[0], n, stream);
  }
  const AdagradParams p_;
};

class AdamKernel final : public OptimizerKernel {
 public:
  explicit AdamKernel(const KernelInfo& info) : OptimizerKernel(info, 2), p_(ReadAdamParams(node_)) {}

 private:
  void Update(const float* r, const int64_t* t, int64_t n, const Slots& s, cudaStream_t stream) override {
    math::LaunchAdam(p_, r, t, s.x, s.g, s.state[0], s.state[1], s.x_new, s.state_new[0], s.state_new[1], n, stream);
  }
  const AdamParams p_;
};

// org.onnxtrain AdamW: the update of runtime/ops/math/optimizer_math.h, which the CPU kernel runs too.
class AdamWKernel final : public OptimizerKernel {
 public:
  explicit AdamWKernel(const KernelInfo& info) : OptimizerKernel(info, 2), p_(ReadAdamWParams(node_)) {}

 private:
  void Update(const float* r, const int64_t* t, int64_t n, const Slots& s, cudaStream_t stream) override {
    math::LaunchAdamW(p_, r, t, s.x, s.g, s.state[0], s.state[1], s.x_new, s.state_new[0], s.state_new[1], n, stream);
  }
  const AdamWParams p_;
};

// org.onnxtrain RMSprop: the update of runtime/ops/math/optimizer_math.h, which the CPU kernel runs too.
class RmspropKernel final : public OptimizerKernel {
 public:
  explicit RmspropKernel(const KernelInfo& info)
      : OptimizerKernel(info, ReadRmspropParams(info.node).States()), p_(ReadRmspropParams(node_)) {}

 private:
  void Update(const float* r, const int64_t* t, int64_t n, const Slots& s, cudaStream_t stream) override {
    (void)t;
    math::LaunchRmsprop(p_, r, s.x, s.g, s.state, s.state_new, s.x_new, n, stream);
  }
  const RmspropParams p_;
};

OT_REGISTER_CUDA_KERNEL("SoftmaxCrossEntropyLoss", 12, kLatestOpset, ClassificationLossKernel);
OT_REGISTER_CUDA_KERNEL("NegativeLogLikelihoodLoss", 12, kLatestOpset, ClassificationLossKernel);
// The loss the autodiff pass attaches to models older than opset 12.
OT_REGISTER_KERNEL(kGradDomain, "SoftmaxCrossEntropyLoss", 1, kLatestOpset, ::ot::DeviceType::kCUDA,
                   ClassificationLossKernel);
OT_REGISTER_KERNEL(kGradDomain, "SoftmaxCrossEntropyLossGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, LossGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "NegativeLogLikelihoodLossGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, LossGradKernel);
OT_REGISTER_KERNEL(kTrainingOpsDomain, "Momentum", 1, kLatestOpset, ::ot::DeviceType::kCUDA, MomentumKernel);
OT_REGISTER_KERNEL(kTrainingOpsDomain, "Adagrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, AdagradKernel);
OT_REGISTER_KERNEL(kGradDomain, "SGD", 1, kLatestOpset, ::ot::DeviceType::kCUDA, SgdKernel);
OT_REGISTER_KERNEL(kTrainingOpsDomain, "Adam", 1, kLatestOpset, ::ot::DeviceType::kCUDA, AdamKernel);
OT_REGISTER_KERNEL(kGradDomain, "AdamW", 1, kLatestOpset, ::ot::DeviceType::kCUDA, AdamWKernel);
OT_REGISTER_KERNEL(kGradDomain, "RMSprop", 1, kLatestOpset, ::ot::DeviceType::kCUDA, RmspropKernel);

}  // namespace
}  // namespace ot::cuda
