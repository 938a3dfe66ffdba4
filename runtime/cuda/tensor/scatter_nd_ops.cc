// CUDA kernel of ScatterND (reduction 'none'), mirroring runtime/cpu/tensor/index_ops.cc's
// with the same plan and checks (runtime/ops/index_shapes.h's PlanGatherND): data copied to
// the output, then the update slices written by scatter_nd.cu.
#include <string>

#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/cuda/tensor/scatter_nd.h"
#include "runtime/ops/index_shapes.h"
#include "runtime/ops/kernel_util.h"
#include "runtime/ops/op_shapes.h"

namespace ot::cuda {
namespace {

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
    if (plan.k > tensor::kMaxScatterIndexDepth)
      Unsupported("index tuples of " + std::to_string(plan.k) + " entries on CUDA");
    g_ = tensor::ScatterNDGeometry{};
    g_.tuples = plan.tuples;
    g_.k = plan.k;
    g_.slice = plan.slice;
    for (int64_t q = 0; q < plan.k; ++q) {
      g_.dims[q] = plan.dims[static_cast<size_t>(q)];
      g_.strides[q] = plan.strides[static_cast<size_t>(q)];
    }
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

OT_REGISTER_CUDA_KERNEL("ScatterND", 11, kLatestOpset, ScatterNDKernel);

}  // namespace
}  // namespace ot::cuda
