// Conv on oneDNN's convolution primitive: 1D/2D/3D, groups (depthwise included),
// strides, dilations, explicit pads and auto_pad, optional bias; and its gradient.
#include <unordered_map>
#include <vector>

#include "graph/gradient_registry.h"

#include "runtime/cpu/dnnl_util.h"
#include "runtime/cpu/window_geometry.h"
#include "runtime/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

// Convolution problem in oneDNN's terms. Spatial vectors use oneDNN's conventions
// (dilation 0 means dense).
struct ConvProblem {
  Shape src, dst;
  Shape weights;  // [G, M/G, C/G, k...] when grouped, [M, C, k...] otherwise
  int64_t out_channels = 0;
  bool has_bias = false;
  dnnl::memory::dims strides, dilations, pads_begin, pads_end;
};

// Memory descriptors the primitive is created with. This is the one place that picks
// layouts; today all are plain row-major, matching the runtime's tensors.
struct ConvDescs {
  dnnl::memory::desc src, weights, bias, dst;
};

ConvDescs ChooseConvDescs(const ConvProblem& p) {
  ConvDescs d;
  d.src = PlainDesc(p.src, DType::kFloat32);
  d.weights = PlainDesc(p.weights, DType::kFloat32);
  if (p.has_bias) d.bias = PlainDesc(Shape{p.out_channels}, DType::kFloat32);
  d.dst = PlainDesc(p.dst, DType::kFloat32);
  return d;
}

// The problem a Conv node poses on given input shapes; shared by Conv and ConvGrad.
ConvProblem DescribeConv(const Node& node, const Tensor& x, const Tensor& w, const Tensor* b) {
  auto fail = [&](const std::string& what) { throw Error(node.Describe() + ": " + what); };
  const int rank = x.rank();
  if (rank < 3) fail("input " + x.Describe() + " must be N x C x D1 x ... (at least one spatial dimension)");
  if (rank > 5) throw UnsupportedError("Conv: " + std::to_string(rank - 2) + "D convolution (oneDNN has 1D to 3D)");
  if (w.rank() != rank) fail("weight " + w.Describe() + " must have the input's rank " + std::to_string(rank));
  const int64_t group = node.GetInt("group", 1);
  const int64_t in_channels = x.dim(1), out_channels = w.dim(0);
  if (group < 1 || in_channels % group != 0 || out_channels % group != 0 || w.dim(1) * group != in_channels)
    fail(StrFormat("input channels %lld, weight %s and group %lld do not match (weight must be M x C/group x k...)",
                   static_cast<long long>(in_channels), w.Describe().c_str(), static_cast<long long>(group)));
  ConvProblem p;
  p.out_channels = out_channels;
  p.has_bias = b != nullptr;
  if (b && b->shape() != Shape{out_channels})
    fail("bias " + b->Describe() + " must have one value per output channel (" + std::to_string(out_channels) + ")");
  const Shape kernel = SpatialDims(w.shape());
  const WindowAttrs attrs = ReadWindowAttrs(node, kernel.size(), kernel);
  const WindowGeometry g = ComputeWindowGeometry(attrs, SpatialDims(x.shape()), node);
  p.src = x.shape();
  p.dst = {x.dim(0), out_channels};
  p.dst.insert(p.dst.end(), g.output.begin(), g.output.end());
  p.weights = w.shape();
  if (group > 1) {
    p.weights = {group, out_channels / group};
    p.weights.insert(p.weights.end(), w.shape().begin() + 1, w.shape().end());
  }
  p.strides = attrs.strides;
  for (int64_t d : attrs.dilations) p.dilations.push_back(d - 1);
  p.pads_begin = g.pads_begin;
  p.pads_end = g.pads_end;
  return p;
}

// Forward descriptor of the problem (prop: inference, or training as the gradient's hint).
dnnl::convolution_forward::desc ConvForwardDesc(const ConvProblem& p, const ConvDescs& d, dnnl::prop_kind prop) {
  if (p.has_bias)
    return dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, d.src, d.weights, d.bias, d.dst,
                                           p.strides, p.dilations, p.pads_begin, p.pads_end);
  return dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, d.src, d.weights, d.dst, p.strides,
                                         p.dilations, p.pads_begin, p.pads_end);
}

