// BatchNormalization's per-channel statistics bookkeeping in training mode, one definition
// for the CPU kernel and the CUDA one (__host__ __device__ under nvcc; this header
// includes only integer_pow.h's macro), so the CPU tests check what the GPU computes.
#pragma once

#include "runtime/ops/math/integer_pow.h"

namespace ot {

// ONNX's running statistic, running * momentum + batch * factor * (1 - momentum) (factor:
// M / (M - 1) for PyTorch's unbiased running variance over M values, else 1).
OT_HOST_DEVICE inline float RunningStatistic(float running, float batch, double factor, float momentum) {
  return running * momentum + static_cast<float>(batch * factor) * (1.f - momentum);
}

// The population variance (sum of squares / count) of `count` values from their unbiased
// variance (sum of squares / (count - 1)), scaled in double; 0 for a single value. This is
// how the CUDA kernel gets the batch variance from cuDNN's, instead of rebuilding it from
// 1 / sqrt(var + epsilon), which loses every digit when var is far below epsilon.
OT_HOST_DEVICE inline float PopulationVariance(float unbiased, double count) {
  return count > 1 ? static_cast<float>(static_cast<double>(unbiased) * ((count - 1) / count)) : 0.f;
}

}  // namespace ot
