// CUDA kernels of the reductions (launching reduce.cu and elementwise.cu): ReduceSum,
// ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare,
// ReduceLogSum, ReduceLogSumExp (axes as attribute, or for ReduceSum from opset 13 an
// input; keepdims; noop_with_empty_axes), ArgMax/ArgMin, and the gradient-domain
// SumToShape and ReduceGrad. Semantics follow runtime/cpu/reduce/reduce.cc and
// gradient_kernels.cc. Axes and target shapes are read on the host in Prepare; the
// executor keys plans by the values of small integer graph inputs, so they are not
// re-checked in Compute (that would wait for the device every step).
#include "graph/op_domains.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/ops/shapes/reduce_shapes.h"

namespace ot::cuda {
namespace {

// Plans a reduction of `in` over the dimensions marked in `reduced`; Unsupported when
// more than kMaxDims dimensions remain after merging.
math::ReduceIndexer PlanReduction(const Node& node, const Shape& in, const std::vector<bool>& reduced) {
  math::ReduceIndexer ix;
  if (!math::MakeReduceIndexer(in, reduced, &ix))
    throw UnsupportedError(node.op_type + ": a reduction over more than " + std::to_string(math::kMaxDims) +
                           " separate dimensions on CUDA");
  return ix;
}

class ReduceKernel final : public OpKernel {
 public:
  explicit ReduceKernel(const KernelInfo& info) : OpKernel(info), op_(ParseReduceOp(info.node.op_type)) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const DType t = x.dtype();
    CheckReduceType(op_, t, node_);
    const std::vector<int64_t> axes = ReadReduceAxes(node_, opset_, op_, ctx, axes_input_);
    const ReducePlan plan = PlanReduce(node_, op_, t, x.shape(), axes);
    identity_ = plan.identity;
    reduced_count_ = plan.reduced_count;
    ix_ = PlanReduction(node_, x.shape(), plan.reduced);
    ctx.SetOutput(0, t, plan.out);
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    cudaStream_t stream = math::ComputeStream(device_.index);
    if (identity_) {
      if (x.nbytes() > 0)
        OT_CUDA_CHECK(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice, stream));
      return;
    }
    math::LaunchReduce(op_, x.dtype(), x.raw(), y.raw(), y.numel(), reduced_count_, ix_, stream);
    math::CheckLaunch(node_.op_type.c_str());
  }

 private:
  const ReduceOp op_;
  bool identity_ = false;
  int64_t reduced_count_ = 1;
  math::ReduceIndexer ix_;
  ShapeInputValues axes_input_;  // not checked in Compute: plans are keyed by these values
};

// ArgMax / ArgMin along one axis (int64 indices; first or last extreme on ties).
class ArgExtremeKernel final : public OpKernel {
 public:
  explicit ArgExtremeKernel(const KernelInfo& info) : OpKernel(info), is_max_(info.node.op_type == "ArgMax") {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const DType t = x.dtype();
    if (t != DType::kFloat32 && t != DType::kFloat64 && t != DType::kInt32 && t != DType::kInt64 && t != DType::kInt8 &&
        t != DType::kUInt8)
      Unsupported("data type " + DTypeName(t) + " on CUDA");
    plan_ = PlanArgExtreme(node_, x.shape());
    ctx.SetOutput(0, DType::kInt64, plan_.out);
  }

  void Compute(KernelContext& ctx) override {
    math::LaunchArgExtreme(is_max_, plan_.select_last, ctx.Input(0).dtype(), ctx.Input(0).raw(),
                           ctx.Output(0).data<int64_t>(), plan_.outer, plan_.axis_size, plan_.inner,
                           math::ComputeStream(device_.index));
    math::CheckLaunch(node_.op_type.c_str());
  }

 private:
  const bool is_max_;
  ArgExtremePlan plan_;
};

// SumToShape(grad, shape): sums a gradient over the axes along which the forward input
// of that shape was broadcast.
class SumToShapeKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& g = ctx.Input(0);
    const Shape target = SumToShapeTarget(node_, ctx);
    copy_ = NumElements(target) == g.numel();
    const size_t rank = g.shape().size();
    std::vector<bool> reduced(rank, false);
    for (size_t d = 0; d < rank; ++d) {
      const size_t lead = rank - target.size();
      const int64_t td = d < lead ? 1 : target[d - lead];
      reduced[d] = td == 1 && g.shape()[d] != 1;
    }
    count_ = NumElements(target) > 0 ? g.numel() / NumElements(target) : 0;
    if (!copy_) ix_ = PlanReduction(node_, g.shape(), reduced);
    ctx.SetOutput(0, DType::kFloat32, target);
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& g = ctx.Input(0);
    Tensor& out = ctx.Output(0);
    cudaStream_t stream = math::ComputeStream(device_.index);
    if (copy_) {
      if (g.nbytes() > 0)
        OT_CUDA_CHECK(cudaMemcpyAsync(out.raw(), g.raw(), g.nbytes(), cudaMemcpyDeviceToDevice, stream));
      return;
    }
    math::LaunchReduce(ReduceOp::kSum, DType::kFloat32, g.raw(), out.raw(), out.numel(), count_, ix_, stream);
    math::CheckLaunch("SumToShape");
  }

 private:
  bool copy_ = false;
  int64_t count_ = 0;
  math::ReduceIndexer ix_;
};

// ReduceGrad(dY, input_shape[, axes]) for ReduceSum/ReduceMean: dY broadcast back over
// the reduced axes, divided by the reduced count for a mean.
class ReduceGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const ReduceGradPlan plan = PlanReduceGrad(node_, ctx);
    if (!math::MakeBroadcastIndexer(plan.out, {plan.kept}, &ix_))
      Unsupported("broadcasting that needs more than " + std::to_string(math::kMaxDims) + " dimensions on CUDA");
    scale_ = plan.scale;
    ctx.SetOutput(0, DType::kFloat32, plan.out);
  }

  void Compute(KernelContext& ctx) override {
    math::LaunchBroadcastScale(ctx.Input(0).data<float>(), ctx.Output(0).data<float>(), ctx.Output(0).numel(), ix_,
                               scale_, math::ComputeStream(device_.index));
    math::CheckLaunch("ReduceGrad");
  }

 private:
  math::BroadcastIndexer ix_;
  float scale_ = 1.f;
};

// Opset 18 moves axes to an input for every reduction; until then only ReduceSum (13).
constexpr int64_t kAxesAttributeUntil = kLatestOpset;  // ReadReduceAxes reads the opset-18 axes input
OT_REGISTER_CUDA_KERNEL("ReduceSum", 1, kLatestOpset, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceMean", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceMax", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceMin", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceProd", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceL1", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceL2", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceSumSquare", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceLogSum", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceLogSumExp", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ArgMax", 1, kLatestOpset, ArgExtremeKernel);
OT_REGISTER_CUDA_KERNEL("ArgMin", 1, kLatestOpset, ArgExtremeKernel);
OT_REGISTER_KERNEL(kGradDomain, "SumToShape", 1, kLatestOpset, ::ot::DeviceType::kCUDA, SumToShapeKernel);
OT_REGISTER_KERNEL(kGradDomain, "ReduceGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, ReduceGradKernel);

}  // namespace
}  // namespace ot::cuda
