// Gradient registry and the builder vocabulary.
#include "graph/autodiff/gradient_registry.h"
#include "graph/autodiff/gradient_rules_common.h"

#include <set>

#include "graph/error.h"

namespace ot {

const std::string& GradientBuilder::I(int i) const {
  OT_CHECK(i < node_.NumInputs(), "%s: gradient rule reads input %d, which the node lacks", node_.Describe().c_str(), i);
  return node_.inputs[static_cast<size_t>(i)];
}
const std::string& GradientBuilder::O(int i) const {
  OT_CHECK(i < static_cast<int>(node_.outputs.size()) && !node_.outputs[static_cast<size_t>(i)].empty(),
           "%s: gradient rule reads output %d, which the node does not produce", node_.Describe().c_str(), i);
  return node_.outputs[static_cast<size_t>(i)];
}
const std::string& GradientBuilder::GO(int i) const {
  static const std::string kNone;
  return i < static_cast<int>(go_.size()) ? go_[static_cast<size_t>(i)] : kNone;
}
const std::string& GradientBuilder::GI(int i) const {
  OT_CHECK(NeedGI(i), "%s: gradient rule writes input %d's gradient, which is not needed", node_.Describe().c_str(), i);
  return gi_[static_cast<size_t>(i)];
}

std::string GradientBuilder::Temp(const std::string& hint) {
  return (node_.name.empty() ? node_.op_type : node_.name) + "/grad/" + hint + "_" + std::to_string((*counter_)++);
}

std::string GradientBuilder::Emit(const std::string& op_type, std::vector<std::string> inputs,
                                  std::vector<std::string> outputs, const std::string& domain,
                                  std::map<std::string, Attribute> attrs) {
  Node n;
  n.name = Temp(op_type);
  n.op_type = op_type;
  n.domain = domain;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  std::string first = n.outputs.empty() ? "" : n.outputs[0];
  emitted_->push_back(std::move(n));
  return first;
}

int GradientBuilder::Rank(const std::string& value) const {
  if (!graph_) return -1;
  if (const HostTensor* t = graph_->FindInitializer(value)) return static_cast<int>(t->dims.size());
  auto rank_of = [](const ValueInfo& v) { return v.has_shape ? static_cast<int>(v.dims.size()) : -1; };
  if (const ValueInfo* v = graph_->FindInput(value)) return rank_of(*v);
  for (const auto& o : graph_->outputs)
    if (o.name == value) return rank_of(o);
  auto it = graph_->value_info.find(value);
  const int known = it == graph_->value_info.end() ? -1 : rank_of(it->second);
  if (known >= 0 || !ranks_) return known;
  auto r = ranks_->find(value);
  return r == ranks_->end() ? -1 : r->second;
}

std::string GradientBuilder::Constant(HostTensor value, const std::string& hint) {
  value.name = Temp(hint);
  std::string name = value.name;
  constants_->push_back(std::move(value));
  return name;
}

std::string GradientBuilder::ConstantInt64s(const std::vector<int64_t>& values, const std::string& hint) {
  return Constant(HostTensor::FromVector<int64_t>(values, {static_cast<int64_t>(values.size())}), hint);
}

std::string GradientBuilder::ConstantFloat(float value, const std::string& hint) {
  return Constant(HostTensor::FromVector<float>({value}, {}), hint);
}

Attribute GradientBuilder::AttrInt(int64_t v) { Attribute a; a.kind = Attribute::Kind::kInt; a.i = v; return a; }
Attribute GradientBuilder::AttrFloat(float v) { Attribute a; a.kind = Attribute::Kind::kFloat; a.f = v; return a; }
Attribute GradientBuilder::AttrInts(std::vector<int64_t> v) {
  Attribute a; a.kind = Attribute::Kind::kInts; a.ints = std::move(v); return a;
}
Attribute GradientBuilder::AttrString(std::string v) {
  Attribute a; a.kind = Attribute::Kind::kString; a.s = std::move(v); return a;
}


GradientRegistry& GradientRegistry::Global() {
  static GradientRegistry* r = [] {
    auto* registry = new GradientRegistry();
    RegisterStandardGradientRules(*registry);
    RegisterElementwiseGradientRules(*registry);
    RegisterTensorGradientRules(*registry);
    RegisterNnGradientRules(*registry);
    RegisterSequenceGradientRules(*registry);
    RegisterAttentionGradientRules(*registry);
    return registry;
  }();
  return *r;
}

void GradientRegistry::Register(GradientRuleDef def) { defs_.push_back(std::move(def)); }

const GradientRuleDef* GradientRegistry::Find(const std::string& domain, const std::string& op_type,
                                              int64_t opset) const {
  for (const auto& d : defs_)
    if (d.domain == domain && d.op_type == op_type && opset >= d.since_version && opset <= d.until_version) return &d;
  return nullptr;
}

size_t GradientRegistry::NumOpTypes() const {
  std::set<std::string> ops;
  for (const auto& d : defs_) ops.insert(d.domain + "." + d.op_type);
  return ops.size();
}

}  // namespace ot
