// LRN (local response normalisation across channels) on oneDNN's LRN primitive, and its
// gradient as a direct loop:
//
//   LRN(X) -> Y = X / S^beta, S_c = bias + alpha / size * sum_{i in W(c)} X_i^2 with
//     W(c) = [c - floor((size-1)/2), c + ceil((size-1)/2)] clipped to the channels;
//   LRNGrad(dY, X) -> dX_j = dY_j / S_j^beta
//     - 2 alpha beta / size * X_j * sum_{c : j in W(c)} dY_c X_c / S_c^(beta+1)
//     (org.onnxtrain, the forward attributes; S recomputed from X, in double).
#include <algorithm>
#include <cmath>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/cpu/layout/dnnl_util.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/math/lrn_math.h"
#include "runtime/ops/checks/norm_checks.h"

namespace ot {
namespace cpu {
namespace {

class LrnKernel final : public OpKernel {
 public:
  explicit LrnKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    const LrnAttrs a = ReadLrnAttrs(node_, x);
    const int64_t size = a.size;
    // ONNX's window is [c - floor((size-1)/2), c + ceil((size-1)/2)]; oneDNN's is
    // symmetric, so they agree only for odd sizes.
    if (size % 2 == 0) Unsupported("even size " + std::to_string(size));
    ctx.SetOutput(0, x.dtype(), x.shape());
    if (x.numel() == 0) return;
    // The window runs over channels only, so the spatial dims fold into one.
    desc_ = PlainDesc({x.dim(0), x.dim(1), x.numel() / (x.dim(0) * x.dim(1)), 1}, x.dtype());
    try {
      dnnl::lrn_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::lrn_across_channels, desc_,
                                   size, a.alpha, a.beta, a.bias);
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

class LrnGradKernel final : public OpKernel {
 public:
  explicit LrnGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    ReadLrnAttrs(node_, x);
    if (dy.shape() != x.shape() || dy.dtype() != x.dtype())
      Fail("gradient " + dy.Describe() + " does not match the input " + x.Describe());
    ctx.SetOutput(0, x.dtype(), x.shape());
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(1);
    if (x.numel() == 0) return;
    const int64_t n_batch = x.dim(0), channels = x.dim(1), inner = x.numel() / (n_batch * channels);
    const LrnAttrs a = ReadLrnAttrs(node_, x);
    const LrnGradParams lp = MakeLrnGradParams(channels, a.size, a.alpha, a.beta, a.bias);
    const float* xs = x.data<float>();
    const float* dys = ctx.Input(0).data<float>();
    float* dxs = ctx.Output(0).data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t np = 0; np < n_batch * inner; ++np) {
      const int64_t n = np / inner, p = np % inner;
      auto at = [&](int64_t c) { return (n * channels + c) * inner + p; };
      auto x_at = [&](int64_t c) { return xs[at(c)]; };
      // Per channel: S^-beta and t = dY X S^-(beta+1) along this pixel's channel column.
      std::vector<double> s_pow(static_cast<size_t>(channels)), t(static_cast<size_t>(channels));
      for (int64_t c = 0; c < channels; ++c) {
        const double s = LrnScaleAt(lp, c, x_at);
        s_pow[static_cast<size_t>(c)] = std::pow(s, -lp.beta);
        t[static_cast<size_t>(c)] = static_cast<double>(dys[at(c)]) * xs[at(c)] * s_pow[static_cast<size_t>(c)] / s;
      }
      for (int64_t j = 0; j < channels; ++j) {
        int64_t first = 0, last = 0;
        LrnWindowsHolding(lp, j, &first, &last);
        double acc = 0;
        for (int64_t c = first; c <= last; ++c) acc += t[static_cast<size_t>(c)];
        dxs[at(j)] = LrnGradElement(lp, dys[at(j)], xs[at(j)], s_pow[static_cast<size_t>(j)], acc);
      }
    }
  }
};

OT_REGISTER_CPU_KERNEL("LRN", 1, kLatestOpset, LrnKernel);
OT_REGISTER_KERNEL(kGradDomain, "LRNGrad", 1, kLatestOpset, DeviceType::kCPU, LrnGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
