// Conv and ConvGrad (org.onnxtrain) on cuDNN's convolution routines: 1D/2D/3D, groups,
// strides, dilations, explicit pads and auto_pad, optional bias; the geometry comes from
// the same WindowGeometry the CPU kernel uses. Algorithms are chosen by cuDNN's
// heuristics once per problem (shapes and attributes), the ranking cached for the
// process; each plan takes the first ranked algorithm whose workspace is within
// KernelSettings::cuda_workspace_limit and that the device can allocate, so an
// out-of-memory there tries the next one instead of failing. fp32 math stays on
// FMA-only algorithms unless AllowTf32(). cuDNN pads both ends of a
// dimension equally; where the two ends differ (auto_pad SAME_* with an even window or a
// stride, uneven pads) the input is padded explicitly into a scratch buffer
// (cudnn_kernels.cu) and cuDNN runs without padding.
// --amp fp16: when every operand is float16 (graph/passes/fp16/fp16_products.h casts them),
// the tensors are CUDNN_DATA_HALF, the outputs float16 and the accumulation float32
// (compute type CUDNN_DATA_FLOAT, cuDNN's pseudo-half configuration), tensor cores allowed;
// uneven padding is float32 only.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/ops/shapes/window_geometry.h"
#include "runtime/cuda/cudnn_kernels.h"
#include "runtime/cuda/cudnn_util.h"

namespace ot::cuda {
namespace {

// Descriptors of one convolution (x, w, y as cuDNN sees them; spatial rank padded to 2).
struct ConvProblem {
  Shape y_shape;
  Shape bias_shape;  // 1 x M x 1 x ...: broadcast over y by cudnnAddTensor
  std::vector<int> pads, strides, dilations;
  int64_t group = 1;
  // Uneven padding: X is padded into a buffer of padded_x_shape first (pads above all 0).
  bool explicit_pad = false;
  Shape padded_x_shape;
  SpatialGeometry padding;
};

ConvProblem DescribeConv(const Node& node, const Tensor& x, const Tensor& w, const Tensor* b) {
  const ConvWindow c = DescribeConvWindow(node, x, w, b, "cuDNN kernels cover 1D to 3D");
  const int64_t in_channels = c.in_channels, out_channels = c.out_channels;
  const Shape& kernel = c.kernel;
  const WindowAttrs& attrs = c.attrs;
  const Shape in_spatial = SpatialDims(x.shape());
  const WindowGeometry& g = c.geometry;
  ConvProblem p;
  p.group = c.group;
  p.y_shape = c.output;
  p.bias_shape = Shape(p.y_shape.size(), 1);
  p.bias_shape[1] = out_channels;
  if (kernel.size() > static_cast<size_t>(kMaxSpatialDims)) throw UnsupportedError("Conv: more than 3 spatial dimensions");
  for (size_t i = 0; i < kernel.size(); ++i) {
    // Equal pads, or end padding no window reaches: the windows are those of
    // pads_begin on both ends.
    const int64_t extent = (attrs.kernel[i] - 1) * attrs.dilations[i] + 1;
    const int64_t symmetric_out = (in_spatial[i] + 2 * g.pads_begin[i] - extent) / attrs.strides[i] + 1;
    if (g.pads_end[i] != g.pads_begin[i] &&
        (g.pads_end[i] < g.pads_begin[i] || in_spatial[i] + 2 * g.pads_begin[i] < extent || symmetric_out != g.output[i]))
      p.explicit_pad = true;
  }
  p.padded_x_shape = {x.dim(0), in_channels};
  p.padding.planes = x.dim(0) * in_channels;
  for (size_t i = 0; i < kernel.size(); ++i) {
    p.padding.in[i] = in_spatial[i];
    p.padding.out[i] = in_spatial[i] + g.pads_begin[i] + g.pads_end[i];
    p.padding.pad_begin[i] = g.pads_begin[i];
    p.padded_x_shape.push_back(p.padding.out[i]);
    p.pads.push_back(p.explicit_pad ? 0 : static_cast<int>(g.pads_begin[i]));
    p.strides.push_back(static_cast<int>(attrs.strides[i]));
    p.dilations.push_back(static_cast<int>(attrs.dilations[i]));
  }
  if (p.pads.size() == 1) {  // 1D: a 2D convolution over D1 x 1
    p.pads.push_back(0);
    p.strides.push_back(1);
    p.dilations.push_back(1);
  }
  return p;
}

cudnnMathType_t RequestedMath() { return AllowTf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH; }

// Sets the convolution descriptor of `p` with the given math type.
// Float16 operands run on tensor cores (their accumulation float32 either way).
cudnnMathType_t RequestedMath(bool half) { return half ? CUDNN_TENSOR_OP_MATH : RequestedMath(); }

// Sets the convolution descriptor of `p` with the given math type; the accumulation is float32.
void SetConvDesc(ConvDesc& desc, const ConvProblem& p, cudnnMathType_t math) {
  OT_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(desc.get(), static_cast<int>(p.pads.size()), p.pads.data(),
                                                 p.strides.data(), p.dilations.data(), CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT));
  OT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc.get(), static_cast<int>(p.group)));
  OT_CUDNN_CHECK(cudnnSetConvolutionMathType(desc.get(), math));
}

