// Elementwise CUDA kernels with numpy broadcasting: binary arithmetic and comparisons,
// Pow of mixed types, Where, unary math, Clip, Cast, LeakyReluGrad, the ReduceGrad
// broadcast, and Dropout (Philox counter-based stream from curand's device API) with its
// gradient. One grid-stride loop per op; a rank <= 1 indexer (same shapes or scalars)
// skips the index decomposition. Semantics mirror runtime/cpu (binary.cc, unary_math.cc,
// eltwise.cc, shape_ops.cc, gradient_kernels.cc).
#include <curand_kernel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "runtime/cuda/math_device.h"
#include "runtime/cuda/launch_check.h"

namespace ot::cuda::math {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) { return GridBlocks(n, kThreads); }

// ---------------------------------------------------------------------------------------
// Type dispatch on the host. Each calls fn(T{}) for the element type or returns false.
template <typename Fn>
bool DispatchArithmetic(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32: fn(float{}); return true;
    case DType::kFloat64: fn(double{}); return true;
    case DType::kInt32: fn(int32_t{}); return true;
    case DType::kInt64: fn(int64_t{}); return true;
    case DType::kInt8: fn(int8_t{}); return true;
    case DType::kUInt8: fn(uint8_t{}); return true;
    default: return false;
  }
}
template <typename Fn>
bool DispatchComparable(DType t, Fn&& fn) {
  if (t == DType::kBool) {
    fn(uint8_t{});
    return true;
  }
  return DispatchArithmetic(t, fn);
}
template <typename Fn>
bool DispatchCastable(DType t, Fn&& fn) {
  if (t == DType::kBool) {
    fn(BoolTag{});
    return true;
  }
  if (t == DType::kFloat16) {  // --amp fp16's casts
    fn(HalfTag{});
    return true;
  }
  return DispatchArithmetic(t, fn);
}

// ---------------------------------------------------------------------------------------
// Binary ops.
template <typename T>
struct AddFn {
  __device__ T operator()(T a, T b) const { return static_cast<T>(a + b); }
};
template <typename T>
struct SubFn {
  __device__ T operator()(T a, T b) const { return static_cast<T>(a - b); }
};
template <typename T>
struct MulFn {
  __device__ T operator()(T a, T b) const { return static_cast<T>(a * b); }
};
template <typename T>
struct MaxFn {
  __device__ T operator()(T a, T b) const { return a < b ? b : a; }
};
template <typename T>
struct MinFn {
  __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};
// Integer division truncates toward zero; a zero divisor yields 0 and raises the flag.
template <typename T>
struct DivFn {
  long long* flag;
  __device__ T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) {
        SetErrorFlag(flag, 1);
        return T(0);
      }
    }
    return static_cast<T>(a / b);
  }
};
template <typename T>
struct EqualFn {
  __device__ uint8_t operator()(T a, T b) const { return a == b; }
};
template <typename T>
struct LessFn {
  __device__ uint8_t operator()(T a, T b) const { return a < b; }
};
template <typename T>
struct LessOrEqualFn {
  __device__ uint8_t operator()(T a, T b) const { return a <= b; }
};
template <typename T>
struct GreaterFn {
  __device__ uint8_t operator()(T a, T b) const { return a > b; }
};
template <typename T>
struct GreaterOrEqualFn {
  __device__ uint8_t operator()(T a, T b) const { return a >= b; }
};

template <typename T, typename E>
struct PowFn {
  __device__ T operator()(T a, E b) const { return PowValue(a, b); }
};

template <typename A, typename B, typename Out, typename Fn>
__global__ void BinaryKernel(const A* a, const B* b, Out* out, int64_t n, BroadcastIndexer ix, Fn fn) {
  OT_GRID_LOOP(i, n) {
    int64_t off[2];
    BroadcastOffsets<2>(ix, i, off);
    out[i] = fn(a[off[0]], b[off[1]]);
  }
}

