// Training-graph fusions: see training_fusion.h.
#include "graph/training_fusion.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/gradient_registry.h"

namespace ot {
namespace {

bool IsOnnxOp(const Node& n, const char* op) { return (n.domain.empty() || n.domain == "ai.onnx") && n.op_type == op; }
bool IsGradOp(const Node& n, const char* op) { return n.domain == kGradDomain && n.op_type == op; }

// Who reads what, and what the graph hands out.
struct Uses {
  explicit Uses(const Graph& g) {
    for (const auto& o : g.outputs) graph_outputs.insert(o.name);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& in : g.nodes[i].inputs)
        if (!in.empty()) readers[in].push_back(i);
  }
  // The only reader of `v` when `v` is no graph output; -1 otherwise.
  long SoleReader(const std::string& v) const {
    auto it = readers.find(v);
    if (graph_outputs.count(v) || it == readers.end() || it->second.size() != 1) return -1;
    return static_cast<long>(it->second[0]);
  }
  std::set<std::string> graph_outputs;
  std::map<std::string, std::vector<size_t>> readers;
};

void RemoveNodes(Graph& g, const std::set<size_t>& removed) {
  if (removed.empty()) return;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size() - removed.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed.count(i)) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
}

}  // namespace

BatchNormReluFusion FuseBatchNormRelu(Graph& g) {
  const Uses uses(g);
  BatchNormReluFusion counts;
  std::set<size_t> removed;
  std::set<std::string> names;
  for (const Node& n : g.nodes)
    for (const auto& o : n.outputs) names.insert(o);
  for (const auto& v : g.inputs) names.insert(v.name);
  for (const auto& t : g.initializers) names.insert(t.name);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& bn = g.nodes[i];
    if (!IsGradOp(bn, "BatchNormTraining") || bn.GetInt("relu", 0) != 0 || !bn.HasOutput(0)) continue;
    const long r = uses.SoleReader(bn.outputs[0]);
    if (r < 0 || removed.count(static_cast<size_t>(r)) || !IsOnnxOp(g.nodes[r], "Relu") || !g.nodes[r].HasOutput(0))
      continue;
    const std::string y = bn.outputs[0];
    const std::string z = g.nodes[r].outputs[0];

    // The backward pair: ReluGrad(dZ, Z) whose dY only the gradient of this node reads.
    long rg = -1, bg = -1;
    const auto z_readers = uses.readers.find(z);
    for (size_t k : z_readers == uses.readers.end() ? std::vector<size_t>() : z_readers->second) {
      const Node& c = g.nodes[k];
      if (!IsGradOp(c, "ReluGrad") || c.inputs.size() != 2 || c.inputs[1] != z || !c.HasOutput(0)) continue;
      const long b = uses.SoleReader(c.outputs[0]);
      if (b < 0) continue;
      const Node& grad = g.nodes[b];
      if (IsGradOp(grad, "BatchNormalizationGrad") && grad.GetInt("relu", 0) == 0 && grad.inputs.size() == 5 &&
          grad.inputs[0] == c.outputs[0] && bn.HasOutput(3) && grad.inputs[3] == bn.outputs[3]) {
        rg = static_cast<long>(k);
        bg = b;
        break;
      }
    }

    bn.outputs[0] = z;
    bn.SetInt("relu", 1);
    removed.insert(static_cast<size_t>(r));
    g.value_info.erase(y);
    ++counts.forward;
    if (rg < 0) continue;
    std::string mask = z + "_relu_mask";
    for (int k = 1; names.count(mask); ++k) mask = z + "_relu_mask_" + std::to_string(k);
    names.insert(mask);
    bn.outputs.resize(6);
    bn.outputs[5] = mask;
    Node& grad = g.nodes[bg];
    g.value_info.erase(grad.inputs[0]);
    grad.inputs[0] = g.nodes[rg].inputs[0];
    grad.inputs.push_back(mask);
    grad.SetInt("relu", 1);
    removed.insert(static_cast<size_t>(rg));
    ++counts.backward;
  }
  RemoveNodes(g, removed);
  return counts;
}

int FuseAddRelu(Model& m) {
  if (m.OpsetFor("") < 7) return 0;
  Graph& g = m.graph;
  const Uses uses(g);
  std::set<size_t> removed;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& add = g.nodes[i];
    if (!IsOnnxOp(add, "Add") || add.inputs.size() != 2 || add.inputs[0].empty() || add.inputs[1].empty() ||
        !add.HasOutput(0))
      continue;
    const long r = uses.SoleReader(add.outputs[0]);
    if (r < 0 || removed.count(static_cast<size_t>(r)) || !IsOnnxOp(g.nodes[r], "Relu") || !g.nodes[r].HasOutput(0))
      continue;
    g.value_info.erase(add.outputs[0]);
    add.outputs = {g.nodes[r].outputs[0]};
    add.op_type = "AddRelu";
    add.domain = kGradDomain;
    add.attrs.clear();
    removed.insert(static_cast<size_t>(r));
  }
  if (removed.empty()) return 0;
  RemoveNodes(g, removed);
  if (!m.opsets.count(kGradDomain)) m.opsets[kGradDomain] = 1;
  return static_cast<int>(removed.size());
}

}  // namespace ot
