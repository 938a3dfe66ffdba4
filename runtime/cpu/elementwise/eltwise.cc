// Unary activations on oneDNN's eltwise primitive: Relu, LeakyRelu, Sigmoid, Tanh (and
// the other unary ops oneDNN provides directly: Elu, Exp, Log, Sqrt, Abs, Softplus,
// HardSwish, Mish, and HardSigmoid as linear then clip). Element-wise, so any input layout
// works (oneDNN keeps blocked padding zero); the output takes the input's.
#include "runtime/cpu/layout/dnnl_layout.h"
#include "runtime/core/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

class EltwiseKernel final : public OpKernel {
 public:
  explicit EltwiseKernel(const KernelInfo& info) : OpKernel(info) {}

  bool AcceptsLayouts(const KernelContext&) const override { return true; }

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    ctx.SetOutput(0, x.dtype(), x.shape(), x.layout());
    dnnl::algorithm alg;
    float alpha = 0.f, beta = 0.f;
    const std::string& op = node_.op_type;
    if (op == "Relu") alg = dnnl::algorithm::eltwise_relu;
    else if (op == "LeakyRelu") { alg = dnnl::algorithm::eltwise_relu; alpha = node_.GetFloat("alpha", 0.01f); }
    else if (op == "Sigmoid") alg = dnnl::algorithm::eltwise_logistic;
    else if (op == "Tanh") alg = dnnl::algorithm::eltwise_tanh;
    else if (op == "Elu") { alg = dnnl::algorithm::eltwise_elu; alpha = node_.GetFloat("alpha", 1.f); }
    else if (op == "Exp") alg = dnnl::algorithm::eltwise_exp;
    else if (op == "Log") alg = dnnl::algorithm::eltwise_log;
    else if (op == "Sqrt") alg = dnnl::algorithm::eltwise_sqrt;
    else if (op == "Abs") alg = dnnl::algorithm::eltwise_abs;
    else if (op == "Softplus") alg = dnnl::algorithm::eltwise_soft_relu;
    else if (op == "HardSwish") alg = dnnl::algorithm::eltwise_hardswish;
    else if (op == "Mish") alg = dnnl::algorithm::eltwise_mish;
    else if (op == "HardSigmoid") {
      // max(0, min(1, alpha x + beta)): linear, then clip_v2 to [0, 1] in place.
      alg = dnnl::algorithm::eltwise_linear;
      alpha = node_.GetFloat("alpha", 0.2f);
      beta = node_.GetFloat("beta", 0.5f);
      clip_after_ = true;
    } else Fail("no eltwise algorithm");
    if (x.numel() == 0) return;
    desc_ = DescOf(x);
    prim_ = Make(alg, alpha, beta);
    if (clip_after_) clip_ = Make(dnnl::algorithm::eltwise_clip_v2, 0.f, 1.f);
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.numel() == 0) return;
    dnnl::memory y = Wrap(desc_, ctx.Output(0));
    prim_.execute(Stream(), {{DNNL_ARG_SRC, Wrap(desc_, x)}, {DNNL_ARG_DST, y}});
    if (clip_after_) clip_.execute(Stream(), {{DNNL_ARG_SRC, y}, {DNNL_ARG_DST, y}});
  }

 private:
  dnnl::eltwise_forward Make(dnnl::algorithm alg, float alpha, float beta) const {
    return dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, alg, desc_, alpha, beta), Engine()));
  }

  dnnl::memory::desc desc_;
  dnnl::eltwise_forward prim_, clip_;
  bool clip_after_ = false;
};

OT_REGISTER_CPU_KERNEL("Relu", 1, kLatestOpset, EltwiseKernel);
OT_REGISTER_CPU_KERNEL("LeakyRelu", 1, kLatestOpset, EltwiseKernel);
OT_REGISTER_CPU_KERNEL("Sigmoid", 1, kLatestOpset, EltwiseKernel);
OT_REGISTER_CPU_KERNEL("Tanh", 1, kLatestOpset, EltwiseKernel);
OT_REGISTER_CPU_KERNEL("Elu", 1, kLatestOpset, EltwiseKernel);
OT_REGISTER_CPU_KERNEL("Exp", 1, kLatestOpset, EltwiseKernel);
OT_REGISTER_CPU_KERNEL("Log", 1, kLatestOpset, EltwiseKernel);
OT_REGISTER_CPU_KERNEL("Sqrt", 1, kLatestOpset, EltwiseKernel);
OT_REGISTER_CPU_KERNEL("Abs", 1, kLatestOpset, EltwiseKernel);
OT_REGISTER_CPU_KERNEL("Softplus", 1, kLatestOpset, EltwiseKernel);
OT_REGISTER_CPU_KERNEL("HardSwish", 14, kLatestOpset, EltwiseKernel);
OT_REGISTER_CPU_KERNEL("Mish", 18, kLatestOpset, EltwiseKernel);
OT_REGISTER_CPU_KERNEL("HardSigmoid", 1, kLatestOpset, EltwiseKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
