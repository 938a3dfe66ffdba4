// BatchNormalization (inference and training mode) and InstanceNormalization, both on
// oneDNN's batch-normalization primitive.
//
// BatchNormalization outputs by mode:
//   inference: Y, normalised with the running mean and variance inputs.
//   training (opset 14+: training_mode=1; opsets 7-13: any output past Y requested;
//   opsets 1-6: is_test=0): Y normalised with the batch's own mean and population
//   variance (computed in double, channel_statistics.h, and given to oneDNN), and
//     1 running_mean = input_mean * momentum + batch_mean * (1 - momentum)
//     2 running_var  = input_var  * momentum + batch_var  * (1 - momentum)
//     3 saved_mean   = batch_mean
//     4 saved_var    = batch_var (population variance, before epsilon)
//   Outputs 3 and 4 are in the spec up to opset 13; at opset 14+ a training graph may
//   still request them (the gradient of BatchNormalization reads them).
// Batch normalization and its gradient take data in any layout (a convolution's blocked
// one) and give Y and dX in the layout of X.
// relu=1 (graph/passes/fusion.h): BatchNormTraining's Y is ReLU(Y) and its output 5, when
// requested, the mask oneDNN's fuse_norm_relu records (its workspace, uint8, opaque); the
// gradient with relu=1 takes dReLU(Y) and that mask as input 5.
// clip_min / clip_max (graph/passes/fusion.h's FuseBatchNormClip): Y is clipped to them in
// the normalising pass (runtime/cpu/norm/normalize_clip.h); the gradient is unchanged.
// SyncBatchNormTraining and SyncBatchNormalizationGrad (--sync-bn) are BatchNormTraining and
// BatchNormalizationGrad over the global batch of a data-parallel step: sync_batchnorm.h.
#include <unordered_map>
#include <vector>

#include "graph/op_domains.h"

#include "runtime/ops/math/batchnorm_math.h"
#include "runtime/cpu/norm/channel_statistics.h"
#include "runtime/cpu/norm/normalize_clip.h"
#include "runtime/cpu/layout/dnnl_layout.h"
#include "runtime/cpu/norm/sync_batchnorm.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/math/sync_bn_math.h"
#include "runtime/ops/checks/norm_checks.h"

namespace ot {
namespace cpu {
namespace {

// oneDNN batch normalization with per-channel scale and shift over data whose channels
// are dim 1, normalising with given mean and variance: the running statistics, or the
// batch's own that Statistics computes first (in double: channel_statistics.h).
class BatchNormPrimitive {
 public:
  // relu: ReLU fused into the output; mask: also record where it passed (the workspace
  // the fused gradient reads), whose size in bytes is then workspace_bytes().
  void Build(const dnnl::memory::desc& data_desc, int64_t channels, float epsilon, bool relu = false,
             bool mask = false) {
    data_desc_ = data_desc;
    channel_desc_ = PlainDesc(Shape{channels}, DType::kFloat32);
    auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift |
                 dnnl::normalization_flags::use_global_stats;
    if (relu) flags |= dnnl::normalization_flags::fuse_norm_relu;
    const auto prop = mask ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    try {
      dnnl::batch_normalization_forward::primitive_desc pd(
          dnnl::batch_normalization_forward::desc(prop, data_desc_, epsilon, flags), Engine());
      workspace_desc_ = mask ? pd.workspace_desc() : dnnl::memory::desc();
      prim_ = dnnl::batch_normalization_forward(pd);
    } catch (const dnnl::error& e) {
      throw UnsupportedError(std::string("oneDNN has no batch normalization for this configuration: ") + e.what());
    }
  }
  size_t workspace_bytes() const { return workspace_desc_.get_size(); }

  // The batch's per-channel mean and population variance of src; with replicas, of
  // the global batch.
  void Statistics(const void* src, float* mean, float* variance, CrossReplicaSum* replicas = nullptr) const {
    if (replicas) {
      GlobalChannelStatistics(data_desc_, static_cast<const float*>(src), replicas, mean, variance);
      return;
    }
    ChannelStatistics(data_desc_, static_cast<const float*>(src), mean, variance);
  }

