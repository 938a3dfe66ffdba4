// The device kernels of runtime/cuda/norm/lrn_grad.h: one thread per element in each pass.
#include "runtime/cuda/norm/lrn_grad.h"

#include <cmath>

#include "runtime/cuda/math_device.h"
#include "runtime/cuda/launch_check.h"

namespace ot::cuda::norm {
namespace {

constexpr int kThreads = 256;

__global__ void LrnScalePass(LrnGradParams p, int64_t inner, const float* dy, const float* x, double* s_pow,
                             double* t, int64_t total) {
  OT_GRID_LOOP(e, total) {
    const int64_t q = e % inner, c = (e / inner) % p.channels, n = e / (inner * p.channels);
    const float* column = x + n * p.channels * inner + q;
    const double s = ::ot::LrnScaleAt(p, c, [&](int64_t i) { return column[i * inner]; });
    s_pow[e] = pow(s, -p.beta);
    t[e] = static_cast<double>(dy[e]) * x[e] * s_pow[e] / s;
  }
}

__global__ void LrnGradPass(LrnGradParams p, int64_t inner, const float* dy, const float* x, const double* s_pow,
                            const double* t, float* dx, int64_t total) {
  OT_GRID_LOOP(e, total) {
    const int64_t q = e % inner, j = (e / inner) % p.channels, n = e / (inner * p.channels);
    int64_t first = 0, last = 0;
    ::ot::LrnWindowsHolding(p, j, &first, &last);
    double acc = 0;
    for (int64_t c = first; c <= last; ++c) acc += t[(n * p.channels + c) * inner + q];
    dx[e] = ::ot::LrnGradElement(p, dy[e], x[e], s_pow[e], acc);
  }
}

}  // namespace

void LrnGrad(const LrnGradParams& p, int64_t n, int64_t inner, const float* dy, const float* x, float* dx,
             double* scratch, cudaStream_t stream) {
  const int64_t total = n * p.channels * inner;
  if (total <= 0) return;
  const unsigned blocks = math::GridBlocks(total, kThreads);
  LrnScalePass<<<blocks, kThreads, 0, stream>>>(p, inner, dy, x, scratch, scratch + total, total);
  OT_CUDA_CHECK_LAUNCH("LrnScalePass");
  LrnGradPass<<<blocks, kThreads, 0, stream>>>(p, inner, dy, x, scratch, scratch + total, dx, total);
  OT_CUDA_CHECK_LAUNCH("LrnGradPass");
}

}  // namespace ot::cuda::norm
