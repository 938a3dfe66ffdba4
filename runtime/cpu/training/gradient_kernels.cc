// CPU kernels of the gradient ops ONNX lacks (domain org.onnxtrain): activation
// gradients on oneDNN's eltwise backward primitive; loss, softmax, reduction, concat and
// dropout gradients, SumToShape (reduce a broadcast gradient) and TransposeLastTwo as
// loops (data movement and small reductions that no library routine covers). Conv,
// pooling and BatchNorm gradients live beside their forward kernels.
#include <algorithm>
#include <cmath>
#include <vector>
#include <cstring>

#include "graph/op_domains.h"
#include "runtime/cpu/layout/dnnl_layout.h"
#include "runtime/cpu/training/softmax_rows.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/shapes/op_shapes.h"
#include "runtime/ops/shapes/reduce_shapes.h"

namespace ot {
namespace cpu {
namespace {

// dX from dY and Y (Relu, Sigmoid, Tanh) or X (LeakyRelu).
class ActivationGradKernel final : public OpKernel {
 public:
  explicit ActivationGradKernel(const KernelInfo& info) : OpKernel(info) {}

  // Any layouts: dY is brought to the layout of Y (or X), which dX takes.
  bool AcceptsLayouts(const KernelContext&) const override { return true; }

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& y = ctx.Input(1);
    if (dy.dtype() != DType::kFloat32 || y.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()));
    if (dy.shape() != y.shape()) Fail("gradient shape " + ShapeString(dy.shape()) + " differs from " + ShapeString(y.shape()));
    ctx.SetOutput(0, DType::kFloat32, dy.shape(), y.layout());
    const std::string& op = node_.op_type;
    dnnl::algorithm alg = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
    float alpha = 0.f;
    use_dst_ = true;
    if (op == "SigmoidGrad") alg = dnnl::algorithm::eltwise_logistic_use_dst_for_bwd;
    else if (op == "TanhGrad") alg = dnnl::algorithm::eltwise_tanh_use_dst_for_bwd;
    else if (op == "LeakyReluGrad") {
      alg = dnnl::algorithm::eltwise_relu;
      alpha = node_.GetFloat("alpha", 0.01f);
      use_dst_ = false;
    }
    if (dy.numel() == 0) return;
    desc_ = DescOf(y);
    dy_ = Reorder(DescOf(dy), desc_);
    auto fwd = dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, desc_, alpha, 0.f), Engine());
    auto bwd = dnnl::eltwise_backward::primitive_desc(dnnl::eltwise_backward::desc(alg, desc_, desc_, alpha, 0.f),
                                                      Engine(), fwd);
    prim_ = dnnl::eltwise_backward(bwd);
  }

  void Compute(KernelContext& ctx) override {
    if (ctx.Input(0).numel() == 0) return;
    prim_.execute(Stream(), {{DNNL_ARG_DIFF_DST, dy_.Apply(ctx.Input(0).raw(), 0)},
                             {use_dst_ ? DNNL_ARG_DST : DNNL_ARG_SRC, Wrap(desc_, ctx.Input(1))},
                             {DNNL_ARG_DIFF_SRC, Wrap(desc_, ctx.Output(0))}});
  }

 private:
  Reorder dy_;
  bool use_dst_ = true;
  dnnl::memory::desc desc_;
  dnnl::eltwise_backward prim_;
};

// SumToShape(grad, shape): sums a gradient over the axes along which the forward input
// of that shape was broadcast.
class SumToShapeKernel final : public OpKernel {
 public:
  explicit SumToShapeKernel(const KernelInfo& info) : OpKernel(info) {}

  // A gradient already of the target shape is copied as it is, in any layout; one
  // blocked by 8 or 16 channels is summed to a per-channel shape [N or 1, C, 1, ...] (the
  // scale of squeeze-and-excitation) where it lies.
  bool AcceptsLayouts(const KernelContext& ctx) const override {
    if (!ctx.Input(1).is_plain()) return false;
    const Shape target(ctx.Input(1).ToHost().AsInt64s());
    return target == ctx.Input(0).shape() || PerChannelOfBlocked(ctx.Input(0), target);
  }

