// MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool and their org.onnxtrain
// gradients (MaxPoolGrad, ... taking dY and X), 1 to 3 spatial dimensions, float32. The
// geometry is WindowGeometry's, as on the CPU. cuDNN's pooling runs where it can describe
// the windows (equal padding at both ends, no dilation); windows it cannot (uneven pads,
// ceil_mode's partial last window, dilations) run on our own kernels
// (cudnn_kernels.cu). MaxPool's Indices output and storage_order are unsupported here
// (the CPU kernel has them).
#include <string>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/ops/shapes/window_geometry.h"
#include "runtime/cuda/cudnn_kernels.h"
#include "runtime/cuda/cudnn_util.h"

namespace ot::cuda {
namespace {

struct PoolProblem {
  Shape y_shape;
  // cuDNN's description (own_kernel false):
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX_DETERMINISTIC;
  std::vector<int> window, pads, strides;  // spatial rank padded to 2
  // Our own kernels' (own_kernel true):
  bool own_kernel = false;
  PoolMode own_mode = PoolMode::kMax;
  SpatialGeometry geometry;
};

// `op` is the forward op type (MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool).
PoolProblem DescribePool(const std::string& op, const Node& node, const Shape& x_shape) {
  const PoolWindow w = DescribePoolWindow(op, node, x_shape);
  const Shape spatial = SpatialDims(x_shape);
  const WindowAttrs& attrs = w.attrs;
  const WindowGeometry& g = w.geometry;
  PoolProblem p;
  p.y_shape = w.output;
  if (!w.is_max) {
    p.mode = w.include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    p.own_mode = w.include_pad ? PoolMode::kAverageIncludePad : PoolMode::kAverageExcludePad;
  }
  if (spatial.size() > static_cast<size_t>(kMaxSpatialDims))
    throw UnsupportedError(op + ": " + std::to_string(spatial.size()) + "D pooling (the CUDA kernels have 1D to 3D)");
  p.geometry.planes = x_shape[0] * x_shape[1];
  for (size_t i = 0; i < spatial.size(); ++i) {
    p.geometry.in[i] = spatial[i];
    p.geometry.out[i] = g.output[i];
    p.geometry.pad_begin[i] = g.pads_begin[i];
    p.geometry.kernel[i] = attrs.kernel[i];
    p.geometry.stride[i] = attrs.strides[i];
    p.geometry.dilation[i] = attrs.dilations[i];
    // cuDNN's windows: no dilation, and equal pads or end padding (ceil_mode's included)
    // that no window reaches, narrower than the window.
    const int64_t symmetric_out = (spatial[i] + 2 * g.pads_begin[i] - attrs.kernel[i]) / attrs.strides[i] + 1;
    const bool uneven = g.pads_end[i] != g.pads_begin[i] &&
                        (g.pads_end[i] < g.pads_begin[i] || spatial[i] + 2 * g.pads_begin[i] < attrs.kernel[i] ||
                         symmetric_out != g.output[i]);
    if (attrs.dilations[i] != 1 || uneven || g.pads_begin[i] >= attrs.kernel[i] || attrs.kernel[i] > 0x7fffffff ||
        attrs.strides[i] > 0x7fffffff)
      p.own_kernel = true;
    p.window.push_back(static_cast<int>(attrs.kernel[i]));
    p.pads.push_back(static_cast<int>(g.pads_begin[i]));
    p.strides.push_back(static_cast<int>(attrs.strides[i]));
  }
  if (p.window.size() == 1) {  // 1D: 2D pooling over D1 x 1
    p.window.push_back(1);
    p.pads.push_back(0);
    p.strides.push_back(1);
  }
  return p;
}

void SetPoolDesc(PoolDesc& desc, const PoolProblem& p) {
  OT_CUDNN_CHECK(cudnnSetPoolingNdDescriptor(desc.get(), p.mode, CUDNN_PROPAGATE_NAN, static_cast<int>(p.window.size()),
                                             p.window.data(), p.pads.data(), p.strides.data()));
}

void CheckRank(const Node& node, const std::string& op, const Tensor& x) {
  if (x.rank() < 3)
    throw Error(node.Describe() + ": input " + x.Describe() + " must be N x C x D1 x ... (at least one spatial dimension)");
  if (x.rank() > 5) throw UnsupportedError(op + ": " + std::to_string(x.rank() - 2) + "D pooling (cuDNN has 1D to 3D)");
}

// What the forward and gradient kernels keep from Prepare: the geometry for our own
// kernels, or cuDNN's descriptors.
class PoolKernelBase : public OpKernel {
 public:
  using OpKernel::OpKernel;

