// Optimizer insertion.
#include "graph/passes/optimizer_pass.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "graph/error.h"
#include "graph/autodiff/gradient_registry.h"
#include "graph/op_domains.h"

namespace ot {

OptimizerConfig::Kind ParseOptimizerKind(const std::string& name) {
  if (name == "sgd") return OptimizerConfig::Kind::kSgd;
  if (name == "adam") return OptimizerConfig::Kind::kAdam;
  if (name == "adagrad") return OptimizerConfig::Kind::kAdagrad;
  if (name == "adamw") return OptimizerConfig::Kind::kAdamW;
  if (name == "rmsprop") return OptimizerConfig::Kind::kRmsprop;
  throw Error("unknown optimizer '" + name + "'; choose sgd, adam, adamw, rmsprop or adagrad");
}

ParamKind ParamKindOf(const Graph& g, const std::string& param) {
  // BatchNormTraining: our training form of BatchNormalization (same inputs).
  static const std::set<std::string> kNorms = {"BatchNormalization", "BatchNormTraining", "LayerNormalization",
                                               "InstanceNormalization", "GroupNormalization"};
  static const std::set<std::string> kBiased = {"Conv", "ConvTranspose", "Gemm"};
  const HostTensor* t = g.FindInitializer(param);
  ParamKind kind;
  for (const Node& n : g.nodes) {
    const bool forward = IsOnnxDomain(n.domain) || n.op_type == "BatchNormTraining";
    if (!forward) continue;  // gradient and update nodes
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.inputs[k] != param) continue;
      if (kNorms.count(n.op_type) && (k == 1 || k == 2)) {
        kind.norm = true;
        kind.bias = kind.bias || k == 2;
      } else if (kBiased.count(n.op_type) && k == 2) {
        kind.bias = true;
      } else if (n.op_type == "Add" && n.inputs.size() == 2 && t && t->dims.size() == 1) {
        // A Linear layer exported as MatMul + Add.
        const std::string& other = n.inputs[1 - k];
        for (const Node& p : g.nodes)
          if (p.op_type == "MatMul" && !p.outputs.empty() && p.outputs[0] == other) kind.bias = true;
      }
    }
  }
  return kind;
}

float WeightDecayFor(const OptimizerConfig& config, ParamKind kind) {
  if (kind.bias && !std::isnan(config.bias_weight_decay)) return config.bias_weight_decay;
  if (kind.norm && !std::isnan(config.norm_weight_decay)) return config.norm_weight_decay;
  return config.weight_decay;
}

