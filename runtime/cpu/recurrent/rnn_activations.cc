// The activation functions of the recurrent cells over rows of values (see
// rnn_activations.h): sigmoid and tanh from rnn_math.h (vectorised row loops, for speed),
// every other one from runtime/ops/math/rnn_cell_math.h, the per-element math the CUDA
// kernels run too.
#include "runtime/cpu/recurrent/rnn_activations.h"

#include <algorithm>
#include <cmath>

#include "runtime/ops/math/rnn_cell_math.h"
#include "runtime/cpu/recurrent/rnn_math.h"

namespace ot {
namespace cpu {
namespace {

// y = f(clamp(x, -bound, bound)) over n values, for one activation kind; two loops, so
// that each vectorises.
template <typename F>
void MapClipped(const float* x, float* y, int64_t n, float bound, F f) {
  for (int64_t j = 0; j < n; ++j) y[j] = std::min(std::max(x[j], -bound), bound);
  for (int64_t j = 0; j < n; ++j) y[j] = f(y[j]);
}

// The bound of sigmoid's and tanh's inputs: clip, and kRnnGateBound for rnn_math.h.
float GateBound(float clip) { return std::min(clip, kRnnGateBound); }

}  // namespace

void RnnActivate(const RnnActivation& a, float clip, const float* x, float* y, int64_t n) {
  switch (a.kind) {
    case RnnActivationKind::kSigmoid: return MapClipped(x, y, n, GateBound(clip), SigmoidApprox);
    case RnnActivationKind::kTanh: return MapClipped(x, y, n, GateBound(clip), TanhApprox);
    default: return MapClipped(x, y, n, clip, [&a](float v) { return RnnActivationValue(a, v); });
  }
}

namespace {

// dx = dy * f'(clamp(x, -bound, bound)), and 0 where clip cut x off (|x| > clip). dx must
// not alias x or dy. Two loops, and a mask rather than a branch, so that each vectorises.
template <typename F>
void MapGrad(const float* x, const float* dy, float* dx, int64_t n, float clip, F fp, float bound) {
  for (int64_t j = 0; j < n; ++j) dx[j] = std::min(std::max(x[j], -bound), bound);
  for (int64_t j = 0; j < n; ++j) {
    const float keep = std::fabs(x[j]) > clip ? 0.f : 1.f;
    dx[j] = dy[j] * fp(dx[j]) * keep;
  }
}
template <typename F>
void MapGrad(const float* x, const float* dy, float* dx, int64_t n, float clip, F fp) {
  MapGrad(x, dy, dx, n, clip, fp, clip);
}

}  // namespace

void RnnActivateGrad(const RnnActivation& a, float clip, const float* x, const float* dy, float* dx, int64_t n) {
  switch (a.kind) {
    case RnnActivationKind::kSigmoid:
      return MapGrad(
          x, dy, dx, n, clip,
          [](float v) {
            const float s = SigmoidApprox(v);
            return s * (1.f - s);
          },
          GateBound(clip));
    case RnnActivationKind::kTanh:
      return MapGrad(
          x, dy, dx, n, clip,
          [](float v) {
            const float t = TanhApprox(v);
            return 1.f - t * t;
          },
          GateBound(clip));
    default: return MapGrad(x, dy, dx, n, clip, [&a](float v) { return RnnActivationDerivative(a, v); });
  }
}

void RnnActivateGradFromOutput(const RnnActivation& a, float clip, const float* x, const float* y, const float* dy,
                            float* dx, int64_t n) {
  if (a.kind == RnnActivationKind::kSigmoid || a.kind == RnnActivationKind::kTanh) {
    const bool sigmoid = a.kind == RnnActivationKind::kSigmoid;
    for (int64_t j = 0; j < n; ++j) {
      const float keep = std::fabs(x[j]) > clip ? 0.f : 1.f;
      const float d = sigmoid ? y[j] * (1.f - y[j]) : 1.f - y[j] * y[j];
      dx[j] = dy[j] * d * keep;
    }
    return;
  }
  RnnActivateGrad(a, clip, x, dy, dx, n);
}

}  // namespace cpu
}  // namespace ot
