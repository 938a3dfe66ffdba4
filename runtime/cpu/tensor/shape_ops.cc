// CPU kernels for ops that change shapes or element types but do not move data around
// within a tensor: Flatten, Reshape, Identity, Squeeze, Unsqueeze (bytes copied as they
// are), Shape, Size, Constant, ConstantOfShape (metadata or attributes written out),
// Cast, CastLike (element conversion, float16 rounded to nearest even) and Dropout.
// Expand lives with the strided copies in transpose_concat.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>

#include "graph/op_domains.h"
#include "runtime/cpu/layout/dnnl_cast.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot {
namespace cpu {
namespace {

// ---------------------------------------------------------------------------------------
// Kernels whose output is input 0 with another shape; the bytes are copied unchanged.
class ReshapeLikeKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) final {
    const Tensor& x = ctx.Input(0);
    if (DTypeSize(x.dtype()) == 0) Unsupported("data type " + DTypeName(x.dtype()));
    Shape out = OutputShape(ctx);
    if (NumElements(out) != x.numel())
      Fail("cannot turn input of shape " + ShapeString(x.shape()) + " into shape " + ShapeString(out));
    ctx.SetOutput(0, x.dtype(), out);
  }

  void Compute(KernelContext& ctx) final {
    shape_inputs_.Check(ctx);
    if (ctx.Output(0).raw() != ctx.Input(0).raw()) ctx.Output(0).CopyFrom(ctx.Input(0));
  }

  bool OutputIsInputView() const final { return true; }

 protected:
  virtual Shape OutputShape(const KernelContext& ctx) = 0;

  ShapeInputValues shape_inputs_;
};

class FlattenKernel final : public ReshapeLikeKernel {
 public:
  using ReshapeLikeKernel::ReshapeLikeKernel;

 protected:
  Shape OutputShape(const KernelContext& ctx) override {
    const Shape& in = ctx.Input(0).shape();
    const int64_t rank = static_cast<int64_t>(in.size());
    int64_t axis = node_.GetInt("axis", 1);
    if (axis < -rank || axis > rank)
      Fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
    if (axis < 0) axis += rank;
    Shape outer(in.begin(), in.begin() + axis), inner(in.begin() + axis, in.end());
    return {NumElements(outer), NumElements(inner)};
  }
};

class ReshapeKernel final : public ReshapeLikeKernel {
 public:
  using ReshapeLikeKernel::ReshapeLikeKernel;

 protected:
  Shape OutputShape(const KernelContext& ctx) override {
    const Shape& in = ctx.Input(0).shape();
    // Before opset 5 the target shape is the `shape` attribute (the gradient domain's
    // Reshape, emitted for such models, always takes it as input 1).
    const bool from_attr = opset_ < 5 && node_.domain.empty();
    const Shape requested = from_attr ? Shape(node_.GetInts("shape")) : shape_inputs_.Read(ctx, 1);
    Shape out = requested;
    const bool allow_zero = opset_ >= 14 && node_.GetInt("allowzero", 0) != 0;
    int infer_at = -1;
    int64_t known = 1;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i] == -1) {
        if (infer_at >= 0) Fail("the target shape " + ShapeString(out) + " has more than one -1");
        infer_at = static_cast<int>(i);
        continue;
      }
      if (out[i] == 0 && !allow_zero) {
        if (i >= in.size()) Fail("target shape " + ShapeString(out) + " copies dimension " + std::to_string(i) +
                                 " which the input of shape " + ShapeString(in) + " lacks");
        out[i] = in[i];
      }
      if (out[i] < 0) Fail("the target shape " + ShapeString(out) + " has a negative dimension");
      known *= out[i];
    }
    if (infer_at >= 0) {
      if (allow_zero && std::count(out.begin(), out.end(), 0) > 0) Fail("allowzero shape mixes 0 and -1");
      const int64_t total = NumElements(in);
      if (known == 0 || total % known != 0)
        Fail("cannot infer the -1 of target shape " + ShapeString(requested) + " for input of shape " +
             ShapeString(in));
      out[static_cast<size_t>(infer_at)] = total / known;
    }
    return out;
  }
};