// Identifies a convolution problem on a device for the algorithm cache.
std::string ProblemKey(int device, const Shape& x, const Shape& w, const ConvProblem& p, bool half) {
  std::string key = std::to_string(device) + (half ? " fp16 x" : AllowTf32() ? " tf32 x" : " fp32 x") + ShapeString(x) + " w" +
                    ShapeString(w) + " g" + std::to_string(p.group);
  for (const std::vector<int>* v : {&p.pads, &p.strides, &p.dilations}) {
    key += " ";
    for (int i : *v) key += std::to_string(i) + ",";
  }
  return key;
}

// The algorithms cuDNN's heuristics rank for a problem, best first, that run under the
// requested math type (fp32 without TF32: no tensor-op variants), remembered per problem
// `key` for the process (every plan and executor with the same shapes reuses the
// ranking). `query(count, &returned, perfs)` runs the cuDNN *_v7 call.
template <typename Perf, typename Query>
std::vector<Perf> RankedAlgorithms(const std::string& key, Query query, bool half = false) {
  static std::mutex mu;
  static std::map<std::string, std::vector<Perf>> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  constexpr int kMaxAlgos = 16;
  Perf perfs[kMaxAlgos];
  int returned = 0;
  query(kMaxAlgos, &returned, perfs);
  const bool tensor_ops = half || AllowTf32();
  std::vector<Perf> ranked;
  for (int i = 0; i < returned; ++i) {
    if (perfs[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (!tensor_ops && (perfs[i].mathType == CUDNN_TENSOR_OP_MATH || perfs[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue;
    ranked.push_back(perfs[i]);
  }
  std::lock_guard<std::mutex> lock(mu);
  cache[key] = ranked;
  return ranked;
}

// The first ranked algorithm whose workspace (`workspace_of(perf)` bytes) is within
// `limit` (0: no cap) and that the device can give now (TryWorkspace: an allocation that
// fails with out-of-memory passes to the next algorithm instead of failing the plan).
// Returns the algorithm with its workspace size; throws naming the node when none fits.
template <typename Perf, typename WorkspaceOf>
Perf PickAlgorithm(const Node& node, const char* direction, const std::vector<Perf>& ranked, int device, size_t limit,
                   WorkspaceOf workspace_of, size_t* workspace_bytes) {
  size_t smallest = SIZE_MAX;
  for (const Perf& perf : ranked) {
    const size_t bytes = workspace_of(perf);
    smallest = std::min(smallest, bytes);
    if (limit != 0 && bytes > limit) continue;
    if (bytes != 0 && TryWorkspace(device, bytes) == nullptr) continue;
    *workspace_bytes = bytes;
    return perf;
  }
  if (ranked.empty())
    throw UnsupportedError(StrFormat("%s: cuDNN has no %s convolution algorithm for node %s with these shapes%s",
                                     node.op_type.c_str(), direction, node.name.c_str(),
                                     AllowTf32() ? "" : " in strict fp32 (FMA) math"));
  size_t free_bytes = 0, total = 0;
  MemoryInfo(device, &free_bytes, &total);
  throw Error(StrFormat("%s: out of memory on cuda:%d: none of the %zu %s convolution algorithms cuDNN ranks fits: the "
                        "smallest workspace is %zu bytes, the limit %s, %zu of %zu bytes free; use a smaller batch%s",
                        node.Describe().c_str(), device, ranked.size(), direction, smallest,
                        limit ? (std::to_string(limit) + " bytes").c_str() : "none", free_bytes, total,
                        limit ? " or raise --cudnn-workspace-mb" : ""));
}

// The math type to run a chosen algorithm with: its own under TF32, FMA-only otherwise.
template <typename Perf>
cudnnMathType_t MathFor(const Perf& perf, bool half = false) {
  return half || AllowTf32() ? perf.mathType : CUDNN_FMA_MATH;
}

// True when the operands are float16 (--amp fp16), false for float32; throws for a mix or
// another type.
bool CheckFloat(const Node& node, std::initializer_list<const Tensor*> tensors) {
  const DType first = (*tensors.begin())->dtype();
  for (const Tensor* t : tensors)
    if (t && (t->dtype() != first || (first != DType::kFloat32 && first != DType::kFloat16)))
      throw UnsupportedError(node.op_type + ": data type " + DTypeName(t->dtype()) + " beside " + DTypeName(first) +
                             " (the CUDA kernel takes float32, or float16 throughout)");
  return first == DType::kFloat16;
}

cudnnDataType_t CudnnType(bool half) { return half ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT; }

class ConvKernel final : public OpKernel {
 public:
  explicit ConvKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const Tensor& w = ctx.Input(1);
    const Tensor* b = ctx.OptionalInput(2);
    const bool half = CheckFloat(node_, {&x, &w, b});
    const ConvProblem p = DescribeConv(node_, x, w, b);
    ctx.SetOutput(0, x.dtype(), p.y_shape);
    empty_ = NumElements(p.y_shape) == 0;
    if (empty_) return;
    const std::string what = node_.Describe();
    explicit_pad_ = p.explicit_pad;
    if (explicit_pad_ && half) Unsupported("float16 with uneven padding on CUDA (train it in float32 or bf16)");
    padding_ = p.padding;
    if (explicit_pad_) padded_x_ = Tensor::Empty(DType::kFloat32, p.padded_x_shape, device_);
    SetTensorDesc(x_, explicit_pad_ ? p.padded_x_shape : x.shape(), what, CudnnType(half));
    SetFilterDesc(w_, w.shape(), what, CudnnType(half));
    SetTensorDesc(y_, p.y_shape, what, CudnnType(half));
    has_bias_ = b != nullptr;
    if (has_bias_) SetTensorDesc(bias_, p.bias_shape, what, CudnnType(half));
    SetConvDesc(conv_, p, RequestedMath(half));
    std::vector<int> cudnn_y(p.y_shape.size() < 4 ? 4 : p.y_shape.size());
    OT_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(conv_.get(), x_.get(), w_.get(), static_cast<int>(cudnn_y.size()),
                                                         cudnn_y.data()));
    if (cudnn_y != CudnnDims(p.y_shape, 4, what))
      Fail("cuDNN computes another output shape than ONNX's " + ShapeString(p.y_shape) +
           " for this convolution (an onnx-train bug; run on the CPU meanwhile)");
    DeviceContext& dc = Context(device_.index);
    const std::string key = ProblemKey(device_.index, explicit_pad_ ? p.padded_x_shape : x.shape(), w.shape(), p, half);
    using Perf = cudnnConvolutionFwdAlgoPerf_t;
    const auto ranked = RankedAlgorithms<Perf>(
        key,
        [&](int n, int* got, Perf* perfs) {
          OT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(dc.cudnn, x_.get(), w_.get(), conv_.get(), y_.get(), n,
                                                                got, perfs));
        },
        half);
    auto workspace_of = [&](const Perf& perf) {
      size_t bytes = 0;
      OT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), MathFor(perf, half)));
      OT_CUDNN_CHECK(
          cudnnGetConvolutionForwardWorkspaceSize(dc.cudnn, x_.get(), w_.get(), conv_.get(), y_.get(), perf.algo, &bytes));
      return bytes;
    };
    // The workspace is grown here (TryWorkspace), not in Compute.
    const Perf perf = PickAlgorithm(node_, "forward", ranked, device_.index, ctx.settings().cuda_workspace_limit,
                                    workspace_of, &ws_bytes_);
    algo_ = perf.algo;
    OT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), MathFor(perf, half)));
  }

  std::string PlanNote() const override {
    return empty_ ? std::string() : StrFormat("cuDNN forward algorithm %d, workspace %zu bytes", static_cast<int>(algo_), ws_bytes_);
  }

  void Compute(KernelContext& ctx) override {
    if (empty_) return;
    DeviceContext& dc = Context(device_.index);
    void* ws = ws_bytes_ ? Workspace(device_.index, ws_bytes_) : nullptr;
    const void* x = ctx.Input(0).raw();
    if (explicit_pad_) {
      OT_CUDA_CHECK(PadSpatial(dc.compute, padding_, 0.f, ctx.Input(0).data<float>(), padded_x_.data<float>()));
      x = padded_x_.raw();
    }
    OT_CUDNN_CHECK(cudnnConvolutionForward(dc.cudnn, One(), x_.get(), x, w_.get(), ctx.Input(1).raw(),
                                           conv_.get(), algo_, ws, ws_bytes_, Zero(), y_.get(), ctx.Output(0).raw()));
    if (has_bias_)
      OT_CUDNN_CHECK(cudnnAddTensor(dc.cudnn, One(), bias_.get(), ctx.Input(2).raw(), One(), y_.get(), ctx.Output(0).raw()));
  }

 private:
  bool empty_ = false, has_bias_ = false, explicit_pad_ = false;
  SpatialGeometry padding_;
  Tensor padded_x_;  // X padded (explicit_pad_)
  TensorDesc x_, y_, bias_;
  FilterDesc w_;
  ConvDesc conv_;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t ws_bytes_ = 0;
};

