// Per-channel mean and population variance of float32 data in any oneDNN layout a
// normalization sees (plain N x C x ..., channels-last, channel-blocked nChw8c/nChw16c),
// accumulated in double over two passes. oneDNN's float32 batch-normalization statistics
// drift from the exact ones by a few float32 ulps of the data's magnitude, more than
// PyTorch's; a pre-ReLU value that close to zero then flips sign and moves its whole
// gradient (issue 13 item 4), so training-mode normalizations compute their statistics
// here and hand them to oneDNN as given statistics.
#pragma once

#include <cstdint>

#include "runtime/cpu/layout/dnnl_util.h"

namespace ot {
namespace cpu {

// mean[c] and var[c] (population variance, the sum of squared deviations over the count)
// over every element of channel c (dim 1) of `data`, described by `md` (2 or more dims,
// float32). Throws ot::UnsupportedError for a layout blocked on another dim than channels.
void ChannelStatistics(const dnnl::memory::desc& md, const float* data, float* mean, float* var);

// The pieces of the same statistics for synchronised batch normalization, which sums them
// over replicas between the passes (runtime/cpu/norm/sync_batchnorm.cc). Same layouts; per
// channel c, in double:
// Elements per channel (N x spatial size).
int64_t ChannelCount(const dnnl::memory::desc& md);
// center null: sum[c] = sum of x (sq unused). Else sum[c] = sum of (x - center[c]) and
// sq[c] = sum of (x - center[c])^2.
void ChannelSums(const dnnl::memory::desc& md, const float* data, const double* center, double* sum, double* sq);
// Over dy and x of the same layout md: sum_dy[c] = sum of dy, sum_dy_xmu[c] = sum of
// dy * (x - mean[c]).
void ChannelGradientSums(const dnnl::memory::desc& md, const float* dy, const float* x, const double* mean,
                         double* sum_dy, double* sum_dy_xmu);
// out = a[c] * dy + b[c] * (x - center[c]) + k[c] element-wise (computed in double, stored as float);
// the padding lanes of a channel-blocked layout get 0.
void ChannelAffineCombination(const dnnl::memory::desc& md, const float* dy, const float* x, const double* center,
                              const double* a, const double* b, const double* k, float* out);

}  // namespace cpu
}  // namespace ot
