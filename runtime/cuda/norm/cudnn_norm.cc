// BatchNormalization (inference and training mode), org.onnxtrain BatchNormTraining and
// BatchNormalizationGrad on cuDNN's spatial batch normalization, and LRN on cuDNN's
// cross-channel LRN. Semantics are those of runtime/cpu/norm/batchnorm.cc and lrn.cc:
//   training mode: Y from the batch's mean and population variance;
//     running_mean = input_mean * momentum + batch_mean * (1 - momentum)
//     running_var  = input_var  * momentum + batch_var  * (1 - momentum)
//     saved_mean = batch_mean, saved_var = batch_var (population variance, before epsilon);
//     with unbiased_running_var=1 (PyTorch's models) running_var takes the unbiased one.
// cuDNN's running update is asked for at factor 1 into scratch buffers, which gives the
// batch mean and the unbiased batch variance as cuDNN computed them; a small kernel
// (cudnn_kernels.cu, the formulas of runtime/ops/math/batchnorm_math.h) makes saved_var and
// the running statistics from those. (Rebuilding the variance from cuDNN's saved
// 1/sqrt(var + eps) cancels to noise when var is far below eps.)
#include <string>

#include "graph/op_domains.h"
#include "runtime/cuda/cudnn_kernels.h"
#include "runtime/cuda/cudnn_util.h"
#include "runtime/ops/checks/norm_checks.h"

namespace ot::cuda {
namespace {

class BatchNormKernel final : public OpKernel {
 public:
  explicit BatchNormKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const int64_t channels = CheckBatchNormInputs(node_, ctx);
    // graph/passes/fusion.h's fused ReLU is a CPU fusion (the training session applies it
    // for the CPU device only); never ignore it.
    if (node_.GetInt("relu", 0) != 0) Fail("relu=1 (BatchNorm+ReLU fusion) has no CUDA kernel");
    training_ = BatchNormTrainingMode(node_, opset_, ctx);
    momentum_ = node_.GetFloat("momentum", 0.9f);
    epsilon_ = node_.GetFloat("epsilon", 1e-5f);
    if (epsilon_ < CUDNN_BN_MIN_EPSILON) Fail("epsilon " + std::to_string(epsilon_) + " must not be negative");
    ctx.SetOutput(0, DType::kFloat32, x.shape());
    for (int i = 1; i < 5; ++i) ctx.SetOutput(i, DType::kFloat32, {channels});
    channels_ = channels;
    empty_ = x.numel() == 0;
    if (empty_) {
      if (training_) Fail("training mode needs a non-empty batch to compute statistics");
      return;
    }
    SetTensorDesc(x_, ChannelFoldedShape(x.shape()), node_.Describe());
    OT_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(param_.get(), x_.get(), CUDNN_BATCHNORM_SPATIAL));
    if (training_) {
      inv_std_ = Tensor::Empty(DType::kFloat32, {channels}, device_);
      if (!ctx.HasOutput(3)) mean_scratch_ = Tensor::Empty(DType::kFloat32, {channels}, device_);
      batch_stats_ = Tensor::Empty(DType::kFloat32, {2, channels}, device_);
      count_ = static_cast<double>(x.numel() / channels);
      unbiased_running_ = node_.GetInt("unbiased_running_var", 0) != 0;
    }
  }

  void Compute(KernelContext& ctx) override {
    if (empty_) return;
    DeviceContext& dc = Context(device_.index);
    const Tensor& x = ctx.Input(0);
    const void* scale = ctx.Input(1).raw();
    const void* bias = ctx.Input(2).raw();
    if (!training_) {
      OT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(dc.cudnn, CUDNN_BATCHNORM_SPATIAL, One(), Zero(), x_.get(),
                                                             x.raw(), x_.get(), ctx.Output(0).raw(), param_.get(), scale,
                                                             bias, ctx.Input(3).raw(), ctx.Input(4).raw(), epsilon_));
      return;
    }
    float* mean = ctx.HasOutput(3) ? ctx.Output(3).data<float>() : mean_scratch_.data<float>();
    // cuDNN's running statistics at factor 1 are the batch mean and unbiased variance
    // (factor 1 still reads the old values, times 0: they are cleared so no NaN leaks in).
    float* batch_mean = batch_stats_.data<float>();
    float* unbiased_var = batch_mean + channels_;
    OT_CUDA_CHECK(cudaMemsetAsync(batch_mean, 0, batch_stats_.nbytes(), dc.compute));
    OT_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
        dc.cudnn, CUDNN_BATCHNORM_SPATIAL, One(), Zero(), x_.get(), x.raw(), x_.get(), ctx.Output(0).raw(), param_.get(),
        scale, bias, 1.0, batch_mean, unbiased_var, epsilon_, mean, inv_std_.raw()));
    auto out = [&](int i) { return ctx.HasOutput(i) ? ctx.Output(i).data<float>() : nullptr; };
    OT_CUDA_CHECK(BatchNormFinishStats(dc.compute, channels_, count_, unbiased_running_, momentum_, mean, unbiased_var,
                                       ctx.Input(3).data<float>(), ctx.Input(4).data<float>(), out(1), out(2), out(4)));
  }

 private:
  bool training_ = false, empty_ = false, unbiased_running_ = false;
  float momentum_ = 0.9f, epsilon_ = 1e-5f;
  int64_t channels_ = 0;
  double count_ = 0;  // values per channel in the batch
  TensorDesc x_, param_;
  Tensor inv_std_, mean_scratch_;  // device scratch, one value per channel
  Tensor batch_stats_;             // cuDNN's batch mean and unbiased variance (2 x C)
};

