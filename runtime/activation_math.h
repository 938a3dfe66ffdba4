// Per-element math of the unary activations and functions whose kernels are our own
// loops: the forward value y = f(x) and the derivative dy/dx from x, with the op's
// attributes as plain numbers. One definition for the CPU loops (runtime/cpu/activations.cc)
// and any device kernel (__host__ __device__ under nvcc), so this header includes only the
// standard library. Derivatives at kinks follow PyTorch's autograd (noted per function).
#pragma once

#include <cmath>
#include <type_traits>

#if defined(__CUDACC__)
#define OT_ACTIVATION_HD __host__ __device__
#else
#define OT_ACTIVATION_HD
#endif

namespace ot {

// X(name): the ONNX op type `name`, enumerator UnaryFn::k##name.
#define OT_UNARY_FNS(X)                                                                                    \
  X(Erf) X(Sin) X(Cos) X(Tan) X(Asin) X(Acos) X(Atan) X(Sinh) X(Cosh) X(Asinh) X(Acosh) X(Atanh) X(Sign)     \
      X(Abs) X(Reciprocal) X(HardSigmoid) X(HardSwish) X(Softplus) X(Softsign) X(Elu) X(Selu) X(Celu) X(Mish) \
          X(ThresholdedRelu) X(Shrink) X(Clip)

enum class UnaryFn {
#define OT_UNARY_ENUM(name) k##name,
  OT_UNARY_FNS(OT_UNARY_ENUM)
#undef OT_UNARY_ENUM
};

// The attributes, by op: HardSigmoid alpha, beta; Elu, Celu, ThresholdedRelu alpha;
// Selu alpha, gamma; Shrink lambd (alpha), bias (beta); Clip min (alpha), max (beta).
struct UnaryParams {
  float alpha = 0.f, beta = 0.f, gamma = 0.f;
};

namespace unary_detail {
template <typename T>
OT_ACTIVATION_HD inline T Sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
// log(1 + e^x) without overflow.
template <typename T>
OT_ACTIVATION_HD inline T Softplus(T x) {
  return (x > T(0) ? x : T(0)) + std::log1p(std::exp(-std::fabs(x)));
}
}  // namespace unary_detail

// y = f(x). Sign takes any numeric type; the others floating point.
template <UnaryFn F, typename T>
OT_ACTIVATION_HD inline T UnaryForward(T x, const UnaryParams& p) {
  using unary_detail::Softplus;
  if constexpr (F == UnaryFn::kSign) {
    return static_cast<T>((T(0) < x) - (x < T(0)));
  } else {
    static_assert(std::is_floating_point_v<T>, "floating point only");
    const T a = static_cast<T>(p.alpha), b = static_cast<T>(p.beta), g = static_cast<T>(p.gamma);
    if constexpr (F == UnaryFn::kErf) return std::erf(x);
    if constexpr (F == UnaryFn::kSin) return std::sin(x);
    if constexpr (F == UnaryFn::kCos) return std::cos(x);
    if constexpr (F == UnaryFn::kTan) return std::tan(x);
    if constexpr (F == UnaryFn::kAsin) return std::asin(x);
    if constexpr (F == UnaryFn::kAcos) return std::acos(x);
    if constexpr (F == UnaryFn::kAtan) return std::atan(x);
    if constexpr (F == UnaryFn::kSinh) return std::sinh(x);
    if constexpr (F == UnaryFn::kCosh) return std::cosh(x);
    if constexpr (F == UnaryFn::kAsinh) return std::asinh(x);
    if constexpr (F == UnaryFn::kAcosh) return std::acosh(x);
    if constexpr (F == UnaryFn::kAtanh) return std::atanh(x);
    if constexpr (F == UnaryFn::kAbs) return std::fabs(x);
    if constexpr (F == UnaryFn::kReciprocal) return T(1) / x;
    if constexpr (F == UnaryFn::kHardSigmoid) {
      const T v = a * x + b;
      return v < T(0) ? T(0) : v > T(1) ? T(1) : v;
    }
    if constexpr (F == UnaryFn::kHardSwish) {
      const T v = x / T(6) + T(0.5);
      return x * (v < T(0) ? T(0) : v > T(1) ? T(1) : v);
    }
    if constexpr (F == UnaryFn::kSoftplus) return Softplus(x);
    if constexpr (F == UnaryFn::kSoftsign) return x / (T(1) + std::fabs(x));
    if constexpr (F == UnaryFn::kElu) return x > T(0) ? x : a * std::expm1(x);
    if constexpr (F == UnaryFn::kSelu) return g * (x > T(0) ? x : a * std::expm1(x));
    if constexpr (F == UnaryFn::kCelu) return (x > T(0) ? x : T(0)) + (x > T(0) ? T(0) : a * std::expm1(x / a));
    if constexpr (F == UnaryFn::kMish) return x * std::tanh(Softplus(x));
    if constexpr (F == UnaryFn::kThresholdedRelu) return x > a ? x : T(0);
    if constexpr (F == UnaryFn::kShrink) return x < -a ? x + b : x > a ? x - b : T(0);
    if constexpr (F == UnaryFn::kClip) return x < a ? a : x > b ? b : x;  // a > b gives b, as ONNX says
  }
}

// dy/dx at x (floating point). At kinks, as PyTorch: Abs 0 at 0; HardSwish x/3 + 1/2 on
// [-3, 3]; HardSigmoid alpha strictly inside (0, 1); Elu, Selu and Celu take the x <= 0
// branch at 0; Shrink and ThresholdedRelu 0 at +-lambd and alpha; Clip 1 strictly
// between the bounds (as torch's hardtanh and ReLU6, which export to Clip).
template <UnaryFn F, typename T>
OT_ACTIVATION_HD inline T UnaryDerivative(T x, const UnaryParams& p) {
  static_assert(std::is_floating_point_v<T>, "floating point only");
  using unary_detail::Sigmoid;
  using unary_detail::Softplus;
  const T a = static_cast<T>(p.alpha), b = static_cast<T>(p.beta), g = static_cast<T>(p.gamma);
  if constexpr (F == UnaryFn::kErf) return T(1.1283791670955126) * std::exp(-x * x);  // 2 / sqrt(pi)
  if constexpr (F == UnaryFn::kSin) return std::cos(x);
  if constexpr (F == UnaryFn::kCos) return -std::sin(x);
  if constexpr (F == UnaryFn::kTan) {
    const T t = std::tan(x);
    return T(1) + t * t;
  }
  if constexpr (F == UnaryFn::kAsin) return T(1) / std::sqrt(T(1) - x * x);
  if constexpr (F == UnaryFn::kAcos) return -T(1) / std::sqrt(T(1) - x * x);
  if constexpr (F == UnaryFn::kAtan) return T(1) / (T(1) + x * x);
  if constexpr (F == UnaryFn::kSinh) return std::cosh(x);
  if constexpr (F == UnaryFn::kCosh) return std::sinh(x);
  if constexpr (F == UnaryFn::kAsinh) return T(1) / std::sqrt(x * x + T(1));
  if constexpr (F == UnaryFn::kAcosh) return T(1) / std::sqrt(x * x - T(1));
  if constexpr (F == UnaryFn::kAtanh) return T(1) / (T(1) - x * x);
  if constexpr (F == UnaryFn::kSign) return T(0);
  if constexpr (F == UnaryFn::kAbs) return static_cast<T>((T(0) < x) - (x < T(0)));
  if constexpr (F == UnaryFn::kReciprocal) return -T(1) / (x * x);
  if constexpr (F == UnaryFn::kHardSigmoid) {
    const T v = a * x + b;
    return v > T(0) && v < T(1) ? a : T(0);
  }
  if constexpr (F == UnaryFn::kHardSwish) return x < T(-3) ? T(0) : x <= T(3) ? x / T(3) + T(0.5) : T(1);
  if constexpr (F == UnaryFn::kSoftplus) return Sigmoid(x);
  if constexpr (F == UnaryFn::kSoftsign) {
    const T d = T(1) + std::fabs(x);
    return T(1) / (d * d);
  }
  if constexpr (F == UnaryFn::kElu) return x > T(0) ? T(1) : a * std::exp(x);
  if constexpr (F == UnaryFn::kSelu) return x > T(0) ? g : g * a * std::exp(x);
  if constexpr (F == UnaryFn::kCelu) return x > T(0) ? T(1) : std::exp(x / a);
  if constexpr (F == UnaryFn::kMish) {
    const T t = std::tanh(Softplus(x));
    return t + x * Sigmoid(x) * (T(1) - t * t);
  }
  if constexpr (F == UnaryFn::kThresholdedRelu) return x > a ? T(1) : T(0);
  if constexpr (F == UnaryFn::kShrink) return x < -a || x > a ? T(1) : T(0);
  if constexpr (F == UnaryFn::kClip) return x > a && x < b ? T(1) : T(0);
}

// Calls fn(std::integral_constant<UnaryFn, F>{}) for the runtime value `f`, so that a
// loop over elements is compiled once per function with no per-element switch.
template <typename Fn>
inline void DispatchUnaryFn(UnaryFn f, Fn&& fn) {
  switch (f) {
#define OT_UNARY_CASE(name) \
  case UnaryFn::k##name:    \
    return fn(std::integral_constant<UnaryFn, UnaryFn::k##name>{});
    OT_UNARY_FNS(OT_UNARY_CASE)
#undef OT_UNARY_CASE
  }
}

}  // namespace ot
