// The graph IR: a Model holds one Graph of Nodes that name their input and output values.
// It mirrors ONNX closely (so export is lossless) but owns plain C++ data: attributes,
// initializers and value shapes with symbolic dimensions (e.g. a dynamic batch axis).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "graph/host_tensor.h"

namespace ot {

// One dimension of a value's shape: a fixed size, or a symbol such as "batch", or unknown.
struct Dim {
  int64_t value = -1;   // >= 0 when static
  std::string param;    // symbolic name when dynamic (may be empty: unknown)
  bool IsStatic() const { return value >= 0; }
};

struct ValueInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  bool has_shape = false;
  std::vector<Dim> dims;
  std::string ShapeString() const;  // "[batch, 1, 28, 28]"
};

struct Attribute {
  enum class Kind { kUndefined, kFloat, kInt, kString, kTensor, kFloats, kInts, kStrings, kGraph, kOther };
  Kind kind = Kind::kUndefined;
  float f = 0.f;
  int64_t i = 0;
  std::string s;
  HostTensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;  // "" is the default ONNX domain
  std::vector<std::string> inputs;   // "" marks an absent optional input
  std::vector<std::string> outputs;  // "" marks an unrequested optional output
  std::map<std::string, Attribute> attrs;
  // The node's metadata_props as exported (PyTorch 2.x names the module and the rewrite
  // rule that made the node); kept through passes and written back.
  std::map<std::string, std::string> metadata;

  bool HasAttr(const std::string& key) const { return attrs.count(key) != 0; }
  int64_t GetInt(const std::string& key, int64_t fallback) const;
  float GetFloat(const std::string& key, float fallback) const;
  std::string GetString(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> GetInts(const std::string& key, std::vector<int64_t> fallback = {}) const;
  std::vector<float> GetFloats(const std::string& key, std::vector<float> fallback = {}) const;
  const HostTensor* GetTensor(const std::string& key) const;

  void SetInt(const std::string& key, int64_t v);
  void SetFloat(const std::string& key, float v);
  void SetString(const std::string& key, const std::string& v);
  void SetInts(const std::string& key, std::vector<int64_t> v);
  void SetFloats(const std::string& key, std::vector<float> v);
  void SetTensor(const std::string& key, HostTensor v);

  int NumInputs() const { return static_cast<int>(inputs.size()); }
  bool HasInput(int i) const { return i < NumInputs() && !inputs[i].empty(); }
  bool HasOutput(int i) const { return i < static_cast<int>(outputs.size()) && !outputs[i].empty(); }
  // "node 'conv1' (Conv)" for error messages.
  std::string Describe() const;
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<ValueInfo> inputs;    // graph inputs that are not initializers
  std::vector<ValueInfo> outputs;
  std::vector<HostTensor> initializers;             // in file order
  std::map<std::string, ValueInfo> value_info;      // inferred shapes of intermediate values

  const HostTensor* FindInitializer(const std::string& name) const;
  HostTensor* FindInitializer(const std::string& name);
  const ValueInfo* FindInput(const std::string& name) const;
  // A static tensor: the initializer `name`, else the value of `producer` (the node that
  // produces `name`; null when none) when that is a Constant node; null otherwise.
  const HostTensor* FindStatic(const std::string& name, const Node* producer) const;
  // The value of a one-element float32 or float64 static tensor, or of a Constant's
  // value_float; NaN otherwise.
  float StaticScalar(const std::string& name, const Node* producer) const;
  // Node indices in an order where every node comes after the producers of its inputs.
  // Throws naming a value that is used but never produced (or a cycle).
  std::vector<size_t> TopologicalOrder() const;
};

struct Model {
  Graph graph;
  int64_t ir_version = 8;
  std::map<std::string, int64_t> opsets;  // domain -> version; "" is ai.onnx
  std::string producer_name;
  std::string producer_version;
  std::string path;  // file it was loaded from, for messages

  // Opset of a domain ("ai.onnx" and "" are the same); 0 when not imported.
  int64_t OpsetFor(const std::string& domain) const;
};

// A copy of the model whose initializers have names, types and shapes but no data (for
// holders of the structure whose weights live elsewhere, e.g. on a device).
Model ModelStructure(const Model& m);

}  // namespace ot
