// ConvTranspose and org.onnxtrain ConvTransposeGrad on cuDNN, mirroring
// runtime/cpu/conv/conv_transpose.cc with the same geometry (runtime/ops/shapes/window_geometry.h's
// DescribeConvTransposeWindow). A transposed convolution X -> Y is the data gradient of the
// convolution Y -> X with the same weight, so with cuDNN's convolution taking Y-shaped
// tensors to X-shaped ones (filter [C, M/group, k...], ONNX's own weight layout):
//   Y  = BackwardData(W, X) (+ B per output channel)
//   dX = Forward(dY, W);  dW = BackwardFilter(dY, X);  dB = BackwardBias(dY)
// cuDNN pads symmetrically: a window geometry whose end padding (output_padding,
// output_shape) makes that convolution another size than X is not on CUDA yet.
#include <algorithm>
#include <string>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/cudnn_util.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/ops/shapes/window_geometry.h"

namespace ot::cuda {
namespace {

// The descriptors of the convolution from Y-shaped tensors to X-shaped ones.
struct TransposedConv {
  TensorDesc x, y, bias;  // x: X-shaped ("convolution output"), y: Y-shaped ("convolution input")
  FilterDesc w;
  ConvDesc conv;
  Shape y_shape;
  int64_t out_channels = 0;

  void Plan(const Node& node, const Tensor& x_in, const Tensor& w_in, const Tensor* b) {
    const std::string what = node.Describe();
    const ConvTransposeWindow win = DescribeConvTransposeWindow(node, x_in, w_in, b, "cuDNN has 1D to 3D");
    y_shape = win.output;
    out_channels = win.out_channels;
    const size_t spatial = win.kernel.size();
    std::vector<int> pads, strides, dilations;
    for (size_t d = 0; d < spatial; ++d) {
      if (win.pads_begin[d] < 0) throw UnsupportedError(node.op_type + ": negative padding on CUDA");
      pads.push_back(static_cast<int>(win.pads_begin[d]));
      strides.push_back(static_cast<int>(win.strides[d]));
      dilations.push_back(static_cast<int>(win.dilations[d]));
    }
    while (pads.size() < 2) {  // 1-D as 2-D with a unit axis
      pads.push_back(0);
      strides.push_back(1);
      dilations.push_back(1);
    }
    SetTensorDesc(x, x_in.shape(), what);
    SetTensorDesc(y, y_shape, what);
    SetFilterDesc(w, w_in.shape(), what);
    OT_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(conv.get(), static_cast<int>(pads.size()), pads.data(),
                                                   strides.data(), dilations.data(), CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
    OT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv.get(), static_cast<int>(win.group)));
    OT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv.get(), AllowTf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    std::vector<int> got(x_in.rank() < 4 ? 4 : x_in.rank());
    OT_CUDNN_CHECK(
        cudnnGetConvolutionNdForwardOutputDim(conv.get(), y.get(), w.get(), static_cast<int>(got.size()), got.data()));
    if (got != CudnnDims(x_in.shape(), 4, what))
      throw UnsupportedError(node.op_type + ": this output padding (output_padding, output_shape or uneven pads) on "
                             "CUDA, where cuDNN pads both ends alike; run it on the CPU");
    Shape bias_shape(y_shape.size(), 1);
    bias_shape[1] = out_channels;
    SetTensorDesc(bias, bias_shape, what);
  }
};

// The first algorithm cuDNN's heuristics rank that succeeds with the math this run allows.
template <typename Perf>
Perf FirstUsable(const Node& node, const char* what, const std::vector<Perf>& perfs, int count) {
  for (int i = 0; i < count; ++i)
    if (perfs[static_cast<size_t>(i)].status == CUDNN_STATUS_SUCCESS &&
        (AllowTf32() || perfs[static_cast<size_t>(i)].mathType != CUDNN_TENSOR_OP_MATH))
      return perfs[static_cast<size_t>(i)];
  throw UnsupportedError(node.op_type + ": cuDNN has no " + what + " algorithm for this transposed convolution");
}

constexpr int kAlgorithms = 8;

class ConvTransposeKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const Tensor& w = ctx.Input(1);
    const Tensor* b = ctx.OptionalInput(2);
    for (const Tensor* t : {&x, &w, b})
      if (t && t->dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(t->dtype()) + " on CUDA");
    c_.Plan(node_, x, w, b);
    ctx.SetOutput(0, DType::kFloat32, c_.y_shape);
    empty_ = NumElements(c_.y_shape) == 0 || x.numel() == 0;
    if (empty_) return;
    DeviceContext& dc = Context(device_.index);
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(kAlgorithms);
    int got = 0;
    OT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(dc.cudnn, c_.w.get(), c_.x.get(), c_.conv.get(),
                                                               c_.y.get(), kAlgorithms, &got, perfs.data()));
    const auto perf = FirstUsable(node_, "backward-data", perfs, got);
    algo_ = perf.algo;
    OT_CUDNN_CHECK(cudnnSetConvolutionMathType(c_.conv.get(), perf.mathType));
    OT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(dc.cudnn, c_.w.get(), c_.x.get(), c_.conv.get(),
                                                                c_.y.get(), algo_, &ws_bytes_));
    if (ws_bytes_) Workspace(device_.index, ws_bytes_);  // grown here, not in Compute
  }
  void Compute(KernelContext& ctx) override {
    if (empty_) return;
    DeviceContext& dc = Context(device_.index);
    void* ws = ws_bytes_ ? Workspace(device_.index, ws_bytes_) : nullptr;
    OT_CUDNN_CHECK(cudnnConvolutionBackwardData(dc.cudnn, One(), c_.w.get(), ctx.Input(1).raw(), c_.x.get(),
                                                ctx.Input(0).raw(), c_.conv.get(), algo_, ws, ws_bytes_, Zero(),
                                                c_.y.get(), ctx.Output(0).raw()));
    if (const Tensor* b = ctx.OptionalInput(2))
      OT_CUDNN_CHECK(cudnnAddTensor(dc.cudnn, One(), c_.bias.get(), b->raw(), One(), c_.y.get(), ctx.Output(0).raw()));
  }

 private:
  TransposedConv c_;
  cudnnConvolutionBwdDataAlgo_t algo_{};
  size_t ws_bytes_ = 0;
  bool empty_ = false;
};

