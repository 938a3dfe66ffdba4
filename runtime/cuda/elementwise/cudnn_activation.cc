// Activations and softmax on cuDNN, float32: Relu, Sigmoid, Tanh, Elu (cudnnActivation*)
// with the org.onnxtrain gradients ReluGrad (cuDNN), SigmoidGrad, TanhGrad (a small
// kernel of cudnn_kernels.cu), all from dY and the forward output Y; Softmax, LogSoftmax,
// SoftmaxGrad and LogSoftmaxGrad (cudnnSoftmax*). Before opset 13 softmax runs over the
// input coerced to 2D at `axis` (default 1), from 13 over the single dimension `axis`
// (default -1), as on the CPU; either way the tensor is seen as [outer, axis, inner] and
// cuDNN's channel mode runs over the middle dimension.
#include <string>

#include "graph/op_domains.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cuda/cudnn_kernels.h"
#include "runtime/cuda/cudnn_util.h"

namespace ot::cuda {
namespace {

// Element-wise ops see the data as N x C x rest x 1 (any shape works; the split keeps
// each cuDNN dimension well inside int32).
Shape ElementwiseShape(const Shape& shape) {
  if (shape.size() >= 2) return ChannelFoldedShape(shape);
  return {1, 1, NumElements(shape), 1};
}

void SetActivation(ActivationDesc& desc, const Node& node, const std::string& op) {
  cudnnActivationMode_t mode;
  double coef = 0.0;
  if (op == "Relu") mode = CUDNN_ACTIVATION_RELU;
  else if (op == "Sigmoid") mode = CUDNN_ACTIVATION_SIGMOID;
  else if (op == "Tanh") mode = CUDNN_ACTIVATION_TANH;
  else if (op == "Elu") {
    mode = CUDNN_ACTIVATION_ELU;
    coef = node.GetFloat("alpha", 1.f);
  } else {
    throw Error(node.Describe() + ": no cuDNN activation for " + op);
  }
  OT_CUDNN_CHECK(cudnnSetActivationDescriptor(desc.get(), mode, CUDNN_PROPAGATE_NAN, coef));
}

class ActivationKernel final : public OpKernel {
 public:
  explicit ActivationKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()) + " (the CUDA kernel takes float32)");
    ctx.SetOutput(0, x.dtype(), x.shape());
    empty_ = x.numel() == 0;
    if (empty_) return;
    SetTensorDesc(x_, ElementwiseShape(x.shape()), node_.Describe());
    SetActivation(act_, node_, node_.op_type);
  }

  void Compute(KernelContext& ctx) override {
    if (empty_) return;
    DeviceContext& dc = Context(device_.index);
    OT_CUDNN_CHECK(cudnnActivationForward(dc.cudnn, act_.get(), One(), x_.get(), ctx.Input(0).raw(), Zero(), x_.get(),
                                          ctx.Output(0).raw()));
  }

 private:
  bool empty_ = false;
  TensorDesc x_;
  ActivationDesc act_;
};

// ReluGrad / SigmoidGrad / TanhGrad (dY, Y) -> dX. ReluGrad on cuDNN, with Y standing in
// for X as well (Y > 0 exactly where X > 0, and Y = X there); Sigmoid and Tanh from Y on
// our own kernel (cuDNN's backward might read X for them, which the op does not have).
class ActivationGradKernel final : public OpKernel {
 public:
  explicit ActivationGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& y = ctx.Input(1);
    if (dy.dtype() != DType::kFloat32 || y.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()));
    if (dy.shape() != y.shape()) Fail("gradient shape " + ShapeString(dy.shape()) + " differs from " + ShapeString(y.shape()));
    ctx.SetOutput(0, DType::kFloat32, dy.shape());
    empty_ = dy.numel() == 0;
    relu_ = node_.op_type == "ReluGrad";
    from_output_ = node_.op_type == "SigmoidGrad" ? OutputActivation::kSigmoid : OutputActivation::kTanh;
    if (empty_ || !relu_) return;
    SetTensorDesc(desc_, ElementwiseShape(dy.shape()), node_.Describe());
    SetActivation(act_, node_, "Relu");
  }

  void Compute(KernelContext& ctx) override {
    if (empty_) return;
    DeviceContext& dc = Context(device_.index);
    if (!relu_) {
      OT_CUDA_CHECK(ActivationGradFromOutput(dc.compute, from_output_, ctx.Input(0).numel(), ctx.Input(0).data<float>(),
                                             ctx.Input(1).data<float>(), ctx.Output(0).data<float>()));
      return;
    }
    const void* y = ctx.Input(1).raw();
    OT_CUDNN_CHECK(cudnnActivationBackward(dc.cudnn, act_.get(), One(), desc_.get(), y, desc_.get(), ctx.Input(0).raw(),
                                           desc_.get(), y, Zero(), desc_.get(), ctx.Output(0).raw()));
  }

 private:
  bool empty_ = false, relu_ = false;
  OutputActivation from_output_ = OutputActivation::kSigmoid;
  TensorDesc desc_;
  ActivationDesc act_;
};

