#include "runtime/cpu/norm/normalize_clip.h"

#include <cmath>
#include <vector>

#include "runtime/cpu/elementwise/vector_loops.h"

namespace ot {
namespace cpu {
namespace {

// One row of `count` pixels of B lanes each (B = 1: one channel's values).
template <int B>
OT_VECTOR_CLONES void Row(const float* x, float* y, int64_t count, const float* mean, const float* scale,
                          const float* shift, float lo, float hi) {
  for (int64_t p = 0; p < count; ++p)
    for (int l = 0; l < B; ++l) {
      float v = scale[l] * (x[p * B + l] - mean[l]) + shift[l];
      v = v < lo ? lo : v;
      y[p * B + l] = v > hi ? hi : v;
    }
}

OT_VECTOR_CLONES void Clamp(float* y, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) {
    float v = y[i] < lo ? lo : y[i];
    y[i] = v > hi ? hi : v;
  }
}

template <int B>
void Run(const NormalizeClipShape& s, const float* x, float* y, const float* mean_in, const float* var,
         const float* gamma, const float* beta, float epsilon, float lo, float hi) {
  const int64_t blocks = (s.channels + B - 1) / B;
  // Per-channel factors, padded with zeros to whole blocks (padding lanes give 0).
  std::vector<float> mean(static_cast<size_t>(blocks * B), 0.f), scale(mean.size(), 0.f), shift(mean.size(), 0.f);
  for (int64_t c = 0; c < s.channels; ++c) {
    mean[static_cast<size_t>(c)] = mean_in[c];
    scale[static_cast<size_t>(c)] = gamma[c] / std::sqrt(var[c] + epsilon);
    shift[static_cast<size_t>(c)] = beta[c];
  }
  const int64_t rows = s.batch * blocks, row = s.spatial * B;
#pragma omp parallel for schedule(static) if (rows * row >= (int64_t{1} << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const size_t c0 = static_cast<size_t>((r % blocks) * B);
    if (B == 1) {  // scalar factors broadcast along the row
      float m[1] = {mean[c0]}, k[1] = {scale[c0]}, b[1] = {shift[c0]};
      Row<1>(x + r * row, y + r * row, s.spatial, m, k, b, lo, hi);
    } else {
      Row<B>(x + r * row, y + r * row, s.spatial, &mean[c0], &scale[c0], &shift[c0], lo, hi);
    }
  }
}

}  // namespace

void NormalizeClip(const NormalizeClipShape& s, const float* x, float* y, const float* mean, const float* var,
                   const float* gamma, const float* beta, float epsilon, float lo, float hi) {
  if (s.block == 16) return Run<16>(s, x, y, mean, var, gamma, beta, epsilon, lo, hi);
  if (s.block == 8) return Run<8>(s, x, y, mean, var, gamma, beta, epsilon, lo, hi);
  Run<1>(s, x, y, mean, var, gamma, beta, epsilon, lo, hi);
}

void ClipInPlace(float* y, int64_t n, float lo, float hi) {
  ForEachChunk(n, int64_t{1} << 15, [&](int64_t b, int64_t e) { Clamp(y + b, e - b, lo, hi); });
}

}  // namespace cpu
}  // namespace ot
