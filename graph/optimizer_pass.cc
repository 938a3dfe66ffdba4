// Optimizer insertion.
#include "graph/optimizer_pass.h"

#include "graph/error.h"
#include "graph/gradient_registry.h"

namespace ot {

OptimizerConfig::Kind ParseOptimizerKind(const std::string& name) {
  if (name == "sgd") return OptimizerConfig::Kind::kSgd;
  if (name == "adam") return OptimizerConfig::Kind::kAdam;
  if (name == "adagrad") return OptimizerConfig::Kind::kAdagrad;
  throw Error("unknown optimizer '" + name + "'; choose sgd, adam or adagrad");
}

namespace {

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

}  // namespace

void AppendOptimizer(TrainingGraph& tg, const OptimizerConfig& config) {
  Graph& g = tg.model.graph;
  for (const char* name : {kLearningRateInput, kStepInput})
    OT_CHECK(!g.FindInput(name) && !g.FindInitializer(name),
             "the model already has a value named '%s', which the optimizer needs for itself", name);
  g.inputs.push_back(ScalarInput(kLearningRateInput, DType::kFloat32));
  g.inputs.push_back(ScalarInput(kStepInput, DType::kInt64));
  tg.model.opsets[kTrainingOpsDomain] = 1;

  std::vector<Node> updates;
  for (size_t i = 0; i < tg.params.size(); ++i) {
    const std::string& p = tg.params[i];
    const HostTensor param = *g.FindInitializer(p);
    std::vector<std::string> states;
    Node n;
    n.domain = kTrainingOpsDomain;
    n.name = p + "/optimizer";
    n.SetFloat("norm_coefficient", config.weight_decay);
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
    }
    n.inputs = {kLearningRateInput, kStepInput, p, tg.grads[i]};
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