template <typename A, typename B, typename Out, typename Fn>
void RunBinary(const void* a, const void* b, void* out, int64_t n, const BroadcastIndexer& ix, Fn fn,
               cudaStream_t stream) {
  BinaryKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const A*>(a), static_cast<const B*>(b),
                                                  static_cast<Out*>(out), n, ix, fn);
  OT_CUDA_CHECK_LAUNCH("BinaryKernel");
}

template <typename T>
__global__ void BroadcastCopyKernel(const T* x, T* out, int64_t n, BroadcastIndexer ix) {
  OT_GRID_LOOP(i, n) {
    int64_t off[1];
    BroadcastOffsets<1>(ix, i, off);
    out[i] = x[off[0]];
  }
}

template <typename T>
__global__ void DivideByKernel(T* data, int64_t n, T divisor) {
  OT_GRID_LOOP(i, n) data[i] = static_cast<T>(data[i] / divisor);
}

template <typename T>
__global__ void UnaryKernel(UnaryOp op, const T* x, T* y, int64_t n, float alpha) {
  OT_GRID_LOOP(i, n) y[i] = UnaryValue<T>(op, x[i], alpha);
}

template <typename T>
__global__ void ClipKernel(const T* x, T* y, int64_t n, const T* lo_ptr, const T* hi_ptr, T lo, T hi) {
  const T l = lo_ptr ? *lo_ptr : lo;
  const T h = hi_ptr ? *hi_ptr : hi;
  OT_GRID_LOOP(i, n) {
    T v = x[i];
    v = v < l ? l : v;  // std::max(v, lo)
    y[i] = h < v ? h : v;  // std::min(v, hi)
  }
}

// ---------------------------------------------------------------------------------------
template <typename S, typename D>
__global__ void CastKernel(const typename CastElem<S>::Storage* x, typename CastElem<D>::Storage* y, int64_t n,
                           typename CastElem<D>::Storage lowest, typename CastElem<D>::Storage highest) {
  OT_GRID_LOOP(i, n) y[i] = CastValue<S, D>(x[i], lowest, highest);
}

// ---------------------------------------------------------------------------------------
template <typename E>
__global__ void WhereKernel(const uint8_t* cond, const E* x, const E* y, E* out, int64_t n, BroadcastIndexer ix) {
  OT_GRID_LOOP(i, n) {
    int64_t off[3];
    BroadcastOffsets<3>(ix, i, off);
    out[i] = cond[off[0]] ? x[off[1]] : y[off[2]];
  }
}

__global__ void LeakyReluGradKernel(const float* dy, const float* x, float* dx, int64_t n, float alpha) {
  OT_GRID_LOOP(i, n) dx[i] = x[i] > 0.f ? dy[i] : alpha * dy[i];
}

__global__ void BroadcastScaleKernel(const float* g, float* out, int64_t n, BroadcastIndexer ix, float scale) {
  OT_GRID_LOOP(i, n) {
    int64_t off[1];
    BroadcastOffsets<1>(ix, i, off);
    out[i] = g[off[0]] * scale;
  }
}

// ---------------------------------------------------------------------------------------
// Dropout: thread g draws four 32-bit values from Philox subsequence g for elements
// 4g..4g+3; u = bits * 2^-32 is uniform in [0, 1).
template <typename T>
__global__ void DropoutKernel(const T* x, T* y, uint8_t* mask, int64_t n, const void* ratio_ptr, bool ratio_is_double,
                              float ratio_value, const uint8_t* training_ptr, unsigned long long seed,
                              long long* flag) {
  double ratio = ratio_value;
  if (ratio_ptr)
    ratio = ratio_is_double ? *static_cast<const double*>(ratio_ptr) : *static_cast<const float*>(ratio_ptr);
  const bool training = training_ptr ? *training_ptr != 0 : true;
  const bool bad_ratio = training && ratio != 0.0 && !(ratio > 0.0 && ratio < 1.0);
  if (bad_ratio && blockIdx.x == 0 && threadIdx.x == 0) SetErrorFlag(flag, 1);
  const int64_t groups = (n + 3) / 4;
  if (!training || ratio == 0.0 || bad_ratio) {
    OT_GRID_LOOP(i, n) {
      y[i] = x[i];
      if (mask) mask[i] = 1;
    }
    return;
  }
  const T keep_scale = T(1) / (T(1) - static_cast<T>(ratio));
  OT_GRID_LOOP(g, groups) {
    curandStatePhilox4_32_10_t state;
    curand_init(seed, static_cast<unsigned long long>(g), 0ULL, &state);
    const uint4 bits = curand4(&state);
    const unsigned int b[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = g * 4 + k;
      if (i >= n) break;
      const bool keep = static_cast<double>(b[k]) * 0x1.0p-32 >= ratio;
      y[i] = keep ? static_cast<T>(x[i] * keep_scale) : T(0);
      if (mask) mask[i] = keep;
    }
  }
}