 protected:
  // Takes the problem posed on input shape `x_shape`; true when it runs on cuDNN.
  bool TakeProblem(const PoolProblem& p, const Shape& x_shape) {
    own_kernel_ = p.own_kernel;
    own_mode_ = p.own_mode;
    geometry_ = p.geometry;
    if (own_kernel_) return false;
    SetTensorDesc(x_, x_shape, node_.Describe());
    SetTensorDesc(y_, p.y_shape, node_.Describe());
    SetPoolDesc(pool_, p);
    return true;
  }

  bool empty_ = false, own_kernel_ = false;
  PoolMode own_mode_ = PoolMode::kMax;
  SpatialGeometry geometry_;
  TensorDesc x_, y_;
  PoolDesc pool_;
};

class PoolKernel final : public PoolKernelBase {
 public:
  using PoolKernelBase::PoolKernelBase;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()) + " (the CUDA kernel takes float32)");
    CheckRank(node_, node_.op_type, x);
    if (ctx.HasOutput(1)) Unsupported("the Indices output of MaxPool");
    if (node_.GetInt("storage_order", 0) != 0) Unsupported("storage_order=1");
    const PoolProblem p = DescribePool(node_.op_type, node_, x.shape());
    ctx.SetOutput(0, x.dtype(), p.y_shape);
    empty_ = x.numel() == 0 || NumElements(p.y_shape) == 0;
    if (empty_) return;
    TakeProblem(p, x.shape());
  }

  void Compute(KernelContext& ctx) override {
    if (empty_) return;
    DeviceContext& dc = Context(device_.index);
    if (own_kernel_) {
      OT_CUDA_CHECK(PoolForward(dc.compute, own_mode_, geometry_, ctx.Input(0).data<float>(), ctx.Output(0).data<float>()));
      return;
    }
    OT_CUDNN_CHECK(cudnnPoolingForward(dc.cudnn, pool_.get(), One(), x_.get(), ctx.Input(0).raw(), Zero(), y_.get(),
                                       ctx.Output(0).raw()));
  }
};

// <Pool>Grad(dY, X) -> dX with the forward node's attributes. cuDNN's backward reads the
// forward output Y as well, which the gradient op does not take: the kernel runs the
// forward pass again into a scratch buffer. Our own kernels need only X.
class PoolGradKernel final : public PoolKernelBase {
 public:
  using PoolKernelBase::PoolKernelBase;

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    if (x.dtype() != DType::kFloat32 || dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    const std::string forward_op = node_.op_type.substr(0, node_.op_type.size() - 4);  // strip "Grad"
    CheckRank(node_, forward_op, x);
    const PoolProblem p = DescribePool(forward_op, node_, x.shape());
    if (p.y_shape != dy.shape())
      Fail("gradient " + dy.Describe() + " does not match the pooled shape " + ShapeString(p.y_shape));
    ctx.SetOutput(0, DType::kFloat32, x.shape());
    empty_ = x.numel() == 0 || dy.numel() == 0;
    if (empty_) return;
    if (!TakeProblem(p, x.shape())) return;
    y_scratch_ = Tensor::Empty(DType::kFloat32, p.y_shape, device_);
  }

  void Compute(KernelContext& ctx) override {
    Tensor& dx = ctx.Output(0);
    DeviceContext& dc = Context(device_.index);
    if (empty_) {
      if (dx.nbytes()) OT_CUDA_CHECK(cudaMemsetAsync(dx.raw(), 0, dx.nbytes(), dc.compute));
      return;
    }
    if (own_kernel_) {
      OT_CUDA_CHECK(PoolBackward(dc.compute, own_mode_, geometry_, ctx.Input(1).data<float>(),
                                 ctx.Input(0).data<float>(), dx.data<float>()));
      return;
    }
    const void* x = ctx.Input(1).raw();
    OT_CUDNN_CHECK(cudnnPoolingForward(dc.cudnn, pool_.get(), One(), x_.get(), x, Zero(), y_.get(), y_scratch_.raw()));
    OT_CUDNN_CHECK(cudnnPoolingBackward(dc.cudnn, pool_.get(), One(), y_.get(), y_scratch_.raw(), y_.get(),
                                        ctx.Input(0).raw(), x_.get(), x, Zero(), x_.get(), dx.raw()));
  }

 private:
  Tensor y_scratch_;
};

OT_REGISTER_CUDA_KERNEL("MaxPool", 1, kLatestOpset, PoolKernel);
OT_REGISTER_CUDA_KERNEL("AveragePool", 1, kLatestOpset, PoolKernel);
OT_REGISTER_CUDA_KERNEL("GlobalMaxPool", 1, kLatestOpset, PoolKernel);
OT_REGISTER_CUDA_KERNEL("GlobalAveragePool", 1, kLatestOpset, PoolKernel);
OT_REGISTER_KERNEL(kGradDomain, "MaxPoolGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, PoolGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "AveragePoolGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, PoolGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "GlobalMaxPoolGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, PoolGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "GlobalAveragePoolGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, PoolGradKernel);

}  // namespace
}  // namespace ot::cuda
