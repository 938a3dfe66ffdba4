// Per-channel mean and population variance of float32 data in any oneDNN layout a
// normalization sees (plain N x C x ..., channels-last, channel-blocked nChw8c/nChw16c),
// accumulated in double over two passes. oneDNN's float32 batch-normalization statistics
// drift from the exact ones by a few float32 ulps of the data's magnitude, more than
// PyTorch's; a pre-ReLU value that close to zero then flips sign and moves its whole
// gradient (issue 13 item 4), so training-mode normalizations compute their statistics
// here and hand them to oneDNN as given statistics.
#pragma once

#include <cstdint>

#include "runtime/cpu/dnnl_util.h"

namespace ot {
namespace cpu {

// mean[c] and var[c] (population variance, the sum of squared deviations over the count)
// over every element of channel c (dim 1) of `data`, described by `md` (2 or more dims,
// float32). Throws ot::UnsupportedError for a layout blocked on another dim than channels.
void ChannelStatistics(const dnnl::memory::desc& md, const float* data, float* mean, float* var);

}  // namespace cpu
}  // namespace ot
