// Elementwise binary and variadic ops with numpy broadcasting: Add, Sub, Mul, Div, Pow,
// Max, Min, Sum, Mean and the comparisons (Equal, Less, Greater, LessOrEqual,
// GreaterOrEqual). float32 Add/Sub/Mul/Div/Max/Min/Sum/Mean run on oneDNN's binary
// primitive when it can express the broadcast (it broadcasts only its second source);
// everything else runs a strided loop. Opsets before 7 (8 for the variadic ops) use the
// legacy broadcast rules, handled here. float32 inputs of equal shapes may come in any
// layout (a convolution's blocked one): the output takes the first laid-out input's. So may
// two inputs where one is a channel-blocked activation (ChannelBlocked) and the other a per-sample,
// per-channel scale [N or 1, C, 1, ...] (squeeze-and-excitation's x * s): the scale is
// reordered to the same blocking (small) and oneDNN broadcasts it.
// org.onnxtrain AddRelu (graph/passes/fusion.h) is Add then ReLU in one pass: the same
// kernel with oneDNN's eltwise_relu post-op on its last step (or ReLU applied after the loop),
// with today's broadcasting rules.
#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>

#include "graph/op_domains.h"
#include "runtime/cpu/layout/dnnl_layout.h"
#include "runtime/cpu/dtype_dispatch.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cpu/strided_loop.h"
#include "runtime/ops/math/integer_pow.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot {
namespace cpu {
namespace {

bool IsCommutative(BinaryOp op) {
  return op == BinaryOp::kAdd || op == BinaryOp::kMul || op == BinaryOp::kMax || op == BinaryOp::kMin;
}

// Pads a shape with leading 1s to `rank`.
Shape PadToRank(const Shape& s, size_t rank) {
  Shape out(rank - s.size(), 1);
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

// x (channel-blocked, ChannelBlocked) op s, s of shape [N or 1, C, 1, ...] broadcast over x's
// spatial axes (or a plain [C, 1, ...] of lower rank, as ConvNeXt's layer scale): the
// descriptor s takes. Null when the pair is not of that kind.
std::optional<dnnl::memory::desc> ScaleDescFor(const Tensor& x, const Tensor& s) {
  const Shape& xs = x.shape();
  if (x.is_plain() || xs.size() < 3 || xs.size() > 5 || s.shape().size() > xs.size()) return std::nullopt;
  if (s.shape().size() != xs.size() && !s.is_plain()) return std::nullopt;
  const Shape ss = PadToRank(s.shape(), xs.size());
  const int64_t block = ChannelBlockOf(x);
  if (block == 0) return std::nullopt;
  if (ss[1] != xs[1] || (ss[0] != xs[0] && ss[0] != 1)) return std::nullopt;
  for (size_t d = 2; d < ss.size(); ++d)
    if (ss[d] != 1) return std::nullopt;
  return ChannelBlocked(ss, block);
}

template <typename T, typename E>
T ScalarPow(T base, E exponent) {
  if constexpr (std::is_integral_v<T> && std::is_integral_v<E>)
    return IntegerPow(base, exponent);
  else if constexpr (std::is_same_v<T, float> && std::is_same_v<E, float>)
    return std::pow(base, exponent);
  else
    return static_cast<T>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
}

class BroadcastBinaryKernel final : public OpKernel {
 public:
  explicit BroadcastBinaryKernel(const KernelInfo& info)
      : OpKernel(info),
        relu_(info.node.op_type == "AddRelu"),
        op_(ParseBinaryOp(relu_ ? "Add" : info.node.op_type)),
        mean_(info.node.op_type == "Mean") {
    if (relu_) opset_ = kLatestOpset;  // its own domain's version says nothing of broadcasting
  }

  bool AcceptsLayouts(const KernelContext& ctx) const override {
    if (ctx.NumInputs() < 2 || IsComparison(op_) || op_ == BinaryOp::kPow) return false;
    bool same_shapes = true;
    for (int i = 0; i < ctx.NumInputs(); ++i) {
      if (ctx.Input(i).dtype() != DType::kFloat32) return false;
      same_shapes = same_shapes && ctx.Input(i).shape() == ctx.Input(0).shape();
    }
    return same_shapes || ScaledActivation(ctx) >= 0;
  }

  void Prepare(KernelContext& ctx) override {
    const int n = ctx.NumInputs();
    CheckBinaryInputs(node_, opset_, op_, ctx);
    shapes_.clear();
    for (int i = 0; i < n; ++i) shapes_.push_back(ctx.Input(i).shape());
    CheckTypes(ctx);
    ApplyLegacyBroadcast();
    out_shape_ = shapes_[0];
    for (int i = 1; i < n; ++i) out_shape_ = BroadcastShapes(out_shape_, shapes_[i], node_);
    // The output takes the layout of the first laid-out input of its shape.
    layout_ = nullptr;
    for (int i = 0; i < n && !layout_; ++i)
      if (ctx.Input(i).shape() == out_shape_) layout_ = ctx.Input(i).layout();
    DType out_type = IsComparison(op_) ? DType::kBool : ctx.Input(0).dtype();
    ctx.SetOutput(0, out_type, out_shape_, layout_);
    steps_.clear();
    use_dnnl_ = ctx.Input(0).dtype() == DType::kFloat32 && NumElements(out_shape_) > 0 && n >= 2 && PlanDnnl(ctx);
    if (layout_ && !use_dnnl_) Fail("inputs in a non-plain layout need the oneDNN path");
  }

  void Compute(KernelContext& ctx) override {
    if (NumElements(out_shape_) == 0) return;
    if (use_dnnl_) return ComputeDnnl(ctx);
    if (op_ == BinaryOp::kPow) return ComputePow(ctx);
    if (IsComparison(op_)) {
      DispatchType(NumericOrBoolTypes{}, ctx.Input(0).dtype(), node_,
                   [&](auto tag) { ComputeComparison<typename decltype(tag)::type>(ctx); });
      return;
    }
    DispatchType(NumericTypes{}, ctx.Input(0).dtype(), node_,
                 [&](auto tag) { ComputeArithmetic<typename decltype(tag)::type>(ctx); });
  }

 private:
  // One oneDNN binary step: dst = src0 (op) src1, where src0 is the base input for the first
  // step and the output afterwards.
  struct DnnlStep {
    int src1_input;
    Reorder src1;  // into the layout of the output (a no-op for plain data)
    dnnl::binary prim;
  };

  // For two inputs x (channel-blocked, ChannelBlocked) and s (per-channel scale, see ScaleDescFor),
  // the position of x, when oneDNN has a fast (jit) binary for them and the op can take x
  // as its first source; else -1.
  int ScaledActivation(const KernelContext& ctx) const {
    if (ctx.NumInputs() != 2 || opset_ < (IsVariadicBinary(node_.op_type) ? 8 : 7)) return -1;
    dnnl::algorithm alg;
    if (!DnnlAlgorithm(&alg)) return -1;
    for (int x : {0, 1}) {
      if (x == 1 && !IsCommutative(op_) && op_ != BinaryOp::kSub) continue;
      const std::optional<dnnl::memory::desc> sd = ScaleDescFor(ctx.Input(x), ctx.Input(1 - x));
      if (!sd) continue;
      const dnnl::memory::desc xd = DescOf(ctx.Input(x));
      dnnl::binary::primitive_desc pd(dnnl::binary::desc(alg, xd, *sd, xd), dnnl::primitive_attr(), Engine(), true);
      if (pd && std::string(pd.impl_info_str()).rfind("ref", 0) != 0) return x;
    }
    return -1;
  }

  bool DnnlAlgorithm(dnnl::algorithm* alg) const {
    switch (op_) {
      case BinaryOp::kAdd: *alg = dnnl::algorithm::binary_add; return true;
      case BinaryOp::kSub: *alg = dnnl::algorithm::binary_sub; return true;
      case BinaryOp::kMul: *alg = dnnl::algorithm::binary_mul; return true;
      case BinaryOp::kDiv: *alg = dnnl::algorithm::binary_div; return true;
      case BinaryOp::kMax: *alg = dnnl::algorithm::binary_max; return true;
      case BinaryOp::kMin: *alg = dnnl::algorithm::binary_min; return true;
      default: return false;
    }
  }

  void CheckTypes(const KernelContext& ctx) const {
    DType t = ctx.Input(0).dtype();
    if (mean_ && !TypeListHas(FloatTypes{}, t)) ThrowUnsupportedType(t, node_);
  }

  // Before opset 7 (8 for Max/Min/Sum/Mean) inputs had equal shapes unless `broadcast` was
  // set, in which case B is matched against A's dimensions starting at `axis` (default:
  // suffix matching). Rewrites B's shape so numpy broadcasting gives the legacy answer.
  void ApplyLegacyBroadcast() {
    if (IsVariadicBinary(node_.op_type)) {
      if (opset_ >= 8) return;
      for (const Shape& s : shapes_)
        if (s != shapes_[0])
          Fail("inputs must have equal shapes before opset 8, got " + ShapeString(shapes_[0]) + " and " +
               ShapeString(s));
      return;
    }
    if (opset_ >= 7) return;
    const Shape& a = shapes_[0];
    Shape& b = shapes_[1];
    if (node_.GetInt("broadcast", 0) == 0) {
      if (a != b)
        Fail("shapes " + ShapeString(a) + " and " + ShapeString(b) + " differ and the broadcast attribute is not set");
      return;
    }
    int64_t rank_a = static_cast<int64_t>(a.size()), rank_b = static_cast<int64_t>(b.size());
    int64_t axis = node_.HasAttr("axis") ? NormalizeAxis(node_.GetInt("axis", 0), rank_a, node_) : rank_a - rank_b;
    if (axis < 0 || axis + rank_b > rank_a)
      Fail("B of shape " + ShapeString(b) + " does not fit A of shape " + ShapeString(a) + " at axis " +
           std::to_string(axis));
    Shape aligned(static_cast<size_t>(rank_a), 1);
    for (int64_t i = 0; i < rank_b; ++i) {
      int64_t da = a[static_cast<size_t>(axis + i)], db = b[static_cast<size_t>(i)];
      if (db != da && db != 1)
        Fail("B of shape " + ShapeString(b) + " does not match A of shape " + ShapeString(a) + " at axis " +
             std::to_string(axis));
      aligned[static_cast<size_t>(axis + i)] = db;
    }
    b = aligned;
  }

  // Plans the op as a chain of oneDNN binary steps on the output; false when oneDNN cannot
  // express it (the loop runs instead).
  bool PlanDnnl(const KernelContext& ctx) {
    dnnl::algorithm alg;
    if (!DnnlAlgorithm(&alg)) return false;
    const size_t rank = out_shape_.size();
    if (rank > DNNL_MAX_NDIMS) return false;
    // oneDNN broadcasts only src1, so the first step's src0 must already have the output
    // shape. Sub with only B full-shaped runs as -(B - A).
    int base = -1;
    for (int i = 0; i < static_cast<int>(shapes_.size()) && base < 0; ++i)
      if (PadToRank(shapes_[static_cast<size_t>(i)], rank) == out_shape_ &&
          (i == 0 || IsCommutative(op_) || op_ == BinaryOp::kSub))
        base = i;
    if (base < 0) return false;
    base_input_ = base;
    float scale = 1.f;
    if (mean_) scale = 1.f / static_cast<float>(shapes_.size());
    if (op_ == BinaryOp::kSub && base == 1) scale = -1.f;
    // Laid-out inputs (all of the output's shape) are brought to the output's layout.
    auto input_desc = [&](int i) {
      return ctx.Input(i).layout() ? DescOf(ctx.Input(i))
                                   : PlainDesc(PadToRank(shapes_[static_cast<size_t>(i)], rank), DType::kFloat32);
    };
    dnnl::memory::desc dst_desc = PlainDesc(out_shape_, DType::kFloat32);
    if (layout_)
      for (int i = 0; i < static_cast<int>(shapes_.size()); ++i)
        if (ctx.Input(i).layout() && ctx.Input(i).shape() == out_shape_) {
          dst_desc = DescOf(ctx.Input(i));
          break;
        }
    base_desc_ = dst_desc;
    base_ = Reorder(input_desc(base), dst_desc);
    std::vector<int> others;
    for (int i = 0; i < static_cast<int>(shapes_.size()); ++i)
      if (i != base) others.push_back(i);
    for (size_t k = 0; k < others.size(); ++k) {
      int src1 = others[k];
      // A laid-out output: src1 in its layout, or (a per-channel scale) channel-blocked too.
      dnnl::memory::desc src1_target = input_desc(src1);
      if (layout_) {
        std::optional<dnnl::memory::desc> scale;
        if (ctx.Input(src1).shape() != out_shape_) scale = ScaleDescFor(ctx.Input(base), ctx.Input(src1));
        if (ctx.Input(src1).shape() != out_shape_ && !scale) return false;
        src1_target = scale ? *scale : dst_desc;
      }
      Reorder src1_reorder(input_desc(src1), src1_target);
      dnnl::memory::desc src1_desc = src1_reorder.to();
      dnnl::primitive_attr attr;
      if (k + 1 == others.size() && (scale != 1.f || relu_)) {
        dnnl::post_ops ops;
        if (scale != 1.f) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, scale, 0.f);
        if (relu_) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
        attr.set_post_ops(ops);
      }
      dnnl::binary::primitive_desc pd(dnnl::binary::desc(alg, dst_desc, src1_desc, dst_desc), attr, Engine(), true);
      if (!pd) return false;
      steps_.push_back({src1, src1_reorder, dnnl::binary(pd)});
    }
    return true;
  }

  void ComputeDnnl(KernelContext& ctx) {
    Tensor& out = ctx.Output(0);
    dnnl::memory dst = Wrap(base_desc_, out);
    for (size_t k = 0; k < steps_.size(); ++k) {
      dnnl::memory src0 = k == 0 ? base_.Apply(ctx.Input(base_input_).raw(), 0) : dst;
      dnnl::memory src1 = steps_[k].src1.Apply(ctx.Input(steps_[k].src1_input).raw(), 1);
      steps_[k].prim.execute(Stream(), {{DNNL_ARG_SRC_0, src0}, {DNNL_ARG_SRC_1, src1}, {DNNL_ARG_DST, dst}});
    }
  }

  // Folds the inputs left to right into the output: out = in0 op in1, out = out op in2, ...
  template <typename T, typename Fn>
  void FoldInputs(KernelContext& ctx, Fn&& fn) {
    T* out = ctx.Output(0).data<T>();
    const int n = ctx.NumInputs();
    if (n == 1) {
      BroadcastCopy(ctx.Input(0).data<T>(), shapes_[0], out, out_shape_);
      return;
    }
    BroadcastMap(ctx.Input(0).data<T>(), shapes_[0], ctx.Input(1).data<T>(), shapes_[1], out, out_shape_, fn);
    for (int i = 2; i < n; ++i)
      BroadcastMap(out, out_shape_, ctx.Input(i).data<T>(), shapes_[static_cast<size_t>(i)], out, out_shape_, fn);
  }

  template <typename T>
  void ComputeArithmetic(KernelContext& ctx) {
    switch (op_) {
      case BinaryOp::kAdd:
        FoldInputs<T>(ctx, [](T a, T b) { return static_cast<T>(a + b); });
        break;
      case BinaryOp::kSub:
        FoldInputs<T>(ctx, [](T a, T b) { return static_cast<T>(a - b); });
        break;
      case BinaryOp::kMul:
        FoldInputs<T>(ctx, [](T a, T b) { return static_cast<T>(a * b); });
        break;
      case BinaryOp::kMax:
        FoldInputs<T>(ctx, [](T a, T b) { return a < b ? b : a; });
        break;
      case BinaryOp::kMin:
        FoldInputs<T>(ctx, [](T a, T b) { return b < a ? b : a; });
        break;
      case BinaryOp::kDiv:
        ComputeDivide<T>(ctx);
        break;
      default:
        Fail("not an arithmetic op");
    }
    if constexpr (std::is_signed_v<T> || std::is_floating_point_v<T>) {
      if (relu_) {
        T* out = ctx.Output(0).data<T>();
        for (int64_t i = 0, e = NumElements(out_shape_); i < e; ++i)
          if (out[i] < T(0)) out[i] = T(0);
      }
    }
    if (mean_) {
      if constexpr (std::is_floating_point_v<T>) {
        T* out = ctx.Output(0).data<T>();
        const T count = static_cast<T>(ctx.NumInputs());
        for (int64_t i = 0, e = NumElements(out_shape_); i < e; ++i) out[i] /= count;
      }
    }
  }

  // Integer division truncates toward zero (as C does); a zero divisor is an error.
  template <typename T>
  void ComputeDivide(KernelContext& ctx) {
    if constexpr (std::is_integral_v<T>) {
      bool divided_by_zero = false;
      FoldInputs<T>(ctx, [&divided_by_zero](T a, T b) {
        if (b == 0) {
          divided_by_zero = true;
          return T(0);
        }
        return static_cast<T>(a / b);
      });
      if (divided_by_zero) Fail("integer division by zero");
    } else {
      FoldInputs<T>(ctx, [](T a, T b) { return a / b; });
    }
  }

  template <typename T>
  void ComputeComparison(KernelContext& ctx) {
    const T* a = ctx.Input(0).data<T>();
    const T* b = ctx.Input(1).data<T>();
    bool* out = ctx.Output(0).data<bool>();
    auto map = [&](auto fn) { BroadcastMap(a, shapes_[0], b, shapes_[1], out, out_shape_, fn); };
    switch (op_) {
      case BinaryOp::kEqual:
        map([](T x, T y) { return x == y; });
        break;
      case BinaryOp::kLess:
        map([](T x, T y) { return x < y; });
        break;
      case BinaryOp::kLessOrEqual:
        map([](T x, T y) { return x <= y; });
        break;
      case BinaryOp::kGreater:
        map([](T x, T y) { return x > y; });
        break;
      case BinaryOp::kGreaterOrEqual:
        map([](T x, T y) { return x >= y; });
        break;
      default:
        Fail("not a comparison");
    }
  }

  void ComputePow(KernelContext& ctx) {
    const Tensor& base = ctx.Input(0);
    const Tensor& exponent = ctx.Input(1);
    // float32 x^e with one exponent (x^2 in LayerNorm's decomposition before opset 17): on
    // oneDNN's eltwise pow, rebuilt only when e changes.
    const DType et = exponent.dtype();
    if (base.dtype() == DType::kFloat32 && exponent.numel() == 1 && shapes_[0] == out_shape_ &&
        (et == DType::kFloat32 || et == DType::kInt32 || et == DType::kInt64) && base.numel() > 0) {
      const float e = et == DType::kFloat32 ? *exponent.data<float>()
                      : et == DType::kInt32 ? static_cast<float>(*exponent.data<int32_t>())
                                            : static_cast<float>(*exponent.data<int64_t>());
      if (!pow_exponent_ || *pow_exponent_ != e) {
        pow_desc_ = PlainDesc(out_shape_, DType::kFloat32);
        using dnnl::eltwise_forward;
        pow_ = eltwise_forward(eltwise_forward::primitive_desc(
            eltwise_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_pow, pow_desc_, 1.f, e),
            Engine()));
        pow_exponent_ = e;
      }
      pow_.execute(Stream(), {{DNNL_ARG_SRC, Wrap(pow_desc_, base)}, {DNNL_ARG_DST, Wrap(pow_desc_, ctx.Output(0))}});
      Stream().wait();
      return;
    }
    using BaseTypes = TypeList<float, double, int32_t, int64_t>;
    DispatchType(BaseTypes{}, base.dtype(), node_, [&](auto base_tag) {
      using T = typename decltype(base_tag)::type;
      DispatchType(NumericTypes{}, exponent.dtype(), node_, [&](auto exp_tag) {
        using E = typename decltype(exp_tag)::type;
        BroadcastMap(base.data<T>(), shapes_[0], exponent.data<E>(), shapes_[1], ctx.Output(0).data<T>(), out_shape_,
                     [](T x, E y) { return ScalarPow(x, y); });
      });
    });
  }