  void Run(void* src, void* dst, void* scale, void* shift, void* mean, void* variance, void* mask = nullptr) const {
    auto channel = [&](void* p) { return dnnl::memory(channel_desc_, Engine(), p); };
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, dnnl::memory(data_desc_, Engine(), src)},
                                                  {DNNL_ARG_DST, dnnl::memory(data_desc_, Engine(), dst)},
                                                  {DNNL_ARG_SCALE, channel(scale)},
                                                  {DNNL_ARG_SHIFT, channel(shift)},
                                                  {DNNL_ARG_MEAN, channel(mean)},
                                                  {DNNL_ARG_VARIANCE, channel(variance)}};
    if (workspace_bytes() > 0) args[DNNL_ARG_WORKSPACE] = dnnl::memory(workspace_desc_, Engine(), mask);
    prim_.execute(Stream(), args);
  }

 private:
  dnnl::memory::desc data_desc_, channel_desc_, workspace_desc_;
  dnnl::batch_normalization_forward prim_;
};

// oneDNN takes 2 to 5 dims; more spatial dims fold into one (statistics are per channel
// over all of them anyway).
Shape NormalizationShape(const Shape& shape) {
  if (shape.size() <= 5) return shape;
  return {shape[0], shape[1], NumElements(Shape(shape.begin() + 2, shape.end()))};
}

// The descriptor batch normalization runs on: X's own layout, or plain.
dnnl::memory::desc NormalizationDesc(const Tensor& x) {
  return x.is_plain() ? PlainDesc(NormalizationShape(x.shape()), DType::kFloat32) : DescOf(x);
}

class BatchNormKernel final : public OpKernel {
 public:
  explicit BatchNormKernel(const KernelInfo& info) : OpKernel(info) {}

