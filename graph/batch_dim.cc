// Fixed-batch exports: detection and rebinding of the batch dimension.
#include "graph/batch_dim.h"

#include <map>
#include <onnx/onnx_pb.h>

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
  m.graph.value_info.clear();
  onnx::ModelProto proto;
  ModelToProto(m, &proto);
  LoadOptions lo;
  lo.run_checker = false;
  Model out = LoadModelFromBytes(proto.SerializeAsString(), model.path.empty() ? "the model" : model.path, "", lo);
  out.path = model.path;
  return out;
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

}  // namespace

std::vector<std::string> NodesHoldingBatch(const Model& model, int64_t batch) {
  const Graph& g = model.graph;
  std::map<std::string, const Node*> producer;
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) producer[o] = &n;
  std::vector<std::string> out;
  for (const auto& n : g.nodes) {
    if (!n.domain.empty()) continue;
    int shape_input = -1;
    if (n.op_type == "Reshape" || n.op_type == "Expand" || n.op_type == "Tile") shape_input = 1;
    if (n.op_type == "ConstantOfShape") shape_input = 0;
    if (shape_input < 0 || !n.HasInput(shape_input)) continue;
    const std::vector<int64_t> shape = ConstantInts(g, producer, n.inputs[static_cast<size_t>(shape_input)]);
    if (!shape.empty() && shape[0] == batch) out.push_back(n.Describe());
  }
  return out;
}

}  // namespace ot
