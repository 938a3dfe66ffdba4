// The device kernels of runtime/cuda/tensor/resize.h: one thread per output element for the
// forward, one per input element for the gradient (gather-style over the transposed taps:
// deterministic).
#include "runtime/cuda/tensor/resize.h"

#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_device.h"
#include "runtime/cuda/launch_check.h"

namespace ot::cuda::tensor {
namespace {

constexpr int kThreads = 256;

__global__ void ResizeAxisKernel(ResizeAxisView a, const float* src, float* dst, int64_t n) {
  OT_GRID_LOOP(e, n) {
    const int64_t i = e % a.inner;
    const int64_t j = (e / a.inner) % a.len_out;
    const int64_t o = e / (a.inner * a.len_out);
    const float* s = src + o * a.len_in * a.inner + i;
    const int64_t* idx = a.index + j * a.taps;
    if (a.taps == 1) {
      dst[e] = s[idx[0] * a.inner];
      continue;
    }
    const float* w = a.weight + j * a.taps;
    float acc = 0.f;
    for (int t = 0; t < a.taps; ++t) acc += w[t] * s[idx[t] * a.inner];
    dst[e] = acc;
  }
}

__global__ void ResizeAxisGradKernel(ResizeAxisView a, const float* ddst, float* dsrc, int64_t n) {
  OT_GRID_LOOP(e, n) {
    const int64_t i = e % a.inner;
    const int64_t p = (e / a.inner) % a.len_in;
    const int64_t o = e / (a.inner * a.len_in);
    const float* d = ddst + o * a.len_out * a.inner + i;
    float acc = 0.f;
    for (int64_t k = a.starts[p]; k < a.starts[p + 1]; ++k) {
      const int64_t tap = a.entries[k];
      acc += a.weight[tap] * d[(tap / a.taps) * a.inner];
    }
    dsrc[e] = acc;
  }
}

}  // namespace

void ResizeAlongAxis(const ResizeAxisView& a, const float* src, float* dst, cudaStream_t stream) {
  const int64_t n = a.outer * a.len_out * a.inner;
  if (n > 0) ResizeAxisKernel<<<math::GridBlocks(n, kThreads), kThreads, 0, stream>>>(a, src, dst, n);
  OT_CUDA_CHECK_LAUNCH("ResizeAxisKernel");
}

void ResizeAlongAxisGrad(const ResizeAxisView& a, const float* ddst, float* dsrc, cudaStream_t stream) {
  const int64_t n = a.outer * a.len_in * a.inner;
  if (n > 0) ResizeAxisGradKernel<<<math::GridBlocks(n, kThreads), kThreads, 0, stream>>>(a, ddst, dsrc, n);
  OT_CUDA_CHECK_LAUNCH("ResizeAxisGradKernel");
}

}  // namespace ot::cuda::tensor
