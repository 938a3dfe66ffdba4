// The optimizers' per-element updates, one definition for the CPU kernels and the CUDA ones
// (__host__ __device__ under nvcc; this header includes only the standard library and
// integer_pow.h's host/device macro), so the CPU tests check the formulas the GPU runs.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/ops/integer_pow.h"

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

}  // namespace ot
