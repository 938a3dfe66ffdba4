// Conv on oneDNN's convolution primitive: 1D/2D/3D, groups (depthwise included),
// strides, dilations, explicit pads and auto_pad, optional bias.
#include <unordered_map>

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

class ConvKernel final : public OpKernel {
 public:
  explicit ConvKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const Tensor& w = ctx.Input(1);
    const Tensor* b = ctx.OptionalInput(2);
    for (const Tensor* t : {&x, &w, b})
      if (t && t->dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(t->dtype()));
    ConvProblem p = DescribeProblem(x, w, b);
    ctx.SetOutput(0, DType::kFloat32, p.dst);
    if (NumElements(p.dst) == 0) return;
    descs_ = ChooseConvDescs(p);
    try {
      auto desc = p.has_bias
                      ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                        dnnl::algorithm::convolution_direct, descs_.src, descs_.weights,
                                                        descs_.bias, descs_.dst, p.strides, p.dilations, p.pads_begin,
                                                        p.pads_end)
                      : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                        dnnl::algorithm::convolution_direct, descs_.src, descs_.weights,
                                                        descs_.dst, p.strides, p.dilations, p.pads_begin, p.pads_end);
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
  ConvProblem DescribeProblem(const Tensor& x, const Tensor& w, const Tensor* b) const {
    const int rank = x.rank();
    if (rank < 3) Fail("input " + x.Describe() + " must be N x C x D1 x ... (at least one spatial dimension)");
    if (rank > 5) Unsupported(std::to_string(rank - 2) + "D convolution (oneDNN has 1D to 3D)");
    if (w.rank() != rank) Fail("weight " + w.Describe() + " must have the input's rank " + std::to_string(rank));
    const int64_t group = node_.GetInt("group", 1);
    const int64_t in_channels = x.dim(1), out_channels = w.dim(0);
    if (group < 1 || in_channels % group != 0 || out_channels % group != 0 || w.dim(1) * group != in_channels)
      Fail(StrFormat("input channels %lld, weight %s and group %lld do not match (weight must be M x C/group x k...)",
                     static_cast<long long>(in_channels), w.Describe().c_str(), static_cast<long long>(group)));
    ConvProblem p;
    p.out_channels = out_channels;
    p.has_bias = b != nullptr;
    if (b && b->shape() != Shape{out_channels})
      Fail("bias " + b->Describe() + " must have one value per output channel (" + std::to_string(out_channels) + ")");
    const Shape kernel = SpatialDims(w.shape());
    const WindowAttrs attrs = ReadWindowAttrs(node_, kernel.size(), kernel);
    const WindowGeometry g = ComputeWindowGeometry(attrs, SpatialDims(x.shape()), node_);
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

  ConvDescs descs_;
  bool has_bias_ = false;
  dnnl::convolution_forward prim_;
};

OT_REGISTER_CPU_KERNEL("Conv", 1, 1 << 30, ConvKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
