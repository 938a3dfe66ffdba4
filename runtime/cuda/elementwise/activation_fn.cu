// The activations of runtime/ops/math/activation_math.h on the GPU: forward and ActivationGrad
// run the same UnaryForward / UnaryDerivative the CPU kernels run, one kernel per function
// (DispatchUnaryFn), so only the launch is CUDA's own.
#include "runtime/cuda/elementwise/activation_fn.h"

#include "runtime/cuda/math_device.h"
#include "runtime/cuda/launch_check.h"

namespace ot::cuda::math {
namespace {

constexpr int kThreads = 256;
unsigned Blocks(int64_t n) { return GridBlocks(n, kThreads); }

template <UnaryFn F>
__global__ void UnaryFnForwardKernel(const float* x, float* y, int64_t n, UnaryParams p, const float* lo,
                                     const float* hi) {
  if (lo) p.alpha = *lo;  // Clip's bounds from inputs (opset 11 on)
  if (hi) p.beta = *hi;
  OT_GRID_LOOP(i, n) y[i] = UnaryForward<F>(x[i], p);
}

template <UnaryFn F>
__global__ void UnaryFnGradKernel(const float* dy, const float* x, float* dx, int64_t n, UnaryParams p,
                                  const float* lo, const float* hi) {
  if (lo) p.alpha = *lo;
  if (hi) p.beta = *hi;
  OT_GRID_LOOP(i, n) dx[i] = dy[i] * UnaryDerivative<F>(x[i], p);
}

}  // namespace

void LaunchUnaryFn(UnaryFn fn, const UnaryParams& p, const float* x, float* y, int64_t n, const float* lo,
                   const float* hi, cudaStream_t stream) {
  if (n <= 0) return;
  DispatchUnaryFn(fn, [&](auto f) {
    constexpr UnaryFn F = decltype(f)::value;
    UnaryFnForwardKernel<F><<<Blocks(n), kThreads, 0, stream>>>(x, y, n, p, lo, hi);
    OT_CUDA_CHECK_LAUNCH("UnaryFnForwardKernel");
  });
}

void LaunchUnaryFnGrad(UnaryFn fn, const UnaryParams& p, const float* dy, const float* x, float* dx, int64_t n,
                       const float* lo, const float* hi, cudaStream_t stream) {
  if (n <= 0) return;
  DispatchUnaryFn(fn, [&](auto f) {
    constexpr UnaryFn F = decltype(f)::value;
    UnaryFnGradKernel<F><<<Blocks(n), kThreads, 0, stream>>>(dy, x, dx, n, p, lo, hi);
    OT_CUDA_CHECK_LAUNCH("UnaryFnGradKernel");
  });
}

}  // namespace ot::cuda::math