  void Prepare(KernelContext& ctx) override {
    const Tensor& g = ctx.Input(0);
    const Shape target = SumToShapeTarget(node_, ctx);
    ctx.SetOutput(0, DType::kFloat32, target, target == g.shape() ? g.layout() : nullptr);
    per_channel_ = target != g.shape() && !g.is_plain();
    same_shape_ = target == g.shape();
    if (per_channel_ && !PerChannelOfBlocked(g, target)) Fail("a laid-out gradient needs a per-channel target");
    outer_ = -1;
    if (!per_channel_ && target != g.shape()) PlanOuterKeptInner(g.shape(), target);
  }

  // A gradient that needs no summing is passed on in place, in its layout (the executor
  // binds the output to the input's buffer).
  bool OutputIsInputView() const override { return same_shape_; }

  void Compute(KernelContext& ctx) override {
    const Tensor& g = ctx.Input(0);
    Tensor& out = ctx.Output(0);
    if (per_channel_) return SumBlockedPerChannel(g, out);
    if (out.numel() == g.numel()) {
      if (out.raw() != g.raw()) std::memcpy(out.raw(), g.raw(), g.nbytes());
      return;
    }
    const float* src = g.data<float>();
    float* dst = out.data<float>();
    if (outer_ >= 0) return SumOuterKeptInner(src, dst);
    std::vector<int64_t> ost = BroadcastStrides(out.shape(), g.shape());
    const Shape& gs = g.shape();
    std::memset(dst, 0, out.nbytes());
    std::vector<int64_t> idx(gs.size(), 0);
    const int64_t n = g.numel();
    int64_t o = 0;
    for (int64_t i = 0; i < n; ++i) {
      dst[o] += src[i];
      for (size_t d = gs.size(); d-- > 0;) {  // odometer increment
        o += ost[d];
        if (++idx[d] < gs[d]) break;
        o -= ost[d] * gs[d];
        idx[d] = 0;
      }
    }
  }

 private:
  // When the summed axes of g form a prefix and/or a suffix around one run of kept axes
  // (the bias of a Linear over [batch, tokens, features]: outer = batch * tokens; a
  // per-channel [1, C, 1, 1] of NCHW: outer = N, inner = H * W), g is [outer, kept, inner]
  // and out is [kept]; outer_ stays -1 otherwise (the odometer loop).
  void PlanOuterKeptInner(const Shape& gs, const Shape& target) {
    const size_t lead = gs.size() - target.size();
    if (target.size() > gs.size()) return;
    // 0: reduced, 1: kept, 2: size 1 (either)
    std::vector<int> kind(gs.size());
    for (size_t d = 0; d < gs.size(); ++d) {
      const int64_t t = d < lead ? 1 : target[d - lead];
      kind[d] = gs[d] == 1 ? 2 : (t == gs[d] ? 1 : (t == 1 ? 0 : -1));
      if (kind[d] < 0) return;
    }
    int64_t outer = 1, kept = 1, inner = 1;
    int phase = 0;  // 0: leading reduced, 1: kept, 2: trailing reduced
    for (size_t d = 0; d < gs.size(); ++d) {
      if (kind[d] == 2) continue;
      if (kind[d] == 1) {
        if (phase == 2) return;
        phase = 1;
        kept *= gs[d];
      } else {
        if (phase == 1) phase = 2;
        (phase == 0 ? outer : inner) *= gs[d];
      }
    }
    outer_ = outer;
    kept_ = kept;
    inner_ = inner;
  }

