// Our own CUDA kernels for the ops that index data by tuples of indices
// (runtime/cuda/tensor/scatter_nd_ops.cc): ScatterND with reduction 'none' (a copy of data
// with the indexed slices replaced by the updates) and GatherND (the indexed slices, with
// batch_dims). Index arithmetic as runtime/ops/math/index_math.h's. Elements of 1, 2, 4 or 8 bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ot::cuda::tensor {

constexpr int kMaxScatterIndexDepth = 8;  // most entries per index tuple

struct ScatterNDGeometry {
  int64_t batch = 1, batch_stride = 0;  // GatherND's batch_dims (ScatterND: 1, 0)
  int64_t tuples = 0, k = 0, slice = 1;  // tuples per batch
  int64_t dims[kMaxScatterIndexDepth] = {};
  int64_t strides[kMaxScatterIndexDepth] = {};
};

// out (already a copy of data): out[offset(tuple t) + i] = updates[t * slice + i]. An index
// outside [-dim, dim) writes nothing and sets *error_flag to 1 + t.
void ScatterNDReplace(const ScatterNDGeometry& g, const void* indices, bool indices_int64, const void* updates,
                      void* out, size_t element_size, long long* error_flag, cudaStream_t stream);

// out[(b * tuples + t) * slice + i] = data[b * batch_stride + offset(tuple b * tuples + t) + i].
// An index outside [-dim, dim) writes zeros and sets *error_flag to 1 + the tuple's number.
void GatherNDCopy(const ScatterNDGeometry& g, const void* data, const void* indices, bool indices_int64, void* out,
                  size_t element_size, long long* error_flag, cudaStream_t stream);

}  // namespace ot::cuda::tensor