  // X in any layout; the per-channel inputs are always plain (1-D).
  bool AcceptsLayouts(const KernelContext& ctx) const override {
    for (int i = 1; i < ctx.NumInputs(); ++i)
      if (ctx.OptionalInput(i) && !ctx.OptionalInput(i)->is_plain()) return false;
    return true;
  }

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const int64_t channels = CheckBatchNormInputs(node_, ctx);
    training_ = BatchNormTrainingMode(node_, opset_, ctx);
    sync_ = node_.op_type == "SyncBatchNormTraining";
    relu_ = node_.GetInt("relu", 0) != 0;
    if (relu_ && sync_) Fail("relu=1 is not supported with synchronised batch normalization");
    if (ctx.HasOutput(5) && !(relu_ && training_)) Fail("output 5 (the ReLU mask) needs relu=1 and training mode");
    clip_ = node_.HasAttr("clip_min") || node_.HasAttr("clip_max");
    if (clip_) {
      clip_lo_ = node_.GetFloat("clip_min", 0.f);
      clip_hi_ = node_.GetFloat("clip_max", 0.f);
      if (relu_ || sync_ || !(clip_lo_ <= 0.f && clip_hi_ >= 0.f))
        Fail("clip_min/clip_max need relu=0, no synchronisation and clip_min <= 0 <= clip_max");
      clip_shape_.batch = x.shape().empty() ? 0 : x.shape()[0];
      clip_shape_.channels = channels;
      clip_shape_.spatial = clip_shape_.batch * channels > 0 ? x.numel() / (clip_shape_.batch * channels) : 0;
      clip_shape_.block = x.is_plain() ? 1 : ChannelBlockOf(x);  // 0: another layout
      epsilon_ = node_.GetFloat("epsilon", 1e-5f);
    }
    momentum_ = node_.GetFloat("momentum", 0.9f);
    // PyTorch updates the running variance with the unbiased batch variance (times
    // M / (M - 1) over the M values of a channel); the ONNX operator with the population one.
    const int64_t count = x.shape().size() >= 2 && x.shape()[1] > 0 ? x.numel() / x.shape()[1] : 0;
    unbiased_count_ = node_.GetInt("unbiased_running_var", 0) != 0 && count > 1
                      ? static_cast<double>(count) : 0.0;
    ctx.SetOutput(0, DType::kFloat32, x.shape(), x.layout());
    for (int i = 1; i < 5; ++i) ctx.SetOutput(i, DType::kFloat32, {channels});
    if (x.numel() == 0) {
      if (training_) Fail("training mode needs a non-empty batch to compute statistics");
      return;
    }
    batch_mean_.assign(static_cast<size_t>(channels), 0.f);
    batch_var_.assign(static_cast<size_t>(channels), 0.f);
    prim_.Build(NormalizationDesc(x), channels, node_.GetFloat("epsilon", 1e-5f), relu_, ctx.HasOutput(5));
    if (ctx.HasOutput(5)) ctx.SetOutput(5, DType::kUInt8, {static_cast<int64_t>(prim_.workspace_bytes())});
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.numel() == 0) return;
    void* scale = ctx.Input(1).raw();
    void* shift = ctx.Input(2).raw();
    if (!training_) {
      Normalize(ctx, scale, shift, ctx.Input(3).data<float>(), ctx.Input(4).data<float>(), nullptr);
      return;
    }
    float* mean = ctx.HasOutput(3) ? ctx.Output(3).data<float>() : batch_mean_.data();
    float* var = ctx.HasOutput(4) ? ctx.Output(4).data<float>() : batch_var_.data();
    prim_.Statistics(x.raw(), mean, var, sync_ ? ctx.cross_replica() : nullptr);
    Normalize(ctx, scale, shift, mean, var, ctx.HasOutput(5) ? ctx.Output(5).raw() : nullptr);
    // Element-wise, so an output may share its buffer with the running-stat input.
    UpdateRunningStat(ctx, 1, ctx.Input(3).data<float>(), mean, 1.0);
    double factor = 1.0;
    if (unbiased_count_ > 0) {
      const CrossReplicaSum* replicas = sync_ ? ctx.cross_replica() : nullptr;
      const double m = unbiased_count_ * (replicas ? replicas->replicas() : 1);  // values per channel, all replicas
      factor = m / (m - 1);
    }
    UpdateRunningStat(ctx, 2, ctx.Input(4).data<float>(), var, factor);
  }

 private:
  // Y from X with the given statistics: oneDNN's primitive, or with clip_min/clip_max our
  // one pass (plain and channel-blocked data; another layout: oneDNN's, then the clip).
  void Normalize(KernelContext& ctx, void* scale, void* shift, const float* mean, const float* var, void* mask) {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    if (clip_ && clip_shape_.block > 0) {
      NormalizeClip(clip_shape_, x.data<float>(), y.data<float>(), mean, var, static_cast<const float*>(scale),
                    static_cast<const float*>(shift), epsilon_, clip_lo_, clip_hi_);
      return;
    }
    prim_.Run(x.raw(), y.raw(), scale, shift, const_cast<float*>(mean), const_cast<float*>(var), mask);
    if (clip_) ClipInPlace(y.data<float>(), static_cast<int64_t>(y.nbytes() / sizeof(float)), clip_lo_, clip_hi_);
  }

  void UpdateRunningStat(KernelContext& ctx, int output, const float* running, const float* batch,
                         double factor) const {
    if (!ctx.HasOutput(output)) return;
    float* out = ctx.Output(output).data<float>();
    const int64_t n = ctx.Output(output).numel();
    for (int64_t c = 0; c < n; ++c)
      out[c] = RunningStatistic(running[c], batch[c], factor, momentum_);
  }

  bool training_ = false;
  bool relu_ = false;  // relu=1: Y = ReLU(normalised X)
  bool clip_ = false;  // clip_min / clip_max: Y = clip(normalised X)
  float clip_lo_ = 0.f, clip_hi_ = 0.f, epsilon_ = 1e-5f;
  NormalizeClipShape clip_shape_;
  bool sync_ = false;  // SyncBatchNormTraining: statistics over every replica's batch
  float momentum_ = 0.9f;
  double unbiased_count_ = 0;  // > 0: values per channel per replica (unbiased running variance)
  std::vector<float> batch_mean_, batch_var_;  // when saved_mean / saved_var are not outputs
  BatchNormPrimitive prim_;
};

// BatchNormalizationGrad(dY, X, scale, saved_mean, saved_var[, mask]) -> dX, dScale, dBias
// on oneDNN's backward primitive; saved_var is the population variance before epsilon.
// relu=1: dY is the gradient of the fused ReLU's output and mask the forward's output 5.
class BatchNormGradKernel final : public OpKernel {
 public:
  explicit BatchNormGradKernel(const KernelInfo& info) : OpKernel(info) {}

