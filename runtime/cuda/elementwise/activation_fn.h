// Launchers of the shared activations (runtime/ops/math/activation_math.h) on the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/ops/math/activation_math.h"

namespace ot::cuda::math {

// y = f(x), f named by fn with its attributes p; lo/hi: device scalars that replace p.alpha /
// p.beta (Clip's bounds from inputs), or null.
void LaunchUnaryFn(UnaryFn fn, const UnaryParams& p, const float* x, float* y, int64_t n, const float* lo,
                   const float* hi, cudaStream_t stream);
// dx = dy * f'(x).
void LaunchUnaryFnGrad(UnaryFn fn, const UnaryParams& p, const float* dy, const float* x, float* dx, int64_t n,
                       const float* lo, const float* hi, cudaStream_t stream);

}  // namespace ot::cuda::math
