// Pooling on oneDNN's (dilated) pooling primitive: MaxPool, AveragePool,
// GlobalMaxPool, GlobalAveragePool over 1 to 3 spatial dimensions, and their gradients.
// float32 data may come in any layout: Y takes the layout oneDNN picks for it, dX that
// of X. MaxPool's optional Indices output (flat positions in X, row- or column-major by
// storage_order) comes from a loop of our own on plain float32 data.
#include <unordered_map>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/cpu/layout/dnnl_layout.h"
#include "runtime/ops/shapes/window_geometry.h"
#include "runtime/core/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

// Everything oneDNN needs to know about one pooling node on one input shape; shared by
// the forward kernel and the gradient kernel.
struct PoolProblem {
  Shape src, dst;
  dnnl::algorithm alg = dnnl::algorithm::pooling_max;
  dnnl::memory::dims strides, kernel, dilations, pads_begin, pads_end;
};

// `op` is the forward op type (MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool).
PoolProblem DescribePool(const std::string& op, const Node& node, const Shape& x_shape) {
  const PoolWindow w = DescribePoolWindow(op, node, x_shape);
  const WindowAttrs& attrs = w.attrs;
  const WindowGeometry& g = w.geometry;
  PoolProblem p;
  p.src = x_shape;
  p.dst = w.output;
  if (!w.is_max)
    p.alg = w.include_pad ? dnnl::algorithm::pooling_avg_include_padding : dnnl::algorithm::pooling_avg_exclude_padding;
  p.strides = attrs.strides;
  p.kernel = attrs.kernel;
  for (int64_t d : attrs.dilations) p.dilations.push_back(d - 1);
  p.pads_begin = g.pads_begin;
  p.pads_end = g.pads_end;
  return p;
}

// With a plain src the dst is plain too; with a laid-out src oneDNN picks the dst's.
dnnl::pooling_v2_forward::primitive_desc PoolForwardDesc(const PoolProblem& p, const dnnl::memory::desc& src, DType t,
                                                         dnnl::prop_kind prop) {
  const dnnl::memory::desc plain_src = PlainDesc(p.src, t);
  const dnnl::memory::desc dst = src == plain_src ? PlainDesc(p.dst, t)
                                                  : dnnl::memory::desc(ToDims(p.dst), ToDnnl(t), dnnl::memory::format_tag::any);
  dnnl::pooling_v2_forward::desc desc(prop, p.alg, src, dst, p.strides, p.kernel, p.dilations, p.pads_begin,
                                      p.pads_end);
  return dnnl::pooling_v2_forward::primitive_desc(desc, Engine());
}

// Indices of MaxPool: for each output element the flat position in X (N x C x D1 x ...)
// of the first maximum of its window (padding never counts); with storage_order 1 the
// spatial part of the position is column-major.
void MaxPoolIndices(const PoolWindow& w, const Shape& x_shape, bool column_major, const float* x, int64_t* indices) {
  const Shape in = SpatialDims(x_shape), out = SpatialDims(w.output);
  const size_t sr = in.size();
  const int64_t planes = x_shape[0] * x_shape[1], in_n = NumElements(in), out_n = NumElements(out);
  const int64_t taps = NumElements(w.attrs.kernel);
  std::vector<int64_t> col_strides(sr, 1);  // column-major strides of the spatial dims
  for (size_t d = 1; d < sr; ++d) col_strides[d] = col_strides[d - 1] * in[d - 1];
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < planes; ++plane) {
    std::vector<int64_t> o(sr), k(sr);
    for (int64_t oi = 0; oi < out_n; ++oi) {
      int64_t r = oi;
      for (size_t d = sr; d-- > 0;) {
        o[d] = r % out[d];
        r /= out[d];
      }
      float best = 0;
      int64_t best_at = -1, best_col = -1;
      for (int64_t t = 0; t < taps; ++t) {
        int64_t rt = t, at = 0, col = 0;
        bool inside = true;
        for (size_t d = sr; d-- > 0;) {
          k[d] = rt % w.attrs.kernel[d];
          rt /= w.attrs.kernel[d];
        }
        for (size_t d = 0; d < sr && inside; ++d) {
          const int64_t pos = o[d] * w.attrs.strides[d] - w.geometry.pads_begin[d] + k[d] * w.attrs.dilations[d];
          inside = pos >= 0 && pos < in[d];
          at = at * in[d] + pos;
          col += pos * col_strides[d];
        }
        if (!inside) continue;
        const float v = x[plane * in_n + at];
        if (best_at < 0 || v > best) {
          best = v;
          best_at = at;
          best_col = col;
        }
      }
      indices[plane * out_n + oi] = plane * in_n + (column_major ? best_col : best_at);
    }
  }
}