  // dY and X in any layout (dY is brought to X's); the per-channel inputs and the mask plain.
  bool AcceptsLayouts(const KernelContext& ctx) const override {
    for (int i = 2; i < ctx.NumInputs(); ++i)
      if (ctx.OptionalInput(i) && !ctx.OptionalInput(i)->is_plain()) return false;
    return true;
  }

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    const int64_t channels = CheckBatchNormGradInputs(node_, ctx);
    ctx.SetOutput(0, DType::kFloat32, x.shape(), x.layout());
    ctx.SetOutput(1, DType::kFloat32, {channels});
    ctx.SetOutput(2, DType::kFloat32, {channels});
    if (x.numel() == 0) Fail("training mode needs a non-empty batch");
    data_desc_ = NormalizationDesc(x);
    dy_ = Reorder(dy.is_plain() ? PlainDesc(NormalizationShape(dy.shape()), DType::kFloat32) : DescOf(dy), data_desc_);
    channel_desc_ = PlainDesc(Shape{channels}, DType::kFloat32);
    const float eps = node_.GetFloat("epsilon", 1e-5f);
    scratch_.assign(static_cast<size_t>(channels) * 2, 0.f);
    scratch_dx_.resize(ctx.HasOutput(0) ? 0 : data_desc_.get_size() / sizeof(float));
    sync_ = node_.op_type == "SyncBatchNormalizationGrad";
    relu_ = node_.GetInt("relu", 0) != 0;
    if (relu_ && sync_) Fail("relu=1 is not supported with synchronised batch normalization");
    if (relu_ != (ctx.OptionalInput(5) != nullptr))
      Fail(relu_ ? "relu=1 needs the forward's ReLU mask as input 5" : "input 5 (a ReLU mask) needs relu=1");
    if (sync_) return;  // sync_batchnorm.h, no oneDNN primitive
    auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    // The mask's format is the forward's: a forward_training primitive with the same data
    // descriptor and fuse_norm_relu records the same workspace whether or not it is given
    // the statistics (use_global_stats), which the forward kernel is and this hint is not.
    if (relu_) flags |= dnnl::normalization_flags::fuse_norm_relu;
    auto fwd = dnnl::batch_normalization_forward::primitive_desc(
        dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, data_desc_, eps, flags), Engine());
    dnnl::batch_normalization_backward::desc bwd(dnnl::prop_kind::backward, data_desc_, data_desc_, eps, flags);
    dnnl::batch_normalization_backward::primitive_desc pd(bwd, Engine(), fwd);
    prim_ = dnnl::batch_normalization_backward(pd);
    zero_shift_.assign(static_cast<size_t>(channels), 0.f);
    if (relu_) {
      workspace_desc_ = pd.workspace_desc();
      const Tensor& mask = ctx.Input(5);
      if (mask.dtype() != DType::kUInt8 || mask.numel() != static_cast<int64_t>(workspace_desc_.get_size()))
        Fail("input 5 " + mask.Describe() + " is not the ReLU mask of a fused BatchNormTraining on " +
             x.Describe() + " (" + std::to_string(workspace_desc_.get_size()) + " uint8 values)");
    }
  }

  void Compute(KernelContext& ctx) override {
    auto channel = [&](void* p) { return dnnl::memory(channel_desc_, Engine(), p); };
    const size_t c = scratch_.size() / 2;
    void* dx = ctx.HasOutput(0) ? ctx.Output(0).raw() : scratch_dx_.data();
    void* dscale = ctx.HasOutput(1) ? ctx.Output(1).raw() : scratch_.data();
    void* dshift = ctx.HasOutput(2) ? ctx.Output(2).raw() : scratch_.data() + c;
    if (sync_) {
      const float* dy = static_cast<const float*>(dy_.Apply(ctx.Input(0).raw(), 0).get_data_handle());
      GlobalBatchNormGrad(data_desc_, dy, ctx.Input(1).data<float>(), ctx.Input(2).data<float>(),
                          ctx.Input(3).data<float>(), ctx.Input(4).data<float>(), node_.GetFloat("epsilon", 1e-5f),
                          ctx.cross_replica(), static_cast<float*>(dx), static_cast<float*>(dscale),
                          static_cast<float*>(dshift));
      return;
    }
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_DIFF_DST, dy_.Apply(ctx.Input(0).raw(), 0)},
        {DNNL_ARG_SRC, dnnl::memory(data_desc_, Engine(), ctx.Input(1).raw())},
        {DNNL_ARG_SCALE, channel(ctx.Input(2).raw())},
        {DNNL_ARG_SHIFT, channel(zero_shift_.data())},  // oneDNN 2.6 wants it, unread
        {DNNL_ARG_MEAN, channel(ctx.Input(3).raw())},
        {DNNL_ARG_VARIANCE, channel(ctx.Input(4).raw())},
        {DNNL_ARG_DIFF_SRC, dnnl::memory(data_desc_, Engine(), dx)},
        {DNNL_ARG_DIFF_SCALE, channel(dscale)},
        {DNNL_ARG_DIFF_SHIFT, channel(dshift)}};
    if (relu_) args[DNNL_ARG_WORKSPACE] = dnnl::memory(workspace_desc_, Engine(), ctx.Input(5).raw());
    prim_.execute(Stream(), args);
  }

 private:
  Reorder dy_;
  dnnl::memory::desc data_desc_, channel_desc_, workspace_desc_;
  dnnl::batch_normalization_backward prim_;
  std::vector<float> scratch_, scratch_dx_, zero_shift_;
  bool relu_ = false;  // relu=1: input 0 is dReLU(Y), input 5 the forward's mask
  bool sync_ = false;  // SyncBatchNormalizationGrad: sums over every replica's batch
};

