// Device kernels of copy_kernels.h: each output element is computed by one thread of a
// grid-stride loop from its coordinates; elements are moved as 1-, 2-, 4- or 8-byte words.
#include "runtime/cuda/tensor/copy_kernels.h"

#include <string>

#include "graph/error.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/launch_check.h"

namespace ot::cuda {
namespace {

// Shapes and strides passed by value to a kernel.
struct Dims {
  int rank = 0;
  int64_t size[kMaxCopyRank] = {};
  int64_t stride[kMaxCopyRank] = {};
};

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

// Calls fn(Word{}) with the unsigned integer type of the element size.
template <typename Fn> void BySize(size_t element_size, Fn&& fn) {
  switch (element_size) {
    case 1: fn(uint8_t{}); break;
    case 2: fn(uint16_t{}); break;
    case 4: fn(uint32_t{}); break;
    case 8: fn(uint64_t{}); break;
    default: throw Error("element size " + std::to_string(element_size) + " has no CUDA copy routine");
  }
}

__device__ int64_t LoadIndex(const void* indices, bool int64, int64_t i) {
  return int64 ? static_cast<const int64_t*>(indices)[i] : static_cast<int64_t>(static_cast<const int32_t*>(indices)[i]);
}

template <typename W>
__global__ void StridedCopyKernel(const W* __restrict__ src, Dims src_dims, int64_t offset, W* __restrict__ dst,
                                  int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, at = offset;
    for (int d = src_dims.rank - 1; d >= 0; --d) {
      const int64_t c = rest % src_dims.size[d];
      rest /= src_dims.size[d];
      at += c * src_dims.stride[d];
    }
    dst[i] = src[at];
  }
}

// Records 1 + `position` of an index out of range, unless an earlier one is recorded.
__device__ void FlagBadIndex(long long* error_flag, int64_t position) {
  if (error_flag)
    atomicCAS(reinterpret_cast<unsigned long long*>(error_flag), 0ULL, static_cast<unsigned long long>(position + 1));
}

template <typename W>
__global__ void GatherKernel(const W* __restrict__ data, const void* __restrict__ indices, bool int64, int64_t dim,
                             int64_t count, int64_t inner, W* __restrict__ out, int64_t n, long long* error_flag) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = i % inner;
    const int64_t k = (i / inner) % count;
    const int64_t o = i / (inner * count);
    int64_t idx = LoadIndex(indices, int64, k);
    if (idx < 0) idx += dim;
    const bool inside = idx >= 0 && idx < dim;
    if (!inside && o == 0 && j == 0) FlagBadIndex(error_flag, k);
    out[i] = inside ? data[(o * dim + idx) * inner + j] : W(0);
  }
}

template <typename W>
__global__ void GatherElementsKernel(const W* __restrict__ data, const void* __restrict__ indices, bool int64,
                                     Dims index_dims, int64_t axis_stride, int64_t dim, W* __restrict__ out,
                                     int64_t n, long long* error_flag) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, at = 0;
    for (int d = index_dims.rank - 1; d >= 0; --d) {
      const int64_t c = rest % index_dims.size[d];
      rest /= index_dims.size[d];
      at += c * index_dims.stride[d];
    }
    int64_t idx = LoadIndex(indices, int64, i);
    if (idx < 0) idx += dim;
    const bool inside = idx >= 0 && idx < dim;
    if (!inside) FlagBadIndex(error_flag, i);
    out[i] = inside ? data[at + idx * axis_stride] : W(0);
  }
}

// Pad: out_dims.size are the output sizes, out_dims.stride the input's row-major strides;
// in_size and begin per axis.
struct PadGeometry {
  Dims out;
  int64_t in_size[kMaxCopyRank] = {};
  int64_t begin[kMaxCopyRank] = {};
};

template <typename W>
__global__ void PadKernel(const W* __restrict__ src, PadGeometry g, int mode, const W* __restrict__ fill_device,
                          W fill, W* __restrict__ dst, int64_t n) {
  const W value = fill_device ? *fill_device : fill;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, at = 0;
    bool padding = false;
    for (int d = g.out.rank - 1; d >= 0; --d) {
      const int64_t c = rest % g.out.size[d];
      rest /= g.out.size[d];
      const int64_t dim = g.in_size[d];
      int64_t s = c - g.begin[d];
      if (s < 0 || s >= dim) {
        if (mode == static_cast<int>(PadMode::kConstant)) {
          padding = true;
          continue;
        }
        if (mode == static_cast<int>(PadMode::kEdge)) {
          s = s < 0 ? 0 : dim - 1;
        } else if (dim == 1) {
          s = 0;
        } else {  // reflect: period 2*(dim-1), mirrored about both ends
          const int64_t period = 2 * (dim - 1);
          s = ((s % period) + period) % period;
          if (s >= dim) s = period - s;
        }
      }
      at += s * g.out.stride[d];
    }
    dst[i] = padding ? value : src[at];
  }
}