namespace {

// Appends a node of `op` (default domain) named after its one output `out`; returns `out`.
std::string AddNode(Graph& g, const std::string& op, std::vector<std::string> inputs, const std::string& out) {
  Node n;
  n.op_type = op;
  n.name = out;
  n.inputs = std::move(inputs);
  n.outputs = {out};
  g.nodes.push_back(std::move(n));
  return out;
}

ValueInfo ScalarInput(const std::string& name, DType t) {
  ValueInfo v;
  v.name = name;
  v.dtype = t;
  v.has_shape = true;
  return v;
}

ValueInfo LikeTensor(const std::string& name, const HostTensor& t) {
  ValueInfo v;
  v.name = name;
  v.dtype = t.dtype;
  v.has_shape = true;
  for (int64_t d : t.dims) v.dims.push_back(Dim{d, ""});
  return v;
}

// Gradient clipping by global norm, as nodes of the default domain: each gradient's sum
// of squares, their sum, its square root N, C = min(max / (N + 1e-6), 1), and every
// gradient times C (torch.nn.utils.clip_grad_norm_, which also multiplies by a clamped
// coefficient of 1). Returns the gradients the updates read.
std::vector<std::string> ClipGradients(TrainingGraph& tg, float max_norm) {
  if (max_norm <= 0.f || tg.grads.empty()) return tg.grads;
  Graph& g = tg.model.graph;
  const std::string prefix = "clip_grad_norm/";
  auto add = [&](const std::string& op, std::vector<std::string> inputs, const std::string& out) {
    return AddNode(g, op, std::move(inputs), out);
  };
  auto constant = [&](const std::string& name, float v) {
    Node n;
    n.op_type = "Constant";
    n.name = prefix + name;
    n.outputs = {prefix + name};
    n.SetTensor("value", HostTensor::FromVector<float>({v}, {}));
    g.nodes.push_back(std::move(n));
    return prefix + name;
  };
  std::vector<std::string> squares;
  for (const std::string& grad : tg.grads) {
    squares.push_back(add("ReduceSumSquare", {grad}, prefix + grad + "/sum_square"));
    g.nodes.back().SetInt("keepdims", 0);
  }
  const std::string total = add("Sum", squares, prefix + "sum_square");
  const std::string norm = add("Sqrt", {total}, prefix + "norm");
  const std::string denom = add("Add", {norm, constant("epsilon", 1e-6f)}, prefix + "norm_plus_epsilon");
  const std::string coef = add("Div", {constant("max_norm", max_norm), denom}, prefix + "coefficient");
  const std::string clamped = add("Min", {coef, constant("one", 1.f)}, prefix + "coefficient_clamped");
  std::vector<std::string> out;
  for (const std::string& grad : tg.grads) out.push_back(add("Mul", {grad, clamped}, prefix + grad));
  return out;
}

// Each parameter's group in config.groups (the last that matches it), -1 for none.
std::vector<int> ParamGroupOf(const TrainingGraph& tg, const OptimizerConfig& config) {
  std::vector<int> group_of(tg.params.size(), -1);
  for (size_t k = 0; k < config.groups.size(); ++k) {
    const ParamGroup& group = config.groups[k];
    const std::vector<std::string> matched =
        MatchInitializers(tg.model.graph, group.patterns, "--param-group '" + group.spec + "':");
    const std::set<std::string> names(matched.begin(), matched.end());
    bool any = false;
    for (size_t i = 0; i < tg.params.size(); ++i)
      if (names.count(tg.params[i])) {
        group_of[i] = static_cast<int>(k);
        any = true;
      }
    OT_CHECK(any,
             "--param-group '%s' matches only initializers that do not train (frozen, statistics, or without a "
             "gradient), e.g. '%s'; point it at trainable parameters or leave it out",
             group.spec.c_str(), matched.front().c_str());
    OT_CHECK(std::isnan(group.lr) || (!std::isnan(config.base_lr) && config.base_lr > 0.f),
             "--param-group '%s' sets an absolute lr, which needs the base learning rate (--lr); write it as a "
             "factor of the base rate instead (lr=0.1x)",
             group.spec.c_str());
  }
  return group_of;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> AppendGradientAccumulation(TrainingGraph& tg, int64_t steps) {
  OT_CHECK(steps >= 2, "gradient accumulation needs at least 2 micro-steps, got %lld", (long long)steps);
  Graph& g = tg.model.graph;
  std::vector<std::pair<std::string, std::string>> micro = tg.state_updates;
  Node scale;
  scale.op_type = "Constant";
  scale.name = scale.outputs.emplace_back("grad_accumulation/scale");
  scale.SetTensor("value", HostTensor::FromVector<float>({1.f / static_cast<float>(steps)}, {}));
  g.nodes.push_back(std::move(scale));
  for (size_t i = 0; i < tg.params.size(); ++i) {
    const std::string& p = tg.params[i];
    const std::string acc = p + "/grad_accumulator";
    OT_CHECK(!g.FindInitializer(acc), "the model already has a value named '%s'", acc.c_str());
    const HostTensor* param = g.FindInitializer(p);
    g.initializers.push_back(HostTensor(param->dtype, param->dims, acc));
    auto add = [&](const std::string& op, std::vector<std::string> inputs, const std::string& out) {
      return AddNode(g, op, std::move(inputs), out);
    };
    const std::string sum = add("Add", {acc, tg.grads[i]}, p + "/grad_accumulated");
    const std::string mean = add("Mul", {sum, "grad_accumulation/scale"}, p + "/grad_mean");
    const std::string shape = add("Shape", {acc}, acc + "/shape");
    const std::string zeros = add("ConstantOfShape", {shape}, acc + "/reset");
    micro.emplace_back(sum, acc);
    tg.state_updates.emplace_back(zeros, acc);
    tg.grads[i] = mean;
  }
  return micro;
}

void AppendOptimizer(TrainingGraph& tg, const OptimizerConfig& config) {
  Graph& g = tg.model.graph;
  for (const char* name : {kLearningRateInput, kStepInput})
    OT_CHECK(!g.FindInput(name) && !g.FindInitializer(name),
             "the model already has a value named '%s', which the optimizer needs for itself", name);
  g.inputs.push_back(ScalarInput(kLearningRateInput, DType::kFloat32));
  g.inputs.push_back(ScalarInput(kStepInput, DType::kInt64));
  tg.model.opsets[kTrainingOpsDomain] = 1;

  const std::vector<int> group_of = ParamGroupOf(tg, config);
  // A group whose rate differs from the base reads "lr/group_K" = lr * factor.
  std::vector<std::string> group_lr(config.groups.size(), kLearningRateInput);
  for (size_t k = 0; k < config.groups.size(); ++k) {
    const ParamGroup& group = config.groups[k];
    const float factor = !std::isnan(group.lr_factor) ? group.lr_factor
                         : !std::isnan(group.lr)      ? group.lr / config.base_lr
                                                      : 1.f;
    if (factor == 1.f || std::find(group_of.begin(), group_of.end(), static_cast<int>(k)) == group_of.end()) continue;
    const std::string name = StrFormat("%s/group_%zu", kLearningRateInput, k);
    Node c;
    c.op_type = "Constant";
    c.name = name + "/factor";
    c.outputs = {name + "/factor"};
    c.SetTensor("value", HostTensor::FromVector<float>({factor}, {}));
    g.nodes.push_back(std::move(c));
    group_lr[k] = AddNode(g, "Mul", {kLearningRateInput, name + "/factor"}, name);
  }

  const std::vector<std::string> grads = ClipGradients(tg, config.clip_grad_norm);
  std::vector<Node> updates;
  for (size_t i = 0; i < tg.params.size(); ++i) {
    const std::string& p = tg.params[i];
    const HostTensor param = *g.FindInitializer(p);
    const int group = group_of[i];
    const float decay = group >= 0 && !std::isnan(config.groups[static_cast<size_t>(group)].weight_decay)
                            ? config.groups[static_cast<size_t>(group)].weight_decay
                            : WeightDecayFor(config, ParamKindOf(g, p));
    std::vector<std::string> states;
    Node n;
    n.domain = kTrainingOpsDomain;
    n.name = p + "/optimizer";
    if (config.kind != OptimizerConfig::Kind::kAdamW && config.kind != OptimizerConfig::Kind::kRmsprop)
      n.SetFloat("norm_coefficient", decay);
    switch (config.kind) {
      case OptimizerConfig::Kind::kSgd:
        if (config.momentum == 0.f) {  // plain SGD: no momentum buffer to keep or update
          n.domain = kGradDomain;
          n.op_type = "SGD";
          tg.model.opsets[kGradDomain] = 1;
          break;
        }
        n.op_type = "Momentum";
        n.SetFloat("alpha", config.momentum);
        n.SetFloat("beta", 1.f);
        n.SetString("mode", config.nesterov ? "nesterov" : "standard");
        states = {p + "/momentum"};
        break;
      case OptimizerConfig::Kind::kAdam:
        n.op_type = "Adam";
        n.SetFloat("alpha", config.beta1);
        n.SetFloat("beta", config.beta2);
        n.SetFloat("epsilon", config.epsilon);
        states = {p + "/adam_m", p + "/adam_v"};
        break;
      case OptimizerConfig::Kind::kAdagrad:
        n.op_type = "Adagrad";
        n.SetFloat("decay_factor", config.adagrad_decay);
        n.SetFloat("epsilon", config.adagrad_epsilon);
        states = {p + "/adagrad_h"};
        break;
      case OptimizerConfig::Kind::kAdamW:
        n.domain = kGradDomain;
        n.op_type = "AdamW";
        n.SetFloat("beta1", config.beta1);
        n.SetFloat("beta2", config.beta2);
        n.SetFloat("epsilon", config.epsilon);
        n.SetFloat("weight_decay", decay);
        states = {p + "/adam_m", p + "/adam_v"};
        break;
      case OptimizerConfig::Kind::kRmsprop:
        n.domain = kGradDomain;
        n.op_type = "RMSprop";
        n.SetFloat("alpha", config.rmsprop_alpha);
        n.SetFloat("epsilon", config.epsilon);
        n.SetFloat("momentum", config.momentum);
        n.SetFloat("weight_decay", decay);
        n.SetInt("centered", config.rmsprop_centered ? 1 : 0);
        states = {p + "/rmsprop_square_avg"};
        if (config.rmsprop_centered) states.push_back(p + "/rmsprop_grad_avg");
        if (config.momentum > 0.f) states.push_back(p + "/rmsprop_momentum");
        break;
    }
    if (n.domain == kGradDomain) tg.model.opsets[kGradDomain] = 1;
    n.inputs = {group >= 0 ? group_lr[static_cast<size_t>(group)] : std::string(kLearningRateInput), kStepInput, p,
                grads[i]};
    n.outputs = {StateUpdateName(p)};
    for (const auto& s : states) {
      OT_CHECK(!g.FindInitializer(s), "the model already has a value named '%s'", s.c_str());
      HostTensor zeros(param.dtype, param.dims, s);
      g.initializers.push_back(zeros);
      n.inputs.push_back(s);
      n.outputs.push_back(StateUpdateName(s));
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const std::string state = k == 0 ? p : states[k - 1];
      g.outputs.push_back(LikeTensor(n.outputs[k], param));
      tg.state_updates.emplace_back(n.outputs[k], state);
    }
    updates.push_back(std::move(n));
  }
  // The update nodes go in reverse parameter order, the order backward produces the
  // gradients in (the executor keeps file order among ready nodes, so the updates run
  // after backward, in this order). Data-parallel training reduces the gradients in
  // buckets in that order, so the first update needs the bucket that was reduced first
  // and the last bucket's allreduce (the first layers', finished last) runs while the
  // other parameters are updated, instead of in front of them. Each update is independent:
  // the results do not depend on the order.
  for (auto it = updates.rbegin(); it != updates.rend(); ++it) g.nodes.push_back(std::move(*it));
}

}  // namespace ot
