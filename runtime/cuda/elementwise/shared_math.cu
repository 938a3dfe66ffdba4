// The device kernels of runtime/cuda/elementwise/shared_math.h, one grid-stride loop per op
// over the formulas of runtime/ops/math/elementwise_math.h.
#include "runtime/cuda/elementwise/shared_math.h"

#include "runtime/cuda/math_device.h"
#include "runtime/ops/math/elementwise_math.h"
#include "runtime/cuda/launch_check.h"

namespace ot::cuda::elementwise {
namespace {

constexpr int kThreads = 256;
unsigned Blocks(int64_t n) { return math::GridBlocks(n, kThreads); }

template <typename T>
__global__ void ModKernel(bool c_style, const T* a, const T* b, T* y, int64_t n, math::BroadcastIndexer ix,
                          long long* error_flag) {
  OT_GRID_LOOP(i, n) {
    int64_t off[2];
    math::BroadcastOffsets<2>(ix, i, off);
    bool div_zero = false;
    y[i] = ::ot::ModValue(a[off[0]], b[off[1]], c_style, &div_zero);
    if (div_zero) math::SetErrorFlag(error_flag, 1);
  }
}

__global__ void PReluKernel(const float* x, const float* slope, float* y, int64_t n, math::BroadcastIndexer ix) {
  OT_GRID_LOOP(i, n) {
    int64_t off[2];
    math::BroadcastOffsets<2>(ix, i, off);
    y[i] = ::ot::PReluValue(x[off[0]], slope[off[1]]);
  }
}

__global__ void PReluGradKernel(const float* dy, const float* x, const float* slope, float* dx, float* slope_terms,
                                int64_t n, math::BroadcastIndexer ix) {
  OT_GRID_LOOP(i, n) {
    int64_t off[2];
    math::BroadcastOffsets<2>(ix, i, off);
    if (dx) dx[off[0]] = ::ot::PReluInputGrad(dy[off[0]], x[off[0]], slope[off[1]]);
    if (slope_terms) slope_terms[off[0]] = ::ot::PReluSlopeGradTerm(dy[off[0]], x[off[0]]);
  }
}

template <typename E>
__global__ void PowGradKernel(const float* dy, const float* a, const E* b, float* da, float* db, int64_t n,
                              math::BroadcastIndexer ix) {
  OT_GRID_LOOP(i, n) {
    int64_t off[3];
    math::BroadcastOffsets<3>(ix, i, off);
    const float x = a[off[1]], e = static_cast<float>(b[off[2]]);
    if (da) da[i] = ::ot::PowBaseGrad(dy[off[0]], x, e);
    if (db) db[i] = ::ot::PowExponentGrad(dy[off[0]], x, e);
  }
}

__global__ void NotKernel(const uint8_t* x, uint8_t* y, int64_t n) {
  OT_GRID_LOOP(i, n) y[i] = x[i] ? 0 : 1;
}

template <typename T>
__global__ void RangeKernel(const T* start, const T* delta, T* y, int64_t n) {
  const T s = *start, d = *delta;
  OT_GRID_LOOP(i, n) y[i] = ::ot::RangeValue(s, d, static_cast<long long>(i));
}

}  // namespace

bool LaunchMod(DType type, bool c_style, const void* a, const void* b, void* y, int64_t n,
               const math::BroadcastIndexer& ix, long long* error_flag, cudaStream_t stream) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (n > 0)
      ModKernel<T><<<Blocks(n), kThreads, 0, stream>>>(c_style, static_cast<const T*>(a), static_cast<const T*>(b),
                                                       static_cast<T*>(y), n, ix, error_flag);
    OT_CUDA_CHECK_LAUNCH("ModKernel");
    return true;
  };
  switch (type) {
    case DType::kInt32: return run(int32_t{});
    case DType::kInt64: return run(int64_t{});
    case DType::kFloat32: return run(float{});
    case DType::kFloat64: return run(double{});
    default: return false;
  }
}

void LaunchPRelu(const float* x, const float* slope, float* y, int64_t n, const math::BroadcastIndexer& ix,
                 cudaStream_t stream) {
  if (n > 0) PReluKernel<<<Blocks(n), kThreads, 0, stream>>>(x, slope, y, n, ix);
  OT_CUDA_CHECK_LAUNCH("PReluKernel");
}

void LaunchPReluGrad(const float* dy, const float* x, const float* slope, float* dx, float* slope_terms, int64_t n,
                     const math::BroadcastIndexer& ix, cudaStream_t stream) {
  if (n > 0) PReluGradKernel<<<Blocks(n), kThreads, 0, stream>>>(dy, x, slope, dx, slope_terms, n, ix);
  OT_CUDA_CHECK_LAUNCH("PReluGradKernel");
}

bool LaunchPowGrad(DType exponent_type, const float* dy, const float* a, const void* b, float* da, float* db,
                   int64_t n, const math::BroadcastIndexer& ix, cudaStream_t stream) {
  auto run = [&](auto tag) {
    using E = decltype(tag);
    if (n > 0) PowGradKernel<E><<<Blocks(n), kThreads, 0, stream>>>(dy, a, static_cast<const E*>(b), da, db, n, ix);
    OT_CUDA_CHECK_LAUNCH("PowGradKernel");
    return true;
  };
  switch (exponent_type) {
    case DType::kFloat32: return run(float{});
    case DType::kInt32: return run(int32_t{});
    case DType::kInt64: return run(int64_t{});
    default: return false;
  }
}

void LaunchNot(const uint8_t* x, uint8_t* y, int64_t n, cudaStream_t stream) {
  if (n > 0) NotKernel<<<Blocks(n), kThreads, 0, stream>>>(x, y, n);
  OT_CUDA_CHECK_LAUNCH("NotKernel");
}

bool LaunchRange(DType type, const void* start, const void* delta, void* y, int64_t n, cudaStream_t stream) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (n > 0)
      RangeKernel<T><<<Blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(start), static_cast<const T*>(delta),
                                                         static_cast<T*>(y), n);
    OT_CUDA_CHECK_LAUNCH("RangeKernel");
    return true;
  };
  switch (type) {
    case DType::kInt16: return run(int16_t{});
    case DType::kInt32: return run(int32_t{});
    case DType::kInt64: return run(int64_t{});
    case DType::kFloat32: return run(float{});
    case DType::kFloat64: return run(double{});
    default: return false;
  }
}

}  // namespace ot::cuda::elementwise
