// The device kernels of runtime/cuda/norm/row_norm.h: one block per row for the statistics
// and dX (a shared-memory tree sum in double), one thread per column or channel for the
// parameter gradients. The per-element formulas are runtime/ops/math/norm_math.h's.
#include "runtime/cuda/norm/row_norm.h"

#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_device.h"
#include "runtime/ops/math/norm_math.h"
#include "runtime/cuda/launch_check.h"

namespace ot::cuda::norm {
namespace {

constexpr int kRowThreads = 256;  // a power of two (the tree sum halves it)
constexpr int kColThreads = 256;

// The sum of every thread's `v` in the block, returned to all threads.
__device__ double BlockSum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kRowThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

__device__ void RowStatistics(const float* xr, int64_t cols, float eps, double* shared, float* mean, float* inv) {
  double sum = 0;
  for (int64_t j = threadIdx.x; j < cols; j += kRowThreads) sum += xr[j];
  const double mu = cols ? BlockSum(sum, shared) / static_cast<double>(cols) : 0.0;
  double sq = 0;
  for (int64_t j = threadIdx.x; j < cols; j += kRowThreads) {
    const double d = xr[j] - mu;
    sq += d * d;
  }
  const double var = cols ? BlockSum(sq, shared) / static_cast<double>(cols) : 0.0;
  *mean = static_cast<float>(mu);
  *inv = static_cast<float>(::ot::InvStdDev(var, static_cast<double>(eps)));
}

__global__ void RowNormForwardKernel(RowNormShape s, const float* x, const float* scale, const float* shift, float* y,
                                     float* mean_out, float* inv_out) {
  __shared__ double shared[kRowThreads];
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const float* xr = x + r * s.cols;
    float* yr = y + r * s.cols;
    float mu = 0.f, inv = 0.f;
    RowStatistics(xr, s.cols, s.epsilon, shared, &mu, &inv);
    const int64_t c = s.channels > 0 ? r % s.channels : 0;
    for (int64_t j = threadIdx.x; j < s.cols; j += kRowThreads) {
      const int64_t k = s.channels > 0 ? c : j;
      yr[j] = ::ot::NormalizedAffine(xr[j], mu, inv, scale[k], shift ? shift[k] : 0.f);
    }
    if (threadIdx.x == 0) {
      if (mean_out) mean_out[r] = mu;
      if (inv_out) inv_out[r] = inv;
    }
  }
}

__global__ void RowNormBackwardKernel(RowNormShape s, const float* dy, const float* x, const float* scale, float* dx,
                                      float* row_mean, float* row_inv, double* row_g, double* row_gx) {
  __shared__ double shared[kRowThreads];
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const float* xr = x + r * s.cols;
    const float* dyr = dy + r * s.cols;
    float mu = 0.f, inv = 0.f;
    RowStatistics(xr, s.cols, s.epsilon, shared, &mu, &inv);
    const bool by_channel = s.channels > 0;
    double g = 0, gx = 0;
    for (int64_t j = threadIdx.x; j < s.cols; j += kRowThreads) {
      const double gj = by_channel ? static_cast<double>(dyr[j]) : static_cast<double>(dyr[j]) * scale[j];
      g += gj;
      gx += gj * ((xr[j] - mu) * inv);
    }
    g = BlockSum(g, shared);
    gx = BlockSum(gx, shared);
    if (threadIdx.x == 0) {
      row_mean[r] = mu;
      row_inv[r] = inv;
      row_g[r] = g;
      row_gx[r] = gx;
    }
    if (!dx) continue;
    const double n = static_cast<double>(s.cols);
    const float mean_g = static_cast<float>(g / n), mean_gx = static_cast<float>(gx / n);
    const float factor = by_channel ? scale[r % s.channels] * inv : inv;
    float* dxr = dx + r * s.cols;
    for (int64_t j = threadIdx.x; j < s.cols; j += kRowThreads) {
      const float gj = by_channel ? dyr[j] : dyr[j] * scale[j];
      dxr[j] = ::ot::NormInputGrad(gj, (xr[j] - mu) * inv, factor, mean_g, mean_gx);
    }
  }
}

// By column: dscale[j] = sum_r dY * xhat, dbias[j] = sum_r dY.
__global__ void ColumnParamGradKernel(RowNormShape s, const float* dy, const float* x, const float* row_mean,
                                      const float* row_inv, float* dscale, float* dbias) {
  OT_GRID_LOOP(j, s.cols) {
    double ds = 0, db = 0;
    for (int64_t r = 0; r < s.rows; ++r) {
      const float d = dy[r * s.cols + j];
      ds += static_cast<double>(d) * ((x[r * s.cols + j] - row_mean[r]) * row_inv[r]);
      db += d;
    }
    if (dscale) dscale[j] = static_cast<float>(ds);
    if (dbias) dbias[j] = static_cast<float>(db);
  }
}

// By channel: the row sums of dY * xhat and dY over the rows n * C + c.
__global__ void ChannelParamGradKernel(RowNormShape s, const double* row_g, const double* row_gx, float* dscale,
                                       float* dbias) {
  OT_GRID_LOOP(c, s.channels) {
    double ds = 0, db = 0;
    for (int64_t r = c; r < s.rows; r += s.channels) {
      ds += row_gx[r];
      db += row_g[r];
    }
    if (dscale) dscale[c] = static_cast<float>(ds);
    if (dbias) dbias[c] = static_cast<float>(db);
  }
}

unsigned RowBlocks(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

}  // namespace

void RowNormForward(const RowNormShape& s, const float* x, const float* scale, const float* shift, float* y,
                    float* mean, float* inv_std, cudaStream_t stream) {
  if (s.rows <= 0) return;
  RowNormForwardKernel<<<RowBlocks(s.rows), kRowThreads, 0, stream>>>(s, x, scale, shift, y, mean, inv_std);
  OT_CUDA_CHECK_LAUNCH("RowNormForwardKernel");
}

void RowNormBackward(const RowNormShape& s, const float* dy, const float* x, const float* scale, float* dx,
                     float* dscale, float* dbias, float* row_mean, float* row_inv_std, double* row_sum_g,
                     double* row_sum_gx, cudaStream_t stream) {
  if (s.rows > 0)
    RowNormBackwardKernel<<<RowBlocks(s.rows), kRowThreads, 0, stream>>>(s, dy, x, scale, dx, row_mean, row_inv_std,
                                                                         row_sum_g, row_sum_gx);
  OT_CUDA_CHECK_LAUNCH("RowNormBackwardKernel");
  if (!dscale && !dbias) return;
  if (s.channels > 0) {
    ChannelParamGradKernel<<<math::GridBlocks(s.channels, kColThreads), kColThreads, 0, stream>>>(
        s, row_sum_g, row_sum_gx, dscale, dbias);
    OT_CUDA_CHECK_LAUNCH("ChannelParamGradKernel");
  } else if (s.cols > 0) {
    ColumnParamGradKernel<<<math::GridBlocks(s.cols, kColThreads), kColThreads, 0, stream>>>(
        s, dy, x, row_mean, row_inv_std, dscale, dbias);
    OT_CUDA_CHECK_LAUNCH("ColumnParamGradKernel");
  }
}

}  // namespace ot::cuda::norm
