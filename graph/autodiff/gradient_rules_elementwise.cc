// Gradient rules, Elementwise math and activations: Erf, Pow, trigonometry, Abs, Clip, Min/Max, the Hard*/Selu/Celu/Elu/Mish/Softplus/PRelu family, Cast.
// Unary functions share one gradient op, ActivationGrad(dY, X) with the forward op's
// name in `op` and its attributes (runtime/ops/math/activation_math.h has every derivative);
// PRelu, Pow and Min/Max have their own (runtime/cpu/elementwise/elementwise_grad_kernels.cc).
#include "graph/autodiff/gradient_rules_common.h"

#include "graph/error.h"

namespace ot {
namespace {

using B = GradientBuilder;

// dX = ActivationGrad(dY, X) for the unary functions of runtime/ops/math/activation_math.h.
void ActivationGrad(B& b) {
  std::map<std::string, Attribute> attrs = b.node().attrs;
  attrs["op"] = B::AttrString(b.node().op_type);
  b.Emit("ActivationGrad", {b.GO(0), b.I(0)}, {b.GI(0)}, kGradDomain, attrs);
}

// Clip: the bounds are attributes before opset 11 and optional inputs from 11 on; they
// are constants for the gradient (stop inputs), which passes dY strictly between them.
void ClipGrad(B& b) {
  std::map<std::string, Attribute> attrs;
  for (const char* k : {"min", "max"})
    if (b.node().HasAttr(k)) attrs[k] = B::AttrFloat(b.node().GetFloat(k, 0.f));
  attrs["op"] = B::AttrString("Clip");
  std::vector<std::string> ins = {b.GO(0), b.I(0)};
  for (int i : {1, 2}) ins.push_back(b.node().HasInput(i) ? b.I(i) : "");
  while (ins.back().empty()) ins.pop_back();
  b.Emit("ActivationGrad", ins, {b.GI(0)}, kGradDomain, attrs);
}

// Sign, Floor, Ceil, Round: piecewise constant, so the gradient is zero.
void ZeroGrad(B& b) {
  if (b.opset() >= 9) {
    std::string shape = b.Emit("Shape", {b.I(0)}, {b.Temp("shape")});
    b.Emit("ConstantOfShape", {shape}, {b.GI(0)});
  } else {
    b.Emit("Mul", {b.GO(0), b.ConstantFloat(0.f, "zero")}, {b.GI(0)});
  }
}

// Cast between floating-point types: dY cast back to the input's type. (Casts to or from
// integers carry no gradient; the differentiability pass never reaches them.)
void CastGrad(B& b) { b.Emit("CastLike", {b.GO(0), b.I(0)}, {b.GI(0)}, kGradDomain); }

// PRelu(X, slope): dX and dSlope from one PReluGrad (dSlope already summed to the
// slope's shape; before opset 7 a 1-D slope runs along the channel axis).
void PReluGrad(B& b) {
  std::vector<std::string> outs = {b.NeedGI(0) ? b.GI(0) : "", b.NeedGI(1) ? b.GI(1) : ""};
  b.Emit("PReluGrad", {b.GO(0), b.I(0), b.I(1)}, outs, kGradDomain,
         {{"channel_slope", B::AttrInt(b.opset() < 7 ? 1 : 0)}});
}

// Pow(A, B): PowGrad gives both partials shaped like Y, summed to A's and B's shapes.
void PowGrad(B& b) {
  std::vector<std::string> outs = {b.NeedGI(0) ? b.Temp("da") : "", b.NeedGI(1) ? b.Temp("db") : ""};
  b.Emit("PowGrad", {b.GO(0), b.I(0), b.I(1)}, outs, kGradDomain);
  for (int i : {0, 1})
    if (b.NeedGI(i)) WriteBroadcastGrad(b, outs[static_cast<size_t>(i)], i);
}

// Max and Min (one or more inputs): dY goes to the inputs equal to Y, split evenly among
// ties (PyTorch's maximum/minimum give each of two tied inputs half).
void MinMaxGrad(B& b) {
  const int n = b.node().NumInputs();
  std::vector<std::string> ins = {b.GO(0), b.O(0)};
  std::vector<std::string> outs;
  for (int i = 0; i < n; ++i) {
    ins.push_back(b.I(i));
    outs.push_back(b.NeedGI(i) ? b.Temp("d" + std::to_string(i)) : "");
  }
  b.Emit("MinMaxGrad", ins, outs, kGradDomain);
  for (int i = 0; i < n; ++i)
    if (b.NeedGI(i)) WriteBroadcastGrad(b, outs[static_cast<size_t>(i)], i);
}

// Mean: dY / n to every input, summed over its broadcast axes.
void MeanGrad(B& b) {
  const int n = b.node().NumInputs();
  std::string g = b.GO(0);
  if (n > 1) g = b.Emit("Mul", {g, b.ConstantFloat(1.f / static_cast<float>(n), "inv_n")}, {b.Temp("scaled")});
  for (int i = 0; i < n; ++i)
    if (b.NeedGI(i)) WriteBroadcastGrad(b, g, i);
}

}  // namespace

void RegisterElementwiseGradientRules(GradientRegistry& r) {
  // Unary functions, from the first opset with today's semantics (earlier versions only
  // add the legacy 'consumed_inputs' attribute, which the gradient ignores).
  const std::pair<const char*, int64_t> unary[] = {
      {"Erf", 9},         {"Sin", 7},        {"Cos", 7},       {"Tan", 7},      {"Asin", 7},      {"Acos", 7},
      {"Atan", 7},        {"Sinh", 9},       {"Cosh", 9},      {"Asinh", 9},    {"Acosh", 9},     {"Atanh", 9},
      {"Abs", 1},         {"Reciprocal", 1}, {"HardSigmoid", 1}, {"HardSwish", 14}, {"Softplus", 1}, {"Softsign", 1},
      {"Elu", 1},         {"Selu", 1},       {"Celu", 12},     {"Mish", 18},    {"ThresholdedRelu", 10},
      {"Shrink", 9}};
  for (const auto& [op, since] : unary) RegisterRule(r, op, since, kLatestOpset, ActivationGrad);
  RegisterRule(r, "Gelu", 20, kLatestOpset, ActivationGrad);  // approximate "none" or "tanh" (the attribute is passed on)
  RegisterRule(r, "Gelu", 1, kLatestOpset, ActivationGrad, {}, kGradDomain);  // fused (graph/passes/fusion.h)
  RegisterRule(r, "Silu", 1, kLatestOpset, ActivationGrad, {}, kGradDomain);  // fused (graph/passes/fusion.h)
  RegisterRule(r, "Clip", 1, kLatestOpset, ClipGrad, {1, 2});
  for (const char* op : {"Floor", "Ceil"}) RegisterRule(r, op, 1, kLatestOpset, ZeroGrad);
  RegisterRule(r, "Sign", 9, kLatestOpset, ZeroGrad);
  RegisterRule(r, "Round", 11, kLatestOpset, ZeroGrad);
  RegisterRule(r, "Cast", 6, kLatestOpset, CastGrad);
  // CastLike(input, target_type): target_type gives only the type (PyTorch 2.x casts its
  // constants like a parameter), so it never carries a gradient.
  RegisterRule(r, "CastLike", 15, kLatestOpset, CastGrad, {1});
  RegisterRule(r, "PRelu", 1, kLatestOpset, PReluGrad);
  RegisterRule(r, "Pow", 7, kLatestOpset, PowGrad);
  for (const char* op : {"Max", "Min"}) RegisterRule(r, op, 1, kLatestOpset, MinMaxGrad);  // before 8: inputs of equal shapes
  RegisterRule(r, "Mean", 6, kLatestOpset, MeanGrad);
}

}  // namespace ot