  // out[k] = sum over o, i of g[o, k, i]: rows of kept values added in blocks of 64 (their
  // float sums then added up, so rounding grows with 64 + rows / 64, not rows), or each
  // run of inner values summed in double.
  void SumOuterKeptInner(const float* src, float* dst) const {
    if (inner_ == 1) {
      std::vector<float> block(static_cast<size_t>(kept_));
      std::vector<double> total(static_cast<size_t>(kept_), 0.0);
      for (int64_t r0 = 0; r0 < outer_; r0 += 64) {
        std::fill(block.begin(), block.end(), 0.f);
        const int64_t r1 = std::min(outer_, r0 + 64);
        for (int64_t r = r0; r < r1; ++r) {
          const float* row = src + r * kept_;
          float* b = block.data();
          for (int64_t k = 0; k < kept_; ++k) b[k] += row[k];
        }
        for (int64_t k = 0; k < kept_; ++k) total[static_cast<size_t>(k)] += block[static_cast<size_t>(k)];
      }
      for (int64_t k = 0; k < kept_; ++k) dst[k] = static_cast<float>(total[static_cast<size_t>(k)]);
      return;
    }
    for (int64_t k = 0; k < kept_; ++k) {
      double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t o = 0; o < outer_; ++o) {
        const float* run = src + (o * kept_ + k) * inner_;
        int64_t i = 0;
        for (; i + 8 <= inner_; i += 8)
          for (int l = 0; l < 8; ++l) lanes[l] += run[i + l];
        for (; i < inner_; ++i) lanes[0] += run[i];
      }
      dst[k] = static_cast<float>(((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                                  ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])));
    }
  }

  int64_t outer_ = -1, kept_ = 1, inner_ = 1;

  // g float32 blocked by 8 or 16 channels (ChannelBlocked), target [N or 1, C, 1, ...] of g's rank (or [C, 1, ...]).
  static bool PerChannelOfBlocked(const Tensor& g, const Shape& target_shape) {
    const Shape& s = g.shape();
    if (g.is_plain() || g.dtype() != DType::kFloat32 || s.size() < 3 || s.size() > 5 || target_shape.size() > s.size())
      return false;
    Shape target(s.size() - target_shape.size(), 1);
    target.insert(target.end(), target_shape.begin(), target_shape.end());
    if (ChannelBlockOf(g) == 0 || target[1] != s[1] || (target[0] != s[0] && target[0] != 1)) return false;
    for (size_t d = 2; d < s.size(); ++d)
      if (target[d] != 1) return false;
    return true;
  }

  // out[n or 0, c] = sum over the spatial positions (and n when target N is 1) of g, whose
  // storage is [N][C/B][spatial][B], B = ChannelBlockOf(g).
  static void SumBlockedPerChannel(const Tensor& g, Tensor& out) {
    if (ChannelBlockOf(g) == 16)
      SumBlockedPerChannelOf<16>(g, out);
    else
      SumBlockedPerChannelOf<8>(g, out);
  }
  template <int B>
  static void SumBlockedPerChannelOf(const Tensor& g, Tensor& out) {
    const Shape& s = g.shape();
    const int64_t n = s[0], c = s[1], blocks = (c + B - 1) / B, spatial = NumElements(Shape(s.begin() + 2, s.end()));
    const bool per_sample = out.shape().size() == s.size() && out.shape()[0] == n;
    const float* src = g.data<float>();
    float* dst = out.data<float>();
    std::memset(dst, 0, out.nbytes());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t b = 0; b < blocks; ++b) {
        float acc[B] = {};
        const float* p = src + (i * blocks + b) * spatial * B;
        for (int64_t q = 0; q < spatial; ++q)
          for (int k = 0; k < B; ++k) acc[k] += p[q * B + k];
        float* o = dst + (per_sample ? i * c : 0) + b * B;
        for (int64_t k = 0; k < B && b * B + k < c; ++k) o[k] += acc[k];
      }
  }

  bool per_channel_ = false;
  bool same_shape_ = false;
};

