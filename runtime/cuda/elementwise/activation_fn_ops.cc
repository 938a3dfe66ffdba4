// The activations the CUDA runtime had no kernel for (HardSigmoid, HardSwish, Gelu, the
// trigonometric ops, ...) and org.onnxtrain ActivationGrad, on the shared math of
// runtime/ops/math/activation_math.h (the CPU kernels' formulas; see activation_fn.cu).
#include <functional>
#include <limits>
#include <string>

#include "graph/op_domains.h"
#include "runtime/cuda/elementwise/activation_fn.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/ops/checks/activation_attrs.h"
#include "runtime/ops/checks/kernel_util.h"

namespace ot::cuda {
namespace {

// The function of `op` with its attributes; Clip's bounds: the attributes 'min'/'max' where
// present (before opset 11), else the optional float32 scalar inputs first, first + 1.
struct ActivationFn {
  UnaryFn fn = UnaryFn::kErf;
  UnaryParams params;
  void Parse(const Node& node, const std::string& op, const std::function<void(const std::string&)>& fail) {
    if (!ParseNodeUnaryFn(node, op, &fn)) fail("unknown op '" + op + "' for the CUDA activation kernels");
    params = ReadUnaryParams(node, fn);
    if (fn == UnaryFn::kClip) {
      params.alpha = node.GetFloat("min", -std::numeric_limits<float>::infinity());
      params.beta = node.GetFloat("max", std::numeric_limits<float>::infinity());
    }
  }
  // Device pointers to Clip's bound inputs, or null.
  void Bounds(const Node& node, KernelContext& ctx, int first, const float** lo, const float** hi) const {
    *lo = *hi = nullptr;
    if (fn != UnaryFn::kClip) return;
    for (int k = 0; k < 2; ++k) {
      const Tensor* t = ctx.OptionalInput(first + k);
      if (!t) continue;
      if (t->dtype() != DType::kFloat32 || t->numel() != 1)
        throw UnsupportedError(node.Describe() + ": Clip bounds of type " + t->Describe() +
                               " on CUDA (float32 scalars only)");
      (k == 0 ? *lo : *hi) = t->data<float>();
    }
  }
};

class ActivationKernel final : public OpKernel {
 public:
  explicit ActivationKernel(const KernelInfo& info) : OpKernel(info) {
    fn_.Parse(node_, node_.op_type, [&](const std::string& m) { Fail(m); });
  }
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()) + " on CUDA");
    ctx.SetOutput(0, x.dtype(), x.shape());
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    math::LaunchUnaryFn(fn_.fn, fn_.params, x.data<float>(), ctx.Output(0).data<float>(), x.numel(), nullptr, nullptr,
                        math::ComputeStream(device_.index));
    math::CheckLaunch(node_.op_type.c_str());
  }

 private:
  ActivationFn fn_;
};

// ActivationGrad(dY, X[, min, max]) -> dX = dY * f'(X), f the op named by attribute 'op'.
class ActivationGradKernel final : public OpKernel {
 public:
  explicit ActivationGradKernel(const KernelInfo& info) : OpKernel(info) {
    fn_.Parse(node_, node_.GetString("op", ""), [&](const std::string& m) { Fail(m); });
  }
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    if (x.dtype() != DType::kFloat32 || dy.dtype() != DType::kFloat32)
      Unsupported("data type " + DTypeName(x.dtype()) + " on CUDA");
    if (dy.shape() != x.shape())
      Fail("gradient shape " + ShapeString(dy.shape()) + " differs from X's " + ShapeString(x.shape()));
    ctx.SetOutput(0, x.dtype(), x.shape());
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(1);
    const float *lo = nullptr, *hi = nullptr;
    fn_.Bounds(node_, ctx, 2, &lo, &hi);
    math::LaunchUnaryFnGrad(fn_.fn, fn_.params, ctx.Input(0).data<float>(), x.data<float>(),
                            ctx.Output(0).data<float>(), x.numel(), lo, hi, math::ComputeStream(device_.index));
    math::CheckLaunch("ActivationGrad");
  }

 private:
  ActivationFn fn_;
};

// The CPU registers these with the same opset ranges (runtime/cpu/elementwise/).
OT_REGISTER_CUDA_KERNEL("Erf", 9, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Sin", 7, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Cos", 7, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Tan", 7, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Asin", 7, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Acos", 7, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Atan", 7, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Sinh", 9, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Cosh", 9, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Asinh", 9, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Acosh", 9, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Atanh", 9, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Sign", 9, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("HardSigmoid", 1, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("HardSwish", 14, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Softsign", 1, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Selu", 1, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Celu", 12, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Mish", 18, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("ThresholdedRelu", 10, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Shrink", 9, kLatestOpset, ActivationKernel);
OT_REGISTER_CUDA_KERNEL("Gelu", 20, kLatestOpset, ActivationKernel);
OT_REGISTER_KERNEL(kGradDomain, "Gelu", 1, kLatestOpset, ::ot::DeviceType::kCUDA, ActivationKernel);  // fused
OT_REGISTER_KERNEL(kGradDomain, "Silu", 1, kLatestOpset, ::ot::DeviceType::kCUDA, ActivationKernel);  // fused
OT_REGISTER_KERNEL(kGradDomain, "ActivationGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, ActivationGradKernel);

}  // namespace
}  // namespace ot::cuda
