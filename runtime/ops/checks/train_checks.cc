// Device-neutral Prepare logic of the losses and optimizers; see train_checks.h.
#include "runtime/ops/checks/train_checks.h"

#include <string>

#include "graph/error.h"

namespace ot {
namespace {

[[noreturn]] void Fail(const Node& node, const std::string& what) { throw Error(node.Describe() + ": " + what); }

}  // namespace

LossAttrs ReadLossAttrs(const Node& node) {
  LossAttrs a;
  const std::string reduction = node.GetString("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    Fail(node, "reduction must be none, sum or mean, got '" + reduction + "'");
  a.reduce = reduction != "none";
  a.mean = reduction == "mean";
  a.has_ignore_index = node.HasAttr("ignore_index");
  a.ignore_index = node.GetInt("ignore_index", 0);
  return a;
}

Shape CheckLossLabels(const Node& node, const Tensor& scores, const Tensor& labels) {
  if (labels.dtype() != DType::kInt64 && labels.dtype() != DType::kInt32)
    Fail(node, "labels must be int32 or int64, got " + labels.Describe());
  if (scores.rank() < 2) Fail(node, "scores must be [N, C] or [N, C, d1, ...], got " + scores.Describe());
  Shape expected = scores.shape();
  expected.erase(expected.begin() + 1);
  if (labels.shape() != expected)
    Fail(node, "labels " + labels.Describe() + " do not match scores " + scores.Describe() + " (expected " +
                   ShapeString(expected) + ")");
  return expected;
}

int PrepareOptimizerOutputs(const Node& node, KernelContext& ctx, int states) {
  const int groups = 2 + states;  // X, G, states
  if (ctx.NumInputs() < 2 + groups || (ctx.NumInputs() - 2) % groups != 0)
    Fail(node, "expects R, T and then X, G and " + std::to_string(states) + " state tensor(s) per updated tensor");
  const int n = (ctx.NumInputs() - 2) / groups;
  if (ctx.Input(0).numel() != 1 || ctx.Input(0).dtype() != DType::kFloat32) Fail(node, "R must be a float scalar");
  if (ctx.Input(1).numel() != 1 || ctx.Input(1).dtype() != DType::kInt64) Fail(node, "T must be an int64 scalar");
  for (int i = 0; i < n; ++i) {
    const Tensor& x = ctx.Input(2 + i);
    for (int k = 1; k < groups; ++k)
      if (ctx.Input(2 + k * n + i).shape() != x.shape())
        Fail(node, "tensor " + std::to_string(i) + ": shapes of X and its gradient/state differ");
    if (x.dtype() != DType::kFloat32) throw UnsupportedError(node.op_type + ": data type " + DTypeName(x.dtype()));
    for (int k = 0; k < 1 + states; ++k) ctx.SetOutput(k * n + i, DType::kFloat32, x.shape());
  }
  return n;
}

MomentumParams ReadMomentumParams(const Node& node) {
  const std::string mode = node.GetString("mode", "standard");
  if (mode != "standard" && mode != "nesterov") Fail(node, "unknown mode '" + mode + "' (standard or nesterov)");
  MomentumParams p;
  p.nesterov = mode == "nesterov";
  p.alpha = node.GetFloat("alpha", 0.f);
  p.beta = node.GetFloat("beta", 0.f);
  p.norm = node.GetFloat("norm_coefficient", 0.f);
  return p;
}

AdagradParams ReadAdagradParams(const Node& node) {
  AdagradParams p;
  p.decay = node.GetFloat("decay_factor", 0.f);
  p.epsilon = node.GetFloat("epsilon", 0.f);
  p.norm = node.GetFloat("norm_coefficient", 0.f);
  return p;
}

AdamParams ReadAdamParams(const Node& node) {
  AdamParams p;
  p.alpha = node.GetFloat("alpha", 0.9f);
  p.beta = node.GetFloat("beta", 0.999f);
  p.epsilon = node.GetFloat("epsilon", 1e-6f);
  p.norm = node.GetFloat("norm_coefficient", 0.f);
  p.norm_post = node.GetFloat("norm_coefficient_post", 0.f);
  return p;
}

AdamWParams ReadAdamWParams(const Node& node) {
  AdamWParams p;
  p.beta1 = node.GetFloat("beta1", 0.9f);
  p.beta2 = node.GetFloat("beta2", 0.999f);
  p.epsilon = node.GetFloat("epsilon", 1e-8f);
  p.weight_decay = node.GetFloat("weight_decay", 0.01f);
  return p;
}

RmspropParams ReadRmspropParams(const Node& node) {
  RmspropParams p;
  p.alpha = node.GetFloat("alpha", 0.99f);
  p.epsilon = node.GetFloat("epsilon", 1e-8f);
  p.momentum = node.GetFloat("momentum", 0.f);
  p.weight_decay = node.GetFloat("weight_decay", 0.f);
  p.centered = node.GetInt("centered", 0) != 0;
  return p;
}

OptimizerSlots OptimizerSlotsOf(KernelContext& ctx, int i, int n, int states) {
  OptimizerSlots s;
  s.x = ctx.Input(2 + i).data<float>();
  s.g = ctx.Input(2 + n + i).data<float>();
  for (int k = 0; k < states; ++k) s.state[k] = ctx.Input(2 + (2 + k) * n + i).data<float>();
  s.x_new = ctx.HasOutput(i) ? ctx.Output(i).data<float>() : nullptr;
  for (int k = 0; k < states; ++k)
    s.state_new[k] = ctx.HasOutput((1 + k) * n + i) ? ctx.Output((1 + k) * n + i).data<float>() : nullptr;
  return s;
}

int OptimizerInPlaceInput(int output, int n, int states) {
  if (n == 0 || output < 0 || output >= (1 + states) * n) return -1;
  const int k = output / n, i = output % n;
  return k == 0 ? 2 + i : 2 + (1 + k) * n + i;
}

}  // namespace ot