class PoolKernel final : public OpKernel {
 public:
  explicit PoolKernel(const KernelInfo& info) : OpKernel(info) {}

  bool AcceptsLayouts(const KernelContext& ctx) const override {
    return ctx.Input(0).dtype() == DType::kFloat32 && !ctx.HasOutput(1);
  }

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const bool is_max = node_.op_type == "MaxPool" || node_.op_type == "GlobalMaxPool";
    CheckSupported(x, is_max, ctx);
    const PoolProblem p = DescribePool(node_.op_type, node_, x.shape());
    if (ctx.HasOutput(1)) {
      window_ = DescribePoolWindow(node_.op_type, node_, x.shape());
      ctx.SetOutput(1, DType::kInt64, p.dst);
    }
    if (x.numel() == 0 || NumElements(p.dst) == 0) {
      ctx.SetOutput(0, x.dtype(), p.dst);
      return;
    }
    src_desc_ = DescOf(x);
    try {
      auto pd = PoolForwardDesc(p, src_desc_, x.dtype(), dnnl::prop_kind::forward_inference);
      dst_desc_ = pd.dst_desc();
      prim_ = dnnl::pooling_v2_forward(pd);
    } catch (const dnnl::error& e) {
      Unsupported(std::string("oneDNN has no pooling for this configuration: ") + e.what());
    }
    ctx.SetOutput(0, x.dtype(), p.dst, LayoutFor(dst_desc_, p.dst, x.dtype()));
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    if (x.numel() == 0 || y.numel() == 0) return;
    prim_.execute(Stream(), {{DNNL_ARG_SRC, Wrap(src_desc_, x)}, {DNNL_ARG_DST, Wrap(dst_desc_, y)}});
    if (ctx.HasOutput(1))
      MaxPoolIndices(window_, x.shape(), node_.GetInt("storage_order", 0) != 0, x.data<float>(),
                     ctx.Output(1).data<int64_t>());
  }

 private:
  void CheckSupported(const Tensor& x, bool is_max, const KernelContext& ctx) const {
    const DType t = x.dtype();
    const bool type_ok = t == DType::kFloat32 || (is_max && (t == DType::kUInt8 || t == DType::kInt8));
    if (!type_ok) Unsupported("data type " + DTypeName(t));
    if (x.rank() < 3) Fail("input " + x.Describe() + " must be N x C x D1 x ... (at least one spatial dimension)");
    if (x.rank() > 5) Unsupported(std::to_string(x.rank() - 2) + "D pooling (oneDNN has 1D to 3D)");
    if (ctx.HasOutput(1) && (node_.op_type != "MaxPool" || t != DType::kFloat32))
      Unsupported("the Indices output of " + node_.op_type + " on " + DTypeName(t) + " (MaxPool on float32 only)");
    const int64_t order = node_.GetInt("storage_order", 0);
    if (order != 0 && order != 1) Fail("storage_order must be 0 or 1, not " + std::to_string(order));
  }

  dnnl::memory::desc src_desc_, dst_desc_;
  dnnl::pooling_v2_forward prim_;
  PoolWindow window_;  // for the Indices output
};

