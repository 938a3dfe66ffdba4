// Device kernels of cudnn_kernels.h: per-channel batch-norm statistics bookkeeping,
// explicit spatial padding, and pooling over windows cuDNN cannot describe.
#include <cfloat>

#include "runtime/cuda/cudnn_kernels.h"
#include "runtime/ops/math/batchnorm_math.h"
#include "runtime/ops/shapes/window_taps.h"

namespace ot::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

// Blocks for a grid-stride loop over `n` items.
int GridBlocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < (1 << 20) ? blocks : (1 << 20));
}

__device__ int64_t Volume(const int64_t* d) { return d[0] * d[1] * d[2]; }

// Row-major position of `flat` within dims[0] x dims[1] x dims[2].
__device__ void Unravel(int64_t flat, const int64_t* dims, int64_t* idx) {
  idx[2] = flat % dims[2];
  flat /= dims[2];
  idx[1] = flat % dims[1];
  idx[0] = flat / dims[1];
}

__global__ void PadSpatialKernel(SpatialGeometry g, float fill, const float* x, float* padded) {
  const int64_t out_size = Volume(g.out), in_size = Volume(g.in);
  const int64_t total = g.planes * out_size;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t plane = i / out_size;
    int64_t o[kMaxSpatialDims];
    Unravel(i % out_size, g.out, o);
    int64_t src = 0;
    bool inside = true;
    for (int d = 0; d < kMaxSpatialDims; ++d) {
      const int64_t at = o[d] - g.pad_begin[d];
      inside = inside && at >= 0 && at < g.in[d];
      src = src * g.in[d] + at;
    }
    padded[i] = inside ? x[plane * in_size + src] : fill;
  }
}

__global__ void CropSpatialKernel(SpatialGeometry g, const float* padded_grad, float* x_grad) {
  const int64_t out_size = Volume(g.out), in_size = Volume(g.in);
  const int64_t total = g.planes * in_size;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t plane = i / in_size;
    int64_t idx[kMaxSpatialDims];
    Unravel(i % in_size, g.in, idx);
    int64_t src = 0;
    for (int d = 0; d < kMaxSpatialDims; ++d) src = src * g.out[d] + idx[d] + g.pad_begin[d];
    x_grad[i] = padded_grad[plane * out_size + src];
  }
}

// Visits the taps of output position `o` that lie inside the input: fn(input offset).
template <typename Fn>
__device__ void ForEachTap(const SpatialGeometry& g, const int64_t* o, Fn fn) {
  for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
    const int64_t p0 = WindowTap(o[0], k0, g.stride[0], g.pad_begin[0], g.dilation[0]);
    if (p0 < 0 || p0 >= g.in[0]) continue;
    for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
      const int64_t p1 = WindowTap(o[1], k1, g.stride[1], g.pad_begin[1], g.dilation[1]);
      if (p1 < 0 || p1 >= g.in[1]) continue;
      for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
        const int64_t p2 = WindowTap(o[2], k2, g.stride[2], g.pad_begin[2], g.dilation[2]);
        if (p2 < 0 || p2 >= g.in[2]) continue;
        fn((p0 * g.in[1] + p1) * g.in[2] + p2);
      }
    }
  }
}

// The divisor of an average window: its size, or the taps inside the input.
__device__ float AverageDivisor(PoolMode mode, const SpatialGeometry& g, const int64_t* o) {
  if (mode == PoolMode::kAverageIncludePad) return static_cast<float>(Volume(g.kernel));
  int64_t count = 0;
  ForEachTap(g, o, [&](int64_t) { ++count; });
  return static_cast<float>(count);
}

// Offset of the first maximum of the window at `o` within the plane, or -1 (no tap).
__device__ int64_t ArgMax(const SpatialGeometry& g, const int64_t* o, const float* plane_x, float* best_value) {
  int64_t best = -1;
  float value = -FLT_MAX;
  ForEachTap(g, o, [&](int64_t at) {
    const float v = plane_x[at];
    if (best < 0 || v > value) {
      best = at;
      value = v;
    }
  });
  *best_value = value;
  return best;
}

__global__ void PoolForwardKernel(PoolMode mode, SpatialGeometry g, const float* x, float* y) {
  const int64_t out_size = Volume(g.out), in_size = Volume(g.in);
  const int64_t total = g.planes * out_size;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* plane_x = x + (i / out_size) * in_size;
    int64_t o[kMaxSpatialDims];
    Unravel(i % out_size, g.out, o);
    if (mode == PoolMode::kMax) {
      float value = 0.f;
      ArgMax(g, o, plane_x, &value);
      y[i] = value;
      continue;
    }
    float sum = 0.f;
    ForEachTap(g, o, [&](int64_t at) { sum += plane_x[at]; });
    const float divisor = AverageDivisor(mode, g, o);
    y[i] = divisor > 0.f ? sum / divisor : 0.f;
  }
}

