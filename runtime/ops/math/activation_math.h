// Per-element math of the unary activations and functions whose kernels are our own
// loops: the forward value y = f(x) and the derivative dy/dx from x, with the op's
// attributes as plain numbers. One definition for the CPU loops (runtime/cpu/elementwise/activations.cc)
// and any device kernel (__host__ __device__ under nvcc), so this header includes only the
// standard library. Derivatives at kinks follow PyTorch's autograd (noted per function).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
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
          X(ThresholdedRelu) X(Shrink) X(Clip) X(Gelu) X(Silu)

// Y(name): a form of an op above that its attributes choose (ParseNodeUnaryFn in
// runtime/ops/checks/activation_attrs.h), not an op type: GeluTanh is Gelu with approximate="tanh".
// A form of its own, so that each loop over elements has no per-element branch.
#define OT_UNARY_FORMS(Y) Y(GeluTanh)

enum class UnaryFn {
#define OT_UNARY_ENUM(name) k##name,
  OT_UNARY_FNS(OT_UNARY_ENUM) OT_UNARY_FORMS(OT_UNARY_ENUM)
#undef OT_UNARY_ENUM
};

// The attributes, by op: HardSigmoid alpha, beta; Elu, Celu, ThresholdedRelu alpha;
// Selu alpha, gamma; Shrink lambd (alpha), bias (beta); Clip min (alpha), max (beta).
struct UnaryParams {
  float alpha = 0.f, beta = 0.f, gamma = 0.f;
};

namespace unary_detail {
// float32 e^x and erf(x) in plain arithmetic, so that loops over them vectorise (the
// C library's expf/erff are scalar calls: erff took 44 ns an element against oneDNN's
// 3 ns for GELU). FastExp: 2^n * e^r with r = x - n ln 2 in [-ln2/2, ln2/2] and e^r by
// its Taylor polynomial to r^7 (relative error below 2e-7); 0 below -87.3. FastErf:
// x P(x^2) / Q(x^2) with degree-5 P and Q fitted here to erf on [0, 3.92] (erf is 1 in
// float32 beyond), at most 3.6e-7 from erf in float32 arithmetic, relative and absolute.
OT_ACTIVATION_HD inline float FastExp(float x) {
  float xc = x < -87.3f ? -87.3f : x;
  xc = xc > 88.3f ? 88.3f : xc;
  // n = round(x log2(e)): adding and taking away 1.5 * 2^23 rounds to an integer.
  const float nf = (xc * 1.44269504f + 12582912.f) - 12582912.f;
  const int n = static_cast<int>(nf);
  const float r = (xc - nf * 0.693145751953125f) - nf * 1.42860677e-6f;  // ln 2 in two parts
  const float r4 = 1.f / 24 + r * (1.f / 120 + r * (1.f / 720 + r * (1.f / 5040)));
  const float p = 1.f + r * (1.f + r * (0.5f + r * (1.f / 6 + r * r4)));
  const uint32_t bits = static_cast<uint32_t>(n + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -87.3f ? 0.f : p * scale;
}

OT_ACTIVATION_HD inline float FastErf(float x) {
  float a = x < 0.f ? -x : x;
  a = a > 3.92f ? 3.92f : a;
  const float t = a * a;
  const float p = 1.128379077f + t * (1.892325653e-01f + t * (5.264087596e-02f + t * (3.729245174e-03f +
                  t * (2.865264037e-04f + t * 2.090992429e-06f))));
  const float q = 1.f + t * (5.010352526e-01f + t * (1.136676607e-01f + t * (1.489290107e-02f +
                  t * (1.158385128e-03f + t * 3.860212003e-05f))));
  float e = a * p / q;
  e = e > 1.f ? 1.f : e;
  return x < 0.f ? -e : e;
}

template <typename T>
OT_ACTIVATION_HD inline T Erf(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return FastErf(x);
#endif
  return std::erf(x);
}
template <typename T>
OT_ACTIVATION_HD inline T Exp(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return FastExp(x);
#endif
  return std::exp(x);
}

template <typename T>
OT_ACTIVATION_HD inline T Sigmoid(T x) {
  return T(1) / (T(1) + Exp(-x));
}
// GELU's tanh approximation 0.5 x (1 + tanh(u(x))), u(x) = sqrt(2/pi) (x + 0.044715 x^3)
// (ONNX Gelu approximate="tanh", PyTorch's gelu(approximate='tanh')), is computed as the
// equal x sigmoid(2 u(x)): no cancellation in 1 + tanh where tanh nears -1, and vectorisable.
template <typename T>
OT_ACTIVATION_HD inline T GeluTanhArg2(T x) {  // 2 u(x)
  return T(1.5957691216057308) * (x + T(0.044715) * x * x * x);
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
    if constexpr (F == UnaryFn::kErf) return unary_detail::Erf(x);
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
    if constexpr (F == UnaryFn::kGelu) return T(0.5) * x * (T(1) + unary_detail::Erf(x * T(0.70710678118654752)));
    if constexpr (F == UnaryFn::kGeluTanh) return x * unary_detail::Sigmoid(unary_detail::GeluTanhArg2(x));
    if constexpr (F == UnaryFn::kSilu) return x * unary_detail::Sigmoid(x);  // fused x * Sigmoid(x)
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
  // float32 exponentials use FastExp (vectorisable, 1e-7 relative).
  const T a = static_cast<T>(p.alpha), b = static_cast<T>(p.beta), g = static_cast<T>(p.gamma);
  if constexpr (F == UnaryFn::kErf) return T(1.1283791670955126) * unary_detail::Exp(-x * x);  // 2 / sqrt(pi)
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
  if constexpr (F == UnaryFn::kElu) return x > T(0) ? T(1) : a * unary_detail::Exp(x);
  if constexpr (F == UnaryFn::kSelu) return x > T(0) ? g : g * a * unary_detail::Exp(x);
  if constexpr (F == UnaryFn::kCelu) return x > T(0) ? T(1) : unary_detail::Exp(x / a);
  if constexpr (F == UnaryFn::kMish) {
    const T t = std::tanh(Softplus(x));
    return t + x * Sigmoid(x) * (T(1) - t * t);
  }
  if constexpr (F == UnaryFn::kThresholdedRelu) return x > a ? T(1) : T(0);
  if constexpr (F == UnaryFn::kShrink) return x < -a || x > a ? T(1) : T(0);
  if constexpr (F == UnaryFn::kClip) return x > a && x < b ? T(1) : T(0);
  if constexpr (F == UnaryFn::kGelu)  // Phi(x) + x phi(x)
    return T(0.5) * (T(1) + unary_detail::Erf(x * T(0.70710678118654752))) +
           x * T(0.39894228040143268) * unary_detail::Exp(T(-0.5) * x * x);
  if constexpr (F == UnaryFn::kGeluTanh) {  // s + x s (1 - s) 2u'(x), s = sigmoid(2 u(x))
    const T s = Sigmoid(unary_detail::GeluTanhArg2(x));
    return s + x * s * (T(1) - s) * T(1.5957691216057308) * (T(1) + T(3 * 0.044715) * x * x);
  }
  if constexpr (F == UnaryFn::kSilu) {  // s (1 + x (1 - s)), s = sigmoid(x)
    const T s = Sigmoid(x);
    return s * (T(1) + x * (T(1) - s));
  }
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
    OT_UNARY_FORMS(OT_UNARY_CASE)
#undef OT_UNARY_CASE
  }
}

}  // namespace ot