// <Pool>Grad(dY, X) -> dX in the gradient domain, with the forward node's attributes.
// Max pooling's backward needs oneDNN's workspace (where each maximum came from), so the
// gradient kernel runs the forward pass again to get it; average pooling needs only
// the shapes.
class PoolGradKernel final : public OpKernel {
 public:
  explicit PoolGradKernel(const KernelInfo& info) : OpKernel(info) {}

  bool AcceptsLayouts(const KernelContext&) const override { return true; }

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    if (x.dtype() != DType::kFloat32 || dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    const std::string forward_op = node_.op_type.substr(0, node_.op_type.size() - 4);  // strip "Grad"
    const PoolProblem p = DescribePool(forward_op, node_, x.shape());
    if (p.dst != dy.shape()) Fail("gradient " + dy.Describe() + " does not match the pooled shape " + ShapeString(p.dst));
    ctx.SetOutput(0, DType::kFloat32, x.shape(), x.layout());
    if (x.numel() == 0 || dy.numel() == 0) return;
    is_max_ = p.alg == dnnl::algorithm::pooling_max;
    src_desc_ = DescOf(x);
    auto fwd_pd = PoolForwardDesc(p, src_desc_, DType::kFloat32, dnnl::prop_kind::forward_training);
    dst_desc_ = fwd_pd.dst_desc();
    dy_ = Reorder(DescOf(dy), dst_desc_);
    dnnl::pooling_v2_backward::desc bwd(p.alg, src_desc_, dst_desc_, p.strides, p.kernel, p.dilations, p.pads_begin,
                                        p.pads_end);
    bwd_ = dnnl::pooling_v2_backward(dnnl::pooling_v2_backward::primitive_desc(bwd, Engine(), fwd_pd));
    if (is_max_) {
      fwd_ = dnnl::pooling_v2_forward(fwd_pd);
      workspace_desc_ = fwd_pd.workspace_desc();
      workspace_.resize(workspace_desc_.get_size());
      scratch_dst_.resize(dst_desc_.get_size() / sizeof(float));
    }
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (dy.numel() == 0 || ctx.Input(1).numel() == 0) return;
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_DIFF_DST, dy_.Apply(dy.raw(), 0)},
                                                  {DNNL_ARG_DIFF_SRC, Wrap(src_desc_, ctx.Output(0))}};
    if (is_max_) {
      dnnl::memory ws(workspace_desc_, Engine(), workspace_.data());
      fwd_.execute(Stream(), {{DNNL_ARG_SRC, Wrap(src_desc_, ctx.Input(1))},
                              {DNNL_ARG_DST, dnnl::memory(dst_desc_, Engine(), scratch_dst_.data())},
                              {DNNL_ARG_WORKSPACE, ws}});
      args[DNNL_ARG_WORKSPACE] = ws;
    }
    bwd_.execute(Stream(), args);
  }

 private:
  Reorder dy_;
  bool is_max_ = false;
  dnnl::memory::desc src_desc_, dst_desc_, workspace_desc_;
  dnnl::pooling_v2_forward fwd_;
  dnnl::pooling_v2_backward bwd_;
  std::vector<uint8_t> workspace_;
  std::vector<float> scratch_dst_;
};

OT_REGISTER_KERNEL(kGradDomain, "MaxPoolGrad", 1, kLatestOpset, DeviceType::kCPU, PoolGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "AveragePoolGrad", 1, kLatestOpset, DeviceType::kCPU, PoolGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "GlobalMaxPoolGrad", 1, kLatestOpset, DeviceType::kCPU, PoolGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "GlobalAveragePoolGrad", 1, kLatestOpset, DeviceType::kCPU, PoolGradKernel);
OT_REGISTER_CPU_KERNEL("MaxPool", 1, kLatestOpset, PoolKernel);
OT_REGISTER_CPU_KERNEL("AveragePool", 1, kLatestOpset, PoolKernel);
OT_REGISTER_CPU_KERNEL("GlobalMaxPool", 1, kLatestOpset, PoolKernel);
OT_REGISTER_CPU_KERNEL("GlobalAveragePool", 1, kLatestOpset, PoolKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
