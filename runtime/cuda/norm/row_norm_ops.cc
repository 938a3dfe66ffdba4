// CUDA kernels of LayerNormalization (opset 17), InstanceNormalization and their
// org.onnxtrain gradients, mirroring runtime/cpu/norm/layernorm.cc and instance_norm_grad.cc:
// the same Prepare checks (runtime/ops/checks/norm_checks.h), the same per-element formulas
// (runtime/ops/math/norm_math.h, run by row_norm.cu). A Scale or B that broadcasts to the
// normalised tail without covering it is expanded once per run into a dense row.
#include <vector>

#include "graph/op_domains.h"
#include "runtime/cuda/tensor/copy_kernels.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/cuda/norm/row_norm.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/ops/checks/norm_checks.h"

namespace ot::cuda {
namespace {

// A per-column parameter as a dense [inner] row on the device: the tensor itself where it
// already is one, else its broadcast copied into `dense`.
const float* DenseRow(const Tensor& t, const LayerNormGeometry& g, const std::vector<int64_t>& strides, Tensor& dense,
                      cudaStream_t stream) {
  if (t.numel() == g.inner) return t.data<float>();
  StridedCopy(t.raw(), strides, 0, dense.raw(), g.tail, sizeof(float), stream);
  return dense.data<float>();
}

Tensor DenseScratch(const Tensor& t, const LayerNormGeometry& g, const Device& device) {
  return t.numel() == g.inner ? Tensor() : Tensor::Empty(DType::kFloat32, g.tail, device);
}

// LayerNormalization(X, Scale[, B]) -> Y[, Mean, InvStdDev].
class LayerNormKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor* bias = ctx.OptionalInput(2);
    g_ = PlanLayerNorm(node_, ctx, 1, bias);
    ctx.SetOutput(0, DType::kFloat32, ctx.Input(0).shape());
    ctx.SetOutput(1, DType::kFloat32, g_.stats);
    ctx.SetOutput(2, DType::kFloat32, g_.stats);
    scale_dense_ = DenseScratch(ctx.Input(1), g_, device_);
    if (bias) bias_dense_ = DenseScratch(*bias, g_, device_);
  }
  void Compute(KernelContext& ctx) override {
    const cudaStream_t stream = math::ComputeStream(device_.index);
    const Tensor* bias = ctx.OptionalInput(2);
    const float* scale = DenseRow(ctx.Input(1), g_, g_.scale_strides, scale_dense_, stream);
    const float* shift = bias ? DenseRow(*bias, g_, g_.bias_strides, bias_dense_, stream) : nullptr;
    norm::RowNormShape s{g_.outer, g_.inner, node_.GetFloat("epsilon", 1e-5f), 0};
    norm::RowNormForward(s, ctx.Input(0).data<float>(), scale, shift, ctx.Output(0).data<float>(),
                         ctx.HasOutput(1) ? ctx.Output(1).data<float>() : nullptr,
                         ctx.HasOutput(2) ? ctx.Output(2).data<float>() : nullptr, stream);
    math::CheckLaunch("LayerNormalization");
  }

 private:
  LayerNormGeometry g_;
  Tensor scale_dense_, bias_dense_;
};

// Row statistics and sums of a backward pass, one entry per row, kept on the device.
struct RowScratch {
  Tensor stats, sums;  // float [2, rows]: mean, inv_std; double [2, rows]: sum g, sum g * xhat
  void Make(int64_t rows, const Device& device) {
    stats = Tensor::Empty(DType::kFloat32, {2, rows}, device);
    sums = Tensor::Empty(DType::kFloat64, {2, rows}, device);
  }
};