class IdentityKernel final : public ReshapeLikeKernel {
 public:
  using ReshapeLikeKernel::ReshapeLikeKernel;

 protected:
  Shape OutputShape(const KernelContext& ctx) override { return ctx.Input(0).shape(); }
};

// Axes of Squeeze/Unsqueeze: an attribute before opset 13, the optional input 1 from 13.
std::vector<int64_t> SqueezeAxes(const KernelContext& ctx, const Node& node, int64_t opset, bool* given,
                                 ShapeInputValues* shape_inputs) {
  if (opset < 13) {
    *given = node.HasAttr("axes");
    return node.GetInts("axes");
  }
  *given = ctx.OptionalInput(1) != nullptr;
  return shape_inputs->Read(ctx, 1);
}

class SqueezeKernel final : public ReshapeLikeKernel {
 public:
  using ReshapeLikeKernel::ReshapeLikeKernel;

 protected:
  Shape OutputShape(const KernelContext& ctx) override {
    const Shape& in = ctx.Input(0).shape();
    bool given = false;
    std::vector<int64_t> axes = SqueezeAxes(ctx, node_, opset_, &given, &shape_inputs_);
    std::vector<bool> drop(in.size(), false);
    if (!given) {
      for (size_t i = 0; i < in.size(); ++i) drop[i] = in[i] == 1;
    }
    for (int64_t a : axes) {
      int64_t axis = NormalizeAxis(a, static_cast<int64_t>(in.size()), node_);
      if (in[static_cast<size_t>(axis)] != 1)
        Fail("cannot squeeze axis " + std::to_string(a) + " of shape " + ShapeString(in) + ": its size is not 1");
      drop[static_cast<size_t>(axis)] = true;
    }
    Shape out;
    for (size_t i = 0; i < in.size(); ++i)
      if (!drop[i]) out.push_back(in[i]);
    return out;
  }
};

class UnsqueezeKernel final : public ReshapeLikeKernel {
 public:
  using ReshapeLikeKernel::ReshapeLikeKernel;

 protected:
  Shape OutputShape(const KernelContext& ctx) override {
    const Shape& in = ctx.Input(0).shape();
    bool given = false;
    std::vector<int64_t> axes = SqueezeAxes(ctx, node_, opset_, &given, &shape_inputs_);
    if (!given) Fail("axes are required");
    const int64_t out_rank = static_cast<int64_t>(in.size() + axes.size());
    std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
    for (int64_t a : axes) {
      size_t axis = static_cast<size_t>(NormalizeAxis(a, out_rank, node_));
      if (inserted[axis]) Fail("axis " + std::to_string(a) + " is given twice");
      inserted[axis] = true;
    }
    Shape out;
    size_t next_in = 0;
    for (size_t i = 0; i < inserted.size(); ++i) out.push_back(inserted[i] ? 1 : in[next_in++]);
    return out;
  }
};

// ---------------------------------------------------------------------------------------
// Kernels whose output is known in Prepare (from shapes or attributes): it is kept on the
// host and copied out by Compute.
class HostValueKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) final {
    value_ = MakeValue(ctx);
    ctx.SetOutput(0, value_.dtype, value_.dims);
  }
  void Compute(KernelContext& ctx) final {
    shape_inputs_.Check(ctx);
    Tensor& out = ctx.Output(0);
    if (value_.NumBytes()) std::memcpy(out.raw(), value_.bytes.data(), value_.NumBytes());
  }

 protected:
  virtual HostTensor MakeValue(const KernelContext& ctx) = 0;

  ShapeInputValues shape_inputs_;

 private:
  HostTensor value_;
};

class ShapeKernel final : public HostValueKernel {
 public:
  using HostValueKernel::HostValueKernel;
  // Reads only the input's shape, so any layout will do.
  bool AcceptsLayouts(const KernelContext&) const override { return true; }

