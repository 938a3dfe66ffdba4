// The device kernels of runtime/cuda/tensor/index_grad.h, on the index arithmetic of
// runtime/ops/math/index_math.h (the CPU kernels' own).
#include "runtime/cuda/tensor/index_grad.h"

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

template <typename Index>
__global__ void GatherScatterAddKernel(const float* dy, const Index* indices, int64_t dim, int64_t count,
                                       int64_t inner, float* dx, long long* error_flag, int64_t n) {
  OT_GRID_LOOP(e, n) {
    const int64_t i = e % inner;
    const int64_t k = (e / inner) % count;
    const int64_t o = e / (inner * count);
    const int64_t raw = static_cast<int64_t>(indices[k]);
    if (!::ot::IndexInRange(raw, dim)) {
      math::SetErrorFlag(error_flag, 1 + k);
      continue;
    }
    atomicAdd(dx + (o * dim + ::ot::WrapIndex(raw, dim)) * inner + i, dy[e]);
  }
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

void GatherScatterAdd(const float* dy, const void* indices, bool indices_int64, int64_t outer, int64_t dim,
                      int64_t count, int64_t inner, float* dx, long long* error_flag, cudaStream_t stream) {
  const int64_t dx_numel = outer * dim * inner;
  if (dx_numel > 0) OT_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<size_t>(dx_numel) * sizeof(float), stream));
  const int64_t n = outer * count * inner;
  if (n <= 0) return;
  const unsigned blocks = math::GridBlocks(n, kThreads);
  if (indices_int64) {
    GatherScatterAddKernel<int64_t><<<blocks, kThreads, 0, stream>>>(dy, static_cast<const int64_t*>(indices), dim,
                                                                     count, inner, dx, error_flag, n);
    OT_CUDA_CHECK_LAUNCH("GatherScatterAddKernel");
  } else {
    GatherScatterAddKernel<int32_t><<<blocks, kThreads, 0, stream>>>(dy, static_cast<const int32_t*>(indices), dim,
                                                                     count, inner, dx, error_flag, n);
    OT_CUDA_CHECK_LAUNCH("GatherScatterAddKernel");
  }
}

}  // namespace ot::cuda::tensor
