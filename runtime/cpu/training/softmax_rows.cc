#include "runtime/cpu/training/softmax_rows.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "runtime/cpu/elementwise/vector_loops.h"
#include "runtime/ops/math/activation_math.h"

namespace ot {
namespace cpu {
namespace {

OT_VECTOR_CLONES float RowMax(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t c = 0; c < n; ++c) m = x[c] > m ? x[c] : m;
  return m;
}

OT_VECTOR_CLONES float ChunkSumExp(const float* x, int64_t n, float shift) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < n; ++c) s += unary_detail::FastExp(x[c] - shift);
  return s;
}

OT_VECTOR_CLONES bool AnyNaN(const float* x, int64_t n) {
  int nan = 0;
#pragma omp simd reduction(| : nan)
  for (int64_t c = 0; c < n; ++c) nan |= x[c] != x[c];
  return nan != 0;
}

// e^x of a float32, evaluated in double and rounded once: within 0.5 ulp of float32 but for
// about one result in 10^7 (FastExp's 2e-7 relative error showed in gradients that are
// rounding noise in exact arithmetic, a convolution bias before BatchNorm). 2^n * e^r with
// r = x - n ln 2 in [-ln2/2, ln2/2] and e^r by its Taylor polynomial to r^9 (truncation below
// 1e-11); 2^n from the bits of the rounding constant, so no double-to-integer conversion
// (AVX-512F has none for 64-bit lanes) stops the loop from vectorising. 0 below -104 (float32
// underflows), NaN stays NaN.
inline float ExpRounded(float x) {
  double xd = x;
  xd = xd < -104.0 ? -104.0 : xd;
  xd = xd > 89.0 ? 89.0 : xd;
  const double shifted = xd * 1.4426950408889634 + 6755399441055744.0;  // 1.5 * 2^52: rounds n into the low bits
  const double nf = shifted - 6755399441055744.0;
  const double r = xd - nf * 0.6931471805599453;
  double p = 1.0 / 362880;
  p = p * r + 1.0 / 40320;
  p = p * r + 1.0 / 5040;
  p = p * r + 1.0 / 720;
  p = p * r + 1.0 / 120;
  p = p * r + 1.0 / 24;
  p = p * r + 1.0 / 6;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  uint64_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  bits = (bits + 1023) << 52;  // the low bits hold n in two's complement: 2^n
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -104.f ? 0.f : static_cast<float>(p * scale);
}

}  // namespace

double RowLogSumExp(const float* x, int64_t n) {
  const float m = RowMax(x, n);
  if (std::isinf(m)) return AnyNaN(x, n) ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(m);
  constexpr int64_t kChunk = 512;
  double sum = 0;
  for (int64_t c = 0; c < n; c += kChunk) sum += ChunkSumExp(x + c, n - c < kChunk ? n - c : kChunk, m);
  return static_cast<double>(m) + std::log(sum);
}

OT_VECTOR_CLONES void RowShifted(const float* x, int64_t n, double shift, float* out) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) out[c] = static_cast<float>(static_cast<double>(x[c]) - shift);
}

OT_VECTOR_CLONES void RowExpScaled(const float* log_prob, int64_t n, float scale, float* out) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) out[c] = ExpRounded(log_prob[c]) * scale;
}

}  // namespace cpu
}  // namespace ot
