// Our own CUDA kernels for Resize/Upsample and ResizeGrad (runtime/cuda/tensor/
// resize_ops.cc): one axis at a time, as the CPU kernel, with the per-axis input taps and
// weights that runtime/ops/shapes/index_shapes.h's PlanResize computes for both devices (copied to
// the device once per plan). Float32; asynchronous on the given stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ot::cuda::tensor {

// One axis seen as [outer, len, inner]: len_in -> len_out with `taps` (index, weight) pairs
// per output index, index/weight on the device (len_out * taps each).
struct ResizeAxisView {
  int64_t outer = 0, inner = 0, len_in = 0, len_out = 0;
  int taps = 1;
  const int64_t* index = nullptr;
  const float* weight = nullptr;
  // The taps transposed (TransposeResizeTaps, runtime/ops/shapes/index_shapes.h): the taps
  // reading input position p are entries[starts[p] .. starts[p + 1]), in increasing order.
  const int64_t* starts = nullptr;
  const int64_t* entries = nullptr;
};

// dst[o, j, i] = sum_t weight[j, t] * src[o, index[j, t], i] (one tap: a copy).
void ResizeAlongAxis(const ResizeAxisView& a, const float* src, float* dst, cudaStream_t stream);

// The transpose: dsrc[o, p, i] = sum of weight[j, t] * ddst[o, j, i] over the taps (j, t) with
// index[j, t] == p, gather-style (a thread per dsrc element, the taps in the order of
// `entries`): the same sums every run.
void ResizeAlongAxisGrad(const ResizeAxisView& a, const float* ddst, float* dsrc, cudaStream_t stream);

}  // namespace ot::cuda::tensor
