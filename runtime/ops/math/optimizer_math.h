// The optimizers' per-element updates, one definition for the CPU kernels and the CUDA ones
// (__host__ __device__ under nvcc; this header includes only the standard library and
// integer_pow.h's host/device macro), so the CPU tests check the formulas the GPU runs.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/ops/math/integer_pow.h"

namespace ot {

// torch.optim.AdamW's update in its order, for step T >= 1 at rate R:
//   X <- X * (1 - R * weight_decay);  M <- beta1 M + (1 - beta1) G;  V <- beta2 V + (1 - beta2) G^2
//   X <- X - (R / (1 - beta1^T)) * M / (sqrt(V) / sqrt(1 - beta2^T) + epsilon)
struct AdamWParams {
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f, weight_decay = 0.01f;
};

// The step's scalars, in double as PyTorch computes the bias corrections.
struct AdamWStep {
  float step_size = 0.f;  // R / (1 - beta1^T)
  float bc2_sqrt = 1.f;   // sqrt(1 - beta2^T)
  float keep = 1.f;       // 1 - R * weight_decay
};

OT_HOST_DEVICE inline AdamWStep AdamWStepFor(const AdamWParams& p, float rate, int64_t step) {
  const double t = static_cast<double>(step < 1 ? 1 : step);
  AdamWStep s;
  s.step_size = static_cast<float>(rate / (1.0 - pow(static_cast<double>(p.beta1), t)));
  s.bc2_sqrt = static_cast<float>(sqrt(1.0 - pow(static_cast<double>(p.beta2), t)));
  s.keep = 1.f - rate * p.weight_decay;
  return s;
}

// One element: reads x, g, m, v; writes those of the outputs that are not null.
OT_HOST_DEVICE inline void AdamWElement(const AdamWParams& p, const AdamWStep& s, float x, float g, float m, float v,
                                        float* x_new, float* m_new, float* v_new) {
  const float decayed = x * s.keep;
  const float mi = p.beta1 * m + (1.f - p.beta1) * g;
  const float vi = p.beta2 * v + (1.f - p.beta2) * g * g;
  if (m_new) *m_new = mi;
  if (v_new) *v_new = vi;
  if (x_new) *x_new = decayed - s.step_size * (mi / (sqrtf(vi) / s.bc2_sqrt + p.epsilon));
}

// torch.optim.RMSprop's update at rate R:
//   G <- G + weight_decay X;  S <- alpha S + (1 - alpha) G^2
//   centered: A <- alpha A + (1 - alpha) G, D = sqrt(S - A^2) + epsilon; else D = sqrt(S) + epsilon
//   momentum > 0: B <- momentum B + G / D, X <- X - R B; else X <- X - R G / D
// States, in this order: S, then A if centered, then B if momentum > 0.
struct RmspropParams {
  float alpha = 0.99f, epsilon = 1e-8f, momentum = 0.f, weight_decay = 0.f;
  bool centered = false;
  OT_HOST_DEVICE int States() const { return 1 + (centered ? 1 : 0) + (momentum > 0.f ? 1 : 0); }
};

// One element: `state` holds the States() old values in order, `state_new` where to write
// the new ones (null: not requested); x_new null: not requested.
OT_HOST_DEVICE inline void RmspropElement(const RmspropParams& p, float rate, float x, float g_in, const float* state,
                                          float* const* state_new, float* x_new) {
  const float g = p.weight_decay != 0.f ? g_in + p.weight_decay * x : g_in;
  const float sq = p.alpha * state[0] + (1.f - p.alpha) * g * g;
  if (state_new[0]) *state_new[0] = sq;
  float avg;
  if (p.centered) {
    const float a = p.alpha * state[1] + (1.f - p.alpha) * g;
    if (state_new[1]) *state_new[1] = a;
    avg = sqrtf(sq - a * a) + p.epsilon;
  } else {
    avg = sqrtf(sq) + p.epsilon;
  }
  float out;
  if (p.momentum > 0.f) {
    const int buf = p.centered ? 2 : 1;
    const float b = p.momentum * state[buf] + g / avg;
    if (state_new[buf]) *state_new[buf] = b;
    out = x - rate * b;
  } else {
    out = x - rate * (g / avg);
  }
  if (x_new) *x_new = out;
}

}  // namespace ot
