// The per-element formulas of the row normalisations (LayerNormalization, InstanceNormalization)
// and their input gradients, one definition for the CPU kernels and the CUDA ones
// (__host__ __device__ under nvcc), so the CPU tests check what the GPU computes. The row
// statistics (mean, 1/sqrt(var + epsilon)) are the callers'.
#pragma once

#include <cmath>

#include "runtime/ops/math/integer_pow.h"  // OT_HOST_DEVICE

namespace ot {

// 1 / sqrt(var + eps) of a row's population variance.
OT_HOST_DEVICE inline double InvStdDev(double var, double eps) { return 1.0 / sqrt(var + eps); }

// y = (x - mean) * inv_std * scale + shift.
OT_HOST_DEVICE inline float NormalizedAffine(float x, float mean, float inv_std, float scale, float shift) {
  return (x - mean) * inv_std * scale + shift;
}

// dX of one element of a normalised row: factor * (g - mean(g) - xhat * mean(g * xhat)).
// LayerNormalization: g = dY * scale[j], factor = inv_std. InstanceNormalization (one scale
// per row): g = dY, factor = scale[c] * inv_std.
OT_HOST_DEVICE inline float NormInputGrad(float g, float xhat, float factor, float mean_g, float mean_g_xhat) {
  return factor * (g - mean_g - xhat * mean_g_xhat);
}

}  // namespace ot
