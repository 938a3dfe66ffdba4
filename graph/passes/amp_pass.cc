// The --amp graph pass: Cast nodes before the operands of convolutions and matrix products.
#include "graph/passes/amp_pass.h"

#include <map>
#include <vector>

#include "graph/error.h"
#include "graph/op_domains.h"

namespace ot {

AmpMode ParseAmpMode(const std::string& text) {
  if (text.empty() || text == "off") return AmpMode::kOff;
  if (text == "bf16") return AmpMode::kBFloat16;
  if (text == "fp16") return AmpMode::kFloat16;
  throw Error("--amp takes bf16 (bfloat16 products, CPUs with avx512_bf16 or AMX) or fp16 (CUDA), got '" + text +
              "'");
}

std::string AmpModeName(AmpMode mode) {
  switch (mode) {
    case AmpMode::kBFloat16: return "bf16";
    case AmpMode::kFloat16: return "fp16";
    default: return "off";
  }
}

namespace {

// The operands of `n` that run in reduced precision, by input index; none for other ops.
std::vector<size_t> ReducedOperands(const Node& n) {
  if (n.domain.empty() && (n.op_type == "Conv" || n.op_type == "MatMul" || n.op_type == "Gemm")) return {0, 1};
  if (n.domain == kGradDomain && n.op_type == "ConvGrad") return {0, 1, 2};  // dY, X, W
  return {};
}

// Element types the graph states (inputs, initializers, inferred value_info, outputs).
std::map<std::string, DType> KnownTypes(const Graph& g) {
  std::map<std::string, DType> types;
  for (const auto& v : g.inputs) types[v.name] = v.dtype;
  for (const auto& t : g.initializers) types[t.name] = t.dtype;
  for (const auto& [name, v] : g.value_info)
    if (v.dtype != DType::kUndefined) types[name] = v.dtype;
  for (const auto& v : g.outputs)
    if (v.dtype != DType::kUndefined) types[v.name] = v.dtype;
  return types;
}

}  // namespace

AmpCounts InsertAmpCasts(Model& m, AmpMode mode) {
  AmpCounts counts;
  if (mode == AmpMode::kOff) return counts;
  const DType reduced = mode == AmpMode::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
  const std::string suffix = mode == AmpMode::kBFloat16 ? "/bf16" : "/fp16";
  Graph& g = m.graph;
  const std::map<std::string, DType> types = KnownTypes(g);
  std::map<std::string, std::string> cast_of;  // float32 value -> its reduced copy
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size() * 2);
  for (Node& n : g.nodes) {
    bool changed = false;
    for (size_t i : ReducedOperands(n)) {
      if (i >= n.inputs.size() || n.inputs[i].empty()) continue;
      const std::string v = n.inputs[i];
      auto type = types.find(v);
      if (type != types.end() && type->second != DType::kFloat32 && type->second != DType::kUndefined) continue;
      auto done = cast_of.find(v);
      if (done == cast_of.end()) {
        // Placed right before the first reader: v is computed by then (nodes are in order).
        Node cast;
        cast.name = "amp/cast" + suffix + "/" + v;
        cast.op_type = "Cast";
        cast.inputs = {v};
        cast.outputs = {v + suffix};
        cast.SetInt("to", static_cast<int64_t>(reduced));
        ValueInfo info;
        auto known = g.value_info.find(v);
        if (known != g.value_info.end()) info = known->second;
        info.name = cast.outputs[0];
        info.dtype = reduced;
        g.value_info[info.name] = info;
        done = cast_of.emplace(v, cast.outputs[0]).first;
        nodes.push_back(std::move(cast));
        ++counts.casts;
      }
      n.inputs[i] = done->second;
      changed = true;
    }
    counts.products += changed;
    nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);
  return counts;
}

int UseBFloat16Attention(Model& m) {
  int marked = 0;
  for (Node& n : m.graph.nodes)
    if (n.domain == kGradDomain && (n.op_type == "Attention" || n.op_type == "AttentionGrad")) {
      n.SetInt("bf16_products", 1);
      ++marked;
    }
  return marked;
}

int FoldBFloat16CastsIntoActivations(Model& m) {
  Graph& g = m.graph;
  std::map<std::string, int> readers;
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const bool shape_only = g.nodes[i].domain.empty() && g.nodes[i].op_type == "Shape";  // reads no element
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty() && !shape_only) ++readers[in];
    for (const auto& out : g.nodes[i].outputs)
      if (!out.empty()) producer[out] = i;
  }
  for (const auto& v : g.outputs) readers[v.name] += 2;  // a fetched value stays as it is
  auto only_reader = [&](const std::string& v) { return readers[v] == 1; };
  auto made_by = [&](const std::string& v) -> Node* {
    auto it = producer.find(v);
    return it == producer.end() ? nullptr : &g.nodes[it->second];
  };
  const int64_t bf16 = static_cast<int64_t>(DType::kBFloat16);
  std::vector<bool> folded(g.nodes.size(), false);
  int count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& cast = g.nodes[i];
    if (!cast.domain.empty() || cast.op_type != "Cast" || cast.GetInt("to", 0) != bf16 || cast.inputs.empty()) continue;
    const std::string& v = cast.inputs[0];
    if (!only_reader(v)) continue;
    Node* reshape = made_by(v);  // a Reshape or Flatten between, or the activation itself
    Node* act = reshape;
    if (reshape && reshape->domain.empty() && (reshape->op_type == "Reshape" || reshape->op_type == "Flatten")) {
      if (!only_reader(reshape->inputs[0])) continue;
      act = made_by(reshape->inputs[0]);
    } else {
      reshape = nullptr;
    }
    if (!act || act->domain != kGradDomain || (act->op_type != "Gelu" && act->op_type != "Silu") ||
        act->outputs.size() != 1 || act->HasAttr("to"))
      continue;
    act->SetInt("to", bf16);
    auto typed = g.value_info.find(act->outputs[0]);
    if (typed != g.value_info.end()) typed->second.dtype = DType::kBFloat16;
    Node& last = reshape ? *reshape : *act;
    g.value_info.erase(last.outputs[0]);
    last.outputs[0] = cast.outputs[0];  // the Cast's bfloat16 value, its value_info as it was
    folded[i] = true;
    ++count;
  }
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!folded[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  return count;
}

}  // namespace ot
