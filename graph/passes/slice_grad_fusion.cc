// FuseSliceGradSums (graph/passes/fusion.h): the Sum of SliceGrads of one value as one
// org.onnxtrain SliceGradSum node.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/op_domains.h"
#include "graph/passes/fusion.h"

namespace ot {

int FuseSliceGradSums(Model& m) {
  Graph& g = m.graph;
  std::map<std::string, size_t> producer;
  std::map<std::string, int> readers;
  std::set<std::string> graph_outputs;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty()) ++readers[in];
  }
  for (const auto& o : g.outputs) graph_outputs.insert(o.name);
  // The value whose Shape `shape` is, or `shape` itself when it is no plain Shape's output.
  auto shape_source = [&](const std::string& shape) {
    auto it = producer.find(shape);
    if (it == producer.end()) return shape;
    const Node& s = g.nodes[it->second];
    const bool plain = IsOnnxDomain(s.domain) && s.op_type == "Shape" && s.inputs.size() == 1 && !s.HasAttr("start") &&
                       !s.HasAttr("end");
    return plain ? "shape of " + s.inputs[0] : shape;
  };
  std::set<size_t> removed;
  int count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& sum = g.nodes[i];
    if (!IsOnnxDomain(sum.domain) || sum.op_type != "Sum" || sum.inputs.size() < 2 || sum.outputs.size() != 1) continue;
    std::vector<size_t> grads;
    std::string source;
    int64_t opset = -1;
    for (const auto& in : sum.inputs) {
      auto it = producer.find(in);
      if (in.empty() || it == producer.end() || readers[in] != 1 || graph_outputs.count(in)) break;
      const Node& sg = g.nodes[it->second];
      if (sg.domain != kGradDomain || sg.op_type != "SliceGrad" || sg.inputs.size() != 6 || sg.inputs[5].empty() ||
          sg.outputs.size() != 1 || removed.count(it->second))
        break;
      const int64_t o = sg.GetInt("forward_opset", 13);
      const std::string s = shape_source(sg.inputs[5]);
      if (o < 10 || (opset >= 0 && o != opset) || (!source.empty() && s != source)) break;
      opset = o;
      source = s;
      grads.push_back(it->second);
    }
    if (grads.size() != sum.inputs.size()) continue;
    Node fused;
    fused.name = sum.name + "/SliceGradSum";
    fused.op_type = "SliceGradSum";
    fused.domain = kGradDomain;
    fused.inputs = {g.nodes[grads[0]].inputs[5]};
    for (size_t k : grads) {
      const Node& sg = g.nodes[k];
      fused.inputs.insert(fused.inputs.end(), sg.inputs.begin(), sg.inputs.begin() + 5);
      removed.insert(k);
    }
    fused.outputs = sum.outputs;
    fused.SetInt("forward_opset", opset);
    sum = std::move(fused);  // the Sum's place: every SliceGrad ran before it
    ++count;
  }
  if (count == 0) return 0;
  // The data_shape inputs of the other SliceGrads, now unread.
  std::map<std::string, int> still_read;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed.count(i))
      for (const auto& in : g.nodes[i].inputs)
        if (!in.empty()) ++still_read[in];
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (IsOnnxDomain(n.domain) && n.op_type == "Shape" && n.outputs.size() == 1 && !still_read.count(n.outputs[0]) &&
        !graph_outputs.count(n.outputs[0]) && readers[n.outputs[0]] > 0)
      removed.insert(i);
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed.count(i)) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  return count;
}

}  // namespace ot
