// The per-element formulas of Attention and AttentionGrad that the CPU kernels
// (runtime/cpu/matmul/attention.cc) and the CUDA ones (runtime/cuda/attention/) share
// (__host__ __device__ under nvcc): the softcap of a score, its derivative, and one element of
// the softmax's input gradient. The products are each device's library's.
#pragma once

#include <cmath>

#include "runtime/ops/math/integer_pow.h"  // OT_HOST_DEVICE

namespace ot {

// softcap * tanh(s / softcap), with inv_cap = 1 / softcap.
OT_HOST_DEVICE inline float SoftcapScore(float s, float cap, float inv_cap) { return cap * tanhf(s * inv_cap); }

// d(c tanh(s / c))/ds from the capped value: 1 - (capped / c)^2.
OT_HOST_DEVICE inline float SoftcapDerivative(float capped, float inv_cap) {
  return 1.f - (capped * inv_cap) * (capped * inv_cap);
}

// dS of one score from its probability p, dP = dY.V^T and the row's sum of p * dP.
OT_HOST_DEVICE inline float SoftmaxInputGrad(float p, float dp, float row_dot) { return p * (dp - row_dot); }

}  // namespace ot
