// LayerNormalization (opset 17) and its gradient LayerNormalizationGrad (org.onnxtrain)
// over X seen as [outer, inner] around `axis` (the normalised axes are axis..rank-1);
// stash_type 1 (float) only. Where Scale (and B) cover the whole normalised tail (the
// usual [D] of a transformer), both run on oneDNN's layer_normalization primitives (the
// gradient with row statistics computed here in double from X); otherwise, as row loops
// with statistics accumulated in double. RMSNormalization (opset 23) and its gradient
// share the geometry, as row loops.
//
//   LayerNormalization(X, Scale[, B]) -> Y[, Mean, InvStdDev]
//     Mean and InvStdDev have X's shape with the normalised axes set to 1.
//   LayerNormalizationGrad(dY, X, Scale) -> dX, dScale, dBias (each optional)
//     recomputes the row statistics from X; dScale and dBias are shaped like the
//     normalised tail X.shape[axis:] (the rule sums them down to Scale's and B's shapes).
//   RMSNormalization(X, scale) -> Y = X * r * scale, r = 1 / sqrt(mean(X^2) + epsilon) per row
//   RMSNormalizationGrad(dY, X, scale) -> dX, dScale (each optional); with g = dY * scale,
//     dX = r * (g - X * r^2 * mean(g * X)) per row, dScale = sum over rows of dY * X * r,
//     shaped like the normalised tail (summed down to scale's shape by the rule).
#include <cmath>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/cpu/layout/dnnl_util.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/checks/norm_checks.h"
#include "runtime/ops/math/norm_math.h"

namespace ot {
namespace cpu {
namespace {

void IndexTail(const Shape& tail, const std::vector<int64_t>& strides, std::vector<int64_t>* offsets) {
  const int64_t n = NumElements(tail);
  offsets->assign(static_cast<size_t>(n), 0);
  std::vector<int64_t> idx(tail.size(), 0);
  int64_t o = 0;
  for (int64_t i = 0; i < n; ++i) {
    (*offsets)[static_cast<size_t>(i)] = o;
    for (size_t d = tail.size(); d-- > 0;) {
      o += strides[d];
      if (++idx[d] < tail[d]) break;
      o -= strides[d] * tail[d];
      idx[d] = 0;
    }
  }
}

// Mean and population variance of one row of `inner` values, in double.
void RowMeanVar(const float* x, int64_t inner, double* mean, double* var) {
  double sum = 0;
  for (int64_t j = 0; j < inner; ++j) sum += x[j];
  const double mu = inner ? sum / static_cast<double>(inner) : 0.0;
  double sq = 0;
  for (int64_t j = 0; j < inner; ++j) {
    const double d = x[j] - mu;
    sq += d * d;
  }
  *mean = mu;
  *var = inner ? sq / static_cast<double>(inner) : 0.0;
}

// Row mean and 1/sqrt(var + eps) of one row of `inner` values.
void RowStats(const float* x, int64_t inner, float eps, float* mean, float* inv_std) {
  double mu = 0, var = 0;
  RowMeanVar(x, inner, &mu, &var);
  *mean = static_cast<float>(mu);
  *inv_std = static_cast<float>(InvStdDev(var, static_cast<double>(eps)));
}

// Whether a Scale or B broadcast over the tail is one value per tail element, in order
// (oneDNN's layer normalization takes exactly that).
bool DenseOverTail(const std::vector<int64_t>& offsets) {
  for (size_t j = 0; j < offsets.size(); ++j)
    if (offsets[j] != static_cast<int64_t>(j)) return false;
  return true;
}

// oneDNN layer normalization over [outer, inner] rows with per-element scale and shift.
struct LayerNormPrimitives {
  static dnnl::memory::desc Rows(int64_t outer, int64_t inner) { return PlainDesc(Shape{outer, inner}, DType::kFloat32); }
  static dnnl::memory::desc Vec(int64_t n) { return PlainDesc(Shape{n}, DType::kFloat32); }
  static dnnl::normalization_flags Flags() {
    return dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  }
  static dnnl::layer_normalization_forward::primitive_desc Forward(int64_t outer, int64_t inner, float eps) {
    dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_training, Rows(outer, inner), eps, Flags());
    return dnnl::layer_normalization_forward::primitive_desc(d, Engine());
  }
};

class LayerNormKernel final : public OpKernel {
 public:
  explicit LayerNormKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor* bias = ctx.OptionalInput(2);
    g_ = PlanLayerNorm(node_, ctx, 1, bias);
    ctx.SetOutput(0, DType::kFloat32, ctx.Input(0).shape());
    ctx.SetOutput(1, DType::kFloat32, g_.stats);
    ctx.SetOutput(2, DType::kFloat32, g_.stats);
    IndexTail(g_.tail, g_.scale_strides, &scale_off_);
    if (bias) IndexTail(g_.tail, g_.bias_strides, &bias_off_);
    scale_.resize(static_cast<size_t>(g_.inner));
    bias_.assign(static_cast<size_t>(g_.inner), 0.f);
    dense_scale_ = DenseOverTail(scale_off_);
    dense_bias_ = bias && DenseOverTail(bias_off_);
    use_dnnl_ = dense_scale_ && (!bias || dense_bias_) && g_.outer > 0 && g_.inner > 0;
    if (use_dnnl_) {
      try {
        prim_ = dnnl::layer_normalization_forward(LayerNormPrimitives::Forward(g_.outer, g_.inner, node_.GetFloat("epsilon", 1e-5f)));
      } catch (const dnnl::error&) {
        use_dnnl_ = false;
      }
    }
    mean_.resize(use_dnnl_ ? static_cast<size_t>(g_.outer) : 0);
    var_.resize(use_dnnl_ ? static_cast<size_t>(g_.outer) : 0);
  }

