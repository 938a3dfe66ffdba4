// GroupNormalization (opsets 18 and 21) and its gradient GroupNormalizationGrad
// (org.onnxtrain), as loops over the (instance, group) blocks of X with statistics in double.
// X is N x C x D1 x ... (rank >= 2), float32; num_groups G divides C; each block is the
// C/G channels of one group of one instance, contiguous in memory.
//
//   GroupNormalization(X, scale, bias) -> Y = (X - mean) / sqrt(var + epsilon) * scale + bias
//     opset 18-20: scale and bias have one value per group, shape [G];
//     opset 21+:   one value per channel, shape [C] (stash_type 1, float, only).
//   GroupNormalizationGrad(dY, X, scale) -> dX, dScale, dBias (each optional)
//     attributes epsilon, num_groups and per_channel (1: scale is [C], 0: [G]); recomputes
//     the block statistics from X, so the forward needs no extra outputs. With
//     xhat = (x - mean) * inv_std and g = dY * scale over a block of M values:
//       dX     = inv_std * (g - mean(g) - xhat * mean(g * xhat))
//       dScale = sum of dY * xhat, dBias = sum of dY (per channel or per group).
#include <cmath>
#include <string>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/checks/norm_checks.h"

namespace ot {
namespace cpu {
namespace {

struct GroupNormGeometry {
  int64_t n = 0, c = 0, groups = 1, spatial = 1;
  int64_t channels_per_group() const { return c / groups; }
  int64_t block() const { return channels_per_group() * spatial; }
};

// Checks X, scale (and bias when `bias_input` >= 0) and the attributes; `per_channel`
// says whether scale and bias are [C] (opset 21+) or [G].
GroupNormGeometry PlanGroupNorm(const Node& node, const KernelContext& ctx, int x_input, int scale_input,
                                int bias_input, bool per_channel) {
  RequireFloat32Inputs(node, ctx, (bias_input >= 0 ? bias_input : scale_input) + 1);
  if (node.GetInt("stash_type", 1) != 1)
    throw UnsupportedError(node.Describe() + ": stash_type " + std::to_string(node.GetInt("stash_type", 1)) +
                           " is not supported (only 1, float); export the model in float32");
  const Tensor& x = ctx.Input(x_input);
  if (x.rank() < 2) throw Error(node.Describe() + ": the input " + x.Describe() + " must be N x C x D1 x ...");
  if (!node.HasAttr("num_groups")) throw Error(node.Describe() + ": the attribute num_groups is missing");
  GroupNormGeometry g;
  g.n = x.dim(0);
  g.c = x.dim(1);
  g.groups = node.GetInt("num_groups", 1);
  if (g.groups <= 0 || g.c % g.groups != 0)
    throw Error(node.Describe() + ": num_groups " + std::to_string(g.groups) + " does not divide the " +
                std::to_string(g.c) + " channels of " + x.Describe());
  for (size_t d = 2; d < x.shape().size(); ++d) g.spatial *= x.dim(static_cast<int>(d));
  const int64_t want = per_channel ? g.c : g.groups;
  for (int i : {scale_input, bias_input}) {
    if (i < 0) continue;
    const Tensor& t = ctx.Input(i);
    if (t.rank() != 1 || t.dim(0) != want)
      throw Error(node.Describe() + ": " + (i == scale_input ? "scale " : "bias ") + t.Describe() +
                  " must have shape [" + std::to_string(want) + "] (" +
                  (per_channel ? "one value per channel from opset 21" : "one value per group before opset 21") + ")");
  }
  return g;
}

// Mean and 1 / sqrt(var + eps) of `m` values, in double.
void BlockStats(const float* x, int64_t m, double eps, double* mean, double* inv_std) {
  double sum = 0;
  for (int64_t j = 0; j < m; ++j) sum += x[j];
  const double mu = m ? sum / static_cast<double>(m) : 0.0;
  double sq = 0;
  for (int64_t j = 0; j < m; ++j) {
    const double d = x[j] - mu;
    sq += d * d;
  }
  *mean = mu;
  *inv_std = 1.0 / std::sqrt((m ? sq / static_cast<double>(m) : 0.0) + eps);
}

class GroupNormKernel final : public OpKernel {
 public:
  explicit GroupNormKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    g_ = PlanGroupNorm(node_, ctx, 0, 1, 2, opset_ >= 21);
    ctx.SetOutput(0, DType::kFloat32, ctx.Input(0).shape());
  }

  void Compute(KernelContext& ctx) override {
    const float* x = ctx.Input(0).data<float>();
    const float* scale = ctx.Input(1).data<float>();
    const float* bias = ctx.Input(2).data<float>();
    float* y = ctx.Output(0).data<float>();
    const bool per_channel = opset_ >= 21;
    const double eps = node_.GetFloat("epsilon", 1e-5f);
    const int64_t blocks = g_.n * g_.groups, cg = g_.channels_per_group(), s = g_.spatial, m = g_.block();
    const int64_t groups = g_.groups;
#pragma omp parallel for schedule(static) if (blocks * m > 32768)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t group = b % groups;
      double mu = 0, inv = 0;
      BlockStats(x + b * m, m, eps, &mu, &inv);
      const float fm = static_cast<float>(mu), fi = static_cast<float>(inv);
      for (int64_t k = 0; k < cg; ++k) {
        const int64_t ch = per_channel ? group * cg + k : group;
        const float a = fi * scale[ch], c0 = bias[ch];
        const float* xr = x + b * m + k * s;
        float* yr = y + b * m + k * s;
        for (int64_t j = 0; j < s; ++j) yr[j] = (xr[j] - fm) * a + c0;
      }
    }
  }

