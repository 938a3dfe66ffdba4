// Loss scaling nodes in the training graph.
#include "graph/passes/fp16/loss_scale_pass.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "graph/error.h"

namespace ot {

namespace {

Node MakeNode(const std::string& op, std::vector<std::string> inputs, const std::string& out) {
  Node n;
  n.op_type = op;
  n.name = out;
  n.inputs = std::move(inputs);
  n.outputs = {out};
  return n;
}

Node ScalarConstant(const std::string& name, float v) {
  Node n = MakeNode("Constant", {}, name);
  n.SetTensor("value", HostTensor::FromVector<float>({v}, {}));
  return n;
}

ValueInfo Scalar(const std::string& name, DType t) {
  ValueInfo v;
  v.name = name;
  v.dtype = t;
  v.has_shape = true;
  return v;
}

bool HasValue(const Graph& g, const std::string& name) {
  if (g.FindInput(name) || g.FindInitializer(name)) return true;
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs)
      if (o == name) return true;
  return false;
}

}  // namespace

void InsertLossScaling(TrainingGraph& tg) {
  Graph& g = tg.model.graph;
  for (const char* name : {kLossScaleInput, kGradsFiniteOutput})
    OT_CHECK(!HasValue(g, name), "the model already has a value named '%s', which loss scaling needs for itself", name);
  const std::string seed = tg.loss + "/grad_seed";
  OT_CHECK(g.FindInitializer(seed), "loss scaling: the training graph has no seed gradient '%s'", seed.c_str());
  g.inputs.push_back(Scalar(kLossScaleInput, DType::kFloat32));

  // The seed: 1 * scale, read wherever the seed was.
  const std::string scaled_seed = std::string("amp/scaled_seed");
  for (auto& n : g.nodes)
    for (auto& in : n.inputs)
      if (in == seed) in = scaled_seed;
  std::vector<Node> front;
  front.push_back(MakeNode("Mul", {seed, kLossScaleInput}, scaled_seed));
  g.nodes.insert(g.nodes.begin(), std::make_move_iterator(front.begin()), std::make_move_iterator(front.end()));

  // Unscaled gradients, appended after backward: data parallel, the reducer's buckets fill
  // in the order backward produces the gradients, and the check below reads them once all
  // buckets have started.
  g.nodes.push_back(ScalarConstant("amp/one", 1.f));
  g.nodes.push_back(MakeNode("Div", {"amp/one", kLossScaleInput}, "amp/inverse_scale"));
  std::vector<std::string> sums;
  for (std::string& grad : tg.grads) {
    const std::string unscaled = grad + "/unscaled";
    g.nodes.push_back(MakeNode("Mul", {grad, "amp/inverse_scale"}, unscaled));
    grad = unscaled;
  }
  for (const std::string& grad : tg.grads) {
    Node sum = MakeNode("ReduceSum", {grad}, grad + "/sum");
    sum.SetInt("keepdims", 0);
    sums.push_back(sum.outputs[0]);
    g.nodes.push_back(std::move(sum));
  }
  // A finite sum times 0 is 0; inf or NaN anywhere makes it NaN, which is not equal to itself.
  g.nodes.push_back(MakeNode(sums.size() == 1 ? "Identity" : "Sum", sums, "amp/grad_sum"));
  g.nodes.push_back(ScalarConstant("amp/zero", 0.f));
  g.nodes.push_back(MakeNode("Mul", {"amp/grad_sum", "amp/zero"}, "amp/grad_sum_times_zero"));
  g.nodes.push_back(MakeNode("Equal", {"amp/grad_sum_times_zero", "amp/grad_sum_times_zero"}, kGradsFiniteOutput));
  g.outputs.push_back(Scalar(kGradsFiniteOutput, DType::kBool));
}

void GateOptimizerUpdates(TrainingGraph& tg, size_t first_update) {
  Graph& g = tg.model.graph;
  std::map<std::string, std::string> renamed;  // update value -> the optimizer's own output
  for (size_t k = first_update; k < tg.state_updates.size(); ++k) {
    const std::string& value = tg.state_updates[k].first;
    renamed[value] = value + "/unchecked";
  }
  for (auto& n : g.nodes)
    for (auto& o : n.outputs) {
      auto it = renamed.find(o);
      if (it != renamed.end()) o = it->second;
    }
  for (size_t k = first_update; k < tg.state_updates.size(); ++k) {
    const auto& [value, state] = tg.state_updates[k];
    auto info = g.value_info.find(value);
    if (info != g.value_info.end()) {
      ValueInfo v = info->second;
      v.name = renamed[value];
      g.value_info[v.name] = v;
    }
    g.nodes.push_back(MakeNode("Where", {kGradsFiniteOutput, renamed[value], state}, value));
  }
}

}  // namespace ot
