// CUDA kernels of ScatterND (reduction 'none') and GatherND, mirroring
// runtime/cpu/tensor/index_ops.cc's with the same plan and checks (runtime/ops/shapes/index_shapes.h's
// PlanGatherND): ScatterND copies data to the output, then writes the update slices;
// GatherND copies the indexed slices (scatter_nd.cu).
#include <string>

#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/cuda/tensor/scatter_nd.h"
#include "runtime/ops/shapes/index_shapes.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot::cuda {
namespace {

// The kernels' geometry of a GatherND plan (ScatterND's: batch_dims 0); Unsupported past kMaxScatterIndexDepth.
tensor::ScatterNDGeometry GeometryOf(const Node& node, const GatherNDPlan& plan) {
  if (plan.k > tensor::kMaxScatterIndexDepth)
    throw UnsupportedError(node.op_type + ": index tuples of " + std::to_string(plan.k) + " entries on CUDA");
  tensor::ScatterNDGeometry g;
  g.batch = plan.batch;
  g.batch_stride = plan.batch_stride;
  g.tuples = plan.tuples;
  g.k = plan.k;
  g.slice = plan.slice;
  for (int64_t q = 0; q < plan.k; ++q) {
    g.dims[q] = plan.dims[static_cast<size_t>(q)];
    g.strides[q] = plan.strides[static_cast<size_t>(q)];
  }
  return g;
}

class ScatterNDKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    esize_ = CheckedElementSize(data, node_);
    const GatherNDPlan plan = PlanGatherND(node_, data.shape(), ctx.Input(1), 0);
    const Tensor& updates = ctx.Input(2);
    if (updates.shape() != plan.out || updates.dtype() != data.dtype())
      Fail("updates " + updates.Describe() + " must be " + DTypeName(data.dtype()) + " of shape " + ShapeString(plan.out));
    const std::string reduction = ScatterReduction(node_, opset_);
    if (reduction != "none") Unsupported("reduction '" + reduction + "' on CUDA (only 'none')");
    g_ = GeometryOf(node_, plan);
    flag_.Init(device_.index);
    ctx.SetOutput(0, data.dtype(), data.shape());
  }
  void Compute(KernelContext& ctx) override {
    if (const long long bad = flag_.Poll())
      Fail("index tuple " + std::to_string(bad - 1) + " is out of range (detected on the GPU in an earlier run)");
    const cudaStream_t stream = math::ComputeStream(device_.index);
    const Tensor& data = ctx.Input(0);
    Tensor& out = ctx.Output(0);
    if (out.raw() != data.raw() && data.nbytes() > 0)
      OT_CUDA_CHECK(cudaMemcpyAsync(out.raw(), data.raw(), data.nbytes(), cudaMemcpyDeviceToDevice, stream));
    const Tensor& indices = ctx.Input(1);
    tensor::ScatterNDReplace(g_, indices.raw(), indices.dtype() == DType::kInt64, ctx.Input(2).raw(), out.raw(), esize_,
                             flag_.device_ptr(), stream);
    math::CheckLaunch("ScatterND");
    flag_.Publish(stream);
  }

 private:
  size_t esize_ = 0;
  tensor::ScatterNDGeometry g_;
  math::DeviceErrorFlag flag_;
};

class GatherNDKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    esize_ = CheckedElementSize(data, node_);
    const GatherNDPlan plan =
        PlanGatherND(node_, data.shape(), ctx.Input(1), opset_ >= 12 ? node_.GetInt("batch_dims", 0) : 0);
    g_ = GeometryOf(node_, plan);
    flag_.Init(device_.index);
    ctx.SetOutput(0, data.dtype(), plan.out);
  }
  void Compute(KernelContext& ctx) override {
    if (const long long bad = flag_.Poll())
      Fail("index tuple " + std::to_string(bad - 1) + " is out of range (detected on the GPU in an earlier run)");
    const cudaStream_t stream = math::ComputeStream(device_.index);
    const Tensor& indices = ctx.Input(1);
    tensor::GatherNDCopy(g_, ctx.Input(0).raw(), indices.raw(), indices.dtype() == DType::kInt64, ctx.Output(0).raw(),
                         esize_, flag_.device_ptr(), stream);
    math::CheckLaunch("GatherND");
    flag_.Publish(stream);
  }

 private:
  size_t esize_ = 0;
  tensor::ScatterNDGeometry g_;
  math::DeviceErrorFlag flag_;
};

OT_REGISTER_CUDA_KERNEL("ScatterND", 11, kLatestOpset, ScatterNDKernel);
OT_REGISTER_CUDA_KERNEL("GatherND", 11, kLatestOpset, GatherNDKernel);

}  // namespace
}  // namespace ot::cuda
