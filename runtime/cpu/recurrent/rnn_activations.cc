// The activation functions of the recurrent cells over rows of values (see
// rnn_activations.h): sigmoid and tanh from rnn_math.h, the activations the unary ops
// share from runtime/ops/math/activation_math.h, the rest here.
#include "runtime/cpu/recurrent/rnn_activations.h"

#include <algorithm>
#include <cmath>

#include "runtime/ops/math/activation_math.h"
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

// The activations the unary ops share (HardSigmoid, Elu, Softsign, Softplus,
// ThresholdedRelu) come from runtime/ops/math/activation_math.h.
UnaryParams Params(const RnnActivation& a) {
  UnaryParams p;
  p.alpha = a.alpha;
  p.beta = a.beta;
  return p;
}

template <UnaryFn F>
void MapUnary(const RnnActivation& a, float clip, const float* x, float* y, int64_t n) {
  const UnaryParams p = Params(a);
  MapClipped(x, y, n, clip, [&p](float v) { return UnaryForward<F>(v, p); });
}

}  // namespace

void RnnActivate(const RnnActivation& a, float clip, const float* x, float* y, int64_t n) {
  const float al = a.alpha, be = a.beta;
  switch (a.kind) {
    case RnnActivationKind::kSigmoid: return MapClipped(x, y, n, GateBound(clip), SigmoidApprox);
    case RnnActivationKind::kTanh: return MapClipped(x, y, n, GateBound(clip), TanhApprox);
    case RnnActivationKind::kRelu: return MapClipped(x, y, n, clip, [](float v) { return v > 0.f ? v : 0.f; });
    case RnnActivationKind::kLeakyRelu:
      return MapClipped(x, y, n, clip, [al](float v) { return v >= 0.f ? v : al * v; });
    case RnnActivationKind::kThresholdedRelu: return MapUnary<UnaryFn::kThresholdedRelu>(a, clip, x, y, n);
    case RnnActivationKind::kScaledTanh:
      return MapClipped(x, y, n, clip, [al, be](float v) { return al * std::tanh(be * v); });
    case RnnActivationKind::kHardSigmoid: return MapUnary<UnaryFn::kHardSigmoid>(a, clip, x, y, n);
    case RnnActivationKind::kElu: return MapUnary<UnaryFn::kElu>(a, clip, x, y, n);
    case RnnActivationKind::kSoftsign: return MapUnary<UnaryFn::kSoftsign>(a, clip, x, y, n);
    case RnnActivationKind::kSoftplus: return MapUnary<UnaryFn::kSoftplus>(a, clip, x, y, n);
    case RnnActivationKind::kAffine: return MapClipped(x, y, n, clip, [al, be](float v) { return al * v + be; });
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

template <UnaryFn F>
void MapUnaryGrad(const RnnActivation& a, float clip, const float* x, const float* dy, float* dx, int64_t n) {
  const UnaryParams p = Params(a);
  MapGrad(x, dy, dx, n, clip, [&p](float v) { return UnaryDerivative<F>(v, p); });
}

}  // namespace

void RnnActivateGrad(const RnnActivation& a, float clip, const float* x, const float* dy, float* dx, int64_t n) {
  const float al = a.alpha, be = a.beta;
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
    case RnnActivationKind::kRelu: return MapGrad(x, dy, dx, n, clip, [](float v) { return v > 0.f ? 1.f : 0.f; });
    case RnnActivationKind::kLeakyRelu:
      return MapGrad(x, dy, dx, n, clip, [al](float v) { return v >= 0.f ? 1.f : al; });
    case RnnActivationKind::kThresholdedRelu: return MapUnaryGrad<UnaryFn::kThresholdedRelu>(a, clip, x, dy, dx, n);
    case RnnActivationKind::kScaledTanh:
      return MapGrad(x, dy, dx, n, clip, [al, be](float v) {
        const float t = std::tanh(be * v);
        return al * be * (1.f - t * t);
      });
    case RnnActivationKind::kHardSigmoid: return MapUnaryGrad<UnaryFn::kHardSigmoid>(a, clip, x, dy, dx, n);
    case RnnActivationKind::kElu: return MapUnaryGrad<UnaryFn::kElu>(a, clip, x, dy, dx, n);
    case RnnActivationKind::kSoftsign: return MapUnaryGrad<UnaryFn::kSoftsign>(a, clip, x, dy, dx, n);
    case RnnActivationKind::kSoftplus: return MapUnaryGrad<UnaryFn::kSoftplus>(a, clip, x, dy, dx, n);
    case RnnActivationKind::kAffine: return MapGrad(x, dy, dx, n, clip, [al](float) { return al; });
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
