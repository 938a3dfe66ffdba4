// SiLU (swish) fusion before differentiation: graph/passes/fusion.h's FuseSilu.
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

}  // namespace ot
