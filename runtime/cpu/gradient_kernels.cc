// CPU kernels of the gradient ops ONNX lacks (domain org.onnxtrain): activation
// gradients on oneDNN's eltwise backward primitive, and the loss gradients, SumToShape
// (reduce a broadcast gradient) and TransposeLastTwo as loops.
#include <cstring>

#include "graph/gradient_registry.h"
#include "runtime/cpu/dnnl_util.h"
#include "runtime/cpu/kernel_util.h"
#include "runtime/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

// dX from dY and Y (Relu, Sigmoid, Tanh) or X (LeakyRelu).
class ActivationGradKernel final : public OpKernel {
 public:
  explicit ActivationGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& y = ctx.Input(1);
    if (dy.dtype() != DType::kFloat32 || y.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()));
    if (dy.shape() != y.shape()) Fail("gradient shape " + ShapeString(dy.shape()) + " differs from " + ShapeString(y.shape()));
    ctx.SetOutput(0, DType::kFloat32, dy.shape());
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
    desc_ = PlainDesc(dy.shape(), DType::kFloat32);
    auto fwd = dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, desc_, alpha, 0.f), Engine());
    auto bwd = dnnl::eltwise_backward::primitive_desc(dnnl::eltwise_backward::desc(alg, desc_, desc_, alpha, 0.f),
                                                      Engine(), fwd);
    prim_ = dnnl::eltwise_backward(bwd);
  }

  void Compute(KernelContext& ctx) override {
    if (ctx.Input(0).numel() == 0) return;
    prim_.execute(Stream(), {{DNNL_ARG_DIFF_DST, Wrap(desc_, ctx.Input(0))},
                             {use_dst_ ? DNNL_ARG_DST : DNNL_ARG_SRC, Wrap(desc_, ctx.Input(1))},
                             {DNNL_ARG_DIFF_SRC, Wrap(desc_, ctx.Output(0))}});
    Stream().wait();
  }

 private:
  bool use_dst_ = true;
  dnnl::memory::desc desc_;
  dnnl::eltwise_backward prim_;
};

// SumToShape(grad, shape): sums a gradient over the axes along which the forward input
// of that shape was broadcast.
class SumToShapeKernel final : public OpKernel {
 public:
  explicit SumToShapeKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& g = ctx.Input(0);
    if (g.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(g.dtype()));
    Shape target = ctx.Input(1).ToHost().AsInt64s();
    if (BroadcastShapes(target, g.shape(), node_) != g.shape())
      Fail("gradient of shape " + ShapeString(g.shape()) + " cannot be summed to " + ShapeString(target));
    ctx.SetOutput(0, DType::kFloat32, target);
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& g = ctx.Input(0);
    Tensor& out = ctx.Output(0);
    if (out.numel() == g.numel()) {
      std::memcpy(out.raw(), g.raw(), g.nbytes());
      return;
    }
    std::vector<int64_t> ost = BroadcastStrides(out.shape(), g.shape());
    const Shape& gs = g.shape();
    const float* src = g.data<float>();
    float* dst = out.data<float>();
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
};

// Swaps the last two axes (for MatMul gradients of any rank >= 2).
class TransposeLastTwoKernel final : public OpKernel {
 public:
  explicit TransposeLastTwoKernel(const KernelInfo& info) : OpKernel(info) {}
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    if (x.rank() < 2) Fail("needs rank >= 2, got " + ShapeString(x.shape()));
    Shape s = x.shape();
    std::swap(s[s.size() - 1], s[s.size() - 2]);
    ctx.SetOutput(0, DType::kFloat32, s);
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const int64_t r = x.dim(-2), c = x.dim(-1), batch = r * c == 0 ? 0 : x.numel() / (r * c);
    const float* src = x.data<float>();
    float* dst = ctx.Output(0).data<float>();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) dst[b * r * c + j * r + i] = src[b * r * c + i * c + j];
  }
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

constexpr int64_t kAny = 1 << 30;
OT_REGISTER_KERNEL(kGradDomain, "ReluGrad", 1, kAny, DeviceType::kCPU, ActivationGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "SigmoidGrad", 1, kAny, DeviceType::kCPU, ActivationGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "TanhGrad", 1, kAny, DeviceType::kCPU, ActivationGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "LeakyReluGrad", 1, kAny, DeviceType::kCPU, ActivationGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "SumToShape", 1, kAny, DeviceType::kCPU, SumToShapeKernel);
OT_REGISTER_KERNEL(kGradDomain, "TransposeLastTwo", 1, kAny, DeviceType::kCPU, TransposeLastTwoKernel);
OT_REGISTER_KERNEL(kGradDomain, "SoftmaxCrossEntropyLossGrad", 1, kAny, DeviceType::kCPU,
                   SoftmaxCrossEntropyLossGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "NegativeLogLikelihoodLossGrad", 1, kAny, DeviceType::kCPU, NllLossGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
