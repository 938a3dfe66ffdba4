// Graph IR helpers: attribute access, topological order, shape strings.
#include "graph/ir.h"

#include <cmath>
#include <queue>
#include <set>
#include <unordered_map>

#include "graph/error.h"
#include "graph/op_domains.h"

namespace ot {

int64_t NumElements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

std::vector<int64_t> HostTensor::AsInt64s() const {
  std::vector<int64_t> out(static_cast<size_t>(NumElements()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype) {
      case DType::kInt64: out[i] = Data<int64_t>()[i]; break;
      case DType::kInt32: out[i] = Data<int32_t>()[i]; break;
      case DType::kUInt8: out[i] = Data<uint8_t>()[i]; break;
      case DType::kInt8: out[i] = Data<int8_t>()[i]; break;
      case DType::kBool: out[i] = Data<uint8_t>()[i]; break;
      default:
        throw Error("tensor '" + name + "' has type " + DTypeName(dtype) + " where integers were expected");
    }
  }
  return out;
}

std::string ValueInfo::ShapeString() const {
  if (!has_shape) return "[unknown]";
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    if (dims[i].IsStatic()) s += std::to_string(dims[i].value);
    else s += dims[i].param.empty() ? "?" : dims[i].param;
  }
  return s + "]";
}

namespace {
const Attribute* Find(const Node& n, const std::string& key, Attribute::Kind kind) {
  auto it = n.attrs.find(key);
  if (it == n.attrs.end()) return nullptr;
  if (it->second.kind != kind)
    throw Error(n.Describe() + ": attribute '" + key + "' has an unexpected type");
  return &it->second;
}
}  // namespace

int64_t Node::GetInt(const std::string& key, int64_t fallback) const {
  const Attribute* a = Find(*this, key, Attribute::Kind::kInt);
  return a ? a->i : fallback;
}
float Node::GetFloat(const std::string& key, float fallback) const {
  const Attribute* a = Find(*this, key, Attribute::Kind::kFloat);
  return a ? a->f : fallback;
}
std::string Node::GetString(const std::string& key, const std::string& fallback) const {
  const Attribute* a = Find(*this, key, Attribute::Kind::kString);
  return a ? a->s : fallback;
}
std::vector<int64_t> Node::GetInts(const std::string& key, std::vector<int64_t> fallback) const {
  const Attribute* a = Find(*this, key, Attribute::Kind::kInts);
  return a ? a->ints : fallback;
}
std::vector<float> Node::GetFloats(const std::string& key, std::vector<float> fallback) const {
  const Attribute* a = Find(*this, key, Attribute::Kind::kFloats);
  return a ? a->floats : fallback;
}
const HostTensor* Node::GetTensor(const std::string& key) const {
  const Attribute* a = Find(*this, key, Attribute::Kind::kTensor);
  return a ? &a->t : nullptr;
}
void Node::SetInt(const std::string& key, int64_t v) {
  Attribute a; a.kind = Attribute::Kind::kInt; a.i = v; attrs[key] = std::move(a);
}
void Node::SetFloat(const std::string& key, float v) {
  Attribute a; a.kind = Attribute::Kind::kFloat; a.f = v; attrs[key] = std::move(a);
}
void Node::SetString(const std::string& key, const std::string& v) {
  Attribute a; a.kind = Attribute::Kind::kString; a.s = v; attrs[key] = std::move(a);
}
void Node::SetInts(const std::string& key, std::vector<int64_t> v) {
  Attribute a; a.kind = Attribute::Kind::kInts; a.ints = std::move(v); attrs[key] = std::move(a);
}
void Node::SetFloats(const std::string& key, std::vector<float> v) {
  Attribute a; a.kind = Attribute::Kind::kFloats; a.floats = std::move(v); attrs[key] = std::move(a);
}
void Node::SetTensor(const std::string& key, HostTensor v) {
  Attribute a; a.kind = Attribute::Kind::kTensor; a.t = std::move(v); attrs[key] = std::move(a);
}