  const bool relu_;  // AddRelu
  const BinaryOp op_;
  const bool mean_;
  std::vector<Shape> shapes_;  // input shapes after legacy broadcast alignment
  Shape out_shape_;
  bool use_dnnl_ = false;
  int base_input_ = 0;
  dnnl::memory::desc base_desc_;
  Reorder base_;  // the base input into the output's layout
  std::shared_ptr<const TensorLayout> layout_;  // of the output; null when all inputs are plain
  std::vector<DnnlStep> steps_;
  std::optional<float> pow_exponent_;  // of the built pow_
  dnnl::memory::desc pow_desc_;
  dnnl::eltwise_forward pow_;
};

OT_REGISTER_CPU_KERNEL("Add", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_KERNEL(kGradDomain, "AddRelu", 1, kLatestOpset, DeviceType::kCPU, BroadcastBinaryKernel);
OT_REGISTER_CPU_KERNEL("Sub", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CPU_KERNEL("Mul", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CPU_KERNEL("Div", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CPU_KERNEL("Pow", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CPU_KERNEL("Max", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CPU_KERNEL("Min", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CPU_KERNEL("Sum", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CPU_KERNEL("Mean", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CPU_KERNEL("Equal", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CPU_KERNEL("Less", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CPU_KERNEL("Greater", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CPU_KERNEL("LessOrEqual", 12, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CPU_KERNEL("GreaterOrEqual", 12, kLatestOpset, BroadcastBinaryKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