// ConvGrad(dY, X, W) -> dX, dW, dB (each optional) with the Conv node's attributes:
// cuDNN's backward-data, backward-filter and backward-bias.
class ConvGradKernel final : public OpKernel {
 public:
  explicit ConvGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    const Tensor& w = ctx.Input(2);
    const bool half = CheckFloat(node_, {&dy, &x, &w});
    Tensor bias_spec;
    if (ctx.HasOutput(2)) bias_spec = Tensor::View(x.dtype(), {w.dim(0)}, nullptr);
    const ConvProblem p = DescribeConv(node_, x, w, ctx.HasOutput(2) ? &bias_spec : nullptr);
    if (p.y_shape != dy.shape())
      Fail("gradient " + dy.Describe() + " does not match the output shape " + ShapeString(p.y_shape));
    if (x.numel() == 0 || dy.numel() == 0) Unsupported("empty tensors in ConvGrad");
    ctx.SetOutput(0, x.dtype(), x.shape());
    ctx.SetOutput(1, x.dtype(), w.shape());
    ctx.SetOutput(2, x.dtype(), {w.dim(0)});
    const std::string what = node_.Describe();
    want_dx_ = ctx.HasOutput(0);
    want_dw_ = ctx.HasOutput(1);
    want_db_ = ctx.HasOutput(2);
    explicit_pad_ = p.explicit_pad;
    if (explicit_pad_ && half) Unsupported("float16 with uneven padding on CUDA (train it in float32 or bf16)");
    padding_ = p.padding;
    // Padded X for dW, padded dX for dX (then cropped).
    if (explicit_pad_ && want_dw_) padded_x_ = Tensor::Empty(DType::kFloat32, p.padded_x_shape, device_);
    if (explicit_pad_ && want_dx_) padded_dx_ = Tensor::Empty(DType::kFloat32, p.padded_x_shape, device_);
    SetTensorDesc(x_, explicit_pad_ ? p.padded_x_shape : x.shape(), what, CudnnType(half));
    SetFilterDesc(w_, w.shape(), what, CudnnType(half));
    SetTensorDesc(dy_, dy.shape(), what, CudnnType(half));
    DeviceContext& dc = Context(device_.index);
    const std::string key = ProblemKey(device_.index, explicit_pad_ ? p.padded_x_shape : x.shape(), w.shape(), p, half);
    ws_bytes_ = 0;
    const size_t limit = ctx.settings().cuda_workspace_limit;
    if (want_dx_) {
      SetConvDesc(data_conv_, p, RequestedMath(half));
      using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
      const auto ranked = RankedAlgorithms<Perf>(
          key,
          [&](int n, int* got, Perf* perfs) {
            OT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(dc.cudnn, w_.get(), dy_.get(), data_conv_.get(),
                                                                       x_.get(), n, got, perfs));
          },
          half);
      auto workspace_of = [&](const Perf& perf) {
        size_t bytes = 0;
        OT_CUDNN_CHECK(cudnnSetConvolutionMathType(data_conv_.get(), MathFor(perf, half)));
        OT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(dc.cudnn, w_.get(), dy_.get(), data_conv_.get(),
                                                                    x_.get(), perf.algo, &bytes));
        return bytes;
      };
      size_t bytes = 0;
      const Perf perf =
          PickAlgorithm(node_, "backward-data", ranked, device_.index, limit, workspace_of, &bytes);
      data_algo_ = perf.algo;
      OT_CUDNN_CHECK(cudnnSetConvolutionMathType(data_conv_.get(), MathFor(perf, half)));
      ws_bytes_ = std::max(ws_bytes_, bytes);
    }
    if (want_dw_) {
      SetConvDesc(filter_conv_, p, RequestedMath(half));
      using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
      const auto ranked = RankedAlgorithms<Perf>(
          key,
          [&](int n, int* got, Perf* perfs) {
            OT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(dc.cudnn, x_.get(), dy_.get(),
                                                                         filter_conv_.get(), w_.get(), n, got, perfs));
          },
          half);
      auto workspace_of = [&](const Perf& perf) {
        size_t bytes = 0;
        OT_CUDNN_CHECK(cudnnSetConvolutionMathType(filter_conv_.get(), MathFor(perf, half)));
        OT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(dc.cudnn, x_.get(), dy_.get(), filter_conv_.get(),
                                                                      w_.get(), perf.algo, &bytes));
        return bytes;
      };
      size_t bytes = 0;
      const Perf perf =
          PickAlgorithm(node_, "backward-filter", ranked, device_.index, limit, workspace_of, &bytes);
      filter_algo_ = perf.algo;
      OT_CUDNN_CHECK(cudnnSetConvolutionMathType(filter_conv_.get(), MathFor(perf, half)));
      ws_bytes_ = std::max(ws_bytes_, bytes);
    }
    if (want_db_) SetTensorDesc(db_, p.bias_shape, what, CudnnType(half));
    if (ws_bytes_) Workspace(device_.index, ws_bytes_);  // each fitted alone; the larger is kept
  }

  std::string PlanNote() const override {
    std::string note;
    if (want_dx_) note += StrFormat("cuDNN backward-data algorithm %d, ", static_cast<int>(data_algo_));
    if (want_dw_) note += StrFormat("cuDNN backward-filter algorithm %d, ", static_cast<int>(filter_algo_));
    return note + StrFormat("workspace %zu bytes", ws_bytes_);
  }

  void Compute(KernelContext& ctx) override {
    DeviceContext& dc = Context(device_.index);
    void* ws = ws_bytes_ ? Workspace(device_.index, ws_bytes_) : nullptr;
    const void* dy = ctx.Input(0).raw();
    if (want_dx_) {
      void* dx = explicit_pad_ ? padded_dx_.raw() : ctx.Output(0).raw();
      OT_CUDNN_CHECK(cudnnConvolutionBackwardData(dc.cudnn, One(), w_.get(), ctx.Input(2).raw(), dy_.get(), dy,
                                                  data_conv_.get(), data_algo_, ws, ws_bytes_, Zero(), x_.get(), dx));
      if (explicit_pad_)
        OT_CUDA_CHECK(CropSpatial(dc.compute, padding_, padded_dx_.data<float>(), ctx.Output(0).data<float>()));
    }
    if (want_dw_) {
      const void* x = ctx.Input(1).raw();
      if (explicit_pad_) {
        OT_CUDA_CHECK(PadSpatial(dc.compute, padding_, 0.f, ctx.Input(1).data<float>(), padded_x_.data<float>()));
        x = padded_x_.raw();
      }
      OT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(dc.cudnn, One(), x_.get(), x, dy_.get(), dy, filter_conv_.get(),
                                                    filter_algo_, ws, ws_bytes_, Zero(), w_.get(), ctx.Output(1).raw()));
    }
    if (want_db_)
      OT_CUDNN_CHECK(cudnnConvolutionBackwardBias(dc.cudnn, One(), dy_.get(), dy, Zero(), db_.get(), ctx.Output(2).raw()));
  }

 private:
  bool want_dx_ = false, want_dw_ = false, want_db_ = false, explicit_pad_ = false;
  SpatialGeometry padding_;
  Tensor padded_x_, padded_dx_;  // explicit_pad_ scratch
  TensorDesc x_, dy_, db_;
  FilterDesc w_;
  ConvDesc data_conv_, filter_conv_;
  cudnnConvolutionBwdDataAlgo_t data_algo_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t filter_algo_ = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t ws_bytes_ = 0;
};

OT_REGISTER_CUDA_KERNEL("Conv", 1, kLatestOpset, ConvKernel);
OT_REGISTER_KERNEL(kGradDomain, "ConvGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, ConvGradKernel);

}  // namespace
}  // namespace ot::cuda
