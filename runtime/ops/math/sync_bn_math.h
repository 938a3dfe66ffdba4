// The arithmetic of synchronised batch normalization (--sync-bn) between its sums over
// replicas, one definition for the CPU kernels (runtime/cpu/norm/sync_batchnorm.cc) and the
// CUDA ones (runtime/cuda/norm/sync_batch_norm_ops.cc): channel statistics from the
// two-pass sums, the running-statistic update, and the per-channel coefficients of dX.
// Host code (the sums arrive on the host to go over the network); the per-element dX is
// out = a * dy + b * (x - mean) + k (OT_HOST_DEVICE, for the CUDA kernel too).
#pragma once

#include <algorithm>
#include <cmath>

#include "runtime/ops/math/batchnorm_math.h"  // RunningStatistic, OT_HOST_DEVICE

namespace ot {

// Mean and population variance from the centre used by the second pass and that pass's
// sums over all replicas: dev = sum (x - centre), sq = sum (x - centre)^2 over `count` values.
inline void MeanVarFromCenteredSums(double center, double dev, double sq, double count, float* mean, float* var) {
  *mean = static_cast<float>(center + dev / count);
  *var = static_cast<float>(std::max((sq - dev * dev / count) / count, 0.0));
}

// dX = scale * invstd * (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy (x - mean))) as
// a * dy + b * (x - mean) + k, from the sums over all replicas.
struct BatchNormGradCoefficients {
  double a = 0, b = 0, k = 0;
};
inline BatchNormGradCoefficients BatchNormGradCoefficientsFor(double scale, double invstd, double sum_dy,
                                                               double sum_dy_xmu, double count) {
  BatchNormGradCoefficients c;
  c.a = scale * invstd;
  c.b = -c.a * invstd * invstd * (sum_dy_xmu / count);
  c.k = -c.a * (sum_dy / count);
  return c;
}
OT_HOST_DEVICE inline float BatchNormGradElement(double a, double b, double k, float dy, float x, double mean) {
  return static_cast<float>(a * dy + b * (x - mean) + k);
}

}  // namespace ot
