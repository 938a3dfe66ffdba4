// The device kernels of runtime/cuda/attention/attention_kernels.h: one thread per score for
// the bias, one block per row (shared-memory tree reductions, sums in double as the CPU
// kernel) for the softmax and its gradient.
#include "runtime/cuda/attention/attention_kernels.h"

#include <cmath>

#include "runtime/cuda/math_device.h"
#include "runtime/ops/math/attention_math.h"
#include "runtime/cuda/launch_check.h"

namespace ot::cuda::attention {
namespace {

constexpr int kThreads = 256;
constexpr int kRowThreads = 128;  // a power of two

__global__ void ScoreBiasKernel(ScoreBias b, float* s, float* capped, int64_t n) {
  const float masked = -INFINITY;
  OT_GRID_LOOP(e, n) {
    const int64_t j = e % b.total_len;
    const int64_t i = (e / b.total_len) % b.q_len;
    const int64_t h = (e / (b.total_len * b.q_len)) % b.q_heads;
    const int64_t bt = e / (b.total_len * b.q_len * b.q_heads);
    float v = s[e];
    if (b.mask) {
      if (j < b.mask_len) {
        const int64_t off = bt * b.mask_strides[0] + h * b.mask_strides[1] + i * b.mask_strides[2] + j * b.mask_strides[3];
        if (b.mask_bool) {
          if (!static_cast<const uint8_t*>(b.mask)[off]) v = masked;
        } else {
          v += static_cast<const float*>(b.mask)[off];
        }
      } else {
        v = masked;
      }
    }
    if (b.causal && j > i + b.past_len) v = masked;
    if (b.nonpad) {
      const int64_t valid = b.nonpad[bt] < 0 ? 0 : b.nonpad[bt] > b.total_len ? b.total_len : b.nonpad[bt];
      if (j >= valid) v = masked;
    }
    if (b.softcap > 0.f) v = ::ot::SoftcapScore(v, b.softcap, 1.f / b.softcap);
    s[e] = v;
    if (capped) capped[e] = v;
  }
}

__device__ float BlockMax(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kRowThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  const float m = shared[0];
  __syncthreads();
  return m;
}

__device__ double BlockSum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kRowThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  const double t = shared[0];
  __syncthreads();
  return t;
}

__global__ void SoftmaxRowsKernel(float* s, int64_t rows, int64_t cols, float* lse) {
  __shared__ float fshared[kRowThreads];
  __shared__ double dshared[kRowThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* row = s + r * cols;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += kRowThreads) mx = fmaxf(mx, row[j]);
    mx = BlockMax(mx, fshared);
    double sum = 0;
    for (int64_t j = threadIdx.x; j < cols; j += kRowThreads) {
      row[j] = expf(row[j] - mx);
      sum += row[j];
    }
    sum = BlockSum(sum, dshared);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = threadIdx.x; j < cols; j += kRowThreads) row[j] *= inv;
    if (lse && threadIdx.x == 0) lse[r] = mx + static_cast<float>(log(sum));
  }
}

__global__ void SoftmaxGradRowsKernel(const float* p, float* dp, const float* capped, float softcap, int64_t rows,
                                      int64_t cols) {
  __shared__ double dshared[kRowThreads];
  const float inv_cap = softcap > 0.f ? 1.f / softcap : 0.f;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* pr = p + r * cols;
    float* dr = dp + r * cols;
    double dot = 0;
    for (int64_t j = threadIdx.x; j < cols; j += kRowThreads) dot += static_cast<double>(pr[j]) * dr[j];
    const float d = static_cast<float>(BlockSum(dot, dshared));
    for (int64_t j = threadIdx.x; j < cols; j += kRowThreads) {
      float g = ::ot::SoftmaxInputGrad(pr[j], dr[j], d);
      if (softcap > 0.f) g *= ::ot::SoftcapDerivative(capped[r * cols + j], inv_cap);
      dr[j] = g;
    }
  }
}

unsigned RowBlocks(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

}  // namespace

void AddScoreBias(const ScoreBias& b, float* s, float* capped, cudaStream_t stream) {
  const int64_t n = b.batch * b.q_heads * b.q_len * b.total_len;
  if (n <= 0) return;
  ScoreBiasKernel<<<math::GridBlocks(n, kThreads), kThreads, 0, stream>>>(b, s, capped, n);
  OT_CUDA_CHECK_LAUNCH("ScoreBiasKernel");
}

void SoftmaxRows(float* s, int64_t rows, int64_t cols, float* lse, cudaStream_t stream) {
  if (rows <= 0) return;
  SoftmaxRowsKernel<<<RowBlocks(rows), kRowThreads, 0, stream>>>(s, rows, cols, lse);
  OT_CUDA_CHECK_LAUNCH("SoftmaxRowsKernel");
}

void SoftmaxGradRows(const float* p, float* dp, const float* capped, float softcap, int64_t rows, int64_t cols,
                     cudaStream_t stream) {
  if (rows <= 0) return;
  SoftmaxGradRowsKernel<<<RowBlocks(rows), kRowThreads, 0, stream>>>(p, dp, capped, softcap, rows, cols);
  OT_CUDA_CHECK_LAUNCH("SoftmaxGradRowsKernel");
}

}  // namespace ot::cuda::attention