// Swaps the last two axes (for MatMul gradients of any rank >= 2), as one oneDNN reorder
// (vectorised, threaded) from [batch, r, c] into the same dims with transposed strides.
class TransposeLastTwoKernel final : public OpKernel {
 public:
  explicit TransposeLastTwoKernel(const KernelInfo& info) : OpKernel(info) {}
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    ctx.SetOutput(0, DType::kFloat32, TransposeLastTwoShape(node_, x));
    const int64_t r = x.dim(-2), c = x.dim(-1), batch = r * c == 0 ? 0 : x.numel() / (r * c);
    if (batch == 0) return;
    const dnnl::memory::dims dims = {batch, r, c};
    const dnnl::memory::desc src(dims, dnnl::memory::data_type::f32, dnnl::memory::dims{r * c, c, 1});
    dst_ = dnnl::memory::desc(dims, dnnl::memory::data_type::f32, dnnl::memory::dims{r * c, 1, r});
    transpose_ = Reorder(src, dst_);
  }
  void Compute(KernelContext& ctx) override {
    if (ctx.Output(0).numel() == 0) return;
    transpose_.Run(ctx.Input(0).raw(), ctx.Output(0).raw());
  }

 private:
  dnnl::memory::desc dst_;
  Reorder transpose_;
};

// Shared by the two loss gradients: the per-position scale dY * w[label] / denominator,
// 0 where the label is ignored.
struct LossGradScale {
  std::vector<float> scale;  // per position (N * d1 * ...)
  std::vector<int64_t> label;
};

LossGradScale ComputeLossScale(const Node& node, const Tensor& dy, const Tensor& labels, const Tensor* weight,
                               int64_t classes) {
  const std::string reduction = node.GetString("reduction", "mean");
  const bool has_ignore = node.HasAttr("ignore_index");
  const int64_t ignore = node.GetInt("ignore_index", 0);
  HostTensor lab = labels.ToHost();
  std::vector<int64_t> ls = lab.AsInt64s();
  LossGradScale out;
  out.label = ls;
  out.scale.assign(ls.size(), 0.f);
  const float* w = weight ? weight->data<float>() : nullptr;
  double denom = 0;
  for (size_t i = 0; i < ls.size(); ++i) {
    if (has_ignore && ls[i] == ignore) continue;
    if (ls[i] < 0 || ls[i] >= classes)
      throw Error(node.Describe() + ": label " + std::to_string(ls[i]) + " at index " + std::to_string(i) +
                  " is outside [0, " + std::to_string(classes) + ")");
    float wi = w ? w[ls[i]] : 1.f;
    out.scale[i] = wi;
    denom += wi;
  }
  const float* g = dy.data<float>();
  if (reduction == "none") {
    if (static_cast<size_t>(dy.numel()) != ls.size()) throw Error(node.Describe() + ": gradient size does not match the labels");
    for (size_t i = 0; i < ls.size(); ++i) out.scale[i] *= g[i];
  } else {
    float s = g[0];
    if (reduction == "mean") s = denom == 0 ? 0.f : static_cast<float>(s / denom);
    else if (reduction != "sum") throw Error(node.Describe() + ": unknown reduction '" + reduction + "'");
    for (float& v : out.scale) v *= s;
  }
  return out;
}

// SoftmaxCrossEntropyLossGrad(dY, log_prob, labels[, weight]) -> dScores.
class SoftmaxCrossEntropyLossGradKernel final : public OpKernel {
 public:
  explicit SoftmaxCrossEntropyLossGradKernel(const KernelInfo& info) : OpKernel(info) {}
  void Prepare(KernelContext& ctx) override {
    if (ctx.Input(1).dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(ctx.Input(1).dtype()));
    ctx.SetOutput(0, DType::kFloat32, ctx.Input(1).shape());
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& lp = ctx.Input(1);
    const int64_t n = lp.dim(0), c = lp.dim(1), inner = lp.numel() / std::max<int64_t>(n * c, 1);
    LossGradScale s = ComputeLossScale(node_, ctx.Input(0), ctx.Input(2), ctx.OptionalInput(3), c);
    const float* logp = lp.data<float>();
    float* dx = ctx.Output(0).data<float>();
    // Rows are independent (a language model's [N*T, V]: hundreds of MB of exp): split them.
    if (inner == 1) {  // classes contiguous: the vectorised row loop, then the label's class
#pragma omp parallel for schedule(static)
      for (int64_t b = 0; b < n; ++b) {
        const float scale = s.scale[static_cast<size_t>(b)];
        float* row = dx + b * c;
        if (scale == 0.f) {
          std::fill(row, row + c, 0.f);
          continue;
        }
        RowExpScaled(logp + b * c, c, scale, row);
        const int64_t label = s.label[static_cast<size_t>(b)];  // in range: ComputeLossScale checked it
        row[label] = (std::exp(logp[b * c + label]) - 1.f) * scale;
      }
      return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < n; ++b)
      for (int64_t k = 0; k < c; ++k)
        for (int64_t j = 0; j < inner; ++j) {
          const size_t pos = static_cast<size_t>(b * inner + j);
          const int64_t at = (b * c + k) * inner + j;
          const float onehot = s.label[pos] == k ? 1.f : 0.f;
          dx[at] = s.scale[pos] == 0.f ? 0.f : (std::exp(logp[at]) - onehot) * s.scale[pos];
        }
  }
};

