#include "runtime/cpu/training/softmax_rows.h"

#include <cmath>
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
  for (int64_t c = 0; c < n; ++c) out[c] = unary_detail::FastExp(log_prob[c]) * scale;
}

}  // namespace cpu
}  // namespace ot
