// Our own CUDA kernels for the gradients of the indexing ops (runtime/cuda/tensor/
// index_grad_ops.cc): SliceGrad writes dY into zeros at the sliced positions, GatherGrad
// sums dY rows into zeros by row (sorted, deterministic). The index arithmetic is runtime/ops/math/index_math.h's, as on
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

// Device scratch of GatherScatterAdd for `count` indices: the (row, k) pairs before and after
// sorting by row, and the sort's own temporary storage (GatherSortBytes(count) bytes).
struct GatherScratch {
  uint64_t *rows_in = nullptr, *rows_out = nullptr;
  int64_t *pos_in = nullptr, *pos_out = nullptr;
  void* sort_temp = nullptr;
  size_t sort_bytes = 0;
};
size_t GatherSortBytes(int64_t count);

// dx seen as [outer, dim, inner]: dx[o, r, i] = the sum of dy[o, k, i] over the k with
// indices[k] naming row r (0 where none does), deterministically: the indices are sorted by
// row, stably (cub's radix sort), and each row's run is summed by one thread in increasing k;
// no atomics, the same sums every run. Negative indices count from the end; an index outside
// [-dim, dim) adds nothing and sets *error_flag to 1 + k.
void GatherScatterAdd(const float* dy, const void* indices, bool indices_int64, int64_t outer, int64_t dim,
                      int64_t count, int64_t inner, float* dx, long long* error_flag, const GatherScratch& scratch,
                      cudaStream_t stream);

}  // namespace ot::cuda::tensor
