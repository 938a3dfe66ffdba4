// CUDA kernel of org.onnxtrain LRNGrad(dY, X) -> dX, mirroring runtime/cpu/norm/lrn.cc with
// the same checks (runtime/ops/checks/norm_checks.h's ReadLrnAttrs) and formulas
// (runtime/ops/math/lrn_math.h, launched by lrn_grad.cu). Any window size, even ones included.
#include "graph/op_domains.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/cuda/norm/lrn_grad.h"
#include "runtime/ops/checks/norm_checks.h"

namespace ot::cuda {
namespace {

class LrnGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()) + " on CUDA");
    const LrnAttrs a = ReadLrnAttrs(node_, x);
    if (dy.shape() != x.shape() || dy.dtype() != x.dtype())
      Fail("gradient " + dy.Describe() + " does not match the input " + x.Describe());
    ctx.SetOutput(0, x.dtype(), x.shape());
    p_ = MakeLrnGradParams(x.dim(1), a.size, a.alpha, a.beta, a.bias);
    scratch_ = Tensor::Empty(DType::kFloat64, {2, x.numel()}, device_);
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(1);
    if (x.numel() == 0) return;
    const int64_t n = x.dim(0), inner = x.numel() / (n * x.dim(1));
    norm::LrnGrad(p_, n, inner, ctx.Input(0).data<float>(), x.data<float>(), ctx.Output(0).data<float>(),
                  scratch_.data<double>(), math::ComputeStream(device_.index));
    math::CheckLaunch("LRNGrad");
  }

 private:
  LrnGradParams p_;
  Tensor scratch_;
};

OT_REGISTER_KERNEL(kGradDomain, "LRNGrad", 1, kLatestOpset, DeviceType::kCUDA, LrnGradKernel);

}  // namespace
}  // namespace ot::cuda
