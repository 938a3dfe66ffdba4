// Index arithmetic of the gather/scatter ops, one definition for the CPU kernels and the
// CUDA ones (__host__ __device__ under nvcc): ONNX's negative indices, and the offset of a
// row-major position in a strided view. CheckedIndex (op_shapes.h) and the CUDA gradient
// kernels of runtime/cuda/tensor/ use these.
#pragma once

#include <cstdint>

#include "runtime/ops/math/integer_pow.h"  // OT_HOST_DEVICE

namespace ot {

// Whether `raw` names an element of a dimension of size `dim` (negative counts from the end).
OT_HOST_DEVICE inline bool IndexInRange(int64_t raw, int64_t dim) { return raw >= -dim && raw < dim; }

// `raw` in [0, dim): negative indices count from the end. Assumes IndexInRange.
OT_HOST_DEVICE inline int64_t WrapIndex(int64_t raw, int64_t dim) { return raw < 0 ? raw + dim : raw; }

// The element offset of row-major position `i` over `dims` in a view with `strides`.
OT_HOST_DEVICE inline int64_t StridedOffset(int64_t i, int rank, const int64_t* dims, const int64_t* strides) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t q = i / dims[d];
    off += (i - q * dims[d]) * strides[d];
    i = q;
  }
  return off;
}

}  // namespace ot
