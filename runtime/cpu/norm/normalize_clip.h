// Batch normalization's output with a clip in the same pass (BatchNormTraining with
// clip_min / clip_max, graph/passes/fusion.h's FuseBatchNormClip: MobileNetV2's ReLU6):
//   y[n, c, s] = min(max(scale[c] * (x[n, c, s] - mean[c]) + shift[c], lo), hi),
//   scale[c] = gamma[c] / sqrt(var[c] + epsilon)
// as oneDNN's batch normalization computes the affine part, over plain (N x C x spatial)
// or channel-blocked (nChw8c / nChw16c) float32 data. lo <= 0 <= hi keeps blocked padding 0.
#pragma once

#include <cstdint>

namespace ot {
namespace cpu {

struct NormalizeClipShape {
  int64_t batch = 0, channels = 0, spatial = 0;
  int64_t block = 1;  // 1: plain; 8 or 16: channel-blocked
};

void NormalizeClip(const NormalizeClipShape& s, const float* x, float* y, const float* mean, const float* var,
                   const float* gamma, const float* beta, float epsilon, float lo, float hi);

// y[i] = min(max(y[i], lo), hi) over n values (any layout, lo <= 0 <= hi).
void ClipInPlace(float* y, int64_t n, float lo, float hi);

}  // namespace cpu
}  // namespace ot
