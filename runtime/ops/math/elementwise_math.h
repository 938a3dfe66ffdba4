// Per-element formulas of elementwise ops outside activation_math.h -- Mod (both sign
// conventions), PRelu and its gradient, PowGrad, Range's values -- one definition for the CPU kernels
// and the CUDA ones (__host__ __device__ under nvcc), so the CPU tests check what the GPU runs.
#pragma once

#include <cmath>
#include <type_traits>

#include "runtime/ops/math/integer_pow.h"  // OT_HOST_DEVICE

namespace ot {

// Mod(x, d): fmod=1 (c_style) takes the dividend's sign, fmod=0 the divisor's (Python's %).
// Integer division by zero returns 0 and sets *div_zero.
template <typename T>
OT_HOST_DEVICE inline T ModValue(T x, T d, bool c_style, bool* div_zero) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = fmod(x, d);
    if (!c_style && r != 0 && ((r < 0) != (d < 0))) r += d;
    return r;
  } else {
    if (d == 0) {
      *div_zero = true;
      return T(0);
    }
    T r = static_cast<T>(x % d);
    if constexpr (std::is_signed_v<T>) {
      if (!c_style && r != 0 && ((r < 0) != (d < 0))) r = static_cast<T>(r + d);
    }
    return r;
  }
}

// PRelu: x where x >= 0, slope * x elsewhere.
template <typename T>
OT_HOST_DEVICE inline T PReluValue(T x, T slope) {
  return x < T(0) ? static_cast<T>(slope * x) : x;
}

// PReluGrad of one element: dX, and the element's term of dSlope (0 where x >= 0).
OT_HOST_DEVICE inline float PReluInputGrad(float dy, float x, float slope) { return x < 0.f ? slope * dy : dy; }
OT_HOST_DEVICE inline float PReluSlopeGradTerm(float dy, float x) { return x < 0.f ? dy * x : 0.f; }

// PowGrad of one element: dA = dY * e * x^(e-1) (0 where e == 0), dB = dY * x^e * ln x (0
// where x == 0 and e >= 0), as PyTorch's pow backward.
OT_HOST_DEVICE inline float PowBaseGrad(float dy, float x, float e) {
  return e == 0.f ? 0.f : e == 2.f ? dy * 2.f * x : dy * e * powf(x, e - 1.f);
}
OT_HOST_DEVICE inline float PowExponentGrad(float dy, float x, float e) {
  return x == 0.f && e >= 0.f ? 0.f : dy * powf(x, e) * logf(x);
}

// Range's element i: start + i * delta in the element type.
template <typename T>
OT_HOST_DEVICE inline T RangeValue(T start, T delta, long long i) {
  return static_cast<T>(start + static_cast<T>(i) * delta);
}

}  // namespace ot
