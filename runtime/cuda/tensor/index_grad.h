// Our own CUDA kernels for the gradients of the indexing ops (runtime/cuda/tensor/
// index_grad_ops.cc): SliceGrad writes dY into zeros at the sliced positions, GatherGrad
// scatter-adds dY rows into zeros. The index arithmetic is runtime/ops/math/index_math.h's, as on
// the CPU. Float32; asynchronous on the given stream; shapes and strides in elements.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace ot::cuda::tensor {

// Most dimensions of a slice view the scatter handles.
constexpr int kMaxSliceRank = 8;

// dx (dx_numel elements) = 0, then dx[offset + StridedOffset(i, shape, strides)] = dy[i] for
// each row-major position i of `shape` (a slice never names one position twice).
void SliceScatter(const float* dy, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                  int64_t offset, float* dx, int64_t dx_numel, cudaStream_t stream);

// dx seen as [outer, dim, inner] = 0, then dx[o, indices[k], i] += dy[o, k, i] for k < count
// (atomic adds: repeated indices accumulate, in no fixed order). Negative indices count from
// the end; an index outside [-dim, dim) adds nothing and sets *error_flag to 1 + k.
void GatherScatterAdd(const float* dy, const void* indices, bool indices_int64, int64_t outer, int64_t dim,
                      int64_t count, int64_t inner, float* dx, long long* error_flag, cudaStream_t stream);

}  // namespace ot::cuda::tensor