// NegativeLogLikelihoodLossGrad(dY, input, labels[, weight]) -> dInput.
class NllLossGradKernel final : public OpKernel {
 public:
  explicit NllLossGradKernel(const KernelInfo& info) : OpKernel(info) {}
  void Prepare(KernelContext& ctx) override {
    if (ctx.Input(1).dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(ctx.Input(1).dtype()));
    ctx.SetOutput(0, DType::kFloat32, ctx.Input(1).shape());
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(1);
    const int64_t n = x.dim(0), c = x.dim(1), inner = x.numel() / std::max<int64_t>(n * c, 1);
    LossGradScale s = ComputeLossScale(node_, ctx.Input(0), ctx.Input(2), ctx.OptionalInput(3), c);
    float* dx = ctx.Output(0).data<float>();
    std::memset(dx, 0, ctx.Output(0).nbytes());
    for (int64_t b = 0; b < n; ++b)
      for (int64_t j = 0; j < inner; ++j) {
        const size_t pos = static_cast<size_t>(b * inner + j);
        if (s.scale[pos] != 0.f) dx[(b * c + s.label[pos]) * inner + j] = -s.scale[pos];
      }
  }
};

// DropoutGrad(dY, mask[, ratio]) -> dY * mask / (1 - ratio), the mask reused from the
// forward Dropout.
class DropoutGradKernel final : public OpKernel {
 public:
  explicit DropoutGradKernel(const KernelInfo& info) : OpKernel(info) {}
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()));
    if (ctx.Input(1).shape() != dy.shape()) Fail("mask shape differs from the gradient's");
    if (ctx.Input(1).dtype() != DType::kBool && ctx.Input(1).dtype() != DType::kFloat32)
      Unsupported("mask of data type " + DTypeName(ctx.Input(1).dtype()) + " (bool or float expected)");
    ctx.SetOutput(0, DType::kFloat32, dy.shape());
  }
  void Compute(KernelContext& ctx) override {
    float ratio = node_.GetFloat("ratio", 0.5f);
    if (const Tensor* r = ctx.OptionalInput(2)) ratio = r->data<float>()[0];
    const float scale = ratio >= 1.f ? 0.f : 1.f / (1.f - ratio);
    const Tensor& dy = ctx.Input(0);
    const float* g = dy.data<float>();
    float* dx = ctx.Output(0).data<float>();
    const int64_t n = dy.numel();
    const Tensor& mask = ctx.Input(1);
    if (mask.dtype() == DType::kFloat32) {  // Dropout before opset 10: the mask has X's type
      const float* m = mask.data<float>();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) dx[i] = m[i] != 0.f ? g[i] * scale : 0.f;
      return;
    }
    const bool* m = mask.data<bool>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) dx[i] = m[i] ? g[i] * scale : 0.f;
  }
};