// [outer, axis, inner] sizes of `shape` with the softmax running over the middle one:
// everything from `axis` on when `coerce_2d`, else dimension `axis` alone.
Shape SoftmaxView(const Shape& shape, int64_t axis, bool coerce_2d) {
  int64_t outer = 1, len = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    const int64_t size = shape[static_cast<size_t>(d)];
    if (d < axis) outer *= size;
    else if (d == axis || coerce_2d) len *= size;
    else inner *= size;
  }
  return {outer, len, inner, 1};
}

class SoftmaxKernel final : public OpKernel {
 public:
  explicit SoftmaxKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()) + " (the CUDA kernel takes float32)");
    ctx.SetOutput(0, x.dtype(), x.shape());
    const int64_t rank = x.rank();
    const bool coerce_2d = opset_ < 13;
    int64_t axis = node_.GetInt("axis", coerce_2d ? 1 : -1);
    // Coercion to 2D allows axis == rank (everything goes to the outer dimension).
    axis = coerce_2d && (axis == rank || (rank == 0 && axis == 0)) ? rank : NormalizeAxis(axis, rank, node_);
    empty_ = x.numel() == 0;
    if (empty_) return;
    SetTensorDesc(desc_, SoftmaxView(x.shape(), axis, coerce_2d), node_.Describe());
  }

  void Compute(KernelContext& ctx) override {
    if (empty_) return;
    DeviceContext& dc = Context(device_.index);
    const cudnnSoftmaxAlgorithm_t algo = node_.op_type == "LogSoftmax" ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE;
    OT_CUDNN_CHECK(cudnnSoftmaxForward(dc.cudnn, algo, CUDNN_SOFTMAX_MODE_CHANNEL, One(), desc_.get(),
                                       ctx.Input(0).raw(), Zero(), desc_.get(), ctx.Output(0).raw()));
  }

 private:
  bool empty_ = false;
  TensorDesc desc_;
};

// SoftmaxGrad / LogSoftmaxGrad (dY, Y) -> dX over `axis` (default -1), or over all
// dimensions from `axis` on when coerce_2d=1 (forward opsets before 13).
class SoftmaxGradKernel final : public OpKernel {
 public:
  explicit SoftmaxGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32 || ctx.Input(1).dtype() != DType::kFloat32)
      Unsupported("data type " + DTypeName(dy.dtype()));
    if (ctx.Input(1).shape() != dy.shape()) Fail("Y shape differs from the gradient's");
    ctx.SetOutput(0, DType::kFloat32, dy.shape());
    const Shape& s = dy.shape();
    const int64_t axis = NormalizeAxis(node_.GetInt("axis", -1), static_cast<int64_t>(s.size()), node_);
    empty_ = dy.numel() == 0;
    if (empty_) return;
    SetTensorDesc(desc_, SoftmaxView(s, axis, node_.GetInt("coerce_2d", 0) != 0), node_.Describe());
  }

  void Compute(KernelContext& ctx) override {
    if (empty_) return;
    DeviceContext& dc = Context(device_.index);
    const cudnnSoftmaxAlgorithm_t algo = node_.op_type == "LogSoftmaxGrad" ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE;
    OT_CUDNN_CHECK(cudnnSoftmaxBackward(dc.cudnn, algo, CUDNN_SOFTMAX_MODE_CHANNEL, One(), desc_.get(),
                                        ctx.Input(1).raw(), desc_.get(), ctx.Input(0).raw(), Zero(), desc_.get(),
                                        ctx.Output(0).raw()));
  }

 private:
  bool empty_ = false;
  TensorDesc desc_;
};
OT_REGISTER_CUDA_KERNEL("Relu", 1, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Sigmoid", 1, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Tanh", 1, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Elu", 1, kLatestOpset, ActivationKernel);
OT_REGISTER_KERNEL(kGradDomain, "ReluGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, ActivationGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "SigmoidGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, ActivationGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "TanhGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, ActivationGradKernel);
OT_REGISTER_CUDA_KERNEL("Softmax", 1, kLatestOpset, SoftmaxKernel);
OT_REGISTER_CUDA_KERNEL("LogSoftmax", 1, kLatestOpset, SoftmaxKernel);
OT_REGISTER_KERNEL(kGradDomain, "SoftmaxGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, SoftmaxGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "LogSoftmaxGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, SoftmaxGradKernel);

}  // namespace
}  // namespace ot::cuda
