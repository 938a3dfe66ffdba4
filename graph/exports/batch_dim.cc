// Fixed-batch exports: detection and rebinding of the batch dimension.
#include "graph/exports/batch_dim.h"

#include <map>

#include "graph/error.h"
#include "graph/onnx_io.h"

namespace ot {

int64_t FixedBatchSize(const Model& model) {
  if (model.graph.inputs.empty()) return 0;
  const ValueInfo& in = model.graph.inputs[0];
  if (!in.has_shape || in.dims.empty() || !in.dims[0].IsStatic()) return 0;
  return in.dims[0].value;
}

Model WithSymbolicBatch(const Model& model, int64_t batch, const std::string& symbol) {
  Model m = model;
  auto rebind = [&](std::vector<ValueInfo>& values) {
    for (ValueInfo& v : values)
      if (v.has_shape && !v.dims.empty() && v.dims[0].IsStatic() && v.dims[0].value == batch) v.dims[0] = Dim{-1, symbol};
  };
  rebind(m.graph.inputs);
  rebind(m.graph.outputs);
  // Inferred shapes carry the old batch: infer them again from the rebound inputs.
  return WithShapesInferredAgain(m);
}

namespace {

// The value of `name` when it is a constant integer tensor: an initializer, a Constant
// node's value, or Concat/Unsqueeze/Cast of such. Empty when not constant.
std::vector<int64_t> ConstantInts(const Graph& g, const std::map<std::string, const Node*>& producer,
                                  const std::string& name, int depth = 0) {
  if (depth > 16) return {};
  if (const HostTensor* t = g.FindInitializer(name)) {
    if (t->dtype == DType::kInt64 || t->dtype == DType::kInt32) return t->AsInt64s();
    return {};
  }
  auto it = producer.find(name);
  if (it == producer.end()) return {};
  const Node& n = *it->second;
  if (!n.domain.empty()) return {};
  if (n.op_type == "Constant") {
    const HostTensor* t = n.GetTensor("value");
    if (t && (t->dtype == DType::kInt64 || t->dtype == DType::kInt32)) return t->AsInt64s();
    if (n.HasAttr("value_int")) return {n.GetInt("value_int", 0)};
    if (n.HasAttr("value_ints")) return n.GetInts("value_ints");
    return {};
  }
  if (n.op_type == "Unsqueeze" || n.op_type == "Cast" || n.op_type == "Identity")
    return n.HasInput(0) ? ConstantInts(g, producer, n.inputs[0], depth + 1) : std::vector<int64_t>{};
  if (n.op_type == "Concat") {
    std::vector<int64_t> out;
    for (const auto& in : n.inputs) {
      std::vector<int64_t> part = ConstantInts(g, producer, in, depth + 1);
      if (part.empty()) return {};
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }
  return {};
}

// A node whose constant shape input starts with the batch.
struct BatchHolder {
  size_t node;
  std::vector<int64_t> shape;
};

std::vector<BatchHolder> BatchHolders(const Graph& g, int64_t batch) {
  std::map<std::string, const Node*> producer;
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) producer[o] = &n;
  std::vector<BatchHolder> out;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!n.domain.empty()) continue;
    int shape_input = -1;
    if (n.op_type == "Reshape" || n.op_type == "Expand" || n.op_type == "Tile") shape_input = 1;
    if (n.op_type == "ConstantOfShape") shape_input = 0;
    if (shape_input < 0 || !n.HasInput(shape_input)) continue;
    std::vector<int64_t> shape = ConstantInts(g, producer, n.inputs[static_cast<size_t>(shape_input)]);
    if (!shape.empty() && shape[0] == batch) out.push_back({i, std::move(shape)});
  }
  return out;
}

std::string Ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

std::vector<std::string> NodesHoldingBatch(const Model& model, int64_t batch) {
  std::vector<std::string> out;
  for (const BatchHolder& h : BatchHolders(model.graph, batch)) out.push_back(model.graph.nodes[h.node].Describe());
  return out;
}

std::vector<std::string> FreeReshapesOfBatch(Model& model, int64_t batch) {
  Graph& g = model.graph;
  std::vector<std::string> notes;
  for (const BatchHolder& h : BatchHolders(g, batch)) {
    Node& n = g.nodes[h.node];
    if (n.op_type != "Reshape") continue;
    // The data's leading dimension must be that batch, for the target to copy it.
    const ValueInfo* data = g.FindInput(n.inputs[0]);
    auto vi = g.value_info.find(n.inputs[0]);
    if (!data && vi != g.value_info.end()) data = &vi->second;
    if (!data || !data->has_shape || data->dims.empty() || !data->dims[0].IsStatic() || data->dims[0].value != batch)
      continue;
    std::vector<int64_t> target = h.shape;
    const bool allowzero = n.GetInt("allowzero", 0) != 0;
    bool free_rest = true;  // no -1 (nor, with allowzero, 0) after the batch
    for (size_t d = 1; d < target.size(); ++d) free_rest = free_rest && target[d] != -1 && (!allowzero || target[d] != 0);
    if (!allowzero) {
      target[0] = 0;
    } else if (free_rest) {
      target[0] = -1;
    } else {
      continue;
    }
    std::string name = n.inputs[1] + "/any_batch";
    while (g.FindInitializer(name)) name += "_";
    g.initializers.push_back(HostTensor::FromVector<int64_t>(target, {static_cast<int64_t>(target.size())}, name));
    n.inputs[1] = name;
    notes.push_back(StrFormat("%s held the exported batch %lld as a constant in its target %s; it now reshapes to %s "
                              "(%s)",
                              n.Describe().c_str(), (long long)batch, Ints(h.shape).c_str(), Ints(target).c_str(),
                              target[0] == 0 ? "0 copies the input's batch" : "-1 takes the batch from the input's size"));
  }
  return notes;
}

}  // namespace ot
