// Device-neutral Prepare checks of the normalization ops; see norm_checks.h.
#include "runtime/ops/checks/norm_checks.h"

#include <string>

#include "graph/error.h"
#include "graph/op_domains.h"
#include "runtime/ops/checks/kernel_util.h"

namespace ot {

void RequireFloat32Inputs(const Node& node, const KernelContext& ctx, int count) {
  for (int i = 0; i < count; ++i)
    if (ctx.Input(i).dtype() != DType::kFloat32)
      throw UnsupportedError(node.op_type + ": data type " + DTypeName(ctx.Input(i).dtype()));
}

void RequirePerChannelInputs(const Node& node, const KernelContext& ctx, int first, int end, int64_t channels) {
  for (int i = first; i < end; ++i)
    if (ctx.Input(i).shape() != Shape{channels})
      throw Error(node.Describe() + ": input " + std::to_string(i) + " " + ctx.Input(i).Describe() +
                  " must have one value per channel (" + std::to_string(channels) + ")");
}

int64_t CheckBatchNormInputs(const Node& node, const KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  RequireFloat32Inputs(node, ctx, 5);
  if (x.rank() < 2) throw Error(node.Describe() + ": input " + x.Describe() + " must be N x C x ...");
  if (node.GetInt("spatial", 1) != 1)
    throw UnsupportedError(node.op_type + ": spatial=0 (per-activation statistics)");
  const int64_t channels = x.dim(1);
  RequirePerChannelInputs(node, ctx, 1, 5, channels);
  return channels;
}

bool BatchNormTrainingMode(const Node& node, int opset, const KernelContext& ctx) {
  const bool stats_requested = ctx.HasOutput(1) || ctx.HasOutput(2) || ctx.HasOutput(3) || ctx.HasOutput(4);
  if (node.domain == kGradDomain) return true;  // BatchNormTraining of training graphs
  bool training = stats_requested;
  if (opset >= 14) training = node.GetInt("training_mode", 0) != 0;
  else if (opset <= 6) training = node.GetInt("is_test", 0) == 0;
  if (stats_requested && !training)
    throw Error(node.Describe() + ": statistics outputs are requested but the node is in inference mode");
  return training;
}

int64_t CheckBatchNormGradInputs(const Node& node, const KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& x = ctx.Input(1);
  RequireFloat32Inputs(node, ctx, 5);
  if (dy.shape() != x.shape() || x.rank() < 2)
    throw Error(node.Describe() + ": gradient " + dy.Describe() + " does not match input " + x.Describe());
  return x.dim(1);
}

LrnAttrs ReadLrnAttrs(const Node& node, const Tensor& x) {
  if (x.rank() < 3) throw Error(node.Describe() + ": input " + x.Describe() + " must be N x C x D1 x ...");
  LrnAttrs a;
  a.size = node.GetInt("size", 0);
  if (a.size < 1) throw Error(node.Describe() + ": attribute size must be positive");
  a.alpha = node.GetFloat("alpha", 1e-4f);
  a.beta = node.GetFloat("beta", 0.75f);
  a.bias = node.GetFloat("bias", 1.f);
  return a;
}

LayerNormGeometry PlanLayerNorm(const Node& node, const KernelContext& ctx, int scale_input,
                                const Tensor* bias) {
  const Tensor& x = ctx.Input(scale_input - 1);
  const Tensor& scale = ctx.Input(scale_input);
  for (const Tensor* t : {&x, &scale, bias})
    if (t && t->dtype() != DType::kFloat32)
      throw UnsupportedError(node.op_type + ": data type " + DTypeName(t->dtype()) + " (float32 only)");
  if (node.GetInt("stash_type", 1) != 1)
    throw UnsupportedError(node.op_type + ": stash_type " + std::to_string(node.GetInt("stash_type", 1)) +
                           " (only 1, float)");
  const int64_t rank = static_cast<int64_t>(x.rank());
  if (rank == 0) throw Error(node.Describe() + ": " + node.op_type + " needs an input of rank >= 1");
  const int64_t axis = NormalizeAxis(node.GetInt("axis", -1), rank, node);
  LayerNormGeometry g;
  const Shape& s = x.shape();
  g.tail = Shape(s.begin() + axis, s.end());
  g.stats = s;
  for (size_t d = static_cast<size_t>(axis); d < s.size(); ++d) g.stats[d] = 1;
  g.inner = NumElements(g.tail);
  g.outer = NumElements(Shape(s.begin(), s.begin() + axis));
  auto check = [&](const Tensor& t, const char* what) {
    if (static_cast<size_t>(t.rank()) > g.tail.size() || BroadcastShapes(t.shape(), g.tail, node) != g.tail)
      throw Error(node.Describe() + ": " + what + " " + t.Describe() + " does not broadcast to the normalised shape " +
                  ShapeString(g.tail));
  };
  check(scale, "Scale");
  g.scale_strides = BroadcastStrides(scale.shape(), g.tail);
  if (bias) {
    check(*bias, "B");
    g.bias_strides = BroadcastStrides(bias->shape(), g.tail);
  }
  return g;
}

}  // namespace ot
