// The weight gradient of a 2D depthwise convolution (one input and one output channel per
// group) on channel-blocked activations (nChw8c / nChw16c), as vector loops over the
// channels of a block.
//
// oneDNN 2.6-2.7 has its depthwise kernel (jit_dw) for the weight gradient only where the
// map is larger than the window's reach; on small maps (EfficientNet-B0's 5x5 depthwise
// convolutions on 4x4 and 2x2 maps, MobileNetV2's 3x3 on 2x2 at 64x64 images) it falls back
// to its reference kernel on blocked data, and conv.cc then took its generic jit kernel on
// channels-last data, which treats each channel as a group of its own: 13-36 ms a call where
// the products are 4 million multiply-adds (AVX-512 Zen 4, batch 32). That one primitive
// was a third of EfficientNet-B0's step.
//
//   dW[c, kh, kw] = sum over n, oh, ow of dY[n, c, oh, ow] * X[n, c, oh*sh + kh*dh - ph, ow*sw + kw*dw - pw]
//   dB[c]         = sum over n, oh, ow of dY[n, c, oh, ow]
//
// Each image's sums are float32 (at most one map's positions), added over the batch in
// double; threads take channel blocks.
#pragma once

#include <cstdint>
#include <vector>

namespace ot {
namespace cpu {

struct DepthwiseGeometry {
  int64_t batch = 0, channels = 0, block = 16;  // block: 8 or 16 channels a block
  int64_t in_h = 0, in_w = 0, out_h = 0, out_w = 0, kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1, pad_top = 0, pad_left = 0;
};

// x: [N, C, H, W] and dy: [N, C, OH, OW] in the geometry's channel-blocked layout;
// dw: plain [C, 1, KH, KW] (or null); db: [C] (or null).
void DepthwiseWeightGradient(const DepthwiseGeometry& g, const float* x, const float* dy, float* dw, float* db);

}  // namespace cpu
}  // namespace ot