// Gather-style: one thread per input element sums what the windows with a tap on it
// send back, visiting them in increasing order (ForEachWindowCovering), so dX is the same
// every run (no atomics). Max windows send dY to their first maximum only.
__global__ void PoolBackwardKernel(PoolMode mode, SpatialGeometry g, const float* x, const float* dy, float* dx) {
  const int64_t out_size = Volume(g.out), in_size = Volume(g.in);
  const int64_t total = g.planes * in_size;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t plane = i / in_size, here = i % in_size;
    const float* plane_x = x + plane * in_size;
    const float* plane_dy = dy + plane * out_size;
    int64_t p[kMaxSpatialDims];
    Unravel(here, g.in, p);
    float sum = 0.f;
    ForEachWindowCovering(p[0], g.kernel[0], g.stride[0], g.pad_begin[0], g.dilation[0], g.out[0], [&](int64_t o0, int64_t) {
      ForEachWindowCovering(p[1], g.kernel[1], g.stride[1], g.pad_begin[1], g.dilation[1], g.out[1], [&](int64_t o1, int64_t) {
        ForEachWindowCovering(p[2], g.kernel[2], g.stride[2], g.pad_begin[2], g.dilation[2], g.out[2], [&](int64_t o2, int64_t) {
          const int64_t o[kMaxSpatialDims] = {o0, o1, o2};
          const float grad = plane_dy[(o0 * g.out[1] + o1) * g.out[2] + o2];
          if (mode == PoolMode::kMax) {
            float value = 0.f;
            if (ArgMax(g, o, plane_x, &value) == here) sum += grad;
          } else {
            const float divisor = AverageDivisor(mode, g, o);
            if (divisor > 0.f) sum += grad / divisor;
          }
        });
      });
    });
    dx[i] = sum;
  }
}

__global__ void BatchNormFinishStatsKernel(int64_t channels, double count, bool unbiased_running, float momentum,
                                           const float* batch_mean, const float* unbiased_var,
                                           const float* running_mean_in, const float* running_var_in,
                                           float* running_mean_out, float* running_var_out, float* saved_var) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const float var = PopulationVariance(unbiased_var[c], count);
  const float running_batch_var = unbiased_running && count > 1 ? unbiased_var[c] : var;
  const float rm = running_mean_in[c];
  const float rv = running_var_in[c];
  if (running_mean_out) running_mean_out[c] = RunningStatistic(rm, batch_mean[c], 1.0, momentum);
  if (running_var_out) running_var_out[c] = RunningStatistic(rv, running_batch_var, 1.0, momentum);
  if (saved_var) saved_var[c] = var;
}

__global__ void BatchNormInvStdKernel(int64_t channels, float epsilon, const float* var, float* inv_std) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  inv_std[c] = 1.f / sqrtf(var[c] + epsilon);
}

__global__ void ActivationGradFromOutputKernel(OutputActivation act, int64_t n, const float* dy, const float* y,
                                               float* dx) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = y[i];
    dx[i] = act == OutputActivation::kSigmoid ? dy[i] * v * (1.f - v) : dy[i] * (1.f - v * v);
  }
}

}  // namespace

cudaError_t ActivationGradFromOutput(cudaStream_t stream, OutputActivation act, int64_t n, const float* dy,
                                     const float* y, float* dx) {
  if (n == 0) return cudaSuccess;
  ActivationGradFromOutputKernel<<<GridBlocks(n), kThreads, 0, stream>>>(act, n, dy, y, dx);
  return cudaGetLastError();
}

cudaError_t PadSpatial(cudaStream_t stream, const SpatialGeometry& g, float fill, const float* x, float* padded) {
  const int64_t total = g.planes * g.out[0] * g.out[1] * g.out[2];
  if (total == 0) return cudaSuccess;
  PadSpatialKernel<<<GridBlocks(total), kThreads, 0, stream>>>(g, fill, x, padded);
  return cudaGetLastError();
}

cudaError_t CropSpatial(cudaStream_t stream, const SpatialGeometry& g, const float* padded_grad, float* x_grad) {
  const int64_t total = g.planes * g.in[0] * g.in[1] * g.in[2];
  if (total == 0) return cudaSuccess;
  CropSpatialKernel<<<GridBlocks(total), kThreads, 0, stream>>>(g, padded_grad, x_grad);
  return cudaGetLastError();
}

cudaError_t PoolForward(cudaStream_t stream, PoolMode mode, const SpatialGeometry& g, const float* x, float* y) {
  const int64_t total = g.planes * g.out[0] * g.out[1] * g.out[2];
  if (total == 0) return cudaSuccess;
  PoolForwardKernel<<<GridBlocks(total), kThreads, 0, stream>>>(mode, g, x, y);
  return cudaGetLastError();
}

cudaError_t PoolBackward(cudaStream_t stream, PoolMode mode, const SpatialGeometry& g, const float* x,
                         const float* dy, float* dx) {
  const int64_t in_total = g.planes * g.in[0] * g.in[1] * g.in[2];
  if (in_total == 0) return cudaSuccess;
  if (g.out[0] * g.out[1] * g.out[2] == 0)
    return cudaMemsetAsync(dx, 0, static_cast<size_t>(in_total) * sizeof(float), stream);
  PoolBackwardKernel<<<GridBlocks(in_total), kThreads, 0, stream>>>(mode, g, x, dy, dx);
  return cudaGetLastError();
}

cudaError_t BatchNormFinishStats(cudaStream_t stream, int64_t channels, double count, bool unbiased_running,
                                 float momentum, const float* batch_mean, const float* unbiased_var,
                                 const float* running_mean_in, const float* running_var_in, float* running_mean_out,
                                 float* running_var_out, float* saved_var) {
  if (channels == 0) return cudaSuccess;
  BatchNormFinishStatsKernel<<<Blocks(channels), kThreads, 0, stream>>>(
      channels, count, unbiased_running, momentum, batch_mean, unbiased_var, running_mean_in, running_var_in,
      running_mean_out, running_var_out, saved_var);
  return cudaGetLastError();
}

cudaError_t BatchNormInvStd(cudaStream_t stream, int64_t channels, float epsilon, const float* var, float* inv_std) {
  if (channels == 0) return cudaSuccess;
  BatchNormInvStdKernel<<<Blocks(channels), kThreads, 0, stream>>>(channels, epsilon, var, inv_std);
  return cudaGetLastError();
}

}  // namespace ot::cuda
