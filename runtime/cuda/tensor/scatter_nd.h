// Our own CUDA kernel for ScatterND with reduction 'none' (runtime/cuda/tensor/
// scatter_nd_ops.cc): the output is a copy of data with the indexed slices replaced by the
// updates. Index arithmetic as runtime/ops/index_math.h's. Elements of 1, 2, 4 or 8 bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ot::cuda::tensor {

constexpr int kMaxScatterIndexDepth = 8;  // most entries per index tuple

struct ScatterNDGeometry {
  int64_t tuples = 0, k = 0, slice = 1;
  int64_t dims[kMaxScatterIndexDepth] = {};
  int64_t strides[kMaxScatterIndexDepth] = {};
};

// out (already a copy of data): out[offset(tuple t) + i] = updates[t * slice + i]. An index
// outside [-dim, dim) writes nothing and sets *error_flag to 1 + t.
void ScatterNDReplace(const ScatterNDGeometry& g, const void* indices, bool indices_int64, const void* updates,
                      void* out, size_t element_size, long long* error_flag, cudaStream_t stream);

}  // namespace ot::cuda::tensor
