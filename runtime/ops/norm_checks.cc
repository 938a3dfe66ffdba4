// Device-neutral Prepare checks of the normalization ops; see norm_checks.h.
#include "runtime/ops/norm_checks.h"

#include <string>

#include "graph/error.h"
#include "graph/op_domains.h"

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

}  // namespace ot