class ConvKernel final : public OpKernel {
 public:
  explicit ConvKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const Tensor& w = ctx.Input(1);
    const Tensor* b = ctx.OptionalInput(2);
    for (const Tensor* t : {&x, &w, b})
      if (t && t->dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(t->dtype()));
    ConvProblem p = DescribeConv(node_, x, w, b);
    ctx.SetOutput(0, DType::kFloat32, p.dst);
    if (NumElements(p.dst) == 0) return;
    descs_ = ChooseConvDescs(p);
    try {
      auto desc = ConvForwardDesc(p, descs_, dnnl::prop_kind::forward_inference);
      prim_ = dnnl::convolution_forward(dnnl::convolution_forward::primitive_desc(desc, Engine()));
    } catch (const dnnl::error& e) {
      Unsupported(std::string("oneDNN has no convolution for this configuration: ") + e.what());
    }
    has_bias_ = p.has_bias;
  }

  void Compute(KernelContext& ctx) override {
    if (ctx.Output(0).numel() == 0) return;
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, Wrap(descs_.src, ctx.Input(0))},
                                                  {DNNL_ARG_WEIGHTS, Wrap(descs_.weights, ctx.Input(1))},
                                                  {DNNL_ARG_DST, Wrap(descs_.dst, ctx.Output(0))}};
    if (has_bias_) args[DNNL_ARG_BIAS] = Wrap(descs_.bias, ctx.Input(2));
    prim_.execute(Stream(), args);
    Stream().wait();
  }

 private:
  ConvDescs descs_;
  bool has_bias_ = false;
  dnnl::convolution_forward prim_;
};

// ConvGrad(dY, X, W) -> dX, dW, dB (each output optional) with the Conv node's
// attributes, on oneDNN's backward-data and backward-weights primitives.
class ConvGradKernel final : public OpKernel {
 public:
  explicit ConvGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    const Tensor& w = ctx.Input(2);
    for (const Tensor* t : {&dy, &x, &w})
      if (t->dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(t->dtype()));
    Tensor bias_spec;
    if (ctx.HasOutput(2)) bias_spec = Tensor::View(DType::kFloat32, {w.dim(0)}, nullptr);
    ConvProblem p = DescribeConv(node_, x, w, ctx.HasOutput(2) ? &bias_spec : nullptr);
    if (p.dst != dy.shape()) Fail("gradient " + dy.Describe() + " does not match the output shape " + ShapeString(p.dst));
    ctx.SetOutput(0, DType::kFloat32, x.shape());
    ctx.SetOutput(1, DType::kFloat32, w.shape());
    ctx.SetOutput(2, DType::kFloat32, {w.dim(0)});
    if (x.numel() == 0 || dy.numel() == 0) Unsupported("empty tensors in ConvGrad");
    descs_ = ChooseConvDescs(p);
    has_bias_ = p.has_bias;
    auto fwd_pd = dnnl::convolution_forward::primitive_desc(
        ConvForwardDesc(p, descs_, dnnl::prop_kind::forward_training), Engine());
    if (ctx.HasOutput(0)) {
      dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, descs_.src, descs_.weights,
                                              descs_.dst, p.strides, p.dilations, p.pads_begin, p.pads_end);
      data_ = dnnl::convolution_backward_data(dnnl::convolution_backward_data::primitive_desc(d, Engine(), fwd_pd));
    }
    if (ctx.HasOutput(1) || ctx.HasOutput(2)) {
      auto d = p.has_bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, descs_.src,
                                                                     descs_.weights, descs_.bias, descs_.dst, p.strides,
                                                                     p.dilations, p.pads_begin, p.pads_end)
                          : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, descs_.src,
                                                                     descs_.weights, descs_.dst, p.strides, p.dilations,
                                                                     p.pads_begin, p.pads_end);
      weights_ =
          dnnl::convolution_backward_weights(dnnl::convolution_backward_weights::primitive_desc(d, Engine(), fwd_pd));
      // dW is always computed with dB; an unrequested dW goes to scratch.
      if (!ctx.HasOutput(1)) scratch_weights_.resize(static_cast<size_t>(w.numel()));
    }
  }

  void Compute(KernelContext& ctx) override {
    if (ctx.HasOutput(0))
      data_.execute(Stream(), {{DNNL_ARG_DIFF_DST, Wrap(descs_.dst, ctx.Input(0))},
                               {DNNL_ARG_WEIGHTS, Wrap(descs_.weights, ctx.Input(2))},
                               {DNNL_ARG_DIFF_SRC, Wrap(descs_.src, ctx.Output(0))}});
    if (ctx.HasOutput(1) || ctx.HasOutput(2)) {
      void* dw = ctx.HasOutput(1) ? ctx.Output(1).raw() : scratch_weights_.data();
      std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_DIFF_DST, Wrap(descs_.dst, ctx.Input(0))},
                                                    {DNNL_ARG_SRC, Wrap(descs_.src, ctx.Input(1))},
                                                    {DNNL_ARG_DIFF_WEIGHTS, dnnl::memory(descs_.weights, Engine(), dw)}};
      if (has_bias_) args[DNNL_ARG_DIFF_BIAS] = Wrap(descs_.bias, ctx.Output(2));
      weights_.execute(Stream(), args);
    }
    Stream().wait();
  }

 private:
  ConvDescs descs_;
  bool has_bias_ = false;
  dnnl::convolution_backward_data data_;
  dnnl::convolution_backward_weights weights_;
  std::vector<float> scratch_weights_;
};

OT_REGISTER_CPU_KERNEL("Conv", 1, 1 << 30, ConvKernel);
OT_REGISTER_KERNEL(kGradDomain, "ConvGrad", 1, 1 << 30, DeviceType::kCPU, ConvGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