// BatchNormalizationGrad(dY, X, scale, saved_mean, saved_var) -> dX, dScale, dBias;
// saved_var is the population variance before epsilon (turned into cuDNN's saved
// 1/sqrt(var + eps) first).
class BatchNormGradKernel final : public OpKernel {
 public:
  explicit BatchNormGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(1);
    const int64_t channels = CheckBatchNormGradInputs(node_, ctx);
    if (node_.GetInt("relu", 0) != 0) Fail("relu=1 (BatchNorm+ReLU fusion) has no CUDA kernel");
    RequirePerChannelInputs(node_, ctx, 2, 5, channels);
    ctx.SetOutput(0, DType::kFloat32, x.shape());
    ctx.SetOutput(1, DType::kFloat32, {channels});
    ctx.SetOutput(2, DType::kFloat32, {channels});
    if (x.numel() == 0) Fail("training mode needs a non-empty batch");
    epsilon_ = node_.GetFloat("epsilon", 1e-5f);
    if (epsilon_ < CUDNN_BN_MIN_EPSILON) Fail("epsilon " + std::to_string(epsilon_) + " must not be negative");
    channels_ = channels;
    SetTensorDesc(x_, ChannelFoldedShape(x.shape()), node_.Describe());
    OT_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(param_.get(), x_.get(), CUDNN_BATCHNORM_SPATIAL));
    inv_std_ = Tensor::Empty(DType::kFloat32, {channels}, device_);
    dx_scratch_ = ctx.HasOutput(0) ? Tensor() : Tensor::Empty(DType::kFloat32, x.shape(), device_);
    param_scratch_ = ctx.HasOutput(1) && ctx.HasOutput(2) ? Tensor() : Tensor::Empty(DType::kFloat32, {2, channels}, device_);
  }

  void Compute(KernelContext& ctx) override {
    DeviceContext& dc = Context(device_.index);
    float* inv_std = inv_std_.data<float>();
    OT_CUDA_CHECK(BatchNormInvStd(dc.compute, channels_, epsilon_, ctx.Input(4).data<float>(), inv_std));
    void* dx = ctx.HasOutput(0) ? ctx.Output(0).raw() : dx_scratch_.raw();
    float* dscale = ctx.HasOutput(1) ? ctx.Output(1).data<float>() : param_scratch_.data<float>();
    float* dbias = ctx.HasOutput(2) ? ctx.Output(2).data<float>() : param_scratch_.data<float>() + channels_;
    OT_CUDNN_CHECK(cudnnBatchNormalizationBackward(dc.cudnn, CUDNN_BATCHNORM_SPATIAL, One(), Zero(), One(), Zero(),
                                                   x_.get(), ctx.Input(1).raw(), x_.get(), ctx.Input(0).raw(), x_.get(),
                                                   dx, param_.get(), ctx.Input(2).raw(), dscale, dbias, epsilon_,
                                                   ctx.Input(3).raw(), inv_std));
  }

 private:
  float epsilon_ = 1e-5f;
  int64_t channels_ = 0;
  TensorDesc x_, param_;
  Tensor inv_std_, dx_scratch_, param_scratch_;
};

// LRN across channels: y = x / (bias + alpha / size * sum of x^2 over the window)^beta,
// the window [c - floor((size-1)/2), c + ceil((size-1)/2)] as in ONNX (and cuDNN, so even
// sizes work here too).
class LrnKernel final : public OpKernel {
 public:
  explicit LrnKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    const LrnAttrs a = ReadLrnAttrs(node_, x);
    const int64_t size = a.size;
    const float alpha = a.alpha, beta = a.beta, bias = a.bias;
    if (size > CUDNN_LRN_MAX_N) Unsupported("size " + std::to_string(size) + " (cuDNN's LRN window is at most 16)");
    if (beta < CUDNN_LRN_MIN_BETA) Unsupported("beta " + std::to_string(beta) + " below cuDNN's minimum 0.01");
    if (bias < CUDNN_LRN_MIN_K) Unsupported("bias " + std::to_string(bias) + " below cuDNN's minimum 1e-5");
    ctx.SetOutput(0, x.dtype(), x.shape());
    empty_ = x.numel() == 0;
    if (empty_) return;
    SetTensorDesc(x_, ChannelFoldedShape(x.shape()), node_.Describe());
    OT_CUDNN_CHECK(cudnnSetLRNDescriptor(lrn_.get(), static_cast<unsigned>(size), alpha, beta, bias));
  }

  void Compute(KernelContext& ctx) override {
    if (empty_) return;
    DeviceContext& dc = Context(device_.index);
    OT_CUDNN_CHECK(cudnnLRNCrossChannelForward(dc.cudnn, lrn_.get(), CUDNN_LRN_CROSS_CHANNEL_DIM1, One(), x_.get(),
                                               ctx.Input(0).raw(), Zero(), x_.get(), ctx.Output(0).raw()));
  }

 private:
  bool empty_ = false;
  TensorDesc x_;
  LrnDesc lrn_;
};

OT_REGISTER_CUDA_KERNEL("BatchNormalization", 1, kLatestOpset, BatchNormKernel);
OT_REGISTER_KERNEL(kGradDomain, "BatchNormTraining", 1, kLatestOpset, ::ot::DeviceType::kCUDA, BatchNormKernel);
OT_REGISTER_KERNEL(kGradDomain, "BatchNormalizationGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, BatchNormGradKernel);
OT_REGISTER_CUDA_KERNEL("LRN", 1, kLatestOpset, LrnKernel);

}  // namespace
}  // namespace ot::cuda
