// Elementwise unary math beyond the activations of eltwise.cc: Neg, Reciprocal, Ceil,
// Floor, Round and Clip. float32 runs on oneDNN's eltwise primitive where it has the
// function (linear, pow, round, clip_v2); other types and Ceil/Floor run a plain loop.
// float32 Clip takes any layout (ReLU6 right after a blocked convolution or BatchNorm).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "runtime/cpu/layout/dnnl_layout.h"
#include "runtime/cpu/dtype_dispatch.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot {
namespace cpu {
namespace {

// A oneDNN eltwise primitive over a dense float32 tensor.
class DnnlEltwise {
 public:
  void Build(const Shape& shape, dnnl::algorithm alg, float alpha, float beta) {
    Build(PlainDesc(shape, DType::kFloat32), alg, alpha, beta);
  }
  void Build(const dnnl::memory::desc& desc, dnnl::algorithm alg, float alpha, float beta) {
    desc_ = desc;
    auto pd = dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, alg, desc_, alpha, beta), Engine());
    prim_ = dnnl::eltwise_forward(pd);
  }
  void Run(const Tensor& x, const Tensor& y) const {
    prim_.execute(Stream(), {{DNNL_ARG_SRC, Wrap(desc_, x)}, {DNNL_ARG_DST, Wrap(desc_, y)}});
    Stream().wait();
  }

 private:
  dnnl::memory::desc desc_;
  dnnl::eltwise_forward prim_;
};

template <typename T, typename Fn>
void MapElements(const Tensor& x, Tensor& y, Fn&& fn) {
  const T* in = x.data<T>();
  T* out = y.data<T>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) out[i] = fn(in[i]);
}

// Neg, Reciprocal, Ceil, Floor, Round.
class UnaryMathKernel final : public OpKernel {
 public:
  explicit UnaryMathKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const std::string& op = node_.op_type;
    // Neg also takes signed integers; the others are defined for floating point only.
    bool type_ok = op == "Neg" ? TypeListHas(SignedTypes{}, x.dtype()) : TypeListHas(FloatTypes{}, x.dtype());
    if (!type_ok) ThrowUnsupportedType(x.dtype(), node_);
    ctx.SetOutput(0, x.dtype(), x.shape());
    use_dnnl_ = x.dtype() == DType::kFloat32 && x.numel() > 0 && op != "Ceil" && op != "Floor";
    if (!use_dnnl_) return;
    if (op == "Neg")
      eltwise_.Build(x.shape(), dnnl::algorithm::eltwise_linear, -1.f, 0.f);
    else if (op == "Reciprocal")
      eltwise_.Build(x.shape(), dnnl::algorithm::eltwise_pow, 1.f, -1.f);
    else if (op == "Round")
      eltwise_.Build(x.shape(), dnnl::algorithm::eltwise_round, 0.f, 0.f);
    else
      Fail("no eltwise algorithm");
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    if (x.numel() == 0) return;
    if (use_dnnl_) return eltwise_.Run(x, y);
    const std::string& op = node_.op_type;
    DispatchType(SignedTypes{}, x.dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (op == "Neg") return MapElements<T>(x, y, [](T v) { return static_cast<T>(-v); });
      if constexpr (std::is_floating_point_v<T>) {
        if (op == "Reciprocal") return MapElements<T>(x, y, [](T v) { return T(1) / v; });
        if (op == "Ceil") return MapElements<T>(x, y, [](T v) { return std::ceil(v); });
        if (op == "Floor") return MapElements<T>(x, y, [](T v) { return std::floor(v); });
        if (op == "Round") return MapElements<T>(x, y, [](T v) { return std::nearbyint(v); });
      }
      Fail("no loop for this type");
    });
  }

 private:
  bool use_dnnl_ = false;
  DnnlEltwise eltwise_;
};

// Clip: bounds are attributes before opset 11 and optional scalar inputs from 11 on.
class ClipKernel final : public OpKernel {
 public:
  explicit ClipKernel(const KernelInfo& info) : OpKernel(info) {}

  // float32 runs on oneDNN in the input's layout (which keeps blocked padding zero).
  bool AcceptsLayouts(const KernelContext& ctx) const override { return ctx.Input(0).dtype() == DType::kFloat32; }

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (!TypeListHas(NumericTypes{}, x.dtype())) ThrowUnsupportedType(x.dtype(), node_);
    CheckClipBounds(node_, ctx);
    ctx.SetOutput(0, x.dtype(), x.shape(), x.layout());
    built_bounds_.reset();
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    if (x.numel() == 0) return;
    DispatchType(NumericTypes{}, x.dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T lo = Bound<T>(ctx, 1, "min", std::numeric_limits<T>::lowest());
      T hi = Bound<T>(ctx, 2, "max", std::numeric_limits<T>::max());
      if constexpr (std::is_same_v<T, float>) return RunDnnl(x, y, lo, hi);
      // When lo > hi every value becomes hi, as ONNX specifies.
      MapElements<T>(x, y, [lo, hi](T v) { return std::min(std::max(v, lo), hi); });
    });
  }

 private:
  template <typename T>
  T Bound(const KernelContext& ctx, int input, const char* attr, T fallback) const {
    if (opset_ < 11) return node_.HasAttr(attr) ? static_cast<T>(node_.GetFloat(attr, 0.f)) : fallback;
    const Tensor* t = ctx.OptionalInput(input);
    return t ? *t->data<T>() : fallback;
  }

  // Bounds may change from run to run; the primitive is rebuilt only when they do.
  // clip_v2 computes max(lo, min(x, hi)), which differs from ONNX when lo > hi: then
  // every value becomes hi, a linear function with slope 0.
  void RunDnnl(const Tensor& x, Tensor& y, float lo, float hi) {
    if (!built_bounds_ || *built_bounds_ != std::make_pair(lo, hi)) {
      if (lo <= hi) eltwise_.Build(DescOf(x), dnnl::algorithm::eltwise_clip_v2, lo, hi);
      else eltwise_.Build(DescOf(x), dnnl::algorithm::eltwise_linear, 0.f, hi);
      built_bounds_ = std::make_pair(lo, hi);
    }
    eltwise_.Run(x, y);
  }

  DnnlEltwise eltwise_;
  std::optional<std::pair<float, float>> built_bounds_;
};
OT_REGISTER_CPU_KERNEL("Neg", 1, kLatestOpset, UnaryMathKernel);
OT_REGISTER_CPU_KERNEL("Reciprocal", 1, kLatestOpset, UnaryMathKernel);
OT_REGISTER_CPU_KERNEL("Ceil", 1, kLatestOpset, UnaryMathKernel);
OT_REGISTER_CPU_KERNEL("Floor", 1, kLatestOpset, UnaryMathKernel);
OT_REGISTER_CPU_KERNEL("Round", 11, kLatestOpset, UnaryMathKernel);
OT_REGISTER_CPU_KERNEL("Clip", 1, kLatestOpset, ClipKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
