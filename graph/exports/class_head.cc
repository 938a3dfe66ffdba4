// Class-score heads and classifier replacement (see class_head.h).
#include "graph/exports/class_head.h"

#include <algorithm>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "graph/passes/rank_inference.h"

namespace ot {

namespace {

std::map<std::string, size_t> ProducerIndex(const Graph& g) {
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
  return producer;
}

// The shape known for `name`: a graph input or output, or inferred value_info; null if none.
const ValueInfo* KnownValue(const Graph& g, const std::string& name) {
  for (const auto& v : g.inputs)
    if (v.name == name) return &v;
  for (const auto& v : g.outputs)
    if (v.name == name && v.has_shape) return &v;
  auto it = g.value_info.find(name);
  return it == g.value_info.end() ? nullptr : &it->second;
}

std::string Ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string NodeName(const Node& n, const std::string& fallback) { return n.name.empty() ? fallback : n.name; }

// Ops that pass the class scores on between the activation and the graph output.
bool PassesScores(const Node& n) {
  static const std::set<std::string> kOps = {"Flatten", "Reshape", "Squeeze", "Identity", "Dropout"};
  return n.domain.empty() && kOps.count(n.op_type) && n.HasInput(0);
}

// Ops between the classifier layer and the class scores that --num-classes looks through.
bool FollowsClassifier(const Node& n) {
  static const std::set<std::string> kOps = {"Flatten", "Reshape",           "Squeeze",     "Identity",
                                             "Dropout", "GlobalAveragePool", "AveragePool", "Relu",
                                             "Softmax", "LogSoftmax",        "Transpose"};
  return n.domain.empty() && kOps.count(n.op_type) && n.HasInput(0);
}

}  // namespace

bool HasUnitTrailingAxes(const ValueInfo& scores) {
  if (!scores.has_shape || scores.dims.size() < 3) return false;
  for (size_t d = 2; d < scores.dims.size(); ++d)
    if (!scores.dims[d].IsStatic() || scores.dims[d].value != 1) return false;
  return true;
}

// Caffe2-era zoo models keep a Gemm's weight 4-D ([1, 1, K, C]) and Reshape it to [K, C] in
// the graph: the classifier's weight is then that initializer, given the Reshape's 2-D shape
// (the same row-major values) and read by the Gemm directly. Returns the output of the
// Reshape left unread (the caller removes that node), or "".
std::string UseReshapedWeightDirectly(Graph& g, const std::map<std::string, size_t>& producer, Node& layer) {
  auto it = producer.find(layer.inputs[1]);
  if (it == producer.end()) return "";
  const Node& reshape = g.nodes[it->second];
  if (!reshape.domain.empty() || (reshape.op_type != "Reshape" && reshape.op_type != "Flatten" &&
                                  reshape.op_type != "Squeeze") || !reshape.HasInput(0))
    return "";
  HostTensor* w = g.FindInitializer(reshape.inputs[0]);
  auto shape = g.value_info.find(reshape.outputs[0]);
  if (!w || shape == g.value_info.end() || !shape->second.has_shape || shape->second.dims.size() != 2) return "";
  std::vector<int64_t> dims;
  for (const Dim& d : shape->second.dims) {
    if (!d.IsStatic()) return "";
    dims.push_back(d.value);
  }
  if (dims[0] * dims[1] != w->NumElements()) return "";
  int readers = 0, reshape_readers = 0;
  for (const auto& n : g.nodes)
    for (const auto& in : n.inputs) {
      readers += in == w->name;
      reshape_readers += in == reshape.outputs[0];
    }
  for (const auto& o : g.outputs) reshape_readers += o.name == reshape.outputs[0];
  if (readers != 1 || reshape_readers != 1) return "";  // shared: leave the graph as it is
  w->dims = dims;
  layer.inputs[1] = w->name;
  return reshape.outputs[0];
}

bool ScoresHaveClassesLast(const Model& model, const ValueInfo& scores) {
  if (!scores.has_shape || scores.dims.size() != 3 || HasUnitTrailingAxes(scores)) return false;
  const std::map<std::string, size_t> producer = ProducerIndex(model.graph);
  std::string value = scores.name;
  for (int hops = 0; hops < 8; ++hops) {
    auto it = producer.find(value);
    if (it == producer.end()) return true;
    const Node& n = model.graph.nodes[it->second];
    if (!n.domain.empty()) return true;
    if (n.op_type == "Conv" || n.op_type == "ConvTranspose") return false;
    const bool passes = n.op_type == "Softmax" || n.op_type == "LogSoftmax" || n.op_type == "Identity" ||
                        n.op_type == "Dropout" || n.op_type == "Add";  // Add: a conv's bias added apart
    if (!passes || !n.HasInput(0)) return true;
    value = n.inputs[0];
  }
  return true;
}

ClassHead FindClassHead(const Model& model, const std::string& output) {
  const Graph& g = model.graph;
  const std::map<std::string, size_t> producer = ProducerIndex(g);
  auto producer_of = [&](const std::string& value, const char* op) -> const Node* {
    auto it = producer.find(value);
    if (it == producer.end()) return nullptr;
    const Node& n = g.nodes[it->second];
    return n.domain.empty() && n.op_type == op ? &n : nullptr;
  };
  ClassHead head;
  head.output = head.scores = output;
  std::string v = output;
  for (int depth = 0; depth < 8; ++depth) {
    auto it = producer.find(v);
    if (it == producer.end()) break;
    const Node& n = g.nodes[it->second];
    // PyTorch before opset 13 exports softmax(x, dim=1) of [N, K, 1, 1] as Transpose (dim 1
    // to last), Softmax over the last axis, and the same Transpose back.
    if (n.domain.empty() && n.op_type == "Transpose" && n.HasInput(0)) {
      const Node* act = producer_of(n.inputs[0], "Softmax");
      if (!act) act = producer_of(n.inputs[0], "LogSoftmax");
      const Node* before = act && act->HasInput(0) ? producer_of(act->inputs[0], "Transpose") : nullptr;
      const std::vector<int64_t> perm = n.GetInts("perm");
      const ValueInfo* in = before ? KnownValue(g, act->inputs[0]) : nullptr;
      if (before && in && in->has_shape && perm == before->GetInts("perm") && perm.size() == in->dims.size() &&
          perm.size() >= 2) {
        const int64_t rank = static_cast<int64_t>(perm.size());
        int64_t axis = act->GetInt("axis", model.OpsetFor("") < 13 ? 1 : -1);
        if (axis < 0) axis += rank;
        bool swap = axis == rank - 1 && perm[static_cast<size_t>(axis)] == 1 && perm[1] == axis;
        for (int64_t d = 0; swap && d < rank; ++d)
          swap = d == 1 || d == axis || perm[static_cast<size_t>(d)] == d;
        if (swap && before->HasInput(0)) {
          head.scores = before->inputs[0];
          head.activation = act->op_type;
          head.node = act->Describe();
          return head;
        }
      }
    }
    if (n.domain.empty() && (n.op_type == "Softmax" || n.op_type == "LogSoftmax") && n.HasInput(0)) {
      const int64_t opset = model.OpsetFor("");
      const int64_t axis = n.GetInt("axis", opset < 13 ? 1 : -1);
      const ValueInfo* in = KnownValue(g, n.inputs[0]);
      int rank = in && in->has_shape ? static_cast<int>(in->dims.size()) : -1;
      if (rank < 0) {
        const std::map<std::string, int> ranks = InferRanks(g, opset);
        auto r = ranks.find(n.inputs[0]);
        if (r != ranks.end()) rank = r->second;
      }
      const int64_t a = axis < 0 && rank > 0 ? axis + rank : axis;
      // Before opset 13 the op flattens [d0, ..., dk] to [d0 * ... * d(a-1), da * ... * dk]:
      // over the classes only when every axis after the class axis has size 1.
      bool spatial = false;
      if (opset < 13 && in && in->has_shape)
        for (size_t d = 2; d < in->dims.size(); ++d) spatial = spatial || !in->dims[d].IsStatic() || in->dims[d].value != 1;
      const std::string shape = in && in->has_shape ? " " + in->ShapeString() : "";
      OT_CHECK(a == 1 && !spatial,
               "the model's output '%s' comes from %s over axis %lld of '%s'%s%s, which is not the class axis 1 of class "
               "scores [N, K] or [N, K, 1, 1]; onnx-train trains class scores with cross-entropy: export the model "
               "without the final %s, or with it over dim 1",
               output.c_str(), n.Describe().c_str(), (long long)axis, n.inputs[0].c_str(), shape.c_str(),
               spatial && a == 1 ? " (before opset 13 it normalises over every axis from 1 on)" : "",
               n.op_type.c_str());
      head.scores = n.inputs[0];
      head.activation = n.op_type;
      head.node = n.Describe();
      return head;
    }
    if (!PassesScores(n) || n.outputs[0] != v) break;
    v = n.inputs[0];
  }
  return head;
}

std::string DescribeClassHead(const Model& model, const ClassHead& head) {
  const ValueInfo* scores = KnownValue(model.graph, head.scores);
  std::string flat;
  if (scores && HasUnitTrailingAxes(*scores)) {
    std::string k = scores->dims[1].IsStatic() ? std::to_string(scores->dims[1].value) : "K";
    flat = StrFormat("%s the class scores '%s' are %s: the loss reads them as [N, %s], labels [N]",
                     head.activation.empty() ? "" : ";", head.scores.c_str(), scores->ShapeString().c_str(), k.c_str());
  }
  if (head.activation == "Softmax")
    return StrFormat("the model's output '%s' is the Softmax (%s) of the class scores '%s': training applies "
                     "cross-entropy to the scores, the checkpoints keep the Softmax output%s",
                     head.output.c_str(), head.node.c_str(), head.scores.c_str(), flat.c_str());
  if (head.activation == "LogSoftmax")
    return StrFormat("the model's output '%s' is the LogSoftmax (%s) of the class scores '%s': training applies "
                     "NLL to it (cross-entropy on the scores), the checkpoints keep the LogSoftmax output%s",
                     head.output.c_str(), head.node.c_str(), head.scores.c_str(), flat.c_str());
  return flat;
}

std::string ReplaceClassifier(Model& model, int64_t classes, uint64_t seed) {
  Graph& g = model.graph;
  OT_CHECK(!g.outputs.empty(), "--num-classes: the model has no outputs");
  OT_CHECK(classes >= 2, "--num-classes %lld: a classifier needs at least 2 classes", (long long)classes);
  const std::string output = g.outputs[0].name;
  const std::map<std::string, size_t> producer = ProducerIndex(g);
  std::vector<size_t> chain;  // the nodes between the classifier and the output, output first
  std::string v = output;
  std::string found = "the graph input '" + v + "'";
  Node* layer = nullptr;  // Gemm, MatMul or Conv
  Node* bias_add = nullptr;
  std::string unread;  // the output of a weight Reshape the classifier no longer reads
  for (int depth = 0; depth < 32; ++depth) {
    auto it = producer.find(v);
    if (it == producer.end()) {
      found = (g.FindInitializer(v) ? "the initializer '" : "the graph input '") + v + "'";
      break;
    }
    Node& n = g.nodes[it->second];
    found = n.Describe();
    if (FollowsClassifier(n) && n.outputs[0] == v) {
      chain.push_back(it->second);
      v = n.inputs[0];
      continue;
    }
    if (!n.domain.empty()) break;
    if ((n.op_type == "Gemm" || n.op_type == "MatMul") && n.HasInput(1))
      unread = UseReshapedWeightDirectly(g, producer, n);
    if ((n.op_type == "Gemm" || n.op_type == "MatMul" || n.op_type == "Conv") && n.HasInput(1) &&
        g.FindInitializer(n.inputs[1])) {
      layer = &n;
    } else if (n.op_type == "Add" && n.NumInputs() == 2) {
      for (int side : {0, 1}) {
        auto p = producer.find(n.inputs[static_cast<size_t>(1 - side)]);
        if (!g.FindInitializer(n.inputs[static_cast<size_t>(side)]) || p == producer.end()) continue;
        Node& mm = g.nodes[p->second];
        if (mm.domain.empty() && mm.op_type == "MatMul" && mm.HasInput(1) && g.FindInitializer(mm.inputs[1])) {
          layer = &mm;
          bias_add = &n;
          if (side == 0) std::swap(n.inputs[0], n.inputs[1]);  // the bias second, as below
          break;
        }
      }
    }
    break;
  }
  auto no_classifier = [&](const std::string& detail) {
    return Error(StrFormat("--num-classes: found no classifier layer for the output '%s': looking back from it through "
                           "Flatten, Reshape, Squeeze, (Global)AveragePool, Relu, Dropout, Identity and Softmax for a "
                           "Gemm, a MatMul (+Add) or a 1x1 Conv with constant weights, it reached %s%s",
                           output.c_str(), found.c_str(), detail.c_str()));
  };
  if (!layer) throw no_classifier("");
  const std::string what = layer->op_type == "Conv" ? "1x1 Conv" : bias_add ? "MatMul+Add" : layer->op_type;
  const std::string layer_name = NodeName(*layer, layer->inputs[1]);
  HostTensor* w = g.FindInitializer(layer->inputs[1]);
  std::string bias_name = layer->op_type == "Gemm" || layer->op_type == "Conv" ? (layer->HasInput(2) ? layer->inputs[2] : "")
                                                                               : (bias_add ? bias_add->inputs[1] : "");
  HostTensor* b = bias_name.empty() ? nullptr : g.FindInitializer(bias_name);
  OT_CHECK(bias_name.empty() || b, "--num-classes: the bias '%s' of the classifier %s is not a constant",
           bias_name.c_str(), layer->Describe().c_str());
  // Which axis of the weight counts the classes, and the inputs each class sums.
  int64_t class_axis = 0, fan_in = 0;
  bool shape_ok = w->dtype == DType::kFloat32;
  if (layer->op_type == "Conv") {
    shape_ok = shape_ok && w->dims.size() >= 3 && layer->GetInt("group", 1) == 1;
    fan_in = shape_ok ? w->dims[1] : 0;
    for (size_t d = 2; shape_ok && d < w->dims.size(); ++d) shape_ok = w->dims[d] == 1;
  } else {
    shape_ok = shape_ok && w->dims.size() == 2;
    class_axis = layer->op_type == "Gemm" && layer->GetInt("transB", 0) != 0 ? 0 : 1;
    fan_in = shape_ok ? w->dims[static_cast<size_t>(1 - class_axis)] : 0;
  }
  if (!shape_ok || fan_in <= 0)
    throw no_classifier(StrFormat(", whose weights '%s' are %s %s (not a 2-D float matrix, nor a 1x1 convolution of "
                                  "group 1)",
                                  w->name.c_str(), DTypeName(w->dtype).c_str(), Ints(w->dims).c_str()));
  const int64_t old_classes = w->dims[static_cast<size_t>(class_axis)];
  OT_CHECK(!b || (b->dtype == DType::kFloat32 && b->NumElements() == old_classes),
           "--num-classes: the bias '%s' of the classifier %s has %lld values for %lld classes; expected one per class",
           bias_name.c_str(), layer->Describe().c_str(), (long long)(b ? b->NumElements() : 0), (long long)old_classes);
  // A weight that another node reads too (tied embeddings) is not the classifier's alone.
  for (const auto& n : g.nodes)
    for (const auto& in : n.inputs)
      OT_CHECK(&n == layer || &n == bias_add || (!unread.empty() && n.outputs[0] == unread) ||
                   (in != w->name && (bias_name.empty() || in != bias_name)),
               "--num-classes: the classifier's weights '%s' are also read by %s; cannot replace a shared layer",
               in.c_str(), n.Describe().c_str());

  // PyTorch's nn.Linear / nn.Conv2d reset_parameters: kaiming_uniform_(a=sqrt(5)) gives the
  // weight U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bias has the same bound.
  std::mt19937_64 gen(seed);
  const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
  std::uniform_real_distribution<float> dist(-bound, bound);
  auto fresh = [&](HostTensor* t, size_t axis) {
    std::vector<int64_t> dims = t->dims;
    dims[axis] = classes;
    HostTensor n(DType::kFloat32, dims, t->name);
    for (int64_t i = 0; i < n.NumElements(); ++i) n.Data<float>()[i] = dist(gen);
    *t = std::move(n);
  };
  const int64_t in_features = fan_in;
  const std::string weights = "'" + w->name + (bias_name.empty() ? "'" : "', '" + bias_name + "'");
  fresh(w, static_cast<size_t>(class_axis));
  if (b) {
    size_t axis = 0;
    for (size_t d = 0; d < b->dims.size(); ++d)
      if (b->dims[d] == old_classes) axis = d;
    fresh(b, axis);
  }
  if (layer->op_type == "Gemm") {  // nn.Linear computes x W^T + b, unscaled
    layer->attrs.erase("alpha");
    layer->attrs.erase("beta");
  }
  // Constant Reshape targets after the layer that spell out the old class count (new
  // initializers: w and b are not to be used below).
  for (size_t idx : chain) {
    Node& n = g.nodes[idx];
    if (n.op_type != "Reshape" || !n.HasInput(1)) continue;
    auto p = producer.find(n.inputs[1]);
    const HostTensor* target = g.FindStatic(n.inputs[1], p == producer.end() ? nullptr : &g.nodes[p->second]);
    if (!target || (target->dtype != DType::kInt64 && target->dtype != DType::kInt32)) continue;
    std::vector<int64_t> shape = target->AsInt64s();
    bool changed = false;
    for (size_t d = 1; d < shape.size(); ++d)
      if (shape[d] == old_classes) {
        shape[d] = classes;
        changed = true;
      }
    if (!changed) continue;
    std::string name = n.inputs[1] + "/classes";
    while (g.FindInitializer(name) || producer.count(name)) name += "_";
    g.initializers.push_back(HostTensor::FromVector<int64_t>(shape, {static_cast<int64_t>(shape.size())}, name));
    n.inputs[1] = name;
  }
  ValueInfo& out = g.outputs[0];
  if (out.has_shape && out.dims.size() >= 2 && out.dims[1].IsStatic() && out.dims[1].value == old_classes)
    out.dims[1].value = classes;
  if (!unread.empty()) {
    g.nodes.erase(std::remove_if(g.nodes.begin(), g.nodes.end(),
                                 [&](const Node& n) { return !n.outputs.empty() && n.outputs[0] == unread; }),
                  g.nodes.end());
    g.value_info.erase(unread);
  }
  model = WithShapesInferredAgain(model);
  return StrFormat("replaced the classifier '%s' (%s %lldx%lld, %s) with a fresh %lld-way layer under the same "
                   "names, initialised as PyTorch's %s (seed %llu)",
                   layer_name.c_str(), what.c_str(), (long long)in_features, (long long)old_classes, weights.c_str(),
                   (long long)classes, what == "1x1 Conv" ? "nn.Conv2d" : "nn.Linear", (unsigned long long)seed);
}

}  // namespace ot
