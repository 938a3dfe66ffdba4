// CPU kernels of Resize, Upsample and ResizeGrad (float32). The plan (index_shapes.h)
// gives, per axis, the input taps and weights of each output index; the forward applies
// the axes one after another (nearest, linear and cubic are separable), the gradient
// applies the transposed steps in reverse order, scatter-adding dY with the same weights.
// Linear resizing with half-pixel coordinates at scale out/in (bilinear upsampling as torch
// exports it) runs on oneDNN's resampling primitives instead, forward and backward;
// oneDNN has no other ONNX coordinate mode.
#include <algorithm>
#include <cstring>

#include "graph/op_domains.h"
#include "runtime/cpu/layout/dnnl_util.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/ops/shapes/index_shapes.h"
#include "runtime/core/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

// dst[o, j, i] = sum_t w[j, t] * src[o, idx[j, t], i] for one axis seen as [outer, len, inner].
void ResizeAlongAxis(const float* src, float* dst, int64_t outer, int64_t inner, const ResizeAxis& ax) {
  const int taps = ax.taps;
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    const float* s = src + o * ax.in * inner;
    float* d = dst + o * ax.out * inner;
    for (int64_t j = 0; j < ax.out; ++j) {
      float* row = d + j * inner;
      const int64_t* idx = &ax.index[static_cast<size_t>(j * taps)];
      const float* w = &ax.weight[static_cast<size_t>(j * taps)];
      if (taps == 1) {
        std::memcpy(row, s + idx[0] * inner, static_cast<size_t>(inner) * sizeof(float));
        continue;
      }
      for (int64_t i = 0; i < inner; ++i) row[i] = 0.f;
      for (int t = 0; t < taps; ++t) {
        const float* in = s + idx[t] * inner;
        const float wt = w[t];
        for (int64_t i = 0; i < inner; ++i) row[i] += wt * in[i];
      }
    }
  }
}

// The transpose: dsrc[o, idx[j, t], i] += w[j, t] * ddst[o, j, i].
void ResizeAlongAxisGrad(const float* ddst, float* dsrc, int64_t outer, int64_t inner, const ResizeAxis& ax) {
  const int taps = ax.taps;
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    float* s = dsrc + o * ax.in * inner;
    const float* d = ddst + o * ax.out * inner;
    std::memset(s, 0, static_cast<size_t>(ax.in * inner) * sizeof(float));
    for (int64_t j = 0; j < ax.out; ++j) {
      const float* row = d + j * inner;
      for (int t = 0; t < taps; ++t) {
        float* in = s + ax.index[static_cast<size_t>(j * taps + t)] * inner;
        const float wt = ax.weight[static_cast<size_t>(j * taps + t)];
        for (int64_t i = 0; i < inner; ++i) in[i] += wt * row[i];
      }
    }
  }
}

// Calls fn(flat_index) for every element of `shape` that lies outside the crop on some axis.
template <typename Fn> void ForEachOutside(const ResizePlan& p, Fn&& fn) {
  const Shape& s = p.out;
  const int64_t n = NumElements(s);
  std::vector<int64_t> idx(s.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    bool out = false;
    for (size_t d = 0; d < s.size() && !out; ++d)
      out = !p.axes[d].outside.empty() && p.axes[d].outside[static_cast<size_t>(idx[d])];
    if (out) fn(k);
    for (size_t d = s.size(); d-- > 0;) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
}

// Shared by the forward and the gradient: the plan and the buffers between axis steps.
class ResizeBase : public OpKernel {
 public:
  using OpKernel::OpKernel;

 protected:
  void Plan(const KernelContext& ctx, const std::string& op, int64_t opset, const Shape& x) {
    inputs_ = ReadResizeInputs(node_, op, opset, ctx);
    plan_ = PlanResize(node_, op, opset, x, inputs_);
    x_shape_ = x;
  }
  void CheckInputs(const KernelContext& ctx, const std::string& op, int64_t opset) const {
    if (!(ReadResizeInputs(node_, op, opset, ctx) == inputs_))
      Fail("roi, scales or sizes changed between runs with the same input shapes; onnx-train plans output shapes "
           "once per input shapes");
  }
  // Shape after resizing axes [0, upto).
  Shape ShapeAfter(size_t upto) const {
    Shape s = x_shape_;
    for (size_t d = 0; d < upto; ++d) s[d] = plan_.out[d];
    return s;
  }
  static void Split(const Shape& s, size_t d, int64_t* outer, int64_t* inner) {
    *outer = NumElements(Shape(s.begin(), s.begin() + static_cast<long>(d)));
    *inner = NumElements(Shape(s.begin() + static_cast<long>(d) + 1, s.end()));
  }

  // The oneDNN forward primitive descriptor when the plan is one it computes.
  bool PrepareDnnl() {
    use_dnnl_ = plan_.spatial_half_pixel_linear && NumElements(plan_.out) > 0 && NumElements(x_shape_) > 0;
    if (!use_dnnl_) return false;
    x_desc_ = PlainDesc(x_shape_, DType::kFloat32);
    y_desc_ = PlainDesc(plan_.out, DType::kFloat32);
    fwd_pd_ = dnnl::resampling_forward::primitive_desc(
        dnnl::resampling_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::resampling_linear, x_desc_,
                                       y_desc_),
        Engine());
    return true;
  }

  ResizeInputs inputs_;
  ResizePlan plan_;
  Shape x_shape_;
  std::vector<float> a_, b_;
  bool use_dnnl_ = false;
  dnnl::memory::desc x_desc_, y_desc_;
  dnnl::resampling_forward::primitive_desc fwd_pd_;
};