// LayerNormalizationGrad(dY, X, Scale) -> dX, dScale, dBias (each optional; the last two
// shaped as the normalised tail).
class LayerNormGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    g_ = PlanLayerNorm(node_, ctx, 2, nullptr);
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32 || dy.shape() != ctx.Input(1).shape())
      Fail("gradient " + dy.Describe() + " does not match X " + ctx.Input(1).Describe());
    ctx.SetOutput(0, DType::kFloat32, dy.shape());
    ctx.SetOutput(1, DType::kFloat32, g_.tail);
    ctx.SetOutput(2, DType::kFloat32, g_.tail);
    scale_dense_ = DenseScratch(ctx.Input(2), g_, device_);
    scratch_.Make(g_.outer, device_);
  }
  void Compute(KernelContext& ctx) override {
    const cudaStream_t stream = math::ComputeStream(device_.index);
    const float* scale = DenseRow(ctx.Input(2), g_, g_.scale_strides, scale_dense_, stream);
    norm::RowNormShape s{g_.outer, g_.inner, node_.GetFloat("epsilon", 1e-5f), 0};
    float* stats = scratch_.stats.data<float>();
    double* sums = scratch_.sums.data<double>();
    norm::RowNormBackward(s, ctx.Input(0).data<float>(), ctx.Input(1).data<float>(), scale,
                          ctx.HasOutput(0) ? ctx.Output(0).data<float>() : nullptr,
                          ctx.HasOutput(1) ? ctx.Output(1).data<float>() : nullptr,
                          ctx.HasOutput(2) ? ctx.Output(2).data<float>() : nullptr, stats, stats + g_.outer, sums,
                          sums + g_.outer, stream);
    math::CheckLaunch("LayerNormalizationGrad");
  }

 private:
  LayerNormGeometry g_;
  Tensor scale_dense_;
  RowScratch scratch_;
};

// InstanceNormalization(X, scale, B): X is N x C x D1 x ..., scale and B per channel.
class InstanceNormKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    RequireFloat32Inputs(node_, ctx, 3);
    if (x.rank() < 3) Fail("input " + x.Describe() + " must be N x C x D1 x ...");
    RequirePerChannelInputs(node_, ctx, 1, 3, x.dim(1));
    ctx.SetOutput(0, DType::kFloat32, x.shape());
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const int64_t rows = x.dim(0) * x.dim(1);
    if (rows == 0) return;
    norm::RowNormShape s{rows, x.numel() / rows, node_.GetFloat("epsilon", 1e-5f), x.dim(1)};
    norm::RowNormForward(s, x.data<float>(), ctx.Input(1).data<float>(), ctx.Input(2).data<float>(),
                         ctx.Output(0).data<float>(), nullptr, nullptr, math::ComputeStream(device_.index));
    math::CheckLaunch("InstanceNormalization");
  }
};

// InstanceNormalizationGrad(dY, X, scale) -> dX, dScale, dBias (each optional, per channel).
class InstanceNormGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    RequireFloat32Inputs(node_, ctx, 3);
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    if (x.rank() < 3) Fail("input " + x.Describe() + " must be N x C x D1 x ...");
    if (dy.shape() != x.shape()) Fail("gradient " + dy.Describe() + " does not match the input " + x.Describe());
    RequirePerChannelInputs(node_, ctx, 2, 3, x.dim(1));
    ctx.SetOutput(0, DType::kFloat32, x.shape());
    ctx.SetOutput(1, DType::kFloat32, {x.dim(1)});
    ctx.SetOutput(2, DType::kFloat32, {x.dim(1)});
    scratch_.Make(x.dim(0) * x.dim(1), device_);
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(1);
    const int64_t rows = x.dim(0) * x.dim(1);
    norm::RowNormShape s{rows, rows ? x.numel() / rows : 0, node_.GetFloat("epsilon", 1e-5f), x.dim(1)};
    float* stats = scratch_.stats.data<float>();
    double* sums = scratch_.sums.data<double>();
    norm::RowNormBackward(s, ctx.Input(0).data<float>(), x.data<float>(), ctx.Input(2).data<float>(),
                          ctx.HasOutput(0) ? ctx.Output(0).data<float>() : nullptr,
                          ctx.HasOutput(1) ? ctx.Output(1).data<float>() : nullptr,
                          ctx.HasOutput(2) ? ctx.Output(2).data<float>() : nullptr, stats, stats + rows, sums,
                          sums + rows, math::ComputeStream(device_.index));
    math::CheckLaunch("InstanceNormalizationGrad");
  }

 private:
  RowScratch scratch_;
};

OT_REGISTER_CUDA_KERNEL("LayerNormalization", 17, kLatestOpset, LayerNormKernel);
OT_REGISTER_KERNEL(kGradDomain, "LayerNormalization", 1, kLatestOpset, DeviceType::kCUDA, LayerNormKernel);
OT_REGISTER_KERNEL(kGradDomain, "LayerNormalizationGrad", 1, kLatestOpset, DeviceType::kCUDA, LayerNormGradKernel);
OT_REGISTER_CUDA_KERNEL("InstanceNormalization", 1, kLatestOpset, InstanceNormKernel);
OT_REGISTER_KERNEL(kGradDomain, "InstanceNormalizationGrad", 1, kLatestOpset, DeviceType::kCUDA,
                   InstanceNormGradKernel);

}  // namespace
}  // namespace ot::cuda