 private:
  GroupNormGeometry g_;
};

class GroupNormGradKernel final : public OpKernel {
 public:
  explicit GroupNormGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    per_channel_ = node_.GetInt("per_channel", 1) != 0;
    g_ = PlanGroupNorm(node_, ctx, 1, 2, -1, per_channel_);
    const Tensor& dy = ctx.Input(0);
    if (dy.shape() != ctx.Input(1).shape())
      Fail("gradient " + dy.Describe() + " does not match X " + ctx.Input(1).Describe());
    ctx.SetOutput(0, DType::kFloat32, dy.shape());
    const int64_t params = per_channel_ ? g_.c : g_.groups;
    ctx.SetOutput(1, DType::kFloat32, {params});
    ctx.SetOutput(2, DType::kFloat32, {params});
    // Per instance and channel: sum of dY * xhat and sum of dY.
    sums_.assign(static_cast<size_t>(2 * g_.n * g_.c), 0.0);
  }

  void Compute(KernelContext& ctx) override {
    const float* dy = ctx.Input(0).data<float>();
    const float* x = ctx.Input(1).data<float>();
    const float* scale = ctx.Input(2).data<float>();
    float* dx = ctx.HasOutput(0) ? ctx.Output(0).data<float>() : nullptr;
    const double eps = node_.GetFloat("epsilon", 1e-5f);
    const int64_t blocks = g_.n * g_.groups, cg = g_.channels_per_group(), s = g_.spatial, m = g_.block();
    const int64_t groups = g_.groups, channels = g_.c;
    const bool per_channel = per_channel_;
    double* sum_dyx = sums_.data();
    double* sum_dy = sums_.data() + g_.n * g_.c;
#pragma omp parallel for schedule(static) if (blocks * m > 32768)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t group = b % groups, inst = b / groups;
      const float* xb = x + b * m;
      const float* gb = dy + b * m;
      double mu = 0, inv = 0;
      BlockStats(xb, m, eps, &mu, &inv);
      double sum_g = 0, sum_gx = 0;  // of g = dY * scale, and of g * (x - mean)
      for (int64_t k = 0; k < cg; ++k) {
        const int64_t ch = group * cg + k;
        const double sc = scale[per_channel ? ch : group];
        double d = 0, dx_ = 0;
        for (int64_t j = 0; j < s; ++j) {
          d += gb[k * s + j];
          dx_ += gb[k * s + j] * (xb[k * s + j] - mu);
        }
        sum_dy[inst * channels + ch] = d;
        sum_dyx[inst * channels + ch] = dx_ * inv;
        sum_g += sc * d;
        sum_gx += sc * dx_;
      }
      if (!dx) continue;
      const double mean_g = sum_g / static_cast<double>(m), mean_gx = sum_gx * inv / static_cast<double>(m);
      const float fm = static_cast<float>(mu), fi = static_cast<float>(inv);
      const float fmg = static_cast<float>(mean_g), fmgx = static_cast<float>(mean_gx);
      float* db = dx + b * m;
      for (int64_t k = 0; k < cg; ++k) {
        const float sc = scale[per_channel ? group * cg + k : group];
        for (int64_t j = 0; j < s; ++j) {
          const int64_t i = k * s + j;
          const float xhat = (xb[i] - fm) * fi;
          db[i] = fi * (gb[i] * sc - fmg - xhat * fmgx);
        }
      }
    }
    for (int out : {1, 2}) {
      if (!ctx.HasOutput(out)) continue;
      const double* sums = out == 1 ? sum_dyx : sum_dy;
      float* d = ctx.Output(out).data<float>();
      const int64_t params = per_channel ? channels : groups;
      std::vector<double> acc(static_cast<size_t>(params), 0.0);
      for (int64_t i = 0; i < g_.n; ++i)
        for (int64_t ch = 0; ch < channels; ++ch)
          acc[static_cast<size_t>(per_channel ? ch : ch / cg)] += sums[i * channels + ch];
      for (int64_t p = 0; p < params; ++p) d[p] = static_cast<float>(acc[static_cast<size_t>(p)]);
    }
  }

 private:
  GroupNormGeometry g_;
  bool per_channel_ = true;
  std::vector<double> sums_;
};

OT_REGISTER_CPU_KERNEL("GroupNormalization", 18, kLatestOpset, GroupNormKernel);
OT_REGISTER_KERNEL(kGradDomain, "GroupNormalizationGrad", 1, kLatestOpset, DeviceType::kCPU, GroupNormGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
