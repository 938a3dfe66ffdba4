// ConvTranspose on oneDNN's deconvolution primitive (1D/2D/3D, groups, strides,
// dilations, pads, output_padding, output_shape, auto_pad, optional bias), and its
// gradient ConvTransposeGrad(dY, X, W) -> dX, dW, dB on oneDNN's deconvolution backward
// data and backward weights. Activations take the layout oneDNN chooses; the ONNX weight
// (C x M/group x k...) is read and written through a strided descriptor of oneDNN's
// (M, C, k...) weight dims, so no transposition of our own is needed.
#include <cstring>
#include <unordered_map>
#include <vector>

#include "graph/op_domains.h"

#include "runtime/cpu/layout/dnnl_layout.h"
#include "runtime/ops/shapes/window_geometry.h"
#include "runtime/core/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

struct DeconvProblem {
  Shape src, dst;
  dnnl::memory::dims weight_dims;     // oneDNN's: [M, C, k...] or [G, M/G, C/G, k...]
  dnnl::memory::dims weight_strides;  // of the ONNX tensor C x M/G x k...
  int64_t out_channels = 0;
  bool has_bias = false;
  dnnl::memory::dims strides, dilations, pads_begin, pads_end;
};

DeconvProblem DescribeDeconv(const Node& node, const Tensor& x, const Tensor& w, bool has_bias) {
  Tensor bias_spec;
  if (has_bias) bias_spec = Tensor::View(DType::kFloat32, {w.dim(1) * node.GetInt("group", 1)}, nullptr);
  const ConvTransposeWindow c = DescribeConvTransposeWindow(node, x, w, has_bias ? &bias_spec : nullptr,
                                                            "oneDNN has 1D to 3D");
  DeconvProblem p;
  p.src = x.shape();
  p.dst = c.output;
  p.out_channels = c.out_channels;
  p.has_bias = has_bias;
  int64_t taps = 1;
  for (int64_t k : c.kernel) taps *= k;
  std::vector<int64_t> tap_strides(c.kernel.size());
  for (size_t i = c.kernel.size(); i-- > 0;) tap_strides[i] = i + 1 == c.kernel.size() ? 1 : tap_strides[i + 1] * c.kernel[i + 1];
  const int64_t m_per_group = w.dim(1), c_per_group = x.dim(1) / c.group;
  if (c.group > 1) {
    p.weight_dims = {c.group, m_per_group, c_per_group};
    p.weight_strides = {c_per_group * m_per_group * taps, taps, m_per_group * taps};
  } else {
    p.weight_dims = {m_per_group, c_per_group};
    p.weight_strides = {taps, m_per_group * taps};
  }
  p.weight_dims.insert(p.weight_dims.end(), c.kernel.begin(), c.kernel.end());
  p.weight_strides.insert(p.weight_strides.end(), tap_strides.begin(), tap_strides.end());
  p.strides = c.strides;
  for (int64_t d : c.dilations) p.dilations.push_back(d - 1);
  p.pads_begin = c.pads_begin;
  p.pads_end = c.pads_end;
  return p;
}

dnnl::memory::desc Any(const Shape& s) {
  return dnnl::memory::desc(ToDims(s), dnnl::memory::data_type::f32, dnnl::memory::format_tag::any);
}
dnnl::memory::desc AnyDims(const dnnl::memory::dims& d) {
  return dnnl::memory::desc(d, dnnl::memory::data_type::f32, dnnl::memory::format_tag::any);
}
dnnl::memory::desc OnnxWeights(const DeconvProblem& p) {
  return dnnl::memory::desc(p.weight_dims, dnnl::memory::data_type::f32, p.weight_strides);
}

dnnl::deconvolution_forward::desc DeconvForwardDesc(const DeconvProblem& p, dnnl::prop_kind prop) {
  if (p.has_bias)
    return dnnl::deconvolution_forward::desc(prop, dnnl::algorithm::deconvolution_direct, Any(p.src),
                                             AnyDims(p.weight_dims), PlainDesc(Shape{p.out_channels}, DType::kFloat32),
                                             Any(p.dst), p.strides, p.dilations, p.pads_begin, p.pads_end);
  return dnnl::deconvolution_forward::desc(prop, dnnl::algorithm::deconvolution_direct, Any(p.src),
                                           AnyDims(p.weight_dims), Any(p.dst), p.strides, p.dilations, p.pads_begin,
                                           p.pads_end);
}

