// GradientRegistry: for each op type (and opset range) a small rule that emits the nodes
// computing the gradients of a node's inputs from the gradients of its outputs. Rules
// speak a tiny vocabulary, after ONNX Runtime's gradient builders: I(i) forward input,
// O(i) forward output, GO(i) gradient of output i, GI(i) gradient of input i (to be
// written only when NeedGI(i)).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/op_domains.h"

namespace ot {

// Domain of the gradient ops ONNX lacks (ConvGrad, ReluGrad, ...), declared in the
// training model's opset_import.

class GradientBuilder {
 public:
  GradientBuilder(const Node& node, int64_t opset, std::vector<std::string> output_grads,
                  std::vector<bool> need_input_grads, std::vector<std::string> input_grad_names,
                  std::vector<Node>* emitted, std::vector<HostTensor>* constants, int* name_counter)
      : node_(node), opset_(opset), go_(std::move(output_grads)), need_(std::move(need_input_grads)),
        gi_(std::move(input_grad_names)), emitted_(emitted), constants_(constants), counter_(name_counter) {}

  const Node& node() const { return node_; }
  int64_t opset() const { return opset_; }
  const std::string& I(int i) const;
  const std::string& O(int i) const;
  // Gradient of output i; "" when no gradient flows into it.
  const std::string& GO(int i) const;
  bool HasGO(int i) const { return !GO(i).empty(); }
  bool NeedGI(int i) const { return i < static_cast<int>(need_.size()) && need_[i]; }
  const std::string& GI(int i) const;

  // A fresh value name derived from the node's.
  std::string Temp(const std::string& hint);
  // Emits a node (named after the forward node) and returns its first output.
  std::string Emit(const std::string& op_type, std::vector<std::string> inputs, std::vector<std::string> outputs,
                   const std::string& domain = "", std::map<std::string, Attribute> attrs = {});
  // Adds a constant initializer; returns its name.
  std::string Constant(HostTensor value, const std::string& hint);
  std::string ConstantInt64s(const std::vector<int64_t>& values, const std::string& hint);
  std::string ConstantFloat(float value, const std::string& hint);

  // The forward graph, for rules whose emitted nodes depend on an input's rank (set by
  // autodiff; without it Rank answers -1).
  void SetGraph(const Graph* g) { graph_ = g; }
  // Ranks beyond what the graph records (InferRanks); must outlive the builder.
  void SetRanks(const std::map<std::string, int>* ranks) { ranks_ = ranks; }
  // Rank of a forward value where the graph knows it (graph inputs and outputs,
  // initializers, inferred value_info) or the ranks set say; -1 when unknown.
  int Rank(const std::string& value) const;

  // Attribute builders.
  static Attribute AttrInt(int64_t v);
  static Attribute AttrFloat(float v);
  static Attribute AttrInts(std::vector<int64_t> v);
  static Attribute AttrString(std::string v);

 private:
  const Node& node_;
  int64_t opset_;
  std::vector<std::string> go_;
  std::vector<bool> need_;
  std::vector<std::string> gi_;
  std::vector<Node>* emitted_;
  std::vector<HostTensor>* constants_;
  int* counter_;
  const Graph* graph_ = nullptr;
  const std::map<std::string, int>* ranks_ = nullptr;
};

using GradientRule = std::function<void(GradientBuilder&)>;

struct GradientRuleDef {
  std::string domain;
  std::string op_type;
  int64_t since_version = 1;
  int64_t until_version = kLatestOpset;
  // Inputs that never carry a gradient (labels, shapes, indices) by position.
  std::vector<int> stop_gradient_inputs;
  GradientRule rule;
};

class GradientRegistry {
 public:
  static GradientRegistry& Global();
  void Register(GradientRuleDef def);
  const GradientRuleDef* Find(const std::string& domain, const std::string& op_type, int64_t opset) const;
  size_t NumOpTypes() const;

 private:
  std::vector<GradientRuleDef> defs_;
};

}  // namespace ot