class ResizeKernel final : public ResizeBase {
 public:
  using ResizeBase::ResizeBase;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    Plan(ctx, node_.op_type, opset_, x.shape());
    ctx.SetOutput(0, DType::kFloat32, plan_.out);
    if (PrepareDnnl()) prim_ = dnnl::resampling_forward(fwd_pd_);
  }
  void Compute(KernelContext& ctx) override {
    CheckInputs(ctx, node_.op_type, opset_);
    Tensor& y = ctx.Output(0);
    if (y.numel() == 0) return;
    if (use_dnnl_) {
      prim_.execute(Stream(), {{DNNL_ARG_SRC, Wrap(x_desc_, ctx.Input(0))}, {DNNL_ARG_DST, Wrap(y_desc_, y)}});
      Stream().wait();
      return;
    }
    const float* cur = ctx.Input(0).data<float>();
    std::vector<float>* bufs[2] = {&a_, &b_};
    int which = 0;
    for (size_t d = 0; d < plan_.axes.size(); ++d) {
      const ResizeAxis& ax = plan_.axes[d];
      if (ax.identity) continue;
      int64_t outer = 0, inner = 0;
      Split(ShapeAfter(d), d, &outer, &inner);
      std::vector<float>& next = *bufs[which];
      next.resize(static_cast<size_t>(outer * ax.out * inner));
      ResizeAlongAxis(cur, next.data(), outer, inner, ax);
      cur = next.data();
      which ^= 1;
    }
    float* out = y.data<float>();
    std::memcpy(out, cur, y.nbytes());
    if (plan_.any_outside) ForEachOutside(plan_, [&](int64_t k) { out[k] = plan_.extrapolation_value; });
  }

 private:
  dnnl::resampling_forward prim_;
};

// ResizeGrad(dY, forward input 1, 2, 3, X shape) with the forward's attributes and
// forward_op / forward_opset.
class ResizeGradKernel final : public ResizeBase {
 public:
  using ResizeBase::ResizeBase;
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()));
    op_ = node_.GetString("forward_op", "Resize");
    fwd_opset_ = node_.GetInt("forward_opset", 13);
    const Shape x = ctx.Input(4).ToHost().AsInt64s();
    Plan(ctx, op_, fwd_opset_, x);
    if (plan_.out != dy.shape())
      Fail("gradient shape " + ShapeString(dy.shape()) + " differs from the resize's output " + ShapeString(plan_.out));
    ctx.SetOutput(0, DType::kFloat32, x);
    if (PrepareDnnl())
      prim_ = dnnl::resampling_backward(dnnl::resampling_backward::primitive_desc(
          dnnl::resampling_backward::desc(dnnl::algorithm::resampling_linear, x_desc_, y_desc_), Engine(), fwd_pd_));
  }
  void Compute(KernelContext& ctx) override {
    CheckInputs(ctx, op_, fwd_opset_);
    Tensor& dx = ctx.Output(0);
    if (dx.numel() == 0) return;
    const Tensor& dy = ctx.Input(0);
    if (use_dnnl_) {
      prim_.execute(Stream(), {{DNNL_ARG_DIFF_DST, Wrap(y_desc_, dy)}, {DNNL_ARG_DIFF_SRC, Wrap(x_desc_, dx)}});
      Stream().wait();
      return;
    }
    std::vector<float> masked;
    const float* cur = dy.data<float>();
    if (plan_.any_outside) {  // outputs set to extrapolation_value read no input
      masked.assign(cur, cur + dy.numel());
      ForEachOutside(plan_, [&](int64_t k) { masked[static_cast<size_t>(k)] = 0.f; });
      cur = masked.data();
    }
    std::vector<float>* bufs[2] = {&a_, &b_};
    int which = 0;
    for (size_t d = plan_.axes.size(); d-- > 0;) {
      const ResizeAxis& ax = plan_.axes[d];
      if (ax.identity) continue;
      int64_t outer = 0, inner = 0;
      Split(ShapeAfter(d), d, &outer, &inner);
      std::vector<float>& next = *bufs[which];
      next.resize(static_cast<size_t>(outer * ax.in * inner));
      ResizeAlongAxisGrad(cur, next.data(), outer, inner, ax);
      cur = next.data();
      which ^= 1;
    }
    std::memcpy(dx.raw(), cur, dx.nbytes());
  }

 private:
  std::string op_;
  int64_t fwd_opset_ = 13;
  dnnl::resampling_backward prim_;
};
OT_REGISTER_CPU_KERNEL("Resize", 10, kLatestOpset, ResizeKernel);
OT_REGISTER_CPU_KERNEL("Upsample", 7, 9, ResizeKernel);
OT_REGISTER_KERNEL(kGradDomain, "ResizeGrad", 1, kLatestOpset, DeviceType::kCPU, ResizeGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
