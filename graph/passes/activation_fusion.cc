// Activation fusions of graph/passes/fusion.h: FuseSilu (before differentiation) and
// FuseBatchNormClip (the training graph).
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/op_domains.h"
#include "graph/passes/fusion.h"

namespace ot {

int FuseSilu(Model& m) {
  Graph& g = m.graph;
  std::set<std::string> graph_outputs;
  for (const auto& o : g.outputs) graph_outputs.insert(o.name);
  std::map<std::string, std::vector<size_t>> readers;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty()) readers[in].push_back(i);
  std::vector<bool> removed(g.nodes.size(), false);
  int count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& s = g.nodes[i];
    if (!IsOnnxDomain(s.domain) || s.op_type != "Sigmoid" || s.inputs.size() != 1 || s.outputs.size() != 1) continue;
    const std::string& x = s.inputs[0];
    const std::string& sig = s.outputs[0];
    auto it = readers.find(sig);
    if (graph_outputs.count(sig) || it == readers.end() || it->second.size() != 1) continue;
    const size_t j = it->second[0];
    const Node& mul = g.nodes[j];
    if (removed[j] || !IsOnnxDomain(mul.domain) || mul.op_type != "Mul" || mul.inputs.size() != 2 ||
        mul.outputs.size() != 1)
      continue;
    // Both operands must be x and Sigmoid(x): the gate of a squeeze-excitation block
    // (Mul(features, Sigmoid(fc))) is another function and stays as it is.
    const bool silu = (mul.inputs[0] == x && mul.inputs[1] == sig) || (mul.inputs[0] == sig && mul.inputs[1] == x);
    if (!silu) continue;
    Node fused;
    fused.name = mul.name.empty() ? "Silu_fused_" + std::to_string(i) : mul.name + "/Silu";
    fused.op_type = "Silu";
    fused.domain = kGradDomain;
    fused.inputs = {x};
    fused.outputs = {mul.outputs[0]};
    g.nodes[j] = std::move(fused);  // the Mul's place: x exists before it
    removed[i] = true;
    ++count;
  }
  if (count == 0) return 0;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size() - static_cast<size_t>(count));
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  if (!m.opsets.count(kGradDomain)) m.opsets[kGradDomain] = 1;
  return count;
}

int FuseBatchNormClip(Model& training_model) {
  Graph& g = training_model.graph;
  const int64_t opset = training_model.OpsetFor("");
  std::set<std::string> graph_outputs;
  for (const auto& o : g.outputs) graph_outputs.insert(o.name);
  std::map<std::string, std::vector<size_t>> readers;
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty()) readers[in].push_back(i);
    for (const auto& out : g.nodes[i].outputs)
      if (!out.empty()) producer[out] = i;
  }
  // A bound of Clip: the attribute below opset 11, else the optional constant input; NaN
  // where it is computed.
  const float kInf = std::numeric_limits<float>::infinity();
  auto bound = [&](const Node& clip, int input, const char* attr, float none) {
    if (opset < 11) return clip.HasAttr(attr) ? clip.GetFloat(attr, none) : none;
    if (!clip.HasInput(input)) return none;
    const std::string& v = clip.inputs[static_cast<size_t>(input)];
    auto p = producer.find(v);
    const float b = g.StaticScalar(v, p == producer.end() ? nullptr : &g.nodes[p->second]);
    return b;
  };
  std::vector<bool> removed(g.nodes.size(), false);
  int count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& bn = g.nodes[i];
    if (bn.domain != kGradDomain || bn.op_type != "BatchNormTraining" || bn.GetInt("relu", 0) != 0 ||
        bn.HasAttr("clip_min") || !bn.HasOutput(0))
      continue;
    const std::string y = bn.outputs[0];
    auto it = readers.find(y);
    if (graph_outputs.count(y) || it == readers.end()) continue;
    long clip = -1;
    std::vector<size_t> grads;
    bool other = false;
    for (size_t r : it->second) {
      const Node& n = g.nodes[r];
      if (IsOnnxDomain(n.domain) && n.op_type == "Clip" && n.inputs[0] == y && clip < 0 && n.HasOutput(0))
        clip = static_cast<long>(r);
      else if (n.domain == kGradDomain && n.op_type == "ActivationGrad" && n.GetString("op", "") == "Clip" &&
               n.inputs.size() >= 2 && n.inputs[1] == y && n.inputs[0] != y)
        grads.push_back(r);
      else
        other = true;
    }
    if (clip < 0 || other || removed[static_cast<size_t>(clip)]) continue;
    const Node& c = g.nodes[static_cast<size_t>(clip)];
    const float lo = bound(c, 1, "min", -kInf), hi = bound(c, 2, "max", kInf);
    // Bounds around 0 (blocked padding stays zero) and apart (the gradient's mask from
    // the clipped value is then the mask from Y).
    if (std::isnan(lo) || std::isnan(hi) || !(lo <= 0.f && hi >= 0.f && lo < hi)) continue;
    const std::string z = c.outputs[0];
    // Every ActivationGrad must come after Clip: it reads Z now.
    bool after = true;
    for (size_t r : grads) after = after && r > static_cast<size_t>(clip);
    if (!after) continue;
    g.value_info.erase(y);
    bn.outputs[0] = z;
    bn.SetFloat("clip_min", lo);
    bn.SetFloat("clip_max", hi);
    for (size_t r : grads) g.nodes[r].inputs[1] = z;
    removed[static_cast<size_t>(clip)] = true;
    ++count;
  }
  if (count == 0) return 0;
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  return count;
}

}  // namespace ot
