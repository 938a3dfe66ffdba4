// CUDA kernels of org.onnxtrain SliceGrad and GatherGrad, mirroring
// runtime/cpu/tensor/index_grad_kernels.cc: the same Prepare checks (runtime/ops/shapes/op_shapes.h,
// index_shapes.h) and index arithmetic (runtime/ops/math/index_math.h); the launches are in
// index_grad.cu. Shape-like inputs (Slice's starts/ends/axes/steps, the data shape) are read
// on the host in Prepare; Compute only enqueues work.
#include "graph/op_domains.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/cuda/tensor/index_grad.h"
#include "runtime/ops/shapes/index_shapes.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot::cuda {
namespace {

// SliceGrad(dY, starts, ends, axes, steps, data_shape): zeros with dY at the sliced positions.
class SliceGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()) + " on CUDA");
    data_shape_ = shape_inputs_.Read(ctx, 5);
    view_ = SliceView(node_, static_cast<int>(node_.GetInt("forward_opset", 13)), ctx, shape_inputs_, data_shape_);
    if (view_.shape != dy.shape())
      Fail("gradient shape " + ShapeString(dy.shape()) + " differs from the slice's " + ShapeString(view_.shape));
    if (view_.shape.size() > static_cast<size_t>(tensor::kMaxSliceRank))
      Unsupported("a slice of rank " + std::to_string(view_.shape.size()) + " on CUDA");
    ctx.SetOutput(0, DType::kFloat32, data_shape_);
  }
  void Compute(KernelContext& ctx) override {
    tensor::SliceScatter(ctx.Input(0).data<float>(), view_.shape, view_.strides, view_.offset,
                         ctx.Output(0).data<float>(), ctx.Output(0).numel(), math::ComputeStream(device_.index));
    math::CheckLaunch("SliceGrad");
  }

 private:
  Shape data_shape_;
  StridedView view_;
  ShapeInputValues shape_inputs_;
};

// GatherGrad(dY, data_shape, indices) with `axis`: dY rows summed by row into zeros
// (deterministically: index_grad.h).
class GatherGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()) + " on CUDA");
    data_shape_ = shape_inputs_.Read(ctx, 1);
    CheckGatherGrad(node_, dy, data_shape_, ctx.Input(2), &axis_);
    flag_.Init(device_.index);
    ctx.SetOutput(0, DType::kFloat32, data_shape_);
    // The sort's scratch: (row, k) pairs twice (uint64 rows, int64 positions) and cub's storage.
    const int64_t count = ctx.Input(2).numel();
    const size_t sort_bytes = tensor::GatherSortBytes(count);
    scratch_tensor_ = Tensor::Empty(DType::kInt64, {4 * count + static_cast<int64_t>((sort_bytes + 7) / 8)}, device_);
    if (count > 0) {
      int64_t* base = scratch_tensor_.data<int64_t>();
      scratch_.rows_in = reinterpret_cast<uint64_t*>(base);
      scratch_.rows_out = reinterpret_cast<uint64_t*>(base + count);
      scratch_.pos_in = base + 2 * count;
      scratch_.pos_out = base + 3 * count;
      scratch_.sort_temp = base + 4 * count;
      scratch_.sort_bytes = sort_bytes;
    }
  }
  void Compute(KernelContext& ctx) override {
    if (const long long bad = flag_.Poll())
      Fail("index number " + std::to_string(bad - 1) + " is out of range for the gathered axis of size " +
           std::to_string(data_shape_[static_cast<size_t>(axis_)]) + " (detected on the GPU in an earlier run)");
    const Tensor& indices = ctx.Input(2);
    const AxisSplit ds = SplitAround(data_shape_, axis_, sizeof(float));
    const cudaStream_t stream = math::ComputeStream(device_.index);
    tensor::GatherScatterAdd(ctx.Input(0).data<float>(), indices.raw(), indices.dtype() == DType::kInt64, ds.outer,
                             data_shape_[static_cast<size_t>(axis_)], indices.numel(),
                             ds.inner_bytes / static_cast<int64_t>(sizeof(float)), ctx.Output(0).data<float>(),
                             flag_.device_ptr(), scratch_, stream);
    math::CheckLaunch("GatherGrad");
    flag_.Publish(stream);
  }

 private:
  Shape data_shape_;
  int64_t axis_ = 0;
  ShapeInputValues shape_inputs_;
  math::DeviceErrorFlag flag_;
  Tensor scratch_tensor_;  // holds scratch_'s arrays
  tensor::GatherScratch scratch_;
};

OT_REGISTER_KERNEL(kGradDomain, "SliceGrad", 1, kLatestOpset, DeviceType::kCUDA, SliceGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "GatherGrad", 1, kLatestOpset, DeviceType::kCUDA, GatherGradKernel);

}  // namespace
}  // namespace ot::cuda
