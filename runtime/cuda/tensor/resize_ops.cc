// CUDA kernels of Resize (opset 10+), Upsample (7-9) and org.onnxtrain ResizeGrad, mirroring
// runtime/cpu/tensor/resize.cc: the same plan (runtime/ops/shapes/index_shapes.h's ReadResizeInputs
// and PlanResize), its per-axis taps and weights copied to the device in Prepare, the axes
// applied one after another (the gradient in reverse order) by resize.cu. roi/scales/sizes
// are read on the host when the plan is made. The gradient is gather-style over the taps
// transposed on the host (TransposeResizeTaps): deterministic, no atomics. Not on CUDA:
// tf_crop_and_resize's outside positions (extrapolation_value).
#include <algorithm>
#include <string>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/cuda/tensor/resize.h"
#include "runtime/ops/shapes/index_shapes.h"
#include "runtime/ops/checks/kernel_util.h"

namespace ot::cuda {
namespace {

class ResizeBase : public OpKernel {
 public:
  using OpKernel::OpKernel;

 protected:
  // Plans for input shape x; copies the tables of the axes that change to the device and
  // makes the two ping-pong buffers.
  void Plan(const KernelContext& ctx, const std::string& op, int64_t opset, const Shape& x) {
    plan_ = PlanResize(node_, op, opset, x, ReadResizeInputs(node_, op, opset, ctx));
    if (plan_.any_outside) Unsupported("tf_crop_and_resize with positions outside the crop on CUDA");
    axes_.clear();
    tables_.clear();
    Shape cur = x;
    int64_t largest = 0;
    for (size_t d = 0; d < plan_.axes.size(); ++d) {
      const ResizeAxis& ax = plan_.axes[d];
      if (ax.identity) continue;
      tensor::ResizeAxisView v;
      v.outer = NumElements(Shape(cur.begin(), cur.begin() + static_cast<long>(d)));
      v.inner = NumElements(Shape(cur.begin() + static_cast<long>(d) + 1, cur.end()));
      v.len_in = ax.in;
      v.len_out = ax.out;
      v.taps = ax.taps;
      Tensor index = Tensor::FromHost(HostTensor::FromVector(ax.index, {static_cast<int64_t>(ax.index.size())}), device_);
      Tensor weight =
          Tensor::FromHost(HostTensor::FromVector(ax.weight, {static_cast<int64_t>(ax.weight.size())}), device_);
      v.index = index.data<int64_t>();
      v.weight = weight.data<float>();
      tables_.push_back(std::move(index));
      tables_.push_back(std::move(weight));
      std::vector<int64_t> starts, entries;
      TransposeResizeTaps(ax, &starts, &entries);
      Tensor starts_t = Tensor::FromHost(HostTensor::FromVector(starts, {static_cast<int64_t>(starts.size())}), device_);
      Tensor entries_t =
          Tensor::FromHost(HostTensor::FromVector(entries, {static_cast<int64_t>(entries.size())}), device_);
      v.starts = starts_t.data<int64_t>();
      v.entries = entries_t.data<int64_t>();
      tables_.push_back(std::move(starts_t));
      tables_.push_back(std::move(entries_t));
      axes_.push_back(v);
      cur[d] = ax.out;
      largest = std::max(largest, NumElements(cur));
    }
    for (Tensor& b : buffers_) b = Tensor::Empty(DType::kFloat32, {std::max<int64_t>(largest, 1)}, device_);
  }

  ResizePlan plan_;
  std::vector<tensor::ResizeAxisView> axes_;  // the axes that change, in order
  std::vector<Tensor> tables_;                // their index and weight tables on the device
  Tensor buffers_[2];
};

class ResizeKernel final : public ResizeBase {
 public:
  using ResizeBase::ResizeBase;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()) + " on CUDA");
    Plan(ctx, node_.op_type, opset_, x.shape());
    ctx.SetOutput(0, DType::kFloat32, plan_.out);
  }
  void Compute(KernelContext& ctx) override {
    const cudaStream_t stream = math::ComputeStream(device_.index);
    Tensor& y = ctx.Output(0);
    if (y.numel() == 0) return;
    const float* cur = ctx.Input(0).data<float>();
    for (size_t k = 0; k < axes_.size(); ++k) {
      float* next = k + 1 == axes_.size() ? y.data<float>() : buffers_[k % 2].data<float>();
      tensor::ResizeAlongAxis(axes_[k], cur, next, stream);
      cur = next;
    }
    if (axes_.empty()) OT_CUDA_CHECK(cudaMemcpyAsync(y.raw(), cur, y.nbytes(), cudaMemcpyDeviceToDevice, stream));
    math::CheckLaunch("Resize");
  }
};

// ResizeGrad(dY, forward input 1, 2, 3, X shape) with the forward's attributes and
// forward_op / forward_opset.
class ResizeGradKernel final : public ResizeBase {
 public:
  using ResizeBase::ResizeBase;
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()) + " on CUDA");
    const Shape x = ctx.Input(4).ToHost().AsInt64s();
    Plan(ctx, node_.GetString("forward_op", "Resize"), node_.GetInt("forward_opset", 13), x);
    if (plan_.out != dy.shape())
      Fail("gradient shape " + ShapeString(dy.shape()) + " differs from the resize's output " + ShapeString(plan_.out));
    ctx.SetOutput(0, DType::kFloat32, x);
  }
  void Compute(KernelContext& ctx) override {
    const cudaStream_t stream = math::ComputeStream(device_.index);
    Tensor& dx = ctx.Output(0);
    if (dx.numel() == 0) return;
    const float* cur = ctx.Input(0).data<float>();
    for (size_t k = axes_.size(); k-- > 0;) {
      float* next = k == 0 ? dx.data<float>() : buffers_[k % 2].data<float>();
      tensor::ResizeAlongAxisGrad(axes_[k], cur, next, stream);
      cur = next;
    }
    if (axes_.empty())
      OT_CUDA_CHECK(cudaMemcpyAsync(dx.raw(), cur, dx.nbytes(), cudaMemcpyDeviceToDevice, stream));
    math::CheckLaunch("ResizeGrad");
  }
};

OT_REGISTER_CUDA_KERNEL("Resize", 10, kLatestOpset, ResizeKernel);
OT_REGISTER_CUDA_KERNEL("Upsample", 7, 9, ResizeKernel);
OT_REGISTER_KERNEL(kGradDomain, "ResizeGrad", 1, kLatestOpset, DeviceType::kCUDA, ResizeGradKernel);

}  // namespace
}  // namespace ot::cuda
