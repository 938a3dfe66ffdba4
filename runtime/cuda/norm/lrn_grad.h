// Our own CUDA kernel for org.onnxtrain LRNGrad (runtime/cuda/norm/lrn_grad_ops.cc) on the
// formulas of runtime/ops/math/lrn_math.h, as the CPU: a pass for S^-beta and dY X S^-(beta+1)
// per element (into `scratch`, 2 * numel doubles), a pass for dX. Asynchronous.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/ops/math/lrn_math.h"

namespace ot::cuda::norm {

// X, dY, dX as [N, C, inner].
void LrnGrad(const LrnGradParams& p, int64_t n, int64_t inner, const float* dy, const float* x, float* dx,
             double* scratch, cudaStream_t stream);

}  // namespace ot::cuda::norm
