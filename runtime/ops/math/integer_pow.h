// Integer Pow by squaring, one definition for the CPU kernels and the CUDA device code
// (__host__ __device__ under nvcc, so this header includes only the standard library).
#pragma once

#include <type_traits>

#if defined(__CUDACC__)
#define OT_HOST_DEVICE __host__ __device__
#else
#define OT_HOST_DEVICE
#endif

namespace ot {

// base^exponent; a negative exponent truncates like the real result would.
template <typename T, typename E>
OT_HOST_DEVICE inline T IntegerPow(T base, E exponent) {
  if constexpr (std::is_signed_v<E>) {
    if (exponent < 0) return base == 1 ? T(1) : base == T(-1) ? (exponent % 2 ? T(-1) : T(1)) : T(0);
  }
  T result = 1;
  while (exponent > 0) {
    if (exponent & 1) result = static_cast<T>(result * base);
    base = static_cast<T>(base * base);
    exponent = static_cast<E>(exponent >> 1);
  }
  return result;
}

}  // namespace ot
