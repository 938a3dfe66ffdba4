// The device kernels of runtime/cuda/tensor/index_grad.h, on the index arithmetic of
// runtime/ops/math/index_math.h (the CPU kernels' own). GatherGrad sorts its indices by row
// (cub's stable radix sort) and sums each row's run in index order: deterministic.
#include "runtime/cuda/tensor/index_grad.h"

#include <cub/device/device_radix_sort.cuh>

#include "graph/error.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_device.h"
#include "runtime/ops/math/index_math.h"
#include "runtime/cuda/launch_check.h"

namespace ot::cuda::tensor {
namespace {

constexpr int kThreads = 256;

struct SliceGeometry {
  int rank = 0;
  int64_t dims[kMaxSliceRank] = {};
  int64_t strides[kMaxSliceRank] = {};
};

__global__ void SliceScatterKernel(const float* dy, SliceGeometry g, int64_t offset, float* dx, int64_t n) {
  OT_GRID_LOOP(i, n) dx[offset + ::ot::StridedOffset(i, g.rank, g.dims, g.strides)] = dy[i];
}

// rows[k] = the row indices[k] names (dim for one out of range, which sorts last and adds
// nothing), pos[k] = k.
template <typename Index>
__global__ void GatherRowsKernel(const Index* indices, int64_t dim, int64_t count, uint64_t* rows, int64_t* pos,
                                 long long* error_flag) {
  OT_GRID_LOOP(k, count) {
    const int64_t raw = static_cast<int64_t>(indices[k]);
    if (!::ot::IndexInRange(raw, dim)) {
      math::SetErrorFlag(error_flag, 1 + k);
      rows[k] = static_cast<uint64_t>(dim);
    } else {
      rows[k] = static_cast<uint64_t>(::ot::WrapIndex(raw, dim));
    }
    pos[k] = k;
  }
}

// One thread per (o, q, i) of the sorted pairs; the first q of each row's run sums the run.
__global__ void GatherRunSumKernel(const float* dy, const uint64_t* rows, const int64_t* pos, int64_t dim,
                                   int64_t count, int64_t inner, float* dx, int64_t n) {
  OT_GRID_LOOP(e, n) {
    const int64_t i = e % inner;
    const int64_t q = (e / inner) % count;
    const int64_t o = e / (inner * count);
    const uint64_t r = rows[q];
    if (r >= static_cast<uint64_t>(dim) || (q > 0 && rows[q - 1] == r)) continue;
    float acc = 0.f;
    for (int64_t u = q; u < count && rows[u] == r; ++u) acc += dy[(o * count + pos[u]) * inner + i];
    dx[(o * dim + static_cast<int64_t>(r)) * inner + i] = acc;
  }
}

// Bits of the sort keys: enough for values up to dim.
int KeyBits(int64_t dim) {
  int bits = 1;
  while (bits < 64 && (uint64_t{1} << bits) <= static_cast<uint64_t>(dim)) ++bits;
  return bits;
}

}  // namespace

void SliceScatter(const float* dy, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                  int64_t offset, float* dx, int64_t dx_numel, cudaStream_t stream) {
  if (dx_numel > 0) OT_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<size_t>(dx_numel) * sizeof(float), stream));
  if (shape.size() > static_cast<size_t>(kMaxSliceRank))
    throw UnsupportedError("SliceGrad: a slice of rank " + std::to_string(shape.size()) + " on CUDA (at most " +
                           std::to_string(kMaxSliceRank) + ")");
  SliceGeometry g;
  g.rank = static_cast<int>(shape.size());
  int64_t n = 1;
  for (int d = 0; d < g.rank; ++d) {
    g.dims[d] = shape[static_cast<size_t>(d)];
    g.strides[d] = strides[static_cast<size_t>(d)];
    n *= g.dims[d];
  }
  if (n <= 0) return;
  SliceScatterKernel<<<math::GridBlocks(n, kThreads), kThreads, 0, stream>>>(dy, g, offset, dx, n);
  OT_CUDA_CHECK_LAUNCH("SliceScatterKernel");
}

size_t GatherSortBytes(int64_t count) {
  size_t bytes = 0;
  if (count > 0)
    OT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint64_t*>(nullptr),
                                                  static_cast<uint64_t*>(nullptr), static_cast<const int64_t*>(nullptr),
                                                  static_cast<int64_t*>(nullptr), count));
  return bytes;
}

void GatherScatterAdd(const float* dy, const void* indices, bool indices_int64, int64_t outer, int64_t dim,
                      int64_t count, int64_t inner, float* dx, long long* error_flag, const GatherScratch& scratch,
                      cudaStream_t stream) {
  const int64_t dx_numel = outer * dim * inner;
  if (dx_numel > 0) OT_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<size_t>(dx_numel) * sizeof(float), stream));
  const int64_t n = outer * count * inner;
  if (n <= 0) return;
  const unsigned blocks = math::GridBlocks(count, kThreads);
  if (indices_int64) {
    GatherRowsKernel<int64_t><<<blocks, kThreads, 0, stream>>>(static_cast<const int64_t*>(indices), dim, count,
                                                               scratch.rows_in, scratch.pos_in, error_flag);
    OT_CUDA_CHECK_LAUNCH("GatherRowsKernel");
  } else {
    GatherRowsKernel<int32_t><<<blocks, kThreads, 0, stream>>>(static_cast<const int32_t*>(indices), dim, count,
                                                               scratch.rows_in, scratch.pos_in, error_flag);
    OT_CUDA_CHECK_LAUNCH("GatherRowsKernel");
  }
  size_t bytes = scratch.sort_bytes;
  OT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch.sort_temp, bytes, scratch.rows_in, scratch.rows_out,
                                                scratch.pos_in, scratch.pos_out, count, 0, KeyBits(dim), stream));
  GatherRunSumKernel<<<math::GridBlocks(n, kThreads), kThreads, 0, stream>>>(dy, scratch.rows_out, scratch.pos_out,
                                                                           dim, count, inner, dx, n);
  OT_CUDA_CHECK_LAUNCH("GatherRunSumKernel");
}

}  // namespace ot::cuda::tensor