// Softmax and LogSoftmax gradients from dY and the forward output Y, over one axis or,
// with coerce_2d (opsets before 13), over all axes from `axis` on.
class SoftmaxFamilyGradKernel final : public OpKernel {
 public:
  explicit SoftmaxFamilyGradKernel(const KernelInfo& info) : OpKernel(info) {}
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()));
    if (ctx.Input(1).shape() != dy.shape()) Fail("Y shape differs from the gradient's");
    ctx.SetOutput(0, DType::kFloat32, dy.shape());
    const Shape& s = dy.shape();
    const int64_t axis = NormalizeAxis(node_.GetInt("axis", -1), static_cast<int64_t>(s.size()), node_);
    outer_ = NumElements(Shape(s.begin(), s.begin() + axis));
    if (node_.GetInt("coerce_2d", 0)) {
      len_ = NumElements(Shape(s.begin() + axis, s.end()));
      inner_ = 1;
    } else {
      len_ = s.empty() ? 1 : s[static_cast<size_t>(axis)];
      inner_ = NumElements(Shape(s.begin() + axis + 1, s.end()));
    }
    log_ = node_.op_type == "LogSoftmaxGrad";
  }
  void Compute(KernelContext& ctx) override {
    const float* dy = ctx.Input(0).data<float>();
    const float* y = ctx.Input(1).data<float>();
    float* dx = ctx.Output(0).data<float>();
    const int64_t outer = outer_, len = len_, inner = inner_;
    const bool log = log_;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * len * inner + i;
        double acc = 0;
        for (int64_t k = 0; k < len; ++k) acc += log ? dy[base + k * inner] : dy[base + k * inner] * y[base + k * inner];
        for (int64_t k = 0; k < len; ++k) {
          const int64_t at = base + k * inner;
          dx[at] = log ? dy[at] - std::exp(y[at]) * static_cast<float>(acc) : y[at] * (dy[at] - static_cast<float>(acc));
        }
      }
  }

 private:
  int64_t outer_ = 0, len_ = 0, inner_ = 0;
  bool log_ = false;
};

// ReduceGrad(dY, input_shape[, axes]) for ReduceSum/ReduceMean: dY broadcast back over
// the reduced axes, divided by the reduced count for a mean.
class ReduceGradKernel final : public OpKernel {
 public:
  explicit ReduceGradKernel(const KernelInfo& info) : OpKernel(info) {}
  void Prepare(KernelContext& ctx) override {
    const ReduceGradPlan plan = PlanReduceGrad(node_, ctx);
    strides_ = BroadcastStrides(plan.kept, plan.out);
    scale_ = plan.scale;
    ctx.SetOutput(0, DType::kFloat32, plan.out);
  }
  void Compute(KernelContext& ctx) override {
    const Shape& s = ctx.Output(0).shape();
    const float* g = ctx.Input(0).data<float>();
    float* dx = ctx.Output(0).data<float>();
    const int64_t n = ctx.Output(0).numel();
    std::vector<int64_t> idx(s.size(), 0);
    int64_t src = 0;
    for (int64_t i = 0; i < n; ++i) {
      dx[i] = g[src] * scale_;
      for (size_t d = s.size(); d-- > 0;) {
        src += strides_[d];
        if (++idx[d] < s[d]) break;
        src -= strides_[d] * s[d];
        idx[d] = 0;
      }
    }
  }

 private:
  std::vector<int64_t> strides_;
  float scale_ = 1.f;
};

// ConcatGrad(dY, X0, X1, ...) -> dX0, dX1, ...: dY cut along `axis` into pieces shaped
// like the forward inputs.
class ConcatGradKernel final : public OpKernel {
 public:
  explicit ConcatGradKernel(const KernelInfo& info) : OpKernel(info) {}
  void Prepare(KernelContext& ctx) override {
    PrepareConcatGradOutputs(node_, ctx, &axis_);
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Shape& s = dy.shape();
    const size_t esize = DTypeSize(dy.dtype());
    const int64_t outer = NumElements(Shape(s.begin(), s.begin() + axis_));
    const int64_t inner = NumElements(Shape(s.begin() + axis_ + 1, s.end())) * static_cast<int64_t>(esize);
    const int64_t row = s[static_cast<size_t>(axis_)] * inner;
    const uint8_t* src = static_cast<const uint8_t*>(dy.raw());
    int64_t offset = 0;
    for (int i = 1; i < ctx.NumInputs(); ++i) {
      const int64_t chunk = ctx.Input(i).dim(static_cast<int>(axis_)) * inner;
      if (ctx.HasOutput(i - 1)) {
        uint8_t* dst = static_cast<uint8_t*>(ctx.Output(i - 1).raw());
        for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * chunk, src + o * row + offset, static_cast<size_t>(chunk));
      }
      offset += chunk;
    }
  }

 private:
  int64_t axis_ = 0;
};