 protected:
  HostTensor MakeValue(const KernelContext& ctx) override {
    const Shape& in = ctx.Input(0).shape();
    const int64_t rank = static_cast<int64_t>(in.size());
    int64_t start = 0, end = rank;
    if (opset_ >= 15) {
      start = node_.GetInt("start", 0);
      end = node_.GetInt("end", rank);
    }
    auto clamp = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
    start = clamp(start);
    end = std::max(clamp(end), start);
    std::vector<int64_t> dims(in.begin() + start, in.begin() + end);
    return HostTensor::FromVector(dims, {static_cast<int64_t>(dims.size())});
  }
};

class SizeKernel final : public HostValueKernel {
 public:
  using HostValueKernel::HostValueKernel;

 protected:
  HostTensor MakeValue(const KernelContext& ctx) override {
    return HostTensor::FromVector(std::vector<int64_t>{ctx.Input(0).numel()}, {});
  }
};

class ConstantKernel final : public HostValueKernel {
 public:
  using HostValueKernel::HostValueKernel;

 protected:
  HostTensor MakeValue(const KernelContext&) override {
    for (const char* key : {"sparse_value", "value_string", "value_strings"})
      if (node_.HasAttr(key)) Unsupported(std::string("attribute '") + key + "'");
    if (const HostTensor* t = node_.GetTensor("value")) {
      if (DTypeSize(t->dtype) == 0) Unsupported("data type " + DTypeName(t->dtype));
      return *t;
    }
    if (node_.HasAttr("value_float")) return HostTensor::FromVector(std::vector<float>{node_.GetFloat("value_float", 0)}, {});
    if (node_.HasAttr("value_int")) return HostTensor::FromVector(std::vector<int64_t>{node_.GetInt("value_int", 0)}, {});
    if (node_.HasAttr("value_floats")) {
      std::vector<float> v = node_.GetFloats("value_floats");
      return HostTensor::FromVector(v, {static_cast<int64_t>(v.size())});
    }
    if (node_.HasAttr("value_ints")) {
      std::vector<int64_t> v = node_.GetInts("value_ints");
      return HostTensor::FromVector(v, {static_cast<int64_t>(v.size())});
    }
    Fail("has no value attribute");
  }
};

class ConstantOfShapeKernel final : public HostValueKernel {
 public:
  using HostValueKernel::HostValueKernel;

 protected:
  HostTensor MakeValue(const KernelContext& ctx) override {
    Shape shape = shape_inputs_.Read(ctx, 0);
    for (int64_t d : shape)
      if (d < 0) Fail("shape " + ShapeString(shape) + " has a negative dimension");
    HostTensor fill = HostTensor::FromVector(std::vector<float>{0.f}, {1});
    if (const HostTensor* t = node_.GetTensor("value")) fill = *t;
    if (fill.NumElements() != 1) Fail("attribute 'value' must hold exactly one element");
    const size_t esize = DTypeSize(fill.dtype);
    if (esize == 0) Unsupported("data type " + DTypeName(fill.dtype));
    HostTensor out(fill.dtype, shape);
    for (size_t off = 0; off < out.NumBytes(); off += esize) std::memcpy(&out.bytes[off], fill.bytes.data(), esize);
    return out;
  }
};

