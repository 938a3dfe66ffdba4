// Pooling on oneDNN's (dilated) pooling primitive: MaxPool, AveragePool,
// GlobalMaxPool, GlobalAveragePool over 1 to 3 spatial dimensions.
#include "runtime/cpu/dnnl_util.h"
#include "runtime/cpu/window_geometry.h"
#include "runtime/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

class PoolKernel final : public OpKernel {
 public:
  explicit PoolKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const bool is_max = node_.op_type == "MaxPool" || node_.op_type == "GlobalMaxPool";
    CheckSupported(x, is_max, ctx);
    const bool global = node_.op_type.rfind("Global", 0) == 0;
    const Shape spatial = SpatialDims(x.shape());
    WindowAttrs attrs;
    if (global) {
      attrs.kernel = spatial;
      attrs.strides = attrs.dilations = std::vector<int64_t>(spatial.size(), 1);
      attrs.pads_begin = attrs.pads_end = std::vector<int64_t>(spatial.size(), 0);
    } else {
      attrs = ReadWindowAttrs(node_, spatial.size(), {});
    }
    const WindowGeometry g = ComputeWindowGeometry(attrs, spatial, node_);
    Shape out_shape = {x.dim(0), x.dim(1)};
    out_shape.insert(out_shape.end(), g.output.begin(), g.output.end());
    ctx.SetOutput(0, x.dtype(), out_shape);
    if (x.numel() == 0 || NumElements(out_shape) == 0) return;

    dnnl::algorithm alg = dnnl::algorithm::pooling_max;
    if (!is_max) {
      const bool include_pad = node_.GetInt("count_include_pad", 0) != 0;
      // oneDNN divides by the whole window; ONNX (like PyTorch) leaves out the part that
      // ceil_mode adds past the end padding.
      for (int64_t extra : g.ceil_extra)
        if (include_pad && extra > 0) Unsupported("count_include_pad=1 with a ceil_mode window past the padding");
      alg = include_pad ? dnnl::algorithm::pooling_avg_include_padding : dnnl::algorithm::pooling_avg_exclude_padding;
    }
    src_desc_ = PlainDesc(x.shape(), x.dtype());
    dst_desc_ = PlainDesc(out_shape, x.dtype());
    dnnl::memory::dims dilations;
    for (int64_t d : attrs.dilations) dilations.push_back(d - 1);
    try {
      dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, alg, src_desc_, dst_desc_, attrs.strides,
                                          attrs.kernel, dilations, g.pads_begin, g.pads_end);
      prim_ = dnnl::pooling_v2_forward(dnnl::pooling_v2_forward::primitive_desc(desc, Engine()));
    } catch (const dnnl::error& e) {
      Unsupported(std::string("oneDNN has no pooling for this configuration: ") + e.what());
    }
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    if (x.numel() == 0 || y.numel() == 0) return;
    prim_.execute(Stream(), {{DNNL_ARG_SRC, Wrap(src_desc_, x)}, {DNNL_ARG_DST, Wrap(dst_desc_, y)}});
    Stream().wait();
  }

 private:
  void CheckSupported(const Tensor& x, bool is_max, const KernelContext& ctx) const {
    const DType t = x.dtype();
    const bool type_ok = t == DType::kFloat32 || (is_max && (t == DType::kUInt8 || t == DType::kInt8));
    if (!type_ok) Unsupported("data type " + DTypeName(t));
    if (x.rank() < 3) Fail("input " + x.Describe() + " must be N x C x D1 x ... (at least one spatial dimension)");
    if (x.rank() > 5) Unsupported(std::to_string(x.rank() - 2) + "D pooling (oneDNN has 1D to 3D)");
    if (ctx.HasOutput(1)) Unsupported("the Indices output of MaxPool");
    if (node_.GetInt("storage_order", 0) != 0) Unsupported("storage_order=1");
  }

  dnnl::memory::desc src_desc_, dst_desc_;
  dnnl::pooling_v2_forward prim_;
};

OT_REGISTER_CPU_KERNEL("MaxPool", 1, 1 << 30, PoolKernel);
OT_REGISTER_CPU_KERNEL("AveragePool", 1, 1 << 30, PoolKernel);
OT_REGISTER_CPU_KERNEL("GlobalMaxPool", 1, 1 << 30, PoolKernel);
OT_REGISTER_CPU_KERNEL("GlobalAveragePool", 1, 1 << 30, PoolKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