  void Compute(KernelContext& ctx) override {
    if (use_dnnl_) return ComputeOnDnnl(ctx);
    const float* x = ctx.Input(0).data<float>();
    const float* sc = ctx.Input(1).data<float>();
    const Tensor* b = ctx.OptionalInput(2);
    for (size_t j = 0; j < scale_.size(); ++j) {
      scale_[j] = sc[scale_off_[j]];
      if (b) bias_[j] = b->data<float>()[bias_off_[j]];
    }
    float* y = ctx.Output(0).data<float>();
    float* mean_out = ctx.HasOutput(1) ? ctx.Output(1).data<float>() : nullptr;
    float* inv_out = ctx.HasOutput(2) ? ctx.Output(2).data<float>() : nullptr;
    const float eps = node_.GetFloat("epsilon", 1e-5f);
    const int64_t inner = g_.inner, outer = g_.outer;
    const float* scale = scale_.data();
    const float* shift = bias_.data();
#pragma omp parallel for if (outer * inner > 32768)
    for (int64_t r = 0; r < outer; ++r) {
      const float* xr = x + r * inner;
      float* yr = y + r * inner;
      float mu = 0, inv = 0;
      RowStats(xr, inner, eps, &mu, &inv);
      for (int64_t j = 0; j < inner; ++j) yr[j] = NormalizedAffine(xr[j], mu, inv, scale[j], shift[j]);
      if (mean_out) mean_out[r] = mu;
      if (inv_out) inv_out[r] = inv;
    }
  }

 private:
  // Y, the row means and variances by oneDNN; InvStdDev = 1 / sqrt(variance + epsilon).
  void ComputeOnDnnl(KernelContext& ctx) {
    const int64_t outer = g_.outer, inner = g_.inner;
    const Tensor* b = ctx.OptionalInput(2);
    float* mean = ctx.HasOutput(1) ? ctx.Output(1).data<float>() : mean_.data();
    const auto rows = LayerNormPrimitives::Rows(outer, inner);
    const auto vec = LayerNormPrimitives::Vec(inner), stat = LayerNormPrimitives::Vec(outer);
    prim_.execute(Stream(), {{DNNL_ARG_SRC, dnnl::memory(rows, Engine(), ctx.Input(0).raw())},
                             {DNNL_ARG_DST, dnnl::memory(rows, Engine(), ctx.Output(0).raw())},
                             {DNNL_ARG_SCALE, dnnl::memory(vec, Engine(), ctx.Input(1).raw())},
                             {DNNL_ARG_SHIFT, dnnl::memory(vec, Engine(), b ? b->raw() : bias_.data())},
                             {DNNL_ARG_MEAN, dnnl::memory(stat, Engine(), mean)},
                             {DNNL_ARG_VARIANCE, dnnl::memory(stat, Engine(), var_.data())}});
    if (!ctx.HasOutput(2)) return;
    float* inv = ctx.Output(2).data<float>();
    const double eps = node_.GetFloat("epsilon", 1e-5f);
    for (int64_t r = 0; r < outer; ++r) inv[r] = static_cast<float>(1.0 / std::sqrt(var_[static_cast<size_t>(r)] + eps));
  }