// ---------------------------------------------------------------------------------------
// Element conversion for Cast. float16, bfloat16 and bool have their own storage tags.
struct HalfTag {};
struct BFloat16Tag {};
struct BoolTag {};

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    float v = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -v : v;
  }
  uint32_t bits = exponent == 0x1f ? (sign | 0x7f800000u | (mantissa << 13))
                                   : (sign | ((exponent + 112) << 23) | (mantissa << 13));
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Rounds to the nearest float16, ties to even (as numpy and IEEE do), straight from double
// so that a double input is rounded only once.
uint16_t HalfFromDouble(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(v);
  if (std::isnan(v)) return sign | 0x7e00;
  if (a >= 65520.0) return sign | 0x7c00;  // 65520 and above round to infinity
  if (a < std::ldexp(1.0, -14)) {  // subnormal range: units of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(a * std::ldexp(1.0, 24)));
  }
  int exp2 = 0;
  std::frexp(a, &exp2);  // a = m * 2^exp2, m in [0.5, 1)
  int exponent = exp2 - 1;
  double scaled = std::nearbyint(std::ldexp(a, 10 - exponent));  // in [1024, 2048]
  if (scaled >= 2048.0) {
    scaled = 1024.0;
    ++exponent;
  }
  if (exponent > 15) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(((exponent + 15) << 10) | (static_cast<int>(scaled) - 1024));
}

