// ReduceValueGrad(dY, X, Y[, axes]) (org.onnxtrain): the gradient of the reductions whose
// derivative depends on the values (ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceSumSquare, ReduceLogSum, ReduceLogSumExp; attribute `op` names the forward op).
// dY and Y are shaped like the forward output; each element of X takes
// dX = dY[o] * f(X, Y[o]) of the output element o it was reduced into:
//   Max/Min: 1/k at the k positions equal to the extreme (ties split evenly), else 0
//   Prod: Y/X (X = 0 gives the product of the others, computed directly)
//   L1: sign(X)   L2: X/Y (0 where Y = 0)   SumSquare: 2X
//   LogSum: 1/exp(Y)   LogSumExp: exp(X - Y)
#include <cmath>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/shapes/reduce_shapes.h"

namespace ot {
namespace cpu {
namespace {

class ReduceValueGradKernel final : public OpKernel {
 public:
  explicit ReduceValueGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    op_ = ParseReduceOp(node_.GetString("op", ""));
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    const Tensor& y = ctx.Input(2);
    for (const Tensor* t : {&dy, &x, &y})
      if (t->dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(t->dtype()) + " (float32 only)");
    std::vector<int64_t> axes = node_.GetInts("axes");
    if (ctx.OptionalInput(3)) axes = inputs_.Read(ctx, 3);
    const ReducePlan plan = PlanReduce(node_, op_, x.dtype(), x.shape(), axes);
    if (dy.numel() != NumElements(plan.kept) || y.numel() != NumElements(plan.kept))
      Fail("gradient " + dy.Describe() + " and output " + y.Describe() + " do not fit the reduced shape " +
           ShapeString(plan.kept));
    strides_ = BroadcastStrides(plan.kept, x.shape());
    kept_numel_ = NumElements(plan.kept);
    ctx.SetOutput(0, DType::kFloat32, x.shape());
  }

  void Compute(KernelContext& ctx) override {
    inputs_.Check(ctx);
    const float* dy = ctx.Input(0).data<float>();
    const Tensor& xt = ctx.Input(1);
    const float* x = xt.data<float>();
    const float* y = ctx.Input(2).data<float>();
    float* dx = ctx.Output(0).data<float>();
    const Shape& s = xt.shape();
    const int64_t n = xt.numel();
    // Maps each element of X to the output element it was reduced into.
    out_index_.resize(static_cast<size_t>(n));
    {
      std::vector<int64_t> idx(s.size(), 0);
      int64_t o = 0;
      for (int64_t i = 0; i < n; ++i) {
        out_index_[static_cast<size_t>(i)] = o;
        for (size_t d = s.size(); d-- > 0;) {
          o += strides_[d];
          if (++idx[d] < s[d]) break;
          o -= strides_[d] * s[d];
          idx[d] = 0;
        }
      }
    }
    const int64_t* oi = out_index_.data();
    switch (op_) {
      case ReduceOp::kMax:
      case ReduceOp::kMin: {
        count_.assign(static_cast<size_t>(kept_numel_), 0.f);
        for (int64_t i = 0; i < n; ++i)
          if (x[i] == y[oi[i]]) count_[static_cast<size_t>(oi[i])] += 1.f;
        for (int64_t i = 0; i < n; ++i)
          dx[i] = x[i] == y[oi[i]] ? dy[oi[i]] / count_[static_cast<size_t>(oi[i])] : 0.f;
        break;
      }
      case ReduceOp::kProd: {
        // Y / X where X != 0; where X = 0, the product of the other elements.
        zero_count_.assign(static_cast<size_t>(kept_numel_), 0.f);
        nonzero_prod_.assign(static_cast<size_t>(kept_numel_), 1.0);
        for (int64_t i = 0; i < n; ++i) {
          if (x[i] == 0.f) zero_count_[static_cast<size_t>(oi[i])] += 1.f;
          else nonzero_prod_[static_cast<size_t>(oi[i])] *= x[i];
        }
        for (int64_t i = 0; i < n; ++i) {
          const size_t o = static_cast<size_t>(oi[i]);
          float d = 0.f;
          if (zero_count_[o] == 0.f) d = y[o] / x[i];
          else if (zero_count_[o] == 1.f && x[i] == 0.f) d = static_cast<float>(nonzero_prod_[o]);
          dx[i] = dy[o] * d;
        }
        break;
      }
      case ReduceOp::kL1:
        for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0.f ? dy[oi[i]] : x[i] < 0.f ? -dy[oi[i]] : 0.f;
        break;
      case ReduceOp::kL2:
        for (int64_t i = 0; i < n; ++i) dx[i] = y[oi[i]] != 0.f ? dy[oi[i]] * x[i] / y[oi[i]] : 0.f;
        break;
      case ReduceOp::kSumSquare:
        for (int64_t i = 0; i < n; ++i) dx[i] = 2.f * dy[oi[i]] * x[i];
        break;
      case ReduceOp::kLogSum:
        for (int64_t i = 0; i < n; ++i) dx[i] = dy[oi[i]] * std::exp(-y[oi[i]]);
        break;
      case ReduceOp::kLogSumExp:
        for (int64_t i = 0; i < n; ++i) dx[i] = dy[oi[i]] * std::exp(x[i] - y[oi[i]]);
        break;
      default:
        Unsupported("op " + node_.GetString("op", "") + " (use ReduceGrad for ReduceSum and ReduceMean)");
    }
  }

 private:
  ReduceOp op_ = ReduceOp::kMax;
  ShapeInputValues inputs_;
  std::vector<int64_t> strides_, out_index_;
  int64_t kept_numel_ = 0;
  std::vector<float> count_, zero_count_;
  std::vector<double> nonzero_prod_;
};

OT_REGISTER_KERNEL(kGradDomain, "ReduceValueGrad", 1, kLatestOpset, DeviceType::kCPU, ReduceValueGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
