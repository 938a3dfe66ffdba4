// The device kernels of runtime/cuda/norm/channel_sums.h.
#include "runtime/cuda/norm/channel_sums.h"

#include "runtime/cuda/math_device.h"
#include "runtime/ops/math/norm_math.h"
#include "runtime/ops/math/sync_bn_math.h"
#include "runtime/cuda/launch_check.h"

namespace ot::cuda::norm {
namespace {

constexpr int kThreads = 256;  // a power of two

__device__ double BlockSum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  const double t = shared[0];
  __syncthreads();
  return t;
}

// Element e of channel c: x[(n * C + c) * S + s] with e = n * S + s.
__device__ inline int64_t At(const ChannelShape& sh, int64_t c, int64_t e) {
  const int64_t n = e / sh.s, s = e - n * sh.s;
  return (n * sh.c + c) * sh.s + s;
}

__global__ void ChannelSumsKernel(ChannelShape sh, const float* x, const double* center, double* sum0, double* sum1) {
  __shared__ double shared[kThreads];
  const int64_t per_channel = sh.n * sh.s;
  for (int64_t c = blockIdx.x; c < sh.c; c += gridDim.x) {
    const double m = center ? center[c] : 0.0;
    double a = 0, b = 0;
    for (int64_t e = threadIdx.x; e < per_channel; e += kThreads) {
      const double d = x[At(sh, c, e)] - m;
      a += d;
      b += d * d;
    }
    a = BlockSum(a, shared);
    if (sum1) b = BlockSum(b, shared);
    if (threadIdx.x == 0) {
      sum0[c] = a;
      if (sum1) sum1[c] = b;
    }
  }
}

__global__ void ChannelGradientSumsKernel(ChannelShape sh, const float* dy, const float* x, const float* mean,
                                          double* sum_dy, double* sum_dy_xmu) {
  __shared__ double shared[kThreads];
  const int64_t per_channel = sh.n * sh.s;
  for (int64_t c = blockIdx.x; c < sh.c; c += gridDim.x) {
    const double m = mean[c];
    double a = 0, b = 0;
    for (int64_t e = threadIdx.x; e < per_channel; e += kThreads) {
      const int64_t i = At(sh, c, e);
      a += dy[i];
      b += static_cast<double>(dy[i]) * (x[i] - m);
    }
    a = BlockSum(a, shared);
    b = BlockSum(b, shared);
    if (threadIdx.x == 0) {
      sum_dy[c] = a;
      sum_dy_xmu[c] = b;
    }
  }
}

__global__ void NormalizeKernel(ChannelShape sh, const float* x, const float* mean, const float* var, float eps,
                                const float* scale, const float* shift, float* y, int64_t total) {
  OT_GRID_LOOP(i, total) {
    const int64_t c = (i / sh.s) % sh.c;
    const float inv = static_cast<float>(::ot::InvStdDev(var[c], eps));
    y[i] = ::ot::NormalizedAffine(x[i], mean[c], inv, scale[c], shift[c]);
  }
}

__global__ void RunningKernel(int64_t channels, const float* running, const float* batch, double factor,
                              float momentum, float* out) {
  OT_GRID_LOOP(c, channels) out[c] = ::ot::RunningStatistic(running[c], batch[c], factor, momentum);
}

__global__ void AffineKernel(ChannelShape sh, const float* dy, const float* x, const double* coef, float* dx,
                             int64_t total) {
  OT_GRID_LOOP(i, total) {
    const int64_t c = (i / sh.s) % sh.c;
    dx[i] = ::ot::BatchNormGradElement(coef[c], coef[sh.c + c], coef[2 * sh.c + c], dy[i], x[i], coef[3 * sh.c + c]);
  }
}

unsigned ChannelBlocks(int64_t c) { return static_cast<unsigned>(c < 65535 ? c : 65535); }

}  // namespace

void ChannelSums(const ChannelShape& sh, const float* x, const double* center, double* sum0, double* sum1,
                 cudaStream_t stream) {
  if (sh.c > 0) ChannelSumsKernel<<<ChannelBlocks(sh.c), kThreads, 0, stream>>>(sh, x, center, sum0, sum1);
  OT_CUDA_CHECK_LAUNCH("ChannelSumsKernel");
}

void ChannelGradientSums(const ChannelShape& sh, const float* dy, const float* x, const float* mean, double* sum_dy,
                         double* sum_dy_xmu, cudaStream_t stream) {
  if (sh.c > 0)
    ChannelGradientSumsKernel<<<ChannelBlocks(sh.c), kThreads, 0, stream>>>(sh, dy, x, mean, sum_dy, sum_dy_xmu);
  OT_CUDA_CHECK_LAUNCH("ChannelGradientSumsKernel");
}

void NormalizeChannels(const ChannelShape& sh, const float* x, const float* mean, const float* var, float eps,
                       const float* scale, const float* shift, float* y, cudaStream_t stream) {
  const int64_t total = sh.n * sh.c * sh.s;
  if (total > 0)
    NormalizeKernel<<<math::GridBlocks(total, kThreads), kThreads, 0, stream>>>(sh, x, mean, var, eps, scale, shift,
                                                                                y, total);
  OT_CUDA_CHECK_LAUNCH("NormalizeKernel");
}

void UpdateRunningStatistic(int64_t channels, const float* running, const float* batch, double factor, float momentum,
                            float* out, cudaStream_t stream) {
  if (channels > 0)
    RunningKernel<<<math::GridBlocks(channels, kThreads), kThreads, 0, stream>>>(channels, running, batch, factor,
                                                                                 momentum, out);
  OT_CUDA_CHECK_LAUNCH("RunningKernel");
}

void ChannelAffineCombination(const ChannelShape& sh, const float* dy, const float* x, const double* coef, float* dx,
                              cudaStream_t stream) {
  const int64_t total = sh.n * sh.c * sh.s;
  if (total > 0)
    AffineKernel<<<math::GridBlocks(total, kThreads), kThreads, 0, stream>>>(sh, dy, x, coef, dx, total);
  OT_CUDA_CHECK_LAUNCH("AffineKernel");
}

}  // namespace ot::cuda::norm
