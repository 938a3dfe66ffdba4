// CUDA kernels of org.onnxtrain SyncBatchNormTraining and SyncBatchNormalizationGrad
// (--sync-bn), mirroring the CPU's (runtime/cpu/norm/batchnorm.cc, sync_batchnorm.h): the
// per-channel sums in double on the GPU (channel_sums.cu), brought to the host and summed
// over the replicas through KernelContext::cross_replica(), then the statistics, running
// statistics and dX coefficients by runtime/ops/math/sync_bn_math.h, the formulas the CPU uses.
// Each Compute waits for its sums (the replicas' sum is a host call), so a plan with these
// nodes is not captured into a CUDA graph.
#include <cmath>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/cuda/norm/channel_sums.h"
#include "runtime/ops/checks/norm_checks.h"
#include "runtime/ops/math/sync_bn_math.h"

namespace ot::cuda {
namespace {

norm::ChannelShape ChannelsOf(const Tensor& x) {
  norm::ChannelShape sh;
  sh.n = x.dim(0);
  sh.c = x.dim(1);
  sh.s = sh.n * sh.c == 0 ? 0 : x.numel() / (sh.n * sh.c);
  return sh;
}

void SumOverReplicas(CrossReplicaSum* replicas, std::vector<double>& values) {
  if (replicas && replicas->replicas() > 1) replicas->SumInPlace(values.data(), values.size());
}

// Device to host, then waits for the stream.
template <typename T>
void Fetch(std::vector<T>& host, const void* device, size_t count, cudaStream_t stream) {
  OT_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
  OT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

template <typename T>
void Send(void* device, const std::vector<T>& host, size_t count, cudaStream_t stream) {
  OT_CUDA_CHECK(cudaMemcpyAsync(device, host.data(), count * sizeof(T), cudaMemcpyHostToDevice, stream));
}

// SyncBatchNormTraining(X, scale, B, input_mean, input_var) -> Y, running_mean, running_var,
// saved_mean, saved_var.
class SyncBatchNormKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const int64_t channels = CheckBatchNormInputs(node_, ctx);
    if (node_.GetInt("relu", 0) != 0) Fail("relu=1 is not supported with synchronised batch normalization");
    if (x.numel() == 0) Fail("training mode needs a non-empty batch to compute statistics");
    momentum_ = node_.GetFloat("momentum", 0.9f);
    const int64_t count = x.numel() / channels;
    unbiased_count_ = node_.GetInt("unbiased_running_var", 0) != 0 && count > 1 ? static_cast<double>(count) : 0.0;
    ctx.SetOutput(0, DType::kFloat32, x.shape());
    for (int i = 1; i < 5; ++i) ctx.SetOutput(i, DType::kFloat32, {channels});
    sums_ = Tensor::Empty(DType::kFloat64, {3, channels}, device_);  // sum0, sum1, centre
    stats_ = Tensor::Empty(DType::kFloat32, {2, channels}, device_);  // mean, var when not requested
    const size_t c = static_cast<size_t>(channels);
    first_.assign(c + 1, 0.0);
    second_.assign(2 * c, 0.0);
    center_.assign(c, 0.0);
    mean_.assign(c, 0.f);
    var_.assign(c, 0.f);
  }
  void Compute(KernelContext& ctx) override {
    const cudaStream_t stream = math::ComputeStream(device_.index);
    const Tensor& x = ctx.Input(0);
    const norm::ChannelShape sh = ChannelsOf(x);
    const size_t c = static_cast<size_t>(sh.c);
    double* sum0 = sums_.data<double>();
    double* sum1 = sum0 + c;
    double* center = sum1 + c;
    CrossReplicaSum* replicas = ctx.cross_replica();
    // Pass 1: [sum x..., count] over every replica -> the centre.
    norm::ChannelSums(sh, x.data<float>(), nullptr, sum0, nullptr, stream);
    math::CheckLaunch("SyncBatchNormTraining");
    Fetch(first_, sum0, c, stream);
    first_[c] = static_cast<double>(sh.n * sh.s);
    SumOverReplicas(replicas, first_);
    const double count = first_[c];
    if (!(count > 0)) Fail("the global batch is empty");
    for (size_t i = 0; i < c; ++i) center_[i] = first_[i] / count;
    Send(center, center_, c, stream);
    // Pass 2: [sum (x - centre)..., sum (x - centre)^2...] -> mean and population variance.
    norm::ChannelSums(sh, x.data<float>(), center, sum0, sum1, stream);
    math::CheckLaunch("SyncBatchNormTraining");
    Fetch(second_, sum0, 2 * c, stream);
    SumOverReplicas(replicas, second_);
    for (size_t i = 0; i < c; ++i) MeanVarFromCenteredSums(center_[i], second_[i], second_[c + i], count, &mean_[i], &var_[i]);
    float* mean = ctx.HasOutput(3) ? ctx.Output(3).data<float>() : stats_.data<float>();
    float* var = ctx.HasOutput(4) ? ctx.Output(4).data<float>() : stats_.data<float>() + c;
    Send(mean, mean_, c, stream);
    Send(var, var_, c, stream);
    norm::NormalizeChannels(sh, x.data<float>(), mean, var, node_.GetFloat("epsilon", 1e-5f), ctx.Input(1).data<float>(),
                            ctx.Input(2).data<float>(), ctx.Output(0).data<float>(), stream);
    if (ctx.HasOutput(1))
      norm::UpdateRunningStatistic(sh.c, ctx.Input(3).data<float>(), mean, 1.0, momentum_, ctx.Output(1).data<float>(),
                                   stream);
    if (ctx.HasOutput(2)) {
      double factor = 1.0;
      if (unbiased_count_ > 0) {
        const double m = unbiased_count_ * (replicas ? replicas->replicas() : 1);  // values per channel, all replicas
        factor = m / (m - 1);
      }
      norm::UpdateRunningStatistic(sh.c, ctx.Input(4).data<float>(), var, factor, momentum_,
                                   ctx.Output(2).data<float>(), stream);
    }
    math::CheckLaunch("SyncBatchNormTraining");
  }