template <typename T> struct Elem {
  using Storage = T;
  static T Load(T v) { return v; }
  template <typename V> static T Store(V v) {
    if constexpr (std::is_floating_point_v<V> && std::is_integral_v<T>) {
      // Out of range is undefined in ONNX; saturate instead of invoking C++ UB.
      if (std::isnan(v)) return 0;
      if (v <= static_cast<V>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
      if (v >= static_cast<V>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    }
    return static_cast<T>(v);
  }
};
template <> struct Elem<BoolTag> {
  using Storage = uint8_t;
  static uint8_t Load(uint8_t v) { return v != 0; }
  template <typename V> static uint8_t Store(V v) { return v != V(0); }
};
template <> struct Elem<HalfTag> {
  using Storage = uint16_t;
  static float Load(uint16_t v) { return HalfToFloat(v); }
  template <typename V> static uint16_t Store(V v) { return HalfFromDouble(static_cast<double>(v)); }
};

// bfloat16: the upper half of a float32, rounded to nearest even (as oneDNN and PyTorch do).
template <> struct Elem<BFloat16Tag> {
  using Storage = uint16_t;
  static float Load(uint16_t v) {
    const uint32_t bits = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  template <typename V> static uint16_t Store(V v) {
    const float f = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
    return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
  }
};

template <typename T> struct CastTag { using type = T; };

// Calls fn(CastTag<T>) for the element tag of a DType; false when the type has none.
template <typename Fn> bool VisitCastType(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32: fn(CastTag<float>{}); return true;
    case DType::kFloat64: fn(CastTag<double>{}); return true;
    case DType::kFloat16: fn(CastTag<HalfTag>{}); return true;
    case DType::kBFloat16: fn(CastTag<BFloat16Tag>{}); return true;
    case DType::kInt8: fn(CastTag<int8_t>{}); return true;
    case DType::kUInt8: fn(CastTag<uint8_t>{}); return true;
    case DType::kInt16: fn(CastTag<int16_t>{}); return true;
    case DType::kUInt16: fn(CastTag<uint16_t>{}); return true;
    case DType::kInt32: fn(CastTag<int32_t>{}); return true;
    case DType::kUInt32: fn(CastTag<uint32_t>{}); return true;
    case DType::kInt64: fn(CastTag<int64_t>{}); return true;
    case DType::kUInt64: fn(CastTag<uint64_t>{}); return true;
    case DType::kBool: fn(CastTag<BoolTag>{}); return true;
    default: return false;
  }
}

bool CanCast(DType t) {
  return VisitCastType(t, [](auto) {});
}

void CastElements(const Tensor& src, Tensor& dst) {
  VisitCastType(src.dtype(), [&](auto src_tag) {
    using S = Elem<typename decltype(src_tag)::type>;
    VisitCastType(dst.dtype(), [&](auto dst_tag) {
      using D = Elem<typename decltype(dst_tag)::type>;
      const auto* in = static_cast<const typename S::Storage*>(src.raw());
      auto* out = static_cast<typename D::Storage*>(dst.raw());
      for (int64_t i = 0, n = src.numel(); i < n; ++i) out[i] = D::Store(S::Load(in[i]));
    });
  });
}

// Cast (target type from attribute 'to') and CastLike (target type of input 1).
class CastKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  // float32 <-> bfloat16 (--amp bf16's casts) keeps a blocked activation blocked.
  bool AcceptsLayouts(const KernelContext& ctx) const override {
    return IsDnnlCast(ctx.Input(0).dtype(), CastTargetType(node_, ctx));
  }

  void Prepare(KernelContext& ctx) override {
    const DType to = CastTargetType(node_, ctx);
    const Tensor& x = ctx.Input(0);
    for (DType t : {x.dtype(), to})
      if (!CanCast(t)) Unsupported("data type " + DTypeName(t));
    dnnl_ = IsDnnlCast(x.dtype(), to);
    if (dnnl_) {
      cast_ = DnnlCast(x, to);
      ctx.SetOutput(0, to, x.shape(), cast_.output_layout());
      return;
    }
    ctx.SetOutput(0, to, x.shape());
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    if (dnnl_) cast_.Run(x, y);
    else if (x.dtype() == y.dtype()) y.CopyFrom(x);
    else CastElements(x, y);
  }

 private:
  bool dnnl_ = false;
  DnnlCast cast_;
};

// ---------------------------------------------------------------------------------------
// Dropout: identity in inference mode (mask all true). In training mode each element is
// kept with probability 1-ratio and scaled by 1/(1-ratio). With a 'seed' attribute the
// kernel draws from its own 32-bit Mersenne Twister seeded once, using numpy's legacy
// uniform formula, so a seeded model reproduces ONNX's reference masks; without it the
// executor's generator is used.
class DropoutKernel final : public OpKernel {
 public:
  explicit DropoutKernel(const KernelInfo& info) : OpKernel(info) {
    if (node_.HasAttr("seed")) {
      seeded_ = true;
      seeded_rng_.seed(static_cast<std::mt19937::result_type>(node_.GetInt("seed", 0)));
    }
  }

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    DType t = x.dtype();
    if (t != DType::kFloat32 && t != DType::kFloat64 && t != DType::kFloat16) Unsupported("data type " + DTypeName(t));
    PrepareDropout(node_, static_cast<int>(opset_), ctx);
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    double ratio = Ratio(ctx);
    // Before opset 7 is_test (default 0: training) chooses; from 7 to 11 the op has no
    // switch and passes X through; from 12 the training_mode input.
    bool training = opset_ < 7 && node_.GetInt("is_test", 0) == 0;
    if (opset_ >= 12) {
      if (const Tensor* mode = ctx.OptionalInput(2)) {
        if (mode->dtype() != DType::kBool || mode->numel() != 1) Fail("training_mode must be a bool scalar");
        training = *mode->data<uint8_t>() != 0;
      }
    }
    if (!training || ratio == 0.0) {
      ctx.Output(0).CopyFrom(x);
      if (ctx.HasOutput(1)) FillOnes(ctx.Output(1));
      return;
    }
    if (!(ratio > 0.0 && ratio < 1.0)) Fail("ratio " + std::to_string(ratio) + " is outside [0, 1)");
    if (x.dtype() == DType::kFloat32) Drop<float>(ctx, ratio);
    else if (x.dtype() == DType::kFloat64) Drop<double>(ctx, ratio);
    else Unsupported("training mode for data type " + DTypeName(x.dtype()));
  }

 private:
  double Ratio(const KernelContext& ctx) const {
    if (opset_ < 12) return node_.GetFloat("ratio", 0.5f);
    const Tensor* r = ctx.OptionalInput(1);
    if (!r) return 0.5;
    if (r->numel() != 1) Fail("ratio must be a scalar");
    switch (r->dtype()) {
      case DType::kFloat32: return *r->data<float>();
      case DType::kFloat64: return *r->data<double>();
      case DType::kFloat16: return HalfToFloat(*r->data<uint16_t>());
      default: Fail("ratio has type " + DTypeName(r->dtype()));
    }
  }

  // Uniform in [0, 1) with 53 random bits.
  double Uniform(const KernelContext& ctx) {
    if (seeded_) {  // numpy's legacy random_sample
      uint32_t a = static_cast<uint32_t>(seeded_rng_()) >> 5, b = static_cast<uint32_t>(seeded_rng_()) >> 6;
      return (a * 67108864.0 + b) / 9007199254740992.0;
    }
    return static_cast<double>(ctx.rng()() >> 11) * 0x1.0p-53;
  }

  template <typename T> void Drop(KernelContext& ctx, double ratio) {
    const T* x = ctx.Input(0).data<T>();
    T* y = ctx.Output(0).data<T>();
    // The mask is bool from opset 10, of X's type before.
    Tensor* mask = ctx.HasOutput(1) ? &ctx.Output(1) : nullptr;
    uint8_t* bool_mask = mask && mask->dtype() == DType::kBool ? mask->data<uint8_t>() : nullptr;
    T* typed_mask = mask && !bool_mask ? mask->data<T>() : nullptr;
    // Computed in T as the reference does: scale = 1 / (1 - ratio).
    const T keep_scale = T(1) / (T(1) - static_cast<T>(ratio));
    for (int64_t i = 0, n = ctx.Input(0).numel(); i < n; ++i) {
      bool keep = Uniform(ctx) >= ratio;
      y[i] = keep ? x[i] * keep_scale : T(0);
      if (bool_mask) bool_mask[i] = keep;
      if (typed_mask) typed_mask[i] = keep ? T(1) : T(0);
    }
  }

  static void FillOnes(Tensor& mask) {
    const int64_t n = mask.numel();
    switch (mask.dtype()) {
      case DType::kBool: std::fill_n(mask.data<uint8_t>(), n, uint8_t{1}); break;
      case DType::kFloat32: std::fill_n(mask.data<float>(), n, 1.f); break;
      case DType::kFloat64: std::fill_n(mask.data<double>(), n, 1.0); break;
      case DType::kFloat16: std::fill_n(mask.data<uint16_t>(), n, uint16_t{0x3c00}); break;
      default: throw Error("dropout mask of type " + DTypeName(mask.dtype()));
    }
  }

  bool seeded_ = false;
  std::mt19937 seeded_rng_;
};

