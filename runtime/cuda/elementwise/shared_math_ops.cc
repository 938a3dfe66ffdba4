// CUDA kernels of Mod, PRelu, org.onnxtrain PReluGrad and PowGrad, Not and Range, mirroring the CPU
// kernels (runtime/cpu/elementwise/logic_ops.cc, activations.cc, elementwise_grad_kernels.cc,
// runtime/cpu/tensor/generate_ops.cc) with the same shape checks (runtime/ops/) and the same
// per-element formulas (runtime/ops/math/elementwise_math.h, launched by shared_math.cu).
#include <array>
#include <string>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/elementwise/shared_math.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/ops/checks/activation_attrs.h"
#include "runtime/ops/shapes/index_shapes.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot::cuda {
namespace {

math::BroadcastIndexer Indexer(const Node& node, const Shape& out, const Shape& a, const Shape& b) {
  math::BroadcastIndexer ix;
  if (!math::MakeBroadcastIndexer(out, {a, b}, &ix))
    throw UnsupportedError(node.op_type + ": a broadcast of more than " + std::to_string(math::kMaxDims) +
                           " dimensions on CUDA");
  return ix;
}

// Mod(A, B) with `fmod`; numpy broadcasting.
class ModKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& a = ctx.Input(0);
    const Tensor& b = ctx.Input(1);
    if (a.dtype() != b.dtype()) Fail("A is " + DTypeName(a.dtype()) + " but B is " + DTypeName(b.dtype()));
    const DType t = a.dtype();
    if (t != DType::kInt32 && t != DType::kInt64 && t != DType::kFloat32 && t != DType::kFloat64)
      Unsupported("data type " + DTypeName(t) + " on CUDA");
    c_style_ = node_.GetInt("fmod", 0) != 0;
    if ((t == DType::kFloat32 || t == DType::kFloat64) && !c_style_) Fail("floating-point inputs need fmod=1");
    const Shape out = BroadcastShapes(a.shape(), b.shape(), node_);
    ix_ = Indexer(node_, out, a.shape(), b.shape());
    flag_.Init(device_.index);
    ctx.SetOutput(0, t, out);
  }
  void Compute(KernelContext& ctx) override {
    if (flag_.Poll()) Fail("integer division by zero (detected on the GPU in an earlier run)");
    const cudaStream_t stream = math::ComputeStream(device_.index);
    elementwise::LaunchMod(ctx.Input(0).dtype(), c_style_, ctx.Input(0).raw(), ctx.Input(1).raw(),
                           ctx.Output(0).raw(), ctx.Output(0).numel(), ix_, flag_.device_ptr(), stream);
    math::CheckLaunch("Mod");
    flag_.Publish(stream);
  }

 private:
  bool c_style_ = false;
  math::BroadcastIndexer ix_;
  math::DeviceErrorFlag flag_;
};

// PRelu(X, slope), float32.
class PReluKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const Tensor& slope = ctx.Input(1);
    if (x.dtype() != DType::kFloat32 || slope.dtype() != DType::kFloat32)
      Unsupported("data type " + DTypeName(x.dtype()) + " on CUDA (float32 only)");
    ix_ = Indexer(node_, x.shape(), x.shape(), PReluSlopeShape(node_, opset_, x.shape(), slope.shape()));
    ctx.SetOutput(0, x.dtype(), x.shape());
  }
  void Compute(KernelContext& ctx) override {
    elementwise::LaunchPRelu(ctx.Input(0).data<float>(), ctx.Input(1).data<float>(), ctx.Output(0).data<float>(),
                             ctx.Input(0).numel(), ix_, math::ComputeStream(device_.index));
    math::CheckLaunch("PRelu");
  }

 private:
  math::BroadcastIndexer ix_;
};

// PReluGrad(dY, X, slope) -> dX, dSlope (summed to the slope's shape).
class PReluGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    const Tensor& slope = ctx.Input(2);
    for (const Tensor* t : {&dy, &x, &slope})
      if (t->dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(t->dtype()) + " on CUDA (float32 only)");
    if (dy.shape() != x.shape()) Fail("gradient " + dy.Describe() + " does not match X " + x.Describe());
    const Shape slope_shape = PReluSlopeShape(node_, node_.GetInt("channel_slope", 0) ? 6 : 7, x.shape(), slope.shape());
    ix_ = Indexer(node_, x.shape(), x.shape(), slope_shape);
    ctx.SetOutput(0, DType::kFloat32, x.shape());
    ctx.SetOutput(1, DType::kFloat32, slope.shape());
    // dSlope: each element's term, summed over the dimensions the slope broadcasts along.
    const size_t rank = x.shape().size(), lead = rank - slope_shape.size();
    std::vector<bool> reduced(rank, false);
    for (size_t d = 0; d < rank; ++d) reduced[d] = (d < lead ? 1 : slope_shape[d - lead]) == 1 && x.dim(d) != 1;
    count_ = slope.numel() > 0 ? x.numel() / slope.numel() : 0;
    if (!math::MakeReduceIndexer(x.shape(), reduced, &rix_))
      Unsupported("a slope broadcast over more than " + std::to_string(math::kMaxDims) + " dimension groups on CUDA");
    terms_ = Tensor::Empty(DType::kFloat32, x.shape(), device_);
  }
  void Compute(KernelContext& ctx) override {
    const cudaStream_t stream = math::ComputeStream(device_.index);
    const bool want_slope = ctx.HasOutput(1) && ctx.Output(1).numel() > 0;
    elementwise::LaunchPReluGrad(ctx.Input(0).data<float>(), ctx.Input(1).data<float>(), ctx.Input(2).data<float>(),
                                 ctx.HasOutput(0) ? ctx.Output(0).data<float>() : nullptr,
                                 want_slope && terms_.numel() > 0 ? terms_.data<float>() : nullptr,
                                 ctx.Input(1).numel(), ix_, stream);
    if (want_slope) {
      if (terms_.numel() == 0)
        OT_CUDA_CHECK(cudaMemsetAsync(ctx.Output(1).raw(), 0, ctx.Output(1).nbytes(), stream));
      else if (count_ == 1)  // a slope per element: its terms are its gradient
        OT_CUDA_CHECK(cudaMemcpyAsync(ctx.Output(1).raw(), terms_.raw(), ctx.Output(1).nbytes(),
                                      cudaMemcpyDeviceToDevice, stream));
      else
        math::LaunchReduce(ReduceOp::kSum, DType::kFloat32, terms_.raw(), ctx.Output(1).raw(), ctx.Output(1).numel(),
                           count_, rix_, stream);
    }
    math::CheckLaunch("PReluGrad");
  }

 private:
  math::BroadcastIndexer ix_;
  math::ReduceIndexer rix_;
  int64_t count_ = 0;
  Tensor terms_;  // each element's share of dSlope, shaped as X
};

