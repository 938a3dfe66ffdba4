// Vectorisable float32 exp, sigmoid and tanh for the recurrent cells' gate loops
// (runtime/cpu/recurrent/rnn.cc). glibc's scalar expf and tanhf keep GCC from vectorising those
// loops and took about half of a single-threaded LSTM training step (perf). These have
// no branches or comparisons that GCC would keep as control flow (it does not if-convert
// them under -ftrapping-math), so loops over them vectorise; the callers bound the inputs
// in a loop of their own (kRnnGateBound).
//
// Accuracy against float64 over every 97th float with |x| <= 40: exp (|x| <= 80) within
// 1.5 ulp, sigmoid within 2.5 ulp, tanh within 1.8e-7 absolute (it is 2 sigmoid(2x) - 1,
// so relative accuracy fades for |x| well below 1e-2; the cell math only ever adds
// tanh values to others of order one). The exp polynomial was fitted here by least squares
// on Chebyshev nodes in float64 (e^r on |r| <= ln2/2 after reduction by k ln2).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace ot {
namespace cpu {

// Callers clamp the inputs of sigmoid and tanh to [-kRnnGateBound, kRnnGateBound]:
// sigmoid and tanh are 0, 1 or +-1 to float precision beyond it.
constexpr float kRnnGateBound = 40.f;

// e^x for |x| <= 80 (larger |x| saturate near 2^+-127 rather than overflow).
inline float ExpApprox(float x) {
  const float k = (x * 1.44269504f + 12582912.f) - 12582912.f;  // round(x / ln2), via 1.5 * 2^23
  const float r = (x - k * 0.693145751953125f) - k * 1.42860682e-6f;  // x - k ln2 in two parts
  float q = 0.0013933657f;
  q = q * r + 0.0083631752f;
  q = q * r + 0.041666463f;
  q = q * r + 0.16666576f;
  q = q * r + 0.5f;
  const float p = (r * r * q + r) + 1.f;
  // 2^k from its exponent bits: (k + 127) << 23.
  const int32_t bits = static_cast<int32_t>(std::min(std::max(k, -126.f), 127.f)) * 8388608 + 1065353216;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float SigmoidApprox(float x) { return 1.f / (1.f + ExpApprox(-x)); }
inline float TanhApprox(float x) { return 2.f * SigmoidApprox(2.f * x) - 1.f; }

}  // namespace cpu
}  // namespace ot