__global__ void DropoutGradKernel(const float* dy, const uint8_t* mask, float* dx, int64_t n, const float* ratio_ptr,
                                  float ratio_value) {
  const float ratio = ratio_ptr ? *ratio_ptr : ratio_value;
  const float scale = ratio >= 1.f ? 0.f : 1.f / (1.f - ratio);
  OT_GRID_LOOP(i, n) dx[i] = mask[i] ? dy[i] * scale : 0.f;
}

template <typename T>
__global__ void FillKernel(T* data, int64_t n, T value) {
  OT_GRID_LOOP(i, n) data[i] = value;
}

}  // namespace

// =======================================================================================
bool LaunchBinary(BinaryOp op, DType type, const void* a, const void* b, void* out, int64_t n,
                  const BroadcastIndexer& ix, long long* error_flag, cudaStream_t stream) {
  if (n == 0) return true;
  switch (op) {
    case BinaryOp::kEqual:
    case BinaryOp::kLess:
    case BinaryOp::kLessOrEqual:
    case BinaryOp::kGreater:
    case BinaryOp::kGreaterOrEqual:
      return DispatchComparable(type, [&](auto tag) {
        using T = decltype(tag);
        switch (op) {
          case BinaryOp::kEqual: return RunBinary<T, T, uint8_t>(a, b, out, n, ix, EqualFn<T>{}, stream);
          case BinaryOp::kLess: return RunBinary<T, T, uint8_t>(a, b, out, n, ix, LessFn<T>{}, stream);
          case BinaryOp::kLessOrEqual: return RunBinary<T, T, uint8_t>(a, b, out, n, ix, LessOrEqualFn<T>{}, stream);
          case BinaryOp::kGreater: return RunBinary<T, T, uint8_t>(a, b, out, n, ix, GreaterFn<T>{}, stream);
          default: return RunBinary<T, T, uint8_t>(a, b, out, n, ix, GreaterOrEqualFn<T>{}, stream);
        }
      });
    case BinaryOp::kPow:
      return LaunchPow(type, type, a, b, out, n, ix, stream);
    default:
      return DispatchArithmetic(type, [&](auto tag) {
        using T = decltype(tag);
        switch (op) {
          case BinaryOp::kAdd: return RunBinary<T, T, T>(a, b, out, n, ix, AddFn<T>{}, stream);
          case BinaryOp::kSub: return RunBinary<T, T, T>(a, b, out, n, ix, SubFn<T>{}, stream);
          case BinaryOp::kMul: return RunBinary<T, T, T>(a, b, out, n, ix, MulFn<T>{}, stream);
          case BinaryOp::kDiv: return RunBinary<T, T, T>(a, b, out, n, ix, DivFn<T>{error_flag}, stream);
          case BinaryOp::kMax: return RunBinary<T, T, T>(a, b, out, n, ix, MaxFn<T>{}, stream);
          default: return RunBinary<T, T, T>(a, b, out, n, ix, MinFn<T>{}, stream);
        }
      });
  }
}

namespace {
// Pow's base types (the CPU's) and exponent types.
template <typename Fn>
bool DispatchPowBase(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32: fn(float{}); return true;
    case DType::kFloat64: fn(double{}); return true;
    case DType::kInt32: fn(int32_t{}); return true;
    case DType::kInt64: fn(int64_t{}); return true;
    default: return false;
  }
}
}  // namespace

