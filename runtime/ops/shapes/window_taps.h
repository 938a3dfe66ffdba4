// The tap arithmetic of a sliding window along one spatial dimension, host and device
// (__host__ __device__ under nvcc; this header includes only <cstdint> and integer_pow.h's
// macro), so the CPU tests check the index math the CUDA pooling kernels run. The window
// geometry itself (pads, output sizes, ceil_mode) comes from window_geometry.h.
//
// Window `o` has its taps at input positions o * stride - pad + k * dilation, k in
// [0, kernel). A gradient written gather-style reads, for each input position, the
// windows that have a tap on it, in a fixed order: no atomics, the same sums every run.
#pragma once

#include <cstdint>

#include "runtime/ops/math/integer_pow.h"

namespace ot {

// Input position of tap `k` of window `o`.
OT_HOST_DEVICE inline int64_t WindowTap(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t dilation) {
  return o * stride - pad + k * dilation;
}

// Calls fn(o, k) for every window o in [0, out) whose tap k lands on input position `p`,
// in increasing o (stride, dilation and kernel positive).
template <typename Fn>
OT_HOST_DEVICE inline void ForEachWindowCovering(int64_t p, int64_t kernel, int64_t stride, int64_t pad,
                                                 int64_t dilation, int64_t out, Fn fn) {
  // o * stride = p + pad - k * dilation: larger k, smaller o, so k runs downwards.
  for (int64_t k = kernel - 1; k >= 0; --k) {
    const int64_t at = p + pad - k * dilation;
    if (at < 0) continue;
    if (at % stride != 0) continue;
    const int64_t o = at / stride;
    if (o >= out) break;  // smaller k only moves further right
    fn(o, k);
  }
}

}  // namespace ot