// Instance normalization is batch normalization of the N x C instances seen as channels
// of a batch of one: [1, N*C, D1*D2*...], with the per-channel scale and bias tiled N times.
class InstanceNormKernel final : public OpKernel {
 public:
  explicit InstanceNormKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    RequireFloat32Inputs(node_, ctx, 3);
    if (x.rank() < 3) Fail("input " + x.Describe() + " must be N x C x D1 x ...");
    const int64_t channels = x.dim(1);
    RequirePerChannelInputs(node_, ctx, 1, 3, channels);
    ctx.SetOutput(0, DType::kFloat32, x.shape());
    if (x.numel() == 0) return;
    const int64_t instances = x.dim(0) * channels;
    for (auto* v : {&scale_, &shift_, &mean_, &var_}) v->assign(static_cast<size_t>(instances), 0.f);
    prim_.Build(PlainDesc(Shape{1, instances, x.numel() / instances}, DType::kFloat32), instances,
                node_.GetFloat("epsilon", 1e-5f));
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.numel() == 0) return;
    const float* scale = ctx.Input(1).data<float>();
    const float* bias = ctx.Input(2).data<float>();
    const size_t channels = static_cast<size_t>(x.dim(1));
    for (size_t i = 0; i < scale_.size(); ++i) {
      scale_[i] = scale[i % channels];
      shift_[i] = bias[i % channels];
    }
    prim_.Statistics(x.raw(), mean_.data(), var_.data());
    prim_.Run(x.raw(), ctx.Output(0).raw(), scale_.data(), shift_.data(), mean_.data(), var_.data());
  }

 private:
  std::vector<float> scale_, shift_, mean_, var_;  // one entry per instance
  BatchNormPrimitive prim_;
};

OT_REGISTER_CPU_KERNEL("BatchNormalization", 1, kLatestOpset, BatchNormKernel);
OT_REGISTER_KERNEL(kGradDomain, "BatchNormTraining", 1, kLatestOpset, DeviceType::kCPU, BatchNormKernel);
OT_REGISTER_KERNEL(kGradDomain, "BatchNormalizationGrad", 1, kLatestOpset, DeviceType::kCPU, BatchNormGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "SyncBatchNormTraining", 1, kLatestOpset, DeviceType::kCPU, BatchNormKernel);
OT_REGISTER_KERNEL(kGradDomain, "SyncBatchNormalizationGrad", 1, kLatestOpset, DeviceType::kCPU, BatchNormGradKernel);
OT_REGISTER_CPU_KERNEL("InstanceNormalization", 1, kLatestOpset, InstanceNormKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