OT_REGISTER_CPU_KERNEL("Flatten", 1, kLatestOpset, FlattenKernel);
OT_REGISTER_CPU_KERNEL("Reshape", 1, kLatestOpset, ReshapeKernel);
// Reshape(X, shape) for the gradients of models older than opset 5, whose Reshape has no
// shape input.
OT_REGISTER_KERNEL(kGradDomain, "Reshape", 1, kLatestOpset, DeviceType::kCPU, ReshapeKernel);
OT_REGISTER_CPU_KERNEL("Identity", 1, kLatestOpset, IdentityKernel);
OT_REGISTER_CPU_KERNEL("Squeeze", 1, kLatestOpset, SqueezeKernel);
OT_REGISTER_CPU_KERNEL("Unsqueeze", 1, kLatestOpset, UnsqueezeKernel);
OT_REGISTER_CPU_KERNEL("Shape", 1, kLatestOpset, ShapeKernel);
OT_REGISTER_CPU_KERNEL("Size", 1, kLatestOpset, SizeKernel);
OT_REGISTER_CPU_KERNEL("Constant", 1, kLatestOpset, ConstantKernel);
OT_REGISTER_CPU_KERNEL("ConstantOfShape", 9, kLatestOpset, ConstantOfShapeKernel);
OT_REGISTER_CPU_KERNEL("Cast", 6, kLatestOpset, CastKernel);
OT_REGISTER_CPU_KERNEL("CastLike", 15, kLatestOpset, CastKernel);
// Cast's gradient: dY back to the forward input's type, at any model opset.
OT_REGISTER_KERNEL(kGradDomain, "CastLike", 1, kLatestOpset, DeviceType::kCPU, CastKernel);
OT_REGISTER_CPU_KERNEL("Dropout", 1, kLatestOpset, DropoutKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