bool LaunchPow(DType base_type, DType exponent_type, const void* a, const void* b, void* out, int64_t n,
               const BroadcastIndexer& ix, cudaStream_t stream) {
  bool ok = false;
  DispatchPowBase(base_type, [&](auto base_tag) {
    using T = decltype(base_tag);
    ok = DispatchPowBase(exponent_type, [&](auto exp_tag) {
      using E = decltype(exp_tag);
      if (n > 0) RunBinary<T, E, T>(a, b, out, n, ix, PowFn<T, E>{}, stream);
    });
  });
  return ok;
}

bool LaunchBroadcastCopy(DType type, const void* x, void* out, int64_t n, const BroadcastIndexer& ix,
                         cudaStream_t stream) {
  return DispatchComparable(type, [&](auto tag) {
    using T = decltype(tag);
    if (n > 0) {
      BroadcastCopyKernel<T><<<Blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(out), n, ix);
      OT_CUDA_CHECK_LAUNCH("BroadcastCopyKernel");
    }
  });
}

bool LaunchDivideBy(DType type, void* data, int64_t n, int64_t divisor, cudaStream_t stream) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (n > 0) {
      DivideByKernel<T><<<Blocks(n), kThreads, 0, stream>>>(static_cast<T*>(data), n, static_cast<T>(divisor));
      OT_CUDA_CHECK_LAUNCH("DivideByKernel");
    }
  };
  if (type == DType::kFloat32) run(float{});
  else if (type == DType::kFloat64) run(double{});
  else return false;
  return true;
}

bool LaunchUnary(UnaryOp op, DType type, const void* x, void* y, int64_t n, float alpha, cudaStream_t stream) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (n > 0) {
      UnaryKernel<T><<<Blocks(n), kThreads, 0, stream>>>(op, static_cast<const T*>(x), static_cast<T*>(y), n, alpha);
      OT_CUDA_CHECK_LAUNCH("UnaryKernel");
    }
  };
  switch (type) {
    case DType::kFloat32: run(float{}); return true;
    case DType::kFloat64: run(double{}); return true;
    case DType::kInt8: run(int8_t{}); return true;
    case DType::kInt32: run(int32_t{}); return true;
    case DType::kInt64: run(int64_t{}); return true;
    default: return false;
  }
}

bool LaunchClip(DType type, const void* x, void* y, int64_t n, const void* lo_ptr, const void* hi_ptr,
                const double* lo_attr, const double* hi_attr, cudaStream_t stream) {
  return DispatchArithmetic(type, [&](auto tag) {
    using T = decltype(tag);
    const T lo = lo_attr ? static_cast<T>(*lo_attr) : std::numeric_limits<T>::lowest();
    const T hi = hi_attr ? static_cast<T>(*hi_attr) : std::numeric_limits<T>::max();
    if (n > 0) {
      ClipKernel<T><<<Blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n,
                                                        static_cast<const T*>(lo_ptr), static_cast<const T*>(hi_ptr),
                                                        lo, hi);
      OT_CUDA_CHECK_LAUNCH("ClipKernel");
    }
  });
}

bool LaunchCast(DType from, DType to, const void* x, void* y, int64_t n, cudaStream_t stream) {
  bool ok = false;
  DispatchCastable(from, [&](auto from_tag) {
    using S = decltype(from_tag);
    ok = DispatchCastable(to, [&](auto to_tag) {
      using D = decltype(to_tag);
      using DS = typename CastElem<D>::Storage;
      DS lowest = 0, highest = 1;
      if constexpr (!std::is_same_v<D, BoolTag> && !std::is_same_v<D, HalfTag>) {
        lowest = std::numeric_limits<D>::lowest();
        highest = std::numeric_limits<D>::max();
      }
      if (n > 0) {
        CastKernel<S, D><<<Blocks(n), kThreads, 0, stream>>>(static_cast<const typename CastElem<S>::Storage*>(x),
                                                             static_cast<DS*>(y), n, lowest, highest);
        OT_CUDA_CHECK_LAUNCH("CastKernel");
      }
    });
  });
  return ok;
}