 private:
  float momentum_ = 0.9f;
  double unbiased_count_ = 0.0;
  Tensor sums_, stats_;
  std::vector<double> first_, second_, center_;
  std::vector<float> mean_, var_;
};

// SyncBatchNormalizationGrad(dY, X, scale, mean, var) -> dX, dScale, dBias; dScale and dBias
// are this replica's own (the gradient allreduce averages them, as DDP does).
class SyncBatchNormGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(1);
    const int64_t channels = CheckBatchNormGradInputs(node_, ctx);
    if (node_.GetInt("relu", 0) != 0) Fail("relu=1 is not supported with synchronised batch normalization");
    if (x.numel() == 0) Fail("training mode needs a non-empty batch");
    ctx.SetOutput(0, DType::kFloat32, x.shape());
    ctx.SetOutput(1, DType::kFloat32, {channels});
    ctx.SetOutput(2, DType::kFloat32, {channels});
    const size_t c = static_cast<size_t>(channels);
    sums_ = Tensor::Empty(DType::kFloat64, {4, channels}, device_);  // sums, then a, b, k, mean
    sums_host_.assign(2 * c + 1, 0.0);
    coef_.assign(4 * c, 0.0);
    stats_.assign(3 * c, 0.f);  // scale, mean, var
    dscale_.assign(c, 0.f);
    dbias_.assign(c, 0.f);
  }
  void Compute(KernelContext& ctx) override {
    const cudaStream_t stream = math::ComputeStream(device_.index);
    const Tensor& x = ctx.Input(1);
    const norm::ChannelShape sh = ChannelsOf(x);
    const size_t c = static_cast<size_t>(sh.c);
    double* dev = sums_.data<double>();
    norm::ChannelGradientSums(sh, ctx.Input(0).data<float>(), x.data<float>(), ctx.Input(3).data<float>(), dev,
                              dev + c, stream);
    math::CheckLaunch("SyncBatchNormalizationGrad");
    for (int k = 0; k < 3; ++k)
      OT_CUDA_CHECK(cudaMemcpyAsync(stats_.data() + k * c, ctx.Input(2 + k).raw(), c * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream));
    Fetch(sums_host_, dev, 2 * c, stream);
    const float* scale = stats_.data();
    const float* mean = scale + c;
    const float* var = mean + c;
    const double eps = node_.GetFloat("epsilon", 1e-5f);
    std::vector<double> invstd(c);
    for (size_t i = 0; i < c; ++i) {
      invstd[i] = 1.0 / std::sqrt(static_cast<double>(var[i]) + eps);
      dbias_[i] = static_cast<float>(sums_host_[i]);
      dscale_[i] = static_cast<float>(sums_host_[c + i] * invstd[i]);
    }
    if (ctx.HasOutput(1)) Send(ctx.Output(1).raw(), dscale_, c, stream);
    if (ctx.HasOutput(2)) Send(ctx.Output(2).raw(), dbias_, c, stream);
    sums_host_[2 * c] = static_cast<double>(sh.n * sh.s);
    SumOverReplicas(ctx.cross_replica(), sums_host_);
    const double count = sums_host_[2 * c];
    for (size_t i = 0; i < c; ++i) {
      const BatchNormGradCoefficients co =
          BatchNormGradCoefficientsFor(scale[i], invstd[i], sums_host_[i], sums_host_[c + i], count);
      coef_[i] = co.a;
      coef_[c + i] = co.b;
      coef_[2 * c + i] = co.k;
      coef_[3 * c + i] = mean[i];
    }
    if (!ctx.HasOutput(0)) {
      OT_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors stay in use until the copies are done
      return;
    }
    Send(dev, coef_, 4 * c, stream);
    norm::ChannelAffineCombination(sh, ctx.Input(0).data<float>(), x.data<float>(), dev, ctx.Output(0).data<float>(),
                                   stream);
    math::CheckLaunch("SyncBatchNormalizationGrad");
    OT_CUDA_CHECK(cudaStreamSynchronize(stream));  // as above: the next Compute rewrites the host vectors
  }

 private:
  Tensor sums_;
  std::vector<double> sums_host_, coef_;
  std::vector<float> stats_, dscale_, dbias_;
};

OT_REGISTER_KERNEL(kGradDomain, "SyncBatchNormTraining", 1, kLatestOpset, DeviceType::kCUDA, SyncBatchNormKernel);
OT_REGISTER_KERNEL(kGradDomain, "SyncBatchNormalizationGrad", 1, kLatestOpset, DeviceType::kCUDA,
                   SyncBatchNormGradKernel);

}  // namespace
}  // namespace ot::cuda