  LayerNormGeometry g_;
  std::vector<int64_t> scale_off_, bias_off_;
  std::vector<float> scale_, bias_, mean_, var_;
  bool dense_scale_ = false, dense_bias_ = false, use_dnnl_ = false;
  dnnl::layer_normalization_forward prim_;
};

// dX = inv_std * (g - mean(g) - xhat * mean(g * xhat)) with g = dY * scale, per row;
// dScale = sum over rows of dY * xhat, dBias = sum over rows of dY (shaped as the tail).
class LayerNormGradKernel final : public OpKernel {
 public:
  explicit LayerNormGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    g_ = PlanLayerNorm(node_, ctx, 2, nullptr);
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32 || dy.shape() != ctx.Input(1).shape())
      Fail("gradient " + dy.Describe() + " does not match X " + ctx.Input(1).Describe());
    ctx.SetOutput(0, DType::kFloat32, dy.shape());
    ctx.SetOutput(1, DType::kFloat32, g_.tail);
    ctx.SetOutput(2, DType::kFloat32, g_.tail);
    IndexTail(g_.tail, g_.scale_strides, &scale_off_);
    scale_.resize(static_cast<size_t>(g_.inner));
    mean_.resize(static_cast<size_t>(g_.outer));
    inv_.resize(static_cast<size_t>(g_.outer));
    use_dnnl_ = DenseOverTail(scale_off_) && g_.outer > 0 && g_.inner > 0;
    if (use_dnnl_) {
      try {
        const float eps = node_.GetFloat("epsilon", 1e-5f);
        const auto rows = LayerNormPrimitives::Rows(g_.outer, g_.inner);
        dnnl::layer_normalization_backward::desc d(dnnl::prop_kind::backward, rows, rows, eps, LayerNormPrimitives::Flags());
        prim_ = dnnl::layer_normalization_backward(dnnl::layer_normalization_backward::primitive_desc(
            d, Engine(), LayerNormPrimitives::Forward(g_.outer, g_.inner, eps)));
      } catch (const dnnl::error&) {
        use_dnnl_ = false;
      }
    }
    var_.resize(use_dnnl_ ? static_cast<size_t>(g_.outer) : 0);
    scratch_.resize(use_dnnl_ ? static_cast<size_t>(g_.inner) * 2 + static_cast<size_t>(ctx.HasOutput(0) ? 0 : g_.outer * g_.inner) : 0);
  }

  void Compute(KernelContext& ctx) override {
    if (use_dnnl_) return ComputeOnDnnl(ctx);
    const float* dy = ctx.Input(0).data<float>();
    const float* x = ctx.Input(1).data<float>();
    const float* sc = ctx.Input(2).data<float>();
    for (size_t j = 0; j < scale_.size(); ++j) scale_[j] = sc[scale_off_[j]];
    const float eps = node_.GetFloat("epsilon", 1e-5f);
    const int64_t inner = g_.inner, outer = g_.outer;
    const float* scale = scale_.data();
    float* mean = mean_.data();
    float* inv = inv_.data();
    float* dx = ctx.HasOutput(0) ? ctx.Output(0).data<float>() : nullptr;
#pragma omp parallel for if (outer * inner > 32768)
    for (int64_t r = 0; r < outer; ++r) {
      const float* xr = x + r * inner;
      const float* dyr = dy + r * inner;
      RowStats(xr, inner, eps, &mean[r], &inv[r]);
      if (!dx) continue;
      double sum_g = 0, sum_gx = 0;
      for (int64_t j = 0; j < inner; ++j) {
        const double gj = static_cast<double>(dyr[j]) * scale[j];
        sum_g += gj;
        sum_gx += gj * (xr[j] - mean[r]) * inv[r];
      }
      const float mg = static_cast<float>(sum_g / static_cast<double>(inner));
      const float mgx = static_cast<float>(sum_gx / static_cast<double>(inner));
      float* dxr = dx + r * inner;
      for (int64_t j = 0; j < inner; ++j) {
        const float xhat = (xr[j] - mean[r]) * inv[r];
        dxr[j] = NormInputGrad(dyr[j] * scale[j], xhat, inv[r], mg, mgx);
      }
    }
    float* dscale = ctx.HasOutput(1) ? ctx.Output(1).data<float>() : nullptr;
    float* dbias = ctx.HasOutput(2) ? ctx.Output(2).data<float>() : nullptr;
    if (!dscale && !dbias) return;
#pragma omp parallel for if (outer * inner > 32768)
    for (int64_t j = 0; j < inner; ++j) {
      double ds = 0, db = 0;
      for (int64_t r = 0; r < outer; ++r) {
        const float d = dy[r * inner + j];
        ds += static_cast<double>(d) * (x[r * inner + j] - mean[r]) * inv[r];
        db += d;
      }
      if (dscale) dscale[j] = static_cast<float>(ds);
      if (dbias) dbias[j] = static_cast<float>(db);
    }
  }

 private:
  // Row mean and variance in double from X, then oneDNN's backward (dX, dScale, dBias).
  void ComputeOnDnnl(KernelContext& ctx) {
    const int64_t outer = g_.outer, inner = g_.inner;
    const float* x = ctx.Input(1).data<float>();
    float* mean = mean_.data();
    float* var = var_.data();
#pragma omp parallel for if (outer * inner > 32768)
    for (int64_t r = 0; r < outer; ++r) {
      double mu = 0, v = 0;
      RowMeanVar(x + r * inner, inner, &mu, &v);
      mean[r] = static_cast<float>(mu);
      var[r] = static_cast<float>(v);
    }
    const auto rows = LayerNormPrimitives::Rows(outer, inner);
    const auto vec = LayerNormPrimitives::Vec(inner), stat = LayerNormPrimitives::Vec(outer);
    float* scratch = scratch_.data();
    void* dx = ctx.HasOutput(0) ? ctx.Output(0).raw() : scratch + 2 * inner;
    void* dscale = ctx.HasOutput(1) ? ctx.Output(1).raw() : scratch;
    void* dshift = ctx.HasOutput(2) ? ctx.Output(2).raw() : scratch + inner;
    prim_.execute(Stream(), {{DNNL_ARG_SRC, dnnl::memory(rows, Engine(), ctx.Input(1).raw())},
                             {DNNL_ARG_DIFF_DST, dnnl::memory(rows, Engine(), ctx.Input(0).raw())},
                             {DNNL_ARG_SCALE, dnnl::memory(vec, Engine(), ctx.Input(2).raw())},
                             {DNNL_ARG_SHIFT, dnnl::memory(vec, Engine(), scratch)},  // oneDNN 2.6 wants it, unread
                             {DNNL_ARG_MEAN, dnnl::memory(stat, Engine(), mean)},
                             {DNNL_ARG_VARIANCE, dnnl::memory(stat, Engine(), var)},
                             {DNNL_ARG_DIFF_SRC, dnnl::memory(rows, Engine(), dx)},
                             {DNNL_ARG_DIFF_SCALE, dnnl::memory(vec, Engine(), dscale)},
                             {DNNL_ARG_DIFF_SHIFT, dnnl::memory(vec, Engine(), dshift)}});
  }

  LayerNormGeometry g_;
  std::vector<int64_t> scale_off_;
  std::vector<float> scale_, mean_, inv_, var_, scratch_;
  bool use_dnnl_ = false;
  dnnl::layer_normalization_backward prim_;
};

