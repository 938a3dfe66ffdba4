// LpNormalization (p = 1 or 2 along one axis) and its gradient, as loops over X seen as
// [outer, axis, inner]. A slice whose norm is 0 gives 0 (and a zero gradient).
//
//   LpNormalization(X) -> Y = X / ||X||_p
//   LpNormalizationGrad(dY, X) -> dX = (dY - s * sum(dY * Y)) / ||X||_p along the axis,
//     with s = Y for p = 2 and sign(X) for p = 1 (org.onnxtrain, attributes as forward).
#include <cmath>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/core/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

struct LpGeometry {
  int64_t outer = 1, len = 1, inner = 1, p = 2;
};

LpGeometry PlanLp(const Node& node, const Tensor& x) {
  if (x.dtype() != DType::kFloat32) throw UnsupportedError(node.op_type + ": data type " + DTypeName(x.dtype()));
  LpGeometry g;
  g.p = node.GetInt("p", 2);
  if (g.p != 1 && g.p != 2) throw Error(node.Describe() + ": p must be 1 or 2, not " + std::to_string(g.p));
  if (x.rank() == 0) throw Error(node.Describe() + ": LpNormalization needs an input of rank >= 1");
  const int64_t axis = NormalizeAxis(node.GetInt("axis", -1), x.rank(), node);
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d < axis) g.outer *= x.dim(static_cast<int>(d));
    else if (d > axis) g.inner *= x.dim(static_cast<int>(d));
  }
  g.len = x.dim(static_cast<int>(axis));
  return g;
}

// Norm of the slice at (o, i).
double SliceNorm(const LpGeometry& g, const float* x, int64_t o, int64_t i) {
  double acc = 0;
  for (int64_t k = 0; k < g.len; ++k) {
    const double v = x[(o * g.len + k) * g.inner + i];
    acc += g.p == 1 ? std::fabs(v) : v * v;
  }
  return g.p == 1 ? acc : std::sqrt(acc);
}

class LpNormalizationKernel final : public OpKernel {
 public:
  explicit LpNormalizationKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    g_ = PlanLp(node_, ctx.Input(0));
    ctx.SetOutput(0, DType::kFloat32, ctx.Input(0).shape());
  }

  void Compute(KernelContext& ctx) override {
    const float* x = ctx.Input(0).data<float>();
    float* y = ctx.Output(0).data<float>();
    const LpGeometry g = g_;
#pragma omp parallel for schedule(static)
    for (int64_t oi = 0; oi < g.outer * g.inner; ++oi) {
      const int64_t o = oi / g.inner, i = oi % g.inner;
      const double n = SliceNorm(g, x, o, i);
      const float inv = n > 0 ? static_cast<float>(1.0 / n) : 0.f;
      for (int64_t k = 0; k < g.len; ++k) {
        const int64_t at = (o * g.len + k) * g.inner + i;
        y[at] = x[at] * inv;
      }
    }
  }

 private:
  LpGeometry g_;
};

class LpNormalizationGradKernel final : public OpKernel {
 public:
  explicit LpNormalizationGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    g_ = PlanLp(node_, x);
    if (dy.shape() != x.shape() || dy.dtype() != DType::kFloat32)
      Fail("gradient " + dy.Describe() + " does not match the input " + x.Describe());
    ctx.SetOutput(0, DType::kFloat32, x.shape());
  }

  void Compute(KernelContext& ctx) override {
    const float* dy = ctx.Input(0).data<float>();
    const float* x = ctx.Input(1).data<float>();
    float* dx = ctx.Output(0).data<float>();
    const LpGeometry g = g_;
#pragma omp parallel for schedule(static)
    for (int64_t oi = 0; oi < g.outer * g.inner; ++oi) {
      const int64_t o = oi / g.inner, i = oi % g.inner;
      const double n = SliceNorm(g, x, o, i);
      double dot = 0;  // sum(dY * Y)
      for (int64_t k = 0; k < g.len; ++k) {
        const int64_t at = (o * g.len + k) * g.inner + i;
        dot += static_cast<double>(dy[at]) * x[at];
      }
      dot = n > 0 ? dot / n : 0;
      for (int64_t k = 0; k < g.len; ++k) {
        const int64_t at = (o * g.len + k) * g.inner + i;
        if (n <= 0) {
          dx[at] = 0.f;
          continue;
        }
        const double s = g.p == 2 ? x[at] / n : (x[at] > 0) - (x[at] < 0);
        dx[at] = static_cast<float>((dy[at] - s * dot) / n);
      }
    }
  }

 private:
  LpGeometry g_;
};

OT_REGISTER_CPU_KERNEL("LpNormalization", 1, kLatestOpset, LpNormalizationKernel);
OT_REGISTER_KERNEL(kGradDomain, "LpNormalizationGrad", 1, kLatestOpset, DeviceType::kCPU, LpNormalizationGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
