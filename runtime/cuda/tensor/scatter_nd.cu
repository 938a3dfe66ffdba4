// The device kernels of runtime/cuda/tensor/scatter_nd.h: one thread per element moved.
#include "runtime/cuda/tensor/scatter_nd.h"

#include "graph/error.h"
#include "runtime/cuda/math_device.h"
#include "runtime/ops/math/index_math.h"
#include "runtime/cuda/launch_check.h"

namespace ot::cuda::tensor {
namespace {

constexpr int kThreads = 256;

template <typename Elem, typename Index>
__global__ void ScatterNDReplaceKernel(ScatterNDGeometry g, const Index* indices, const Elem* updates, Elem* out,
                                       long long* error_flag, int64_t n) {
  OT_GRID_LOOP(e, n) {
    const int64_t t = e / g.slice, i = e - t * g.slice;
    int64_t off = 0;
    bool ok = true;
    for (int q = 0; q < g.k; ++q) {
      const int64_t raw = static_cast<int64_t>(indices[t * g.k + q]);
      if (!::ot::IndexInRange(raw, g.dims[q])) {
        ok = false;
        break;
      }
      off += ::ot::WrapIndex(raw, g.dims[q]) * g.strides[q];
    }
    if (!ok) {
      math::SetErrorFlag(error_flag, 1 + t);
      continue;
    }
    out[off + i] = updates[e];
  }
}

// Offset of tuple t's slice (within its batch), or -1 when an index is out of range.
template <typename Index>
__device__ int64_t TupleOffset(const ScatterNDGeometry& g, const Index* indices, int64_t t) {
  int64_t off = 0;
  for (int q = 0; q < g.k; ++q) {
    const int64_t raw = static_cast<int64_t>(indices[t * g.k + q]);
    if (!::ot::IndexInRange(raw, g.dims[q])) return -1;
    off += ::ot::WrapIndex(raw, g.dims[q]) * g.strides[q];
  }
  return off;
}

template <typename Elem, typename Index>
__global__ void GatherNDKernel(ScatterNDGeometry g, const Elem* data, const Index* indices, Elem* out,
                               long long* error_flag, int64_t n) {
  OT_GRID_LOOP(e, n) {
    const int64_t t = e / g.slice, i = e - t * g.slice;  // t counts tuples over all batches
    const int64_t off = TupleOffset(g, indices, t);
    if (off < 0) {
      math::SetErrorFlag(error_flag, 1 + t);
      out[e] = Elem(0);
      continue;
    }
    out[e] = data[(t / g.tuples) * g.batch_stride + off + i];
  }
}

template <typename Index>
void LaunchGather(const ScatterNDGeometry& g, const void* data, const Index* indices, void* out, size_t esize,
                  long long* error_flag, cudaStream_t stream) {
  const int64_t n = g.batch * g.tuples * g.slice;
  if (n <= 0) return;
  const unsigned blocks = math::GridBlocks(n, kThreads);
  switch (esize) {
    case 1:
      GatherNDKernel<<<blocks, kThreads, 0, stream>>>(g, static_cast<const uint8_t*>(data), indices,
                                                      static_cast<uint8_t*>(out), error_flag, n);
      OT_CUDA_CHECK_LAUNCH("GatherNDKernel");
      break;
    case 2:
      GatherNDKernel<<<blocks, kThreads, 0, stream>>>(g, static_cast<const uint16_t*>(data), indices,
                                                      static_cast<uint16_t*>(out), error_flag, n);
      OT_CUDA_CHECK_LAUNCH("GatherNDKernel");
      break;
    case 4:
      GatherNDKernel<<<blocks, kThreads, 0, stream>>>(g, static_cast<const uint32_t*>(data), indices,
                                                      static_cast<uint32_t*>(out), error_flag, n);
      OT_CUDA_CHECK_LAUNCH("GatherNDKernel");
      break;
    case 8:
      GatherNDKernel<<<blocks, kThreads, 0, stream>>>(g, static_cast<const uint64_t*>(data), indices,
                                                      static_cast<uint64_t*>(out), error_flag, n);
      OT_CUDA_CHECK_LAUNCH("GatherNDKernel");
      break;
    default:
      throw UnsupportedError("GatherND: elements of " + std::to_string(esize) + " bytes on CUDA");
  }
}

template <typename Index>
void Launch(const ScatterNDGeometry& g, const Index* indices, const void* updates, void* out, size_t esize,
            long long* error_flag, cudaStream_t stream) {
  const int64_t n = g.tuples * g.slice;
  if (n <= 0) return;
  const unsigned blocks = math::GridBlocks(n, kThreads);
  switch (esize) {
    case 1:
      ScatterNDReplaceKernel<<<blocks, kThreads, 0, stream>>>(g, indices, static_cast<const uint8_t*>(updates),
                                                              static_cast<uint8_t*>(out), error_flag, n);
      OT_CUDA_CHECK_LAUNCH("ScatterNDReplaceKernel");
      break;
    case 2:
      ScatterNDReplaceKernel<<<blocks, kThreads, 0, stream>>>(g, indices, static_cast<const uint16_t*>(updates),
                                                              static_cast<uint16_t*>(out), error_flag, n);
      OT_CUDA_CHECK_LAUNCH("ScatterNDReplaceKernel");
      break;
    case 4:
      ScatterNDReplaceKernel<<<blocks, kThreads, 0, stream>>>(g, indices, static_cast<const uint32_t*>(updates),
                                                              static_cast<uint32_t*>(out), error_flag, n);
      OT_CUDA_CHECK_LAUNCH("ScatterNDReplaceKernel");
      break;
    case 8:
      ScatterNDReplaceKernel<<<blocks, kThreads, 0, stream>>>(g, indices, static_cast<const uint64_t*>(updates),
                                                              static_cast<uint64_t*>(out), error_flag, n);
      OT_CUDA_CHECK_LAUNCH("ScatterNDReplaceKernel");
      break;
    default:
      throw UnsupportedError("ScatterND: elements of " + std::to_string(esize) + " bytes on CUDA");
  }
}

}  // namespace

void ScatterNDReplace(const ScatterNDGeometry& g, const void* indices, bool indices_int64, const void* updates,
                      void* out, size_t element_size, long long* error_flag, cudaStream_t stream) {
  if (indices_int64)
    Launch(g, static_cast<const int64_t*>(indices), updates, out, element_size, error_flag, stream);
  else
    Launch(g, static_cast<const int32_t*>(indices), updates, out, element_size, error_flag, stream);
}

void GatherNDCopy(const ScatterNDGeometry& g, const void* data, const void* indices, bool indices_int64, void* out,
                  size_t element_size, long long* error_flag, cudaStream_t stream) {
  if (indices_int64)
    LaunchGather(g, data, static_cast<const int64_t*>(indices), out, element_size, error_flag, stream);
  else
    LaunchGather(g, data, static_cast<const int32_t*>(indices), out, element_size, error_flag, stream);
}

}  // namespace ot::cuda::tensor