// PadGrad(dY, X, pads) with the forward's `mode` -> dX: every element of dY is added to
// the input element it was read from (none for constant padding; reflect and edge read
// some input elements several times, so their gradients add up).
class PadGradKernel final : public OpKernel {
 public:
  explicit PadGradKernel(const KernelInfo& info) : OpKernel(info) {}
  void Prepare(KernelContext& ctx) override {
    const std::vector<int64_t> begin = PadGradBeginPads(node_, ctx);
    const std::string mode = node_.GetString("mode", "constant");
    const Shape& xs = ctx.Input(1).shape();
    const Shape& ys = ctx.Input(0).shape();
    sources_.clear();
    for (size_t d = 0; d < xs.size(); ++d) sources_.push_back(PadAxisSources(xs[d], begin[d], ys[d], mode));
    ctx.SetOutput(0, DType::kFloat32, xs);
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    Tensor& dx = ctx.Output(0);
    const Shape& ys = dy.shape();
    const std::vector<int64_t> xstr = RowMajorStrides(dx.shape());
    const float* g = dy.data<float>();
    float* out = dx.data<float>();
    std::memset(out, 0, dx.nbytes());
    if (dx.rank() == 0) {
      if (dy.numel() == 1) out[0] = g[0];
      return;
    }
    std::vector<int64_t> idx(ys.size(), 0);
    for (int64_t i = 0; i < dy.numel(); ++i) {
      int64_t dst = 0;
      bool inside = true;
      for (size_t d = 0; d < ys.size() && inside; ++d) {
        const int64_t s = sources_[d][static_cast<size_t>(idx[d])];
        inside = s >= 0;
        dst += s * xstr[d];
      }
      if (inside) out[dst] += g[i];
      for (size_t d = ys.size(); d-- > 0;) {
        if (++idx[d] < ys[d]) break;
        idx[d] = 0;
      }
    }
  }

 private:
  std::vector<std::vector<int64_t>> sources_;
};
OT_REGISTER_KERNEL(kGradDomain, "ReluGrad", 1, kLatestOpset, DeviceType::kCPU, ActivationGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "SigmoidGrad", 1, kLatestOpset, DeviceType::kCPU, ActivationGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "TanhGrad", 1, kLatestOpset, DeviceType::kCPU, ActivationGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "LeakyReluGrad", 1, kLatestOpset, DeviceType::kCPU, ActivationGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "SumToShape", 1, kLatestOpset, DeviceType::kCPU, SumToShapeKernel);
OT_REGISTER_KERNEL(kGradDomain, "TransposeLastTwo", 1, kLatestOpset, DeviceType::kCPU, TransposeLastTwoKernel);
OT_REGISTER_KERNEL(kGradDomain, "SoftmaxCrossEntropyLossGrad", 1, kLatestOpset, DeviceType::kCPU,
                   SoftmaxCrossEntropyLossGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "NegativeLogLikelihoodLossGrad", 1, kLatestOpset, DeviceType::kCPU, NllLossGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "DropoutGrad", 1, kLatestOpset, DeviceType::kCPU, DropoutGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "SoftmaxGrad", 1, kLatestOpset, DeviceType::kCPU, SoftmaxFamilyGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "LogSoftmaxGrad", 1, kLatestOpset, DeviceType::kCPU, SoftmaxFamilyGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "ReduceGrad", 1, kLatestOpset, DeviceType::kCPU, ReduceGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "ConcatGrad", 1, kLatestOpset, DeviceType::kCPU, ConcatGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "PadGrad", 1, kLatestOpset, DeviceType::kCPU, PadGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
