// Float16 product outputs for --amp fp16, and their float32 emulation on the CPU.
#include "graph/passes/fp16/fp16_products.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "graph/op_domains.h"

namespace ot {

namespace {

bool IsProduct(const Node& n) {
  return (n.domain.empty() && (n.op_type == "Conv" || n.op_type == "MatMul" || n.op_type == "Gemm")) ||
         (n.domain == kGradDomain && n.op_type == "ConvGrad");
}

bool IsAmpHalfCast(const Node& n) {
  return n.op_type == "Cast" && n.domain.empty() && n.name.rfind("amp/cast/fp16/", 0) == 0;
}

Node CastNode(const std::string& name, const std::string& in, const std::string& out, DType to) {
  Node c;
  c.op_type = "Cast";
  c.name = name;
  c.inputs = {in};
  c.outputs = {out};
  c.SetInt("to", static_cast<int64_t>(to));
  return c;
}

// value_info for `name`: `like`'s shape (when known) with element type `t`.
void Declare(Graph& g, const std::string& like, const std::string& name, DType t) {
  ValueInfo v;
  auto known = g.value_info.find(like);
  if (known != g.value_info.end()) v = known->second;
  v.name = name;
  v.dtype = t;
  g.value_info[name] = v;
}

}  // namespace

int RoundFloat16BiasGradients(TrainingGraph& tg) {
  Graph& g = tg.model.graph;
  std::set<std::string> biases;
  for (const Node& n : g.nodes)
    if (n.domain.empty() && (n.op_type == "Conv" || n.op_type == "Gemm") && n.inputs.size() > 2 && !n.inputs[2].empty())
      biases.insert(n.inputs[2]);
  int rounded = 0;
  for (size_t i = 0; i < tg.params.size() && i < tg.grads.size(); ++i) {
    if (!biases.count(tg.params[i]) || tg.grads[i].empty()) continue;
    const std::string grad = tg.grads[i];
    const std::string half = grad + "/bias_fp16", back = grad + "/bias_fp16_rounded";
    Declare(g, grad, half, DType::kFloat16);
    Declare(g, grad, back, DType::kFloat32);
    g.nodes.push_back(CastNode("amp/round_fp16/" + grad, grad, half, DType::kFloat16));
    g.nodes.push_back(CastNode("amp/round_fp16/" + back, half, back, DType::kFloat32));
    tg.grads[i] = back;
    ++rounded;
  }
  return rounded;
}

int RoundFloat16ProductOutputs(Model& m) {
  Graph& g = m.graph;
  std::set<std::string> halves;  // outputs of the amp's float16 casts
  for (const Node& n : g.nodes)
    if (IsAmpHalfCast(n)) halves.insert(n.outputs[0]);
  std::map<std::string, std::string> bias_half;  // float32 bias -> its float16 cast
  int casts = 0;
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size() * 2);
  for (Node& n : g.nodes) {
    bool reads_half = false;
    for (const auto& in : n.inputs) reads_half = reads_half || halves.count(in) > 0;
    if (!IsProduct(n) || !reads_half) {
      nodes.push_back(std::move(n));
      continue;
    }
    // The bias (Conv's B, Gemm's C) is float16 too, as autocast casts it: one element type
    // throughout (valid ONNX, cuDNN's cudnnAddTensor). Named like InsertAmpCasts' casts, so
    // the CPU's emulation widens it as it does the others.
    if (n.domain.empty() && (n.op_type == "Conv" || n.op_type == "Gemm") && n.inputs.size() > 2 &&
        !n.inputs[2].empty() && !halves.count(n.inputs[2])) {
      const std::string b = n.inputs[2];
      auto done = bias_half.find(b);
      if (done == bias_half.end()) {
        const std::string half = b + "/fp16_bias";
        Declare(g, b, half, DType::kFloat16);
        nodes.push_back(CastNode("amp/cast/fp16/" + b + "/bias", b, half, DType::kFloat16));
        done = bias_half.emplace(b, half).first;
        ++casts;
      }
      n.inputs[2] = done->second;
    }
    std::vector<Node> after;
    for (auto& out : n.outputs) {
      if (out.empty()) continue;
      const std::string half = out + "/fp16";
      Declare(g, out, half, DType::kFloat16);
      after.push_back(CastNode("amp/cast/fp32/" + out, half, out, DType::kFloat32));
      out = half;
      ++casts;
    }
    nodes.push_back(std::move(n));
    for (auto& c : after) nodes.push_back(std::move(c));
  }
  g.nodes = std::move(nodes);
  return casts;
}

int EmulateFloat16Products(Model& m) {
  Graph& g = m.graph;
  std::map<std::string, std::string> widened;  // float16 cast -> its float32 copy
  int casts = 0;
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size() * 2);
  for (Node& n : g.nodes) {
    bool reads_widened = false;
    for (auto& in : n.inputs) {
      auto it = widened.find(in);
      if (it == widened.end()) continue;
      in = it->second;
      reads_widened = true;
    }
    // A product that wrote float16 writes float32 now, rounded to float16 by a Cast.
    std::vector<Node> after;
    if (IsProduct(n) && reads_widened) {
      for (auto& out : n.outputs) {
        auto info = g.value_info.find(out);
        if (out.empty() || info == g.value_info.end() || info->second.dtype != DType::kFloat16) continue;
        const std::string wide = out + "/emulated_fp32";
        Declare(g, out, wide, DType::kFloat32);
        after.push_back(CastNode("amp/emulate/" + out, wide, out, DType::kFloat16));
        out = wide;
      }
    }
    const bool amp_cast = IsAmpHalfCast(n);
    nodes.push_back(std::move(n));
    for (auto& c : after) nodes.push_back(std::move(c)), ++casts;
    if (!amp_cast) continue;
    const std::string half = nodes.back().outputs[0];
    const std::string wide = half + "/emulated_fp32";
    Declare(g, half, wide, DType::kFloat32);
    nodes.push_back(CastNode("amp/emulate/" + half, half, wide, DType::kFloat32));
    widened[half] = wide;
    ++casts;
  }
  g.nodes = std::move(nodes);
  return casts;
}

}  // namespace ot