// 1 / sqrt(mean(x^2) + eps) of one row of `inner` values, in double.
double RowInvRms(const float* x, int64_t inner, double eps) {
  double sq = 0;
  for (int64_t j = 0; j < inner; ++j) sq += static_cast<double>(x[j]) * x[j];
  return 1.0 / std::sqrt((inner ? sq / static_cast<double>(inner) : 0.0) + eps);
}

class RmsNormKernel final : public OpKernel {
 public:
  explicit RmsNormKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    g_ = PlanLayerNorm(node_, ctx, 1, nullptr);
    ctx.SetOutput(0, DType::kFloat32, ctx.Input(0).shape());
    IndexTail(g_.tail, g_.scale_strides, &scale_off_);
    scale_.resize(static_cast<size_t>(g_.inner));
  }

  void Compute(KernelContext& ctx) override {
    const float* x = ctx.Input(0).data<float>();
    const float* sc = ctx.Input(1).data<float>();
    for (size_t j = 0; j < scale_.size(); ++j) scale_[j] = sc[scale_off_[j]];
    float* y = ctx.Output(0).data<float>();
    const double eps = node_.GetFloat("epsilon", 1e-5f);
    const int64_t inner = g_.inner, outer = g_.outer;
    const float* scale = scale_.data();
#pragma omp parallel for if (outer * inner > 32768)
    for (int64_t r = 0; r < outer; ++r) {
      const float* xr = x + r * inner;
      float* yr = y + r * inner;
      const float inv = static_cast<float>(RowInvRms(xr, inner, eps));
      for (int64_t j = 0; j < inner; ++j) yr[j] = xr[j] * inv * scale[j];
    }
  }

 private:
  LayerNormGeometry g_;
  std::vector<int64_t> scale_off_;
  std::vector<float> scale_;
};