class ConvTransposeKernel final : public OpKernel {
 public:
  explicit ConvTransposeKernel(const KernelInfo& info) : OpKernel(info) {}

  bool AcceptsLayouts(const KernelContext&) const override { return true; }

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const Tensor& w = ctx.Input(1);
    const Tensor* b = ctx.OptionalInput(2);
    for (const Tensor* t : {&x, &w, b})
      if (t && t->dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(t->dtype()));
    if (!w.is_plain() || (b && !b->is_plain())) Unsupported("weights in a non-plain layout");
    if (b && b->shape() != Shape{w.dim(1) * node_.GetInt("group", 1)})
      Fail("bias " + b->Describe() + " must have one value per output channel");
    const DeconvProblem p = DescribeDeconv(node_, x, w, b != nullptr);
    ctx.SetOutput(0, DType::kFloat32, p.dst);
    if (NumElements(p.dst) == 0) return;
    if (x.numel() == 0) Unsupported("an empty input");
    dnnl::deconvolution_forward::primitive_desc pd;
    try {
      pd = dnnl::deconvolution_forward::primitive_desc(DeconvForwardDesc(p, dnnl::prop_kind::forward_inference),
                                                        Engine());
    } catch (const dnnl::error& e) {
      Unsupported(std::string("oneDNN has no deconvolution for this configuration: ") + e.what());
    }
    ctx.SetOutput(0, DType::kFloat32, p.dst, LayoutFor(pd.dst_desc(), p.dst, DType::kFloat32));
    src_ = Reorder(DescOf(x), pd.src_desc());
    weights_ = Reorder(OnnxWeights(p), pd.weights_desc());
    dst_desc_ = pd.dst_desc();
    has_bias_ = p.has_bias;
    if (has_bias_) bias_desc_ = pd.bias_desc();
    prim_ = dnnl::deconvolution_forward(pd);
  }

  void Compute(KernelContext& ctx) override {
    if (ctx.Output(0).numel() == 0) return;
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, src_.Apply(ctx.Input(0).raw(), 0)},
                                                  {DNNL_ARG_WEIGHTS, weights_.Apply(ctx.Input(1).raw(), 1)},
                                                  {DNNL_ARG_DST, Wrap(dst_desc_, ctx.Output(0))}};
    if (has_bias_) args[DNNL_ARG_BIAS] = Wrap(bias_desc_, ctx.Input(2));
    prim_.execute(Stream(), args);
  }

 private:
  Reorder src_, weights_;
  dnnl::memory::desc dst_desc_, bias_desc_;
  bool has_bias_ = false;
  dnnl::deconvolution_forward prim_;
};

// ConvTransposeGrad(dY, X, W) -> dX, dW, dB (each optional) with the forward node's
// attributes. dX comes in the layout backward-data chooses; dW (in the ONNX C x M/group x
// k... order) and dB are plain.
class ConvTransposeGradKernel final : public OpKernel {
 public:
  explicit ConvTransposeGradKernel(const KernelInfo& info) : OpKernel(info) {}