void RequireRank(size_t rank, const char* what) {
  if (rank > static_cast<size_t>(kMaxCopyRank))
    throw UnsupportedError(std::string(what) + " on CUDA: " + std::to_string(rank) + " dimensions (at most " +
                           std::to_string(kMaxCopyRank) + ")");
}

}  // namespace

void StridedCopy(const void* src, const std::vector<int64_t>& src_strides, int64_t src_offset, void* dst,
                 const std::vector<int64_t>& shape, size_t element_size, cudaStream_t stream) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n == 0) return;
  // Merge dimensions the source walks contiguously and drop those of size 1.
  std::vector<int64_t> size, stride;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!size.empty() && stride.back() == src_strides[d] * shape[d]) {
      size.back() *= shape[d];
      stride.back() = src_strides[d];
      continue;
    }
    size.push_back(shape[d]);
    stride.push_back(src_strides[d]);
  }
  RequireRank(size.size(), "strided copy");
  if (size.size() == 1 && stride[0] == 1) {
    OT_CUDA_CHECK(cudaMemcpyAsync(dst, static_cast<const char*>(src) + src_offset * static_cast<int64_t>(element_size),
                                  static_cast<size_t>(n) * element_size, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  Dims dims;
  dims.rank = static_cast<int>(size.size());
  for (size_t d = 0; d < size.size(); ++d) {
    dims.size[d] = size[d];
    dims.stride[d] = stride[d];
  }
  BySize(element_size, [&](auto word) {
    using W = decltype(word);
    StridedCopyKernel<W><<<Blocks(n), kThreads, 0, stream>>>(static_cast<const W*>(src), dims, src_offset,
                                                              static_cast<W*>(dst), n);
    OT_CUDA_CHECK_LAUNCH("StridedCopyKernel");
  });
}

void Gather(const void* data, const void* indices, bool indices_int64, int64_t outer, int64_t dim, int64_t count,
            int64_t inner, size_t element_size, void* out, long long* error_flag, cudaStream_t stream) {
  const int64_t n = outer * count * inner;
  if (n == 0) return;
  BySize(element_size, [&](auto word) {
    using W = decltype(word);
    GatherKernel<W><<<Blocks(n), kThreads, 0, stream>>>(static_cast<const W*>(data), indices, indices_int64, dim,
                                                         count, inner, static_cast<W*>(out), n, error_flag);
    OT_CUDA_CHECK_LAUNCH("GatherKernel");
  });
}

void GatherElements(const void* data, const void* indices, bool indices_int64, const std::vector<int64_t>& index_shape,
                    const std::vector<int64_t>& data_strides, int64_t axis_stride, int64_t dim, size_t element_size,
                    void* out, long long* error_flag, cudaStream_t stream) {
  int64_t n = 1;
  for (int64_t d : index_shape) n *= d;
  if (n == 0) return;
  RequireRank(index_shape.size(), "GatherElements");
  Dims dims;
  dims.rank = static_cast<int>(index_shape.size());
  for (size_t d = 0; d < index_shape.size(); ++d) {
    dims.size[d] = index_shape[d];
    dims.stride[d] = data_strides[d];
  }
  BySize(element_size, [&](auto word) {
    using W = decltype(word);
    GatherElementsKernel<W><<<Blocks(n), kThreads, 0, stream>>>(static_cast<const W*>(data), indices, indices_int64,
                                                                 dims, axis_stride, dim, static_cast<W*>(out), n,
                                                                 error_flag);
    OT_CUDA_CHECK_LAUNCH("GatherElementsKernel");
  });
}

void Pad(const void* src, const std::vector<int64_t>& in_shape, const std::vector<int64_t>& out_shape,
         const std::vector<int64_t>& begin, PadMode mode, const void* fill_device, uint64_t fill_bits,
         size_t element_size, void* dst, cudaStream_t stream) {
  int64_t n = 1;
  for (int64_t d : out_shape) n *= d;
  if (n == 0) return;
  RequireRank(out_shape.size(), "Pad");
  PadGeometry g;
  g.out.rank = static_cast<int>(out_shape.size());
  int64_t stride = 1;
  for (size_t d = out_shape.size(); d-- > 0;) {
    g.out.size[d] = out_shape[d];
    g.out.stride[d] = stride;
    g.in_size[d] = in_shape[d];
    g.begin[d] = begin[d];
    stride *= in_shape[d];
  }
  BySize(element_size, [&](auto word) {
    using W = decltype(word);
    const W fill = static_cast<W>(fill_bits);
    PadKernel<W><<<Blocks(n), kThreads, 0, stream>>>(static_cast<const W*>(src), g, static_cast<int>(mode),
                                                      static_cast<const W*>(fill_device), fill, static_cast<W*>(dst), n);
    OT_CUDA_CHECK_LAUNCH("PadKernel");
  });
}

}  // namespace ot::cuda
