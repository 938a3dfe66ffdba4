// LRN (local response normalisation across channels) on oneDNN's LRN primitive.
#include "runtime/cpu/dnnl_util.h"
#include "runtime/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

class LrnKernel final : public OpKernel {
 public:
  explicit LrnKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    if (x.rank() < 3) Fail("input " + x.Describe() + " must be N x C x D1 x ...");
    const int64_t size = node_.GetInt("size", 0);
    if (size < 1) Fail("attribute size must be a positive odd number");
    // ONNX's window is [c - floor((size-1)/2), c + ceil((size-1)/2)]; oneDNN's is
    // symmetric, so they agree only for odd sizes.
    if (size % 2 == 0) Unsupported("even size " + std::to_string(size));
    ctx.SetOutput(0, x.dtype(), x.shape());
    if (x.numel() == 0) return;
    // The window runs over channels only, so the spatial dims fold into one.
    desc_ = PlainDesc({x.dim(0), x.dim(1), x.numel() / (x.dim(0) * x.dim(1)), 1}, x.dtype());
    try {
      dnnl::lrn_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::lrn_across_channels, desc_,
                                   size, node_.GetFloat("alpha", 1e-4f), node_.GetFloat("beta", 0.75f),
                                   node_.GetFloat("bias", 1.f));
      prim_ = dnnl::lrn_forward(dnnl::lrn_forward::primitive_desc(desc, Engine()));
    } catch (const dnnl::error& e) {
      Unsupported(std::string("oneDNN has no LRN for this configuration: ") + e.what());
    }
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.numel() == 0) return;
    prim_.execute(Stream(), {{DNNL_ARG_SRC, Wrap(desc_, x)}, {DNNL_ARG_DST, Wrap(desc_, ctx.Output(0))}});
    Stream().wait();
  }

 private:
  dnnl::memory::desc desc_;
  dnnl::lrn_forward prim_;
};

OT_REGISTER_CPU_KERNEL("LRN", 1, 1 << 30, LrnKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