// ConvTransposeGrad(dY, X, W) -> dX, dW, dB (each optional).
class ConvTransposeGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    const Tensor& w = ctx.Input(2);
    for (const Tensor* t : {&dy, &x, &w})
      if (t->dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(t->dtype()) + " on CUDA");
    c_.Plan(node_, x, w, nullptr);
    if (c_.y_shape != dy.shape())
      Fail("gradient " + dy.Describe() + " does not match the output shape " + ShapeString(c_.y_shape));
    if (x.numel() == 0 || dy.numel() == 0) Unsupported("empty tensors in ConvTransposeGrad");
    ctx.SetOutput(0, DType::kFloat32, x.shape());
    ctx.SetOutput(1, DType::kFloat32, w.shape());
    ctx.SetOutput(2, DType::kFloat32, {c_.out_channels});
    DeviceContext& dc = Context(device_.index);
    ws_bytes_ = 0;
    if (ctx.HasOutput(0)) {
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(kAlgorithms);
      int got = 0;
      OT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(dc.cudnn, c_.y.get(), c_.w.get(), c_.conv.get(), c_.x.get(),
                                                            kAlgorithms, &got, perfs.data()));
      const auto perf = FirstUsable(node_, "forward", perfs, got);
      fwd_algo_ = perf.algo;
      fwd_math_ = perf.mathType;
      size_t bytes = 0;
      OT_CUDNN_CHECK(cudnnSetConvolutionMathType(c_.conv.get(), fwd_math_));
      OT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(dc.cudnn, c_.y.get(), c_.w.get(), c_.conv.get(),
                                                             c_.x.get(), fwd_algo_, &bytes));
      ws_bytes_ = std::max(ws_bytes_, bytes);
    }
    if (ctx.HasOutput(1)) {
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(kAlgorithms);
      int got = 0;
      OT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(dc.cudnn, c_.y.get(), c_.x.get(), c_.conv.get(),
                                                                   c_.w.get(), kAlgorithms, &got, perfs.data()));
      const auto perf = FirstUsable(node_, "backward-filter", perfs, got);
      filter_algo_ = perf.algo;
      filter_math_ = perf.mathType;
      size_t bytes = 0;
      OT_CUDNN_CHECK(cudnnSetConvolutionMathType(c_.conv.get(), filter_math_));
      OT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(dc.cudnn, c_.y.get(), c_.x.get(), c_.conv.get(),
                                                                    c_.w.get(), filter_algo_, &bytes));
      ws_bytes_ = std::max(ws_bytes_, bytes);
    }
    if (ws_bytes_) Workspace(device_.index, ws_bytes_);  // grown here, not in Compute
  }
  void Compute(KernelContext& ctx) override {
    DeviceContext& dc = Context(device_.index);
    void* ws = ws_bytes_ ? Workspace(device_.index, ws_bytes_) : nullptr;
    const void* dy = ctx.Input(0).raw();
    if (ctx.HasOutput(0)) {
      OT_CUDNN_CHECK(cudnnSetConvolutionMathType(c_.conv.get(), fwd_math_));
      OT_CUDNN_CHECK(cudnnConvolutionForward(dc.cudnn, One(), c_.y.get(), dy, c_.w.get(), ctx.Input(2).raw(),
                                             c_.conv.get(), fwd_algo_, ws, ws_bytes_, Zero(), c_.x.get(),
                                             ctx.Output(0).raw()));
    }
    if (ctx.HasOutput(1)) {
      OT_CUDNN_CHECK(cudnnSetConvolutionMathType(c_.conv.get(), filter_math_));
      OT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(dc.cudnn, One(), c_.y.get(), dy, c_.x.get(), ctx.Input(1).raw(),
                                                    c_.conv.get(), filter_algo_, ws, ws_bytes_, Zero(), c_.w.get(),
                                                    ctx.Output(1).raw()));
    }
    if (ctx.HasOutput(2))
      OT_CUDNN_CHECK(
          cudnnConvolutionBackwardBias(dc.cudnn, One(), c_.y.get(), dy, Zero(), c_.bias.get(), ctx.Output(2).raw()));
  }

 private:
  TransposedConv c_;
  cudnnConvolutionFwdAlgo_t fwd_algo_{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo_{};
  cudnnMathType_t fwd_math_ = CUDNN_FMA_MATH, filter_math_ = CUDNN_FMA_MATH;
  size_t ws_bytes_ = 0;
};

OT_REGISTER_CUDA_KERNEL("ConvTranspose", 1, kLatestOpset, ConvTransposeKernel);
OT_REGISTER_KERNEL(kGradDomain, "ConvTransposeGrad", 1, kLatestOpset, DeviceType::kCUDA, ConvTransposeGradKernel);

}  // namespace
}  // namespace ot::cuda
