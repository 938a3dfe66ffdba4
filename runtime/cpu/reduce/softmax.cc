// Softmax, LogSoftmax and Hardmax. Before opset 13 the input is coerced to 2D at `axis`
// (default 1) and the op runs over the second dimension; from 13 on it runs over the
// single dimension `axis` (default -1). Either way the tensor is viewed as
// [outer, axis, inner]; Softmax/LogSoftmax use oneDNN's softmax_v2 on that view when it has
// a fast kernel for it (inner == 1), a loop otherwise and for double; Hardmax a loop.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/cpu/layout/dnnl_util.h"
#include "runtime/cpu/dtype_dispatch.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/core/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

struct AxisView {
  int64_t outer = 1, axis = 1, inner = 1;
};

// The [outer, axis, inner] view of `shape` for the op's opset and `axis` attribute.
AxisView ViewAtAxis(const Shape& shape, const Node& node, int64_t opset) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  const bool coerce_2d = opset < 13;
  int64_t axis = node.GetInt("axis", coerce_2d ? 1 : -1);
  // Coercion to 2D allows axis == rank (everything goes to the outer dimension).
  axis = coerce_2d && (axis == rank || (rank == 0 && axis == 0)) ? rank : NormalizeAxis(axis, rank, node);
  AxisView v;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t size = shape[static_cast<size_t>(d)];
    if (d < axis)
      v.outer *= size;
    else if (d == axis || coerce_2d)
      v.axis *= size;
    else
      v.inner *= size;
  }
  return v;
}

// Softmax or LogSoftmax over the middle dimension of an [outer, axis, inner] block, vectorised
// over `inner` (for layouts oneDNN only has a slow reference kernel for, and for double).
template <typename T>
void SoftmaxLoop(const T* x, T* y, const AxisView& v, bool log) {
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < v.outer; ++o) {
    const T* in = x + o * v.axis * v.inner;
    T* out = y + o * v.axis * v.inner;
    std::vector<T> max(static_cast<size_t>(v.inner), -std::numeric_limits<T>::infinity());
    std::vector<T> sum(static_cast<size_t>(v.inner), T(0));
    for (int64_t a = 0; a < v.axis; ++a)
      for (int64_t i = 0; i < v.inner; ++i) max[i] = std::max(max[i], in[a * v.inner + i]);
    for (int64_t a = 0; a < v.axis; ++a)
      for (int64_t i = 0; i < v.inner; ++i) {
        T e = std::exp(in[a * v.inner + i] - max[i]);
        if (!log) out[a * v.inner + i] = e;
        sum[i] += e;
      }
    for (int64_t i = 0; i < v.inner; ++i) sum[i] = log ? max[i] + std::log(sum[i]) : T(1) / sum[i];
    for (int64_t a = 0; a < v.axis; ++a)
      for (int64_t i = 0; i < v.inner; ++i)
        out[a * v.inner + i] = log ? in[a * v.inner + i] - sum[i] : out[a * v.inner + i] * sum[i];
  }
}

class SoftmaxKernel final : public OpKernel {
 public:
  explicit SoftmaxKernel(const KernelInfo& info) : OpKernel(info), log_(info.node.op_type == "LogSoftmax") {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (!TypeListHas(FloatTypes{}, x.dtype())) ThrowUnsupportedType(x.dtype(), node_);
    ctx.SetOutput(0, x.dtype(), x.shape());
    view_ = ViewAtAxis(x.shape(), node_, opset_);
    use_dnnl_ = x.dtype() == DType::kFloat32 && x.numel() > 0 && PlanDnnl();
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.numel() == 0) return;
    if (use_dnnl_) {
      prim_.execute(Stream(), {{DNNL_ARG_SRC, Wrap(desc_, x)}, {DNNL_ARG_DST, Wrap(desc_, ctx.Output(0))}});
      Stream().wait();
      return;
    }
    DispatchType(FloatTypes{}, x.dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      SoftmaxLoop<T>(x.data<T>(), ctx.Output(0).data<T>(), view_, log_);
    });
  }

 private:
  // softmax_v2 on the [outer, axis, inner] view; false when oneDNN would run its reference
  // kernel (an inner dimension > 1), which is far slower than SoftmaxLoop.
  bool PlanDnnl() {
    desc_ = PlainDesc(Shape{view_.outer, view_.axis, view_.inner}, DType::kFloat32);
    auto alg = log_ ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
    dnnl::softmax_v2_forward::primitive_desc pd(
        dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_inference, alg, desc_, desc_, 1), Engine(), true);
    if (!pd || std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return false;
    prim_ = dnnl::softmax_v2_forward(pd);
    return true;
  }

  const bool log_;
  AxisView view_;
  bool use_dnnl_ = false;
  dnnl::memory::desc desc_;
  dnnl::softmax_v2_forward prim_;
};

// Hardmax: 1 at the first maximum along the axis, 0 elsewhere.
class HardmaxKernel final : public OpKernel {
 public:
  explicit HardmaxKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (!TypeListHas(FloatTypes{}, x.dtype())) ThrowUnsupportedType(x.dtype(), node_);
    ctx.SetOutput(0, x.dtype(), x.shape());
    view_ = ViewAtAxis(x.shape(), node_, opset_);
  }

  void Compute(KernelContext& ctx) override {
    DispatchType(FloatTypes{}, ctx.Input(0).dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = ctx.Input(0).data<T>();
      T* y = ctx.Output(0).data<T>();
      std::fill(y, y + ctx.Output(0).numel(), T(0));
      if (view_.axis == 0) return;
      for (int64_t o = 0; o < view_.outer; ++o) {
        for (int64_t i = 0; i < view_.inner; ++i) {
          const int64_t base = o * view_.axis * view_.inner + i;
          int64_t best = 0;
          for (int64_t a = 1; a < view_.axis; ++a)
            if (x[base + a * view_.inner] > x[base + best * view_.inner]) best = a;
          y[base + best * view_.inner] = T(1);
        }
      }
    });
  }

 private:
  AxisView view_;
};
OT_REGISTER_CPU_KERNEL("Softmax", 1, kLatestOpset, SoftmaxKernel);
OT_REGISTER_CPU_KERNEL("LogSoftmax", 1, kLatestOpset, SoftmaxKernel);
OT_REGISTER_CPU_KERNEL("Hardmax", 1, kLatestOpset, HardmaxKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
