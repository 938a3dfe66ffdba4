// Element-wise reductions the host backends apply to received data: sums for float32,
// float64, float16 and bfloat16 (16-bit types are added in float32 and rounded back to
// nearest even), and the scaling that turns a sum into an average.
#pragma once

#include <cstddef>

#include "graph/dtype.h"

namespace ot {

// out[i] = a[i] + b[i]; out may alias a or b.
using SumFunction = void (*)(void* out, const void* a, const void* b, size_t n);

// The sum for a dtype; null when the dtype cannot be reduced.
SumFunction SumFunctionFor(DType dtype);
// data[i] *= factor.
void ScaleInPlace(void* data, size_t n, DType dtype, double factor);

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

}  // namespace ot