std::string Node::Describe() const {
  std::string d = domain.empty() ? op_type : domain + "." + op_type;
  return "node '" + (name.empty() ? std::string("<unnamed>") : name) + "' (" + d + ")";
}

const HostTensor* Graph::FindInitializer(const std::string& n) const {
  for (const auto& t : initializers) if (t.name == n) return &t;
  return nullptr;
}
HostTensor* Graph::FindInitializer(const std::string& n) {
  for (auto& t : initializers) if (t.name == n) return &t;
  return nullptr;
}
const ValueInfo* Graph::FindInput(const std::string& n) const {
  for (const auto& v : inputs) if (v.name == n) return &v;
  return nullptr;
}

const HostTensor* Graph::FindStatic(const std::string& n, const Node* producer) const {
  if (const HostTensor* t = FindInitializer(n)) return t;
  if (producer && producer->domain.empty() && producer->op_type == "Constant") return producer->GetTensor("value");
  return nullptr;
}

float Graph::StaticScalar(const std::string& n, const Node* producer) const {
  const HostTensor* t = FindStatic(n, producer);
  if (!t && producer && producer->domain.empty() && producer->op_type == "Constant" && producer->HasAttr("value_float"))
    return producer->GetFloat("value_float", 0.f);
  if (!t || t->NumElements() != 1) return std::nanf("");
  if (t->dtype == DType::kFloat32) return t->Data<float>()[0];
  if (t->dtype == DType::kFloat64) return static_cast<float>(t->Data<double>()[0]);
  return std::nanf("");
}

std::vector<size_t> Graph::TopologicalOrder() const {
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& o : nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
  std::set<std::string> available;
  for (const auto& v : inputs) available.insert(v.name);
  for (const auto& t : initializers) available.insert(t.name);

  std::vector<int> pending(nodes.size(), 0);
  std::vector<std::vector<size_t>> users(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const auto& in : nodes[i].inputs) {
      if (in.empty() || available.count(in)) continue;
      auto it = producer.find(in);
      if (it == producer.end())
        throw Error(nodes[i].Describe() + " reads value '" + in +
                    "', which is neither a graph input, an initializer nor produced by any node");
      ++pending[i];
      users[it->second].push_back(i);
    }
  }
  // Kahn's algorithm; a min-queue keeps the file order among ready nodes.
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < nodes.size(); ++i) if (pending[i] == 0) ready.push(i);
  std::vector<size_t> order;
  while (!ready.empty()) {
    size_t i = ready.top(); ready.pop();
    order.push_back(i);
    for (size_t u : users[i]) if (--pending[u] == 0) ready.push(u);
  }
  if (order.size() != nodes.size()) {
    for (size_t i = 0; i < nodes.size(); ++i)
      if (pending[i] > 0) throw Error("the graph has a cycle through " + nodes[i].Describe());
  }
  return order;
}

Model ModelStructure(const Model& m) {
  Model out;
  out.ir_version = m.ir_version;
  out.opsets = m.opsets;
  out.producer_name = m.producer_name;
  out.producer_version = m.producer_version;
  out.path = m.path;
  out.graph.name = m.graph.name;
  out.graph.nodes = m.graph.nodes;
  out.graph.inputs = m.graph.inputs;
  out.graph.outputs = m.graph.outputs;
  out.graph.value_info = m.graph.value_info;
  out.graph.initializers.reserve(m.graph.initializers.size());
  for (const auto& t : m.graph.initializers) {
    HostTensor meta;
    meta.name = t.name;
    meta.dtype = t.dtype;
    meta.dims = t.dims;
    out.graph.initializers.push_back(std::move(meta));
  }
  return out;
}

int64_t Model::OpsetFor(const std::string& domain) const {
  std::string d = CanonicalDomain(domain);
  auto it = opsets.find(d);
  return it == opsets.end() ? 0 : it->second;
}

}  // namespace ot
