// The per-element arithmetic of LRNGrad, one definition for the CPU kernel
// (runtime/cpu/norm/lrn.cc) and the CUDA one (runtime/cuda/norm/lrn_grad.cu)
// (__host__ __device__ under nvcc). ONNX's window of channel c is [c - lo, c + hi] with
// lo = floor((size-1)/2), hi = ceil((size-1)/2), clipped to the channels.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/ops/math/integer_pow.h"  // OT_HOST_DEVICE

namespace ot {

struct LrnGradParams {
  int64_t channels = 0, lo = 0, hi = 0;
  double bias = 1.0, a_over_n = 0.0, beta = 0.75;  // a_over_n = alpha / size
};

inline LrnGradParams MakeLrnGradParams(int64_t channels, int64_t size, double alpha, double beta, double bias) {
  LrnGradParams p;
  p.channels = channels;
  p.lo = (size - 1) / 2;
  p.hi = size - 1 - p.lo;
  p.bias = bias;
  p.a_over_n = alpha / static_cast<double>(size);
  p.beta = beta;
  return p;
}

// S_c = bias + alpha / size * sum of x_i^2 over channel c's window; x_at(i) reads channel i
// of the same (n, pixel) column.
template <typename At>
OT_HOST_DEVICE inline double LrnScaleAt(const LrnGradParams& p, int64_t c, const At& x_at) {
  double sq = 0;
  const int64_t first = c - p.lo < 0 ? 0 : c - p.lo, last = c + p.hi > p.channels - 1 ? p.channels - 1 : c + p.hi;
  for (int64_t i = first; i <= last; ++i) {
    const double v = x_at(i);
    sq += v * v;
  }
  return p.bias + p.a_over_n * sq;
}

// The channels c whose window holds channel j: [first, last].
OT_HOST_DEVICE inline void LrnWindowsHolding(const LrnGradParams& p, int64_t j, int64_t* first, int64_t* last) {
  *first = j - p.hi < 0 ? 0 : j - p.hi;
  *last = j + p.lo > p.channels - 1 ? p.channels - 1 : j + p.lo;
}

// dX_j = dY_j S_j^-beta - 2 alpha beta / size * X_j * acc, acc = sum over the windows holding
// j of t_c = dY_c X_c S_c^-(beta+1).
OT_HOST_DEVICE inline float LrnGradElement(const LrnGradParams& p, float dy, float x, double s_pow, double acc) {
  return static_cast<float>(dy * s_pow - 2 * p.a_over_n * p.beta * x * acc);
}

}  // namespace ot