// PowGrad(dY, A, B) -> dA, dB, shaped like dY.
class PowGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    PreparePowGradOutputs(node_, ctx);
    const Shape& out = ctx.Input(0).shape();
    if (!math::MakeBroadcastIndexer(out, {out, ctx.Input(1).shape(), ctx.Input(2).shape()}, &ix_))
      Unsupported("a broadcast of more than " + std::to_string(math::kMaxDims) + " dimensions on CUDA");
  }
  void Compute(KernelContext& ctx) override {
    elementwise::LaunchPowGrad(ctx.Input(2).dtype(), ctx.Input(0).data<float>(), ctx.Input(1).data<float>(),
                               ctx.Input(2).raw(), ctx.HasOutput(0) ? ctx.Output(0).data<float>() : nullptr,
                               ctx.HasOutput(1) ? ctx.Output(1).data<float>() : nullptr, ctx.Input(0).numel(), ix_,
                               math::ComputeStream(device_.index));
    math::CheckLaunch("PowGrad");
  }

 private:
  math::BroadcastIndexer ix_;
};

// Not(X): bool.
class NotKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kBool) Unsupported("data type " + DTypeName(x.dtype()));
    ctx.SetOutput(0, DType::kBool, x.shape());
  }
  void Compute(KernelContext& ctx) override {
    elementwise::LaunchNot(ctx.Input(0).data<uint8_t>(), ctx.Output(0).data<uint8_t>(), ctx.Input(0).numel(),
                           math::ComputeStream(device_.index));
    math::CheckLaunch("Not");
  }
};

// Range(start, limit, delta): the count is fixed on the host when the plan is made (as on
// the CPU); the values are computed from the device scalars.
class RangeKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const DType t = ctx.Input(0).dtype();
    std::array<double, 3> v{};
    for (int i = 0; i < 3; ++i) {
      const Tensor& in = ctx.Input(i);
      if (in.numel() != 1) Fail("input " + std::to_string(i) + " must be a scalar");
      if (in.dtype() != t) Fail("start, limit and delta must have one type");
      const HostTensor h = in.ToHost();
      if (t == DType::kFloat32) v[static_cast<size_t>(i)] = h.Data<float>()[0];
      else if (t == DType::kFloat64) v[static_cast<size_t>(i)] = h.Data<double>()[0];
      else if (t == DType::kInt16) v[static_cast<size_t>(i)] = h.Data<int16_t>()[0];
      else if (t == DType::kInt32) v[static_cast<size_t>(i)] = h.Data<int32_t>()[0];
      else if (t == DType::kInt64) v[static_cast<size_t>(i)] = static_cast<double>(h.Data<int64_t>()[0]);
      else Unsupported("data type " + DTypeName(t));
    }
    ctx.SetOutput(0, t, {RangeCount(node_, v[0], v[1], v[2])});
  }
  void Compute(KernelContext& ctx) override {
    elementwise::LaunchRange(ctx.Input(0).dtype(), ctx.Input(0).raw(), ctx.Input(2).raw(), ctx.Output(0).raw(),
                             ctx.Output(0).numel(), math::ComputeStream(device_.index));
    math::CheckLaunch("Range");
  }
};

OT_REGISTER_CUDA_KERNEL("Mod", 10, kLatestOpset, ModKernel);
OT_REGISTER_CUDA_KERNEL("PRelu", 1, kLatestOpset, PReluKernel);
OT_REGISTER_KERNEL(kGradDomain, "PReluGrad", 1, kLatestOpset, DeviceType::kCUDA, PReluGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "PowGrad", 1, kLatestOpset, DeviceType::kCUDA, PowGradKernel);
OT_REGISTER_CUDA_KERNEL("Not", 1, kLatestOpset, NotKernel);
OT_REGISTER_CUDA_KERNEL("Range", 11, kLatestOpset, RangeKernel);

}  // namespace
}  // namespace ot::cuda
