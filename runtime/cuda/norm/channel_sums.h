// Our own CUDA kernels for synchronised batch normalization (runtime/cuda/norm/
// sync_batch_norm_ops.cc): per-channel sums in double over X seen as [N, C, S] (one block
// per channel), the normalisation with given statistics, the running-statistic update and
// the per-element dX, on runtime/ops/math/norm_math.h and sync_bn_math.h. Float32; asynchronous.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ot::cuda::norm {

struct ChannelShape {
  int64_t n = 0, c = 0, s = 0;  // X as [N, C, S]
};

// sum0[c] = sum of (x - center[c]) (center null: 0), sum1[c] = sum of (x - center[c])^2
// where sum1 is not null.
void ChannelSums(const ChannelShape& sh, const float* x, const double* center, double* sum0, double* sum1,
                 cudaStream_t stream);
// sum_dy[c] = sum of dy, sum_dy_xmu[c] = sum of dy * (x - mean[c]).
void ChannelGradientSums(const ChannelShape& sh, const float* dy, const float* x, const float* mean, double* sum_dy,
                         double* sum_dy_xmu, cudaStream_t stream);
// y = NormalizedAffine(x, mean[c], 1 / sqrt(var[c] + eps), scale[c], shift[c]).
void NormalizeChannels(const ChannelShape& sh, const float* x, const float* mean, const float* var, float eps,
                       const float* scale, const float* shift, float* y, cudaStream_t stream);
// out[c] = RunningStatistic(running[c], batch[c], factor, momentum) for c < channels.
void UpdateRunningStatistic(int64_t channels, const float* running, const float* batch, double factor, float momentum,
                            float* out, cudaStream_t stream);
// dx = BatchNormGradElement(a[c], b[c], k[c], dy, x, mean[c]); coef = [a..., b..., k..., mean...] (4C doubles).
void ChannelAffineCombination(const ChannelShape& sh, const float* dy, const float* x, const double* coef, float* dx,
                              cudaStream_t stream);

}  // namespace ot::cuda::norm