  bool AcceptsLayouts(const KernelContext&) const override { return true; }

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    const Tensor& w = ctx.Input(2);
    for (const Tensor* t : {&dy, &x, &w})
      if (t->dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(t->dtype()));
    if (!w.is_plain()) Unsupported("weights in a non-plain layout");
    const DeconvProblem p = DescribeDeconv(node_, x, w, ctx.HasOutput(2));
    if (p.dst != dy.shape()) Fail("gradient " + dy.Describe() + " does not match the output shape " + ShapeString(p.dst));
    if (x.numel() == 0 || dy.numel() == 0) Unsupported("empty tensors in ConvTransposeGrad");
    has_bias_ = p.has_bias;
    dnnl::deconvolution_forward::primitive_desc hint;
    try {
      hint = dnnl::deconvolution_forward::primitive_desc(DeconvForwardDesc(p, dnnl::prop_kind::forward_training),
                                                          Engine());
    } catch (const dnnl::error& e) {
      Unsupported(std::string("oneDNN has no deconvolution for this configuration: ") + e.what());
    }
    if (ctx.HasOutput(0)) {
      dnnl::deconvolution_backward_data::desc desc(dnnl::algorithm::deconvolution_direct, Any(p.src),
                                                   AnyDims(p.weight_dims), Any(p.dst), p.strides, p.dilations,
                                                   p.pads_begin, p.pads_end);
      dnnl::deconvolution_backward_data::primitive_desc pd(desc, Engine(), hint);
      data_ = dnnl::deconvolution_backward_data(pd);
      data_dy_ = Reorder(DescOf(dy), pd.diff_dst_desc());
      data_w_ = Reorder(OnnxWeights(p), pd.weights_desc());
      dx_desc_ = pd.diff_src_desc();
    }
    ctx.SetOutput(0, DType::kFloat32, x.shape(),
                  ctx.HasOutput(0) ? LayoutFor(dx_desc_, x.shape(), DType::kFloat32) : nullptr);
    ctx.SetOutput(1, DType::kFloat32, w.shape());
    ctx.SetOutput(2, DType::kFloat32, {p.out_channels});
    if (ctx.HasOutput(1) || ctx.HasOutput(2)) {
      auto desc = p.has_bias
                      ? dnnl::deconvolution_backward_weights::desc(
                            dnnl::algorithm::deconvolution_direct, Any(p.src), AnyDims(p.weight_dims),
                            PlainDesc(Shape{p.out_channels}, DType::kFloat32), Any(p.dst), p.strides, p.dilations,
                            p.pads_begin, p.pads_end)
                      : dnnl::deconvolution_backward_weights::desc(dnnl::algorithm::deconvolution_direct, Any(p.src),
                                                                   AnyDims(p.weight_dims), Any(p.dst), p.strides,
                                                                   p.dilations, p.pads_begin, p.pads_end);
      dnnl::deconvolution_backward_weights::primitive_desc pd(desc, Engine(), hint);
      weights_ = dnnl::deconvolution_backward_weights(pd);
      weights_dy_ = Reorder(DescOf(dy), pd.diff_dst_desc());
      weights_x_ = Reorder(DescOf(x), pd.src_desc());
      dw_desc_ = pd.diff_weights_desc();
      dw_ = Reorder(dw_desc_, OnnxWeights(p));
      dw_bytes_ = dw_desc_.get_size();
      want_dw_ = ctx.HasOutput(1);
      if (has_bias_) bias_desc_ = pd.diff_bias_desc();
    }
  }

  void Compute(KernelContext& ctx) override {
    if (ctx.HasOutput(0))
      data_.execute(Stream(), {{DNNL_ARG_DIFF_DST, data_dy_.Apply(ctx.Input(0).raw(), 0)},
                               {DNNL_ARG_WEIGHTS, data_w_.Apply(ctx.Input(2).raw(), 1)},
                               {DNNL_ARG_DIFF_SRC, Wrap(dx_desc_, ctx.Output(0))}});
    if (ctx.HasOutput(1) || ctx.HasOutput(2)) {
      // dW in the primitive's layout (scratch), then reordered into the ONNX weight order.
      void* dw_library = ScratchBuffer(3, dw_bytes_);
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_DIFF_DST, weights_dy_.Apply(ctx.Input(0).raw(), 0)},
          {DNNL_ARG_SRC, weights_x_.Apply(ctx.Input(1).raw(), 2)},
          {DNNL_ARG_DIFF_WEIGHTS, dnnl::memory(dw_desc_, Engine(), dw_library)}};
      if (has_bias_) args[DNNL_ARG_DIFF_BIAS] = Wrap(bias_desc_, ctx.Output(2));
      weights_.execute(Stream(), args);
      if (want_dw_) {
        if (dw_.needed()) dw_.Run(dw_library, ctx.Output(1).raw());
        else std::memcpy(ctx.Output(1).raw(), dw_library, dw_bytes_);
      }
    }
  }

 private:
  dnnl::memory::desc dx_desc_, bias_desc_, dw_desc_;
  size_t dw_bytes_ = 0;
  bool has_bias_ = false, want_dw_ = false;
  dnnl::deconvolution_backward_data data_;
  Reorder data_dy_, data_w_;
  dnnl::deconvolution_backward_weights weights_;
  Reorder weights_dy_, weights_x_, dw_;
};

OT_REGISTER_CPU_KERNEL("ConvTranspose", 1, kLatestOpset, ConvTransposeKernel);
OT_REGISTER_KERNEL(kGradDomain, "ConvTransposeGrad", 1, kLatestOpset, DeviceType::kCPU, ConvTransposeGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
