// Our own device kernels for ops that move elements without computing on them (the
// CUDA data-movement ops of runtime/cuda/tensor/shape_ops.cc and the broadcast of Gemm's C):
// a strided gather-copy, Gather, GatherElements and Pad. They work on raw elements of 1,
// 2, 4 or 8 bytes, since these ops never look at values. All launches are asynchronous
// on the given stream. Shapes and strides are in elements.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ot::cuda {

// Most dimensions a launch handles after merging contiguous ones.
constexpr int kMaxCopyRank = 12;

// dst (dense, row-major over `shape`) = src[src_offset + sum_d i_d * src_strides[d]].
// Transpose, Slice, Tile, Expand and broadcasts are all this copy. Throws
// ot::UnsupportedError when more than kMaxCopyRank dimensions remain after merging.
void StridedCopy(const void* src, const std::vector<int64_t>& src_strides, int64_t src_offset, void* dst,
                 const std::vector<int64_t>& shape, size_t element_size, cudaStream_t stream);

// out[o, k, i] = data[o, indices[k], i] for data seen as [outer, dim, inner]; negative
// indices count from the end; an index outside [-dim, dim) yields zeros and, when
// `error_flag` is not null, sets it (if still 0) to 1 + its position in `indices`.
void Gather(const void* data, const void* indices, bool indices_int64, int64_t outer, int64_t dim, int64_t count,
            int64_t inner, size_t element_size, void* out, long long* error_flag, cudaStream_t stream);

// out[c] = data[sum_{d != axis} c_d * data_strides[d] + indices[c] * axis_stride] for each
// coordinate c of the dense `index_shape`; data_strides[axis] must be 0. Indices outside
// [-dim, dim) yield zeros and set `error_flag` as Gather does.
void GatherElements(const void* data, const void* indices, bool indices_int64, const std::vector<int64_t>& index_shape,
                    const std::vector<int64_t>& data_strides, int64_t axis_stride, int64_t dim, size_t element_size,
                    void* out, long long* error_flag, cudaStream_t stream);

enum class PadMode { kConstant = 0, kReflect = 1, kEdge = 2 };

// Pads (or, with negative pads, crops) `src` of in_shape into dense `dst` of out_shape;
// begin[d] is the number of elements added before axis d. Constant padding takes the
// element at `fill_device` when it is not null (a value that changes between runs),
// else the low element_size bytes of `fill_bits`.
void Pad(const void* src, const std::vector<int64_t>& in_shape, const std::vector<int64_t>& out_shape,
         const std::vector<int64_t>& begin, PadMode mode, const void* fill_device, uint64_t fill_bits,
         size_t element_size, void* dst, cudaStream_t stream);

}  // namespace ot::cuda
