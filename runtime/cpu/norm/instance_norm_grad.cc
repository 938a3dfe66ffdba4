// InstanceNormalizationGrad (org.onnxtrain): the fused backward of InstanceNormalization,
// one pass of row loops per instance (n, c) over its spatial values.
//
//   InstanceNormalizationGrad(dY, X, scale) -> dX, dScale, dBias (each optional)
//     attribute epsilon as on the forward node. With xhat = (x - mean) * inv_std over
//     the instance's S values:
//       dBias[c]  = sum over n, s of dY
//       dScale[c] = sum over n, s of dY * xhat
//       dX        = scale[c] * inv_std * (dY - mean(dY) - xhat * mean(dY * xhat))
//     Statistics are recomputed from X (in double), so the forward node needs no extra
//     outputs.
#include <cmath>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/checks/norm_checks.h"
#include "runtime/ops/math/norm_math.h"

namespace ot {
namespace cpu {
namespace {

class InstanceNormGradKernel final : public OpKernel {
 public:
  explicit InstanceNormGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    RequireFloat32Inputs(node_, ctx, 3);
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    if (x.rank() < 3) Fail("input " + x.Describe() + " must be N x C x D1 x ...");
    if (dy.shape() != x.shape()) Fail("gradient " + dy.Describe() + " does not match the input " + x.Describe());
    RequirePerChannelInputs(node_, ctx, 2, 3, x.dim(1));
    ctx.SetOutput(0, DType::kFloat32, x.shape());
    ctx.SetOutput(1, DType::kFloat32, {x.dim(1)});
    ctx.SetOutput(2, DType::kFloat32, {x.dim(1)});
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(1);
    const int64_t channels = x.dim(1), instances = x.dim(0) * channels;
    const int64_t spatial = instances == 0 ? 0 : x.numel() / instances;
    const float* dy = ctx.Input(0).data<float>();
    const float* xs = x.data<float>();
    const float* scale = ctx.Input(2).data<float>();
    float* dx = ctx.HasOutput(0) ? ctx.Output(0).data<float>() : nullptr;
    const double eps = node_.GetFloat("epsilon", 1e-5f);
    std::vector<double> sum_dy(static_cast<size_t>(instances)), sum_dy_xhat(static_cast<size_t>(instances));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < instances; ++i) {
      const float* xr = xs + i * spatial;
      const float* gr = dy + i * spatial;
      double mean = 0;
      for (int64_t s = 0; s < spatial; ++s) mean += xr[s];
      mean /= static_cast<double>(spatial);
      double var = 0;
      for (int64_t s = 0; s < spatial; ++s) var += (xr[s] - mean) * (xr[s] - mean);
      var /= static_cast<double>(spatial);
      const double inv_std = InvStdDev(var, eps);
      double g = 0, gx = 0;
      for (int64_t s = 0; s < spatial; ++s) {
        g += gr[s];
        gx += gr[s] * (xr[s] - mean);
      }
      gx *= inv_std;
      sum_dy[static_cast<size_t>(i)] = g;
      sum_dy_xhat[static_cast<size_t>(i)] = gx;
      if (!dx) continue;
      const double n = static_cast<double>(spatial);
      const float k = static_cast<float>(scale[i % channels] * inv_std);
      const float mean_g = static_cast<float>(g / n), mean_gx = static_cast<float>(gx / n);
      const float m = static_cast<float>(mean), is = static_cast<float>(inv_std);
      float* dr = dx + i * spatial;
      for (int64_t s = 0; s < spatial; ++s) dr[s] = NormInputGrad(gr[s], (xr[s] - m) * is, k, mean_g, mean_gx);
    }
    for (int out : {1, 2}) {
      if (!ctx.HasOutput(out)) continue;
      const std::vector<double>& sums = out == 1 ? sum_dy_xhat : sum_dy;
      float* d = ctx.Output(out).data<float>();
      for (int64_t c = 0; c < channels; ++c) {
        double acc = 0;
        for (int64_t n = 0; n < x.dim(0); ++n) acc += sums[static_cast<size_t>(n * channels + c)];
        d[c] = static_cast<float>(acc);
      }
    }
  }
};

OT_REGISTER_KERNEL(kGradDomain, "InstanceNormalizationGrad", 1, kLatestOpset, DeviceType::kCPU, InstanceNormGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
