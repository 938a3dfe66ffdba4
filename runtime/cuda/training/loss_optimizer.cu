// Loss and optimizer CUDA kernels: SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss
// forward (one thread per position: a stable log-sum-exp over the classes in double, the
// picked log-probability, its weight) with a one-block reduction for sum/mean, their
// gradients, and the Momentum / Adagrad / Adam updates that read the learning rate and
// step from device scalars. Math mirrors runtime/cpu/training/loss.cc, gradient_kernels.cc and
// optimizer_kernels.cc.
#include <cub/block/block_reduce.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "runtime/cuda/math_device.h"
#include "runtime/cuda/launch_check.h"

namespace ot::cuda::math {
namespace {

constexpr int kThreads = 256;
constexpr int kReduceThreads = 1024;

unsigned Blocks(int64_t n) { return GridBlocks(n, kThreads); }

template <typename T, typename Label>
__global__ void LossPositionKernel(LossParams p, const T* x, const Label* labels, const T* weight, T* loss,
                                   T* log_prob, double* scratch, long long* flag) {
  const int64_t positions = p.n * p.d;
  OT_GRID_LOOP(pos, positions) {
    double element_loss = 0, w = 0;
    LossAtPosition<T, Label>(p, x, labels, weight, log_prob, pos, &element_loss, &w, flag);
    if (p.reduce) {
      scratch[pos] = element_loss;
      scratch[positions + pos] = w;
    } else {
      loss[pos] = static_cast<T>(element_loss);
    }
  }
}

// loss[0] = sum (or sum / weight sum) of the per-position values, in one block.
template <typename T>
__global__ void LossReduceKernel(const double* scratch, int64_t positions, bool mean, T* loss) {
  using BlockReduce = cub::BlockReduce<double, kReduceThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  double l = 0, w = 0;
  for (int64_t i = threadIdx.x; i < positions; i += kReduceThreads) {
    l += scratch[i];
    w += scratch[positions + i];
  }
  const double loss_sum = BlockReduce(temp).Sum(l);
  __syncthreads();
  const double weight_sum = BlockReduce(temp).Sum(w);
  if (threadIdx.x == 0) loss[0] = static_cast<T>(mean ? loss_sum / weight_sum : loss_sum);
}

// scratch[0] = the sum of the weights of the counted positions (the mean's denominator).
template <typename Label>
__global__ void WeightSumKernel(LossParams p, const Label* labels, const float* weight, double* scratch,
                                long long* flag) {
  using BlockReduce = cub::BlockReduce<double, kReduceThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  const int64_t positions = p.n * p.d;
  double w = 0;
  for (int64_t pos = threadIdx.x; pos < positions; pos += kReduceThreads)
    w += LossWeightAt(p, labels, weight, pos, flag);
  const double total = BlockReduce(temp).Sum(w);
  if (threadIdx.x == 0) scratch[0] = total;
}

template <typename Label>
__global__ void LossGradKernel(LossParams p, const float* dy, const float* log_prob, const Label* labels,
                               const float* weight, float* dx, const double* scratch) {
  const int64_t total = p.n * p.c * p.d;
  const double weight_sum = scratch[0];
  OT_GRID_LOOP(i, total) dx[i] = LossGradAt(p, dy, log_prob, labels, weight, weight_sum, i);
}

// ---------------------------------------------------------------------------------------
__global__ void MomentumKernel(MomentumParams p, const float* lr, const int64_t* step, const float* x, const float* g,
                               const float* v, float* x_new, float* v_new, int64_t n) {
  const float r = *lr;
  const int64_t t = *step;
  OT_GRID_LOOP(i, n)
  MomentumUpdate(p, r, t, x[i], g[i], v[i], x_new ? x_new + i : nullptr, v_new ? v_new + i : nullptr);
}

__global__ void AdagradKernel(AdagradParams p, const float* lr, const int64_t* step, const float* x, const float* g,
                              const float* h, float* x_new, float* h_new, int64_t n) {
  const float rate = AdagradRate(p, *lr, *step);
  OT_GRID_LOOP(i, n) AdagradUpdate(p, rate, x[i], g[i], h[i], x_new ? x_new + i : nullptr, h_new ? h_new + i : nullptr);
}

__global__ void AdamKernel(AdamParams p, const float* lr, const int64_t* step, const float* x, const float* g,
                           const float* v, const float* h, float* x_new, float* v_new, float* h_new, int64_t n) {
  const float rate = AdamRate(p, *lr, *step);
  OT_GRID_LOOP(i, n)
  AdamUpdate(p, rate, x[i], g[i], v[i], h[i], x_new ? x_new + i : nullptr, v_new ? v_new + i : nullptr,
             h_new ? h_new + i : nullptr);
}

__global__ void AdamWKernel(::ot::AdamWParams p, const float* lr, const int64_t* step, const float* x, const float* g,
                            const float* m, const float* v, float* x_new, float* m_new, float* v_new, int64_t n) {
  const ::ot::AdamWStep s = ::ot::AdamWStepFor(p, *lr, *step);
  OT_GRID_LOOP(i, n)
  ::ot::AdamWElement(p, s, x[i], g[i], m[i], v[i], x_new ? x_new + i : nullptr, m_new ? m_new + i : nullptr,
                     v_new ? v_new + i : nullptr);
}

// org.onnxtrain RMSprop: pointers to the old states and the new ones by value (up to 3).
struct RmspropStates {
  const float* old[3];
  float* out[3];
};

__global__ void RmspropKernel(::ot::RmspropParams p, const float* lr, const float* x, const float* g,
                              RmspropStates st, float* x_new, int64_t n) {
  const float r = *lr;
  const int states = p.States();
  OT_GRID_LOOP(i, n) {
    float old[3] = {0.f, 0.f, 0.f};
    float* out[3] = {nullptr, nullptr, nullptr};
    for (int k = 0; k < states; ++k) {
      old[k] = st.old[k][i];  // read all before writing: outputs may overwrite inputs in place
      out[k] = st.out[k] ? st.out[k] + i : nullptr;
    }
    ::ot::RmspropElement(p, r, x[i], g[i], old, out, x_new ? x_new + i : nullptr);
  }
}

}  // namespace

bool LaunchClassificationLoss(const LossParams& p, DType type, const void* scores, const void* labels,
                              bool int64_labels, const void* weight, void* loss, void* log_prob, double* scratch,
                              long long* error_flag, cudaStream_t stream) {
  auto run = [&](auto type_tag, auto label_tag) {
    using T = decltype(type_tag);
    using Label = decltype(label_tag);
    const int64_t positions = p.n * p.d;
    if (positions > 0) {
      LossPositionKernel<T, Label><<<Blocks(positions), kThreads, 0, stream>>>(
          p, static_cast<const T*>(scores), static_cast<const Label*>(labels), static_cast<const T*>(weight),
          static_cast<T*>(loss), static_cast<T*>(log_prob), scratch, error_flag);
      OT_CUDA_CHECK_LAUNCH("LossPositionKernel");
    }
    if (p.reduce) {
      LossReduceKernel<T><<<1, kReduceThreads, 0, stream>>>(scratch, positions, p.mean, static_cast<T*>(loss));
      OT_CUDA_CHECK_LAUNCH("LossReduceKernel");
    }
  };
  auto with_labels = [&](auto type_tag) {
    if (int64_labels) run(type_tag, int64_t{});
    else run(type_tag, int32_t{});
  };
  if (type == DType::kFloat32) with_labels(float{});
  else if (type == DType::kFloat64) with_labels(double{});
  else return false;
  return true;
}

void LaunchClassificationLossGrad(const LossParams& p, const float* dy, const float* log_prob, const void* labels,
                                  bool int64_labels, const float* weight, float* dx, double* scratch,
                                  long long* error_flag, cudaStream_t stream) {
  auto run = [&](auto label_tag) {
    using Label = decltype(label_tag);
    const Label* l = static_cast<const Label*>(labels);
    WeightSumKernel<Label><<<1, kReduceThreads, 0, stream>>>(p, l, weight, scratch, error_flag);
    OT_CUDA_CHECK_LAUNCH("WeightSumKernel");
    const int64_t total = p.n * p.c * p.d;
    if (total > 0) {
      LossGradKernel<Label><<<Blocks(total), kThreads, 0, stream>>>(p, dy, log_prob, l, weight, dx, scratch);
      OT_CUDA_CHECK_LAUNCH("LossGradKernel");
    }
  };
  if (int64_labels) run(int64_t{});
  else run(int32_t{});
}

void LaunchMomentum(const MomentumParams& p, const float* lr, const int64_t* step, const float* x, const float* g,
                    const float* v, float* x_new, float* v_new, int64_t n, cudaStream_t stream) {
  if (n > 0) {
    MomentumKernel<<<Blocks(n), kThreads, 0, stream>>>(p, lr, step, x, g, v, x_new, v_new, n);
    OT_CUDA_CHECK_LAUNCH("MomentumKernel");
  }
}

void LaunchAdagrad(const AdagradParams& p, const float* lr, const int64_t* step, const float* x, const float* g,
                   const float* h, float* x_new, float* h_new, int64_t n, cudaStream_t stream) {
  if (n > 0) {
    AdagradKernel<<<Blocks(n), kThreads, 0, stream>>>(p, lr, step, x, g, h, x_new, h_new, n);
    OT_CUDA_CHECK_LAUNCH("AdagradKernel");
  }
}

void LaunchAdam(const AdamParams& p, const float* lr, const int64_t* step, const float* x, const float* g,
                const float* v, const float* h, float* x_new, float* v_new, float* h_new, int64_t n,
                cudaStream_t stream) {
  if (n > 0) {
    AdamKernel<<<Blocks(n), kThreads, 0, stream>>>(p, lr, step, x, g, v, h, x_new, v_new, h_new, n);
    OT_CUDA_CHECK_LAUNCH("AdamKernel");
  }
}

void LaunchAdamW(const ::ot::AdamWParams& p, const float* lr, const int64_t* step, const float* x, const float* g,
                 const float* m, const float* v, float* x_new, float* m_new, float* v_new, int64_t n,
                 cudaStream_t stream) {
  if (n > 0) {
    AdamWKernel<<<Blocks(n), kThreads, 0, stream>>>(p, lr, step, x, g, m, v, x_new, m_new, v_new, n);
    OT_CUDA_CHECK_LAUNCH("AdamWKernel");
  }
}

void LaunchRmsprop(const ::ot::RmspropParams& p, const float* lr, const float* x, const float* g,
                   const float* const* state, float* const* state_new, float* x_new, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  RmspropStates st{};
  for (int k = 0; k < p.States(); ++k) {
    st.old[k] = state[k];
    st.out[k] = state_new[k];
  }
  RmspropKernel<<<Blocks(n), kThreads, 0, stream>>>(p, lr, x, g, st, x_new, n);
  OT_CUDA_CHECK_LAUNCH("RmspropKernel");
}

}  // namespace ot::cuda::math