class RmsNormGradKernel final : public OpKernel {
 public:
  explicit RmsNormGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    g_ = PlanLayerNorm(node_, ctx, 2, nullptr);
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32 || dy.shape() != ctx.Input(1).shape())
      Fail("gradient " + dy.Describe() + " does not match X " + ctx.Input(1).Describe());
    ctx.SetOutput(0, DType::kFloat32, dy.shape());
    ctx.SetOutput(1, DType::kFloat32, g_.tail);
    IndexTail(g_.tail, g_.scale_strides, &scale_off_);
    scale_.resize(static_cast<size_t>(g_.inner));
    inv_.resize(static_cast<size_t>(g_.outer));
  }

  void Compute(KernelContext& ctx) override {
    const float* dy = ctx.Input(0).data<float>();
    const float* x = ctx.Input(1).data<float>();
    const float* sc = ctx.Input(2).data<float>();
    for (size_t j = 0; j < scale_.size(); ++j) scale_[j] = sc[scale_off_[j]];
    const double eps = node_.GetFloat("epsilon", 1e-5f);
    const int64_t inner = g_.inner, outer = g_.outer;
    const float* scale = scale_.data();
    double* inv = inv_.data();
    float* dx = ctx.HasOutput(0) ? ctx.Output(0).data<float>() : nullptr;
#pragma omp parallel for if (outer * inner > 32768)
    for (int64_t r = 0; r < outer; ++r) {
      const float* xr = x + r * inner;
      const float* dyr = dy + r * inner;
      inv[r] = RowInvRms(xr, inner, eps);
      if (!dx) continue;
      double sum_gx = 0;
      for (int64_t j = 0; j < inner; ++j) sum_gx += static_cast<double>(dyr[j]) * scale[j] * xr[j];
      const float fi = static_cast<float>(inv[r]);
      const float k = static_cast<float>(inv[r] * inv[r] * sum_gx / static_cast<double>(inner));
      float* dxr = dx + r * inner;
      for (int64_t j = 0; j < inner; ++j) dxr[j] = fi * (dyr[j] * scale[j] - xr[j] * k);
    }
    if (!ctx.HasOutput(1)) return;
    float* dscale = ctx.Output(1).data<float>();
#pragma omp parallel for if (outer * inner > 32768)
    for (int64_t j = 0; j < inner; ++j) {
      double ds = 0;
      for (int64_t r = 0; r < outer; ++r) ds += static_cast<double>(dy[r * inner + j]) * x[r * inner + j] * inv[r];
      dscale[j] = static_cast<float>(ds);
    }
  }

 private:
  LayerNormGeometry g_;
  std::vector<int64_t> scale_off_;
  std::vector<float> scale_;
  std::vector<double> inv_;
};

OT_REGISTER_CPU_KERNEL("LayerNormalization", 17, kLatestOpset, LayerNormKernel);
// The same op fused from an older opset's decomposition (graph/passes/fusion.h).
OT_REGISTER_KERNEL(kGradDomain, "LayerNormalization", 1, kLatestOpset, DeviceType::kCPU, LayerNormKernel);
OT_REGISTER_KERNEL(kGradDomain, "LayerNormalizationGrad", 1, kLatestOpset, DeviceType::kCPU, LayerNormGradKernel);
OT_REGISTER_CPU_KERNEL("RMSNormalization", 23, kLatestOpset, RmsNormKernel);
OT_REGISTER_KERNEL(kGradDomain, "RMSNormalizationGrad", 1, kLatestOpset, DeviceType::kCPU, RmsNormGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
