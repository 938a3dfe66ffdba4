// Our own CUDA kernels for the elementwise ops of runtime/ops/math/elementwise_math.h (Mod, PRelu
// and PReluGrad, PowGrad, Not, Range): the CPU kernels' per-element formulas, launched over a
// broadcast indexer (runtime/cuda/math_kernels.h). Asynchronous on the given stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "graph/dtype.h"
#include "runtime/cuda/math_kernels.h"

namespace ot::cuda::elementwise {

// y = ModValue(a, b) over n outputs (operands 0, 1 of ix). Types int32, int64, float32,
// float64; integer division by zero sets *error_flag to 1. False for other types.
bool LaunchMod(DType type, bool c_style, const void* a, const void* b, void* y, int64_t n,
               const math::BroadcastIndexer& ix, long long* error_flag, cudaStream_t stream);

// y = PReluValue(x, slope) (float32; operand 0 x, operand 1 slope).
void LaunchPRelu(const float* x, const float* slope, float* y, int64_t n, const math::BroadcastIndexer& ix,
                 cudaStream_t stream);

// dx = PReluInputGrad and slope_terms = PReluSlopeGradTerm, each element's (each where not
// null; slope_terms shaped as X), which the caller sums to the slope's shape with
// math::LaunchReduce (a fixed order: the same sums every run, no atomics). Operand 0 is
// dY/X/dX (dense), operand 1 the slope.
void LaunchPReluGrad(const float* dy, const float* x, const float* slope, float* dx, float* slope_terms, int64_t n,
                     const math::BroadcastIndexer& ix, cudaStream_t stream);

// PowGrad: da = PowBaseGrad, db = PowExponentGrad (each where not null) over n elements;
// operand 0 dY (dense), 1 the base A, 2 the exponent B of type exponent_type (float32, int32,
// int64). False for another exponent type.
bool LaunchPowGrad(DType exponent_type, const float* dy, const float* a, const void* b, float* da, float* db,
                   int64_t n, const math::BroadcastIndexer& ix, cudaStream_t stream);

// y = !x over bool (uint8) elements.
void LaunchNot(const uint8_t* x, uint8_t* y, int64_t n, cudaStream_t stream);

// y[i] = RangeValue(*start, *delta, i) for i < n (device scalars). Types float32, float64,
// int16, int32, int64; false for others.
bool LaunchRange(DType type, const void* start, const void* delta, void* y, int64_t n, cudaStream_t stream);

}  // namespace ot::cuda::elementwise