bool LaunchWhere(size_t elem_size, const uint8_t* cond, const void* x, const void* y, void* out, int64_t n,
                 const BroadcastIndexer& ix, cudaStream_t stream) {
  auto run = [&](auto tag) {
    using E = decltype(tag);
    if (n > 0) {
      WhereKernel<E><<<Blocks(n), kThreads, 0, stream>>>(cond, static_cast<const E*>(x), static_cast<const E*>(y),
                                                         static_cast<E*>(out), n, ix);
      OT_CUDA_CHECK_LAUNCH("WhereKernel");
    }
  };
  switch (elem_size) {
    case 1: run(uint8_t{}); return true;
    case 2: run(uint16_t{}); return true;
    case 4: run(uint32_t{}); return true;
    case 8: run(uint64_t{}); return true;
    default: return false;
  }
}

void LaunchLeakyReluGrad(const float* dy, const float* x, float* dx, int64_t n, float alpha, cudaStream_t stream) {
  if (n > 0) {
    LeakyReluGradKernel<<<Blocks(n), kThreads, 0, stream>>>(dy, x, dx, n, alpha);
    OT_CUDA_CHECK_LAUNCH("LeakyReluGradKernel");
  }
}

void LaunchBroadcastScale(const float* g, float* out, int64_t n, const BroadcastIndexer& ix, float scale,
                          cudaStream_t stream) {
  if (n > 0) {
    BroadcastScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(g, out, n, ix, scale);
    OT_CUDA_CHECK_LAUNCH("BroadcastScaleKernel");
  }
}

bool LaunchDropout(DType type, const void* x, void* y, uint8_t* mask, int64_t n, const void* ratio_ptr,
                   DType ratio_type, float ratio, const uint8_t* training_ptr, uint64_t seed, long long* error_flag,
                   cudaStream_t stream) {
  if (ratio_ptr && ratio_type != DType::kFloat32 && ratio_type != DType::kFloat64) return false;
  const bool ratio_is_double = ratio_type == DType::kFloat64;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (n > 0) {
      DropoutKernel<T><<<Blocks((n + 3) / 4), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(y), mask, n, ratio_ptr, ratio_is_double, ratio, training_ptr,
          static_cast<unsigned long long>(seed), error_flag);
      OT_CUDA_CHECK_LAUNCH("DropoutKernel");
    }
  };
  if (type == DType::kFloat32) run(float{});
  else if (type == DType::kFloat64) run(double{});
  else return false;
  return true;
}

void LaunchDropoutGrad(const float* dy, const uint8_t* mask, float* dx, int64_t n, const float* ratio_ptr, float ratio,
                       cudaStream_t stream) {
  if (n > 0) {
    DropoutGradKernel<<<Blocks(n), kThreads, 0, stream>>>(dy, mask, dx, n, ratio_ptr, ratio);
    OT_CUDA_CHECK_LAUNCH("DropoutGradKernel");
  }
}

bool LaunchFillOnes(DType type, void* data, int64_t n, cudaStream_t stream) {
  if (n == 0) return true;
  switch (type) {
    case DType::kBool:
      FillKernel<uint8_t><<<Blocks(n), kThreads, 0, stream>>>(static_cast<uint8_t*>(data), n, 1);
      OT_CUDA_CHECK_LAUNCH("FillKernel");
      return true;
    case DType::kFloat32:
      FillKernel<float><<<Blocks(n), kThreads, 0, stream>>>(static_cast<float*>(data), n, 1.f);
      OT_CUDA_CHECK_LAUNCH("FillKernel");
      return true;
    case DType::kFloat64:
      FillKernel<double><<<Blocks(n), kThreads, 0, stream>>>(static_cast<double*>(data), n, 1.0);
      OT_CUDA_CHECK_LAUNCH("FillKernel");
      return true;
    default: return false;
  }
}

}  // namespace ot::cuda::math
