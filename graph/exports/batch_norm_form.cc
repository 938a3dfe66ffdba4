// BatchNormalization form rewrites (see batch_norm_form.h).
#include "graph/exports/batch_norm_form.h"

#include <map>
#include <set>

#include "graph/error.h"
#include "graph/exports/merged_initializers.h"

namespace ot {

namespace {

bool HasRunningStats(const Graph& g, const Node& n) {
  return n.HasInput(3) && n.HasInput(4) && g.FindInitializer(n.inputs[3]) && g.FindInitializer(n.inputs[4]);
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::string UniqueName(const Graph& g, std::set<std::string>& taken, const std::string& base) {
  std::string name = base;
  for (int k = 1; taken.count(name) || g.FindInitializer(name); ++k) name = base + "_" + std::to_string(k);
  taken.insert(name);
  return name;
}

std::set<std::string> AllNames(const Graph& g) {
  std::set<std::string> names;
  for (const auto& n : g.nodes) {
    names.insert(n.name);
    for (const auto& v : n.inputs) names.insert(v);
    for (const auto& v : n.outputs) names.insert(v);
  }
  for (const auto& v : g.inputs) names.insert(v.name);
  for (const auto& t : g.initializers) names.insert(t.name);
  return names;
}

int RankOf(const Graph& g, const std::string& value) {
  if (const ValueInfo* in = g.FindInput(value)) return in->has_shape ? static_cast<int>(in->dims.size()) : -1;
  auto it = g.value_info.find(value);
  if (it != g.value_info.end() && it->second.has_shape) return static_cast<int>(it->second.dims.size());
  return -1;
}

// PyTorch's export shares initializers of equal values: a fresh BatchNorm's running
// variance (ones) and mean (zeros) then arrive as Identity copies of its scale and bias.
// Such statistics become initializers of their own again, under the names the Identity
// nodes give them (b3.running_var), so that they are state, not the scale. Returns how many.
int UnshareStatistics(Graph& g) {
  std::map<std::string, const Node*> producer;
  std::map<std::string, int> readers;
  for (const auto& n : g.nodes) {
    for (const auto& o : n.outputs) producer[o] = &n;
    for (const auto& i : n.inputs) readers[i]++;
  }
  for (const auto& o : g.outputs) readers[o.name]++;
  std::set<std::string> unshare;
  for (const auto& n : g.nodes) {
    if (!n.domain.empty() || n.op_type != "BatchNormalization") continue;
    for (int k : {3, 4}) {
      if (!n.HasInput(k)) continue;
      const std::string& v = n.inputs[static_cast<size_t>(k)];
      auto p = producer.find(v);
      if (p == producer.end() || p->second->op_type != "Identity" || !p->second->domain.empty() ||
          !p->second->HasInput(0) || !g.FindInitializer(p->second->inputs[0]) || readers[v] != 1)
        continue;
      unshare.insert(v);
    }
  }
  if (unshare.empty()) return 0;
  std::vector<Node> nodes;
  for (auto& n : g.nodes) {
    if (n.op_type == "Identity" && n.outputs.size() == 1 && unshare.count(n.outputs[0])) {
      HostTensor copy = *g.FindInitializer(n.inputs[0]);
      copy.name = n.outputs[0];
      g.initializers.push_back(std::move(copy));
      g.value_info.erase(n.outputs[0]);
      continue;
    }
    nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);
  return static_cast<int>(unshare.size());
}

}  // namespace

std::string BatchNormFormReport::Describe() const {
  std::string out;
  if (restored > 0)
    out += StrFormat("the model was exported in eval mode or optimized by the dynamo exporter: PyTorch folded %d "
                     "BatchNorm layer%s into the convolution%s before %s; restored %s as BatchNormalization in "
                     "training form (scale 1, bias 0, fresh statistics)",
                     restored, restored == 1 ? "" : "s", restored == 1 ? "" : "s", restored == 1 ? "it" : "them",
                     restored == 1 ? "it" : "them");
  if (inference_nodes > 0)
    out += StrFormat("%s%d BatchNormalization node%s came in inference form (eval mode); training %s in "
                     "training form (batch statistics, running statistics updated)",
                     out.empty() ? "" : "; ", inference_nodes, inference_nodes == 1 ? "" : "s",
                     inference_nodes == 1 ? "it" : "them");
  if (!out.empty()) out += "; --frozen-bn keeps the exported form with frozen statistics";
  if (frozen > 0)
    out = StrFormat("--frozen-bn: %d BatchNormalization node%s with %s running statistics, which stay fixed "
                    "(scale and bias still train)",
                    frozen, frozen == 1 ? " normalises" : "s normalise", frozen == 1 ? "its" : "their");
  return out;
}

bool IsInferenceBatchNorm(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.op_type != "BatchNormalization" || !HasRunningStats(g, n)) return false;
  bool more_outputs = false;
  for (size_t k = 1; k < n.outputs.size(); ++k) more_outputs = more_outputs || !n.outputs[k].empty();
  // Before opset 14 the training form is told by its extra outputs alone (torch's
  // training-mode export at opset 9-13 has five outputs and no training_mode attribute).
  return !more_outputs || (n.HasAttr("training_mode") && n.GetInt("training_mode", 0) == 0);
}

// PyTorch 2.x's dynamo exporter optimizes the graph with onnxscript's rewriter, whose
// FuseBatchNormIntoConv rule folds a BatchNorm into the convolution before it even for a
// model in train(); the Conv node records the rule and the BatchNorm module's scope.
bool FoldedByRewriter(const Node& n) {
  auto rule = n.metadata.find("pkg.onnxscript.rewriter.rule_name");
  return rule != n.metadata.end() && rule->second.find("FuseBatchNormIntoConv") != std::string::npos;
}

// The BatchNorm module whose layer the rewriter folded into `conv` ("layer1.0.bn1"): the
// last dotted name of the node's pkg.torch.onnx.name_scopes ("['', 'layer1', ..., 'layer1.0.bn1',
// '_native_batch_norm_legit_functional_1']"); "" when the metadata does not say.
std::string FoldedModuleName(const Node& conv) {
  std::string best;
  for (const std::string& scope : NameScopes(conv))
    if (!scope.empty() && scope.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") ==
                              std::string::npos && !StartsWith(scope, "_native_batch_norm"))
      best = scope;
  return best;
}

std::vector<const Node*> ConvsWithFoldedBatchNorm(const Model& m) {
  std::vector<const Node*> out;
  if (m.producer_name != "pytorch") return out;
  for (const auto& n : m.graph.nodes) {
    if (!n.domain.empty() || n.op_type != "Conv" || !n.HasInput(1) || !m.graph.FindInitializer(n.inputs[1])) continue;
    const bool legacy = n.HasInput(2) && StartsWith(n.inputs[1], "onnx::Conv_") &&
                        StartsWith(n.inputs[2], "onnx::Conv_") && m.graph.FindInitializer(n.inputs[2]);
    if (legacy || FoldedByRewriter(n)) out.push_back(&n);
  }
  return out;
}

BatchNormFormReport UseTrainingFormBatchNorm(Model& m) {
  BatchNormFormReport report;
  Graph& g = m.graph;
  UnshareStatistics(g);
  for (const auto& n : g.nodes) report.inference_nodes += IsInferenceBatchNorm(g, n);
  std::set<const Node*> folded;
  for (const Node* n : ConvsWithFoldedBatchNorm(m)) folded.insert(n);
  if (folded.empty()) return report;
  std::set<std::string> taken = AllNames(g);
  std::vector<Node> nodes;
  std::vector<HostTensor> added;
  for (auto& n : g.nodes) {
    const bool restore = folded.count(&n) != 0;
    nodes.push_back(std::move(n));
    if (!restore) continue;
    Node& conv = nodes.back();
    const HostTensor* w = g.FindInitializer(conv.inputs[1]);
    OT_CHECK(w && w->dims.size() >= 3, "%s: its weight '%s' is not [M, C, k...]", conv.Describe().c_str(),
             conv.inputs[1].c_str());
    const int64_t channels = w->dims[0];
    const std::string base = conv.name.empty() ? conv.inputs[1] : conv.name;
    // The dynamo exporter names the folded module: its parameters take PyTorch's names
    // (layer1.0.bn1.weight, ...), so a checkpoint loads back into the module by name.
    const std::string module = FoldedByRewriter(conv) ? FoldedModuleName(conv) : "";
    const std::string y = conv.outputs[0];
    conv.outputs[0] = UniqueName(g, taken, y + "/before_bn");
    Node bn;
    bn.name = UniqueName(g, taken, module.empty() ? base + "/restored_bn" : module);
    bn.op_type = "BatchNormalization";
    bn.inputs = {conv.outputs[0]};
    const float init[4] = {1.f, 0.f, 0.f, 1.f};  // scale, bias, running mean, running variance
    const char* what[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int k = 0; k < 4; ++k) {
      HostTensor t = HostTensor::FromVector(std::vector<float>(static_cast<size_t>(channels), init[k]), {channels},
                                            UniqueName(g, taken, (module.empty() ? bn.name : module) + "." + what[k]));
      bn.inputs.push_back(t.name);
      added.push_back(std::move(t));
    }
    bn.outputs = {y};
    bn.SetFloat("epsilon", 1e-5f);
    bn.SetFloat("momentum", 0.9f);  // PyTorch's default momentum 0.1 in ONNX's convention
    nodes.push_back(std::move(bn));
    report.restored++;
  }
  g.nodes = std::move(nodes);
  for (auto& t : added) g.initializers.push_back(std::move(t));
  // The convolutions' outputs changed names: inferred shapes of the old names still hold
  // (the BatchNormalization keeps the shape), the new ones get the same.
  for (const auto& n : g.nodes)
    if (n.op_type == "BatchNormalization" && n.inputs.size() == 5 && g.value_info.count(n.outputs[0]) &&
        !g.value_info.count(n.inputs[0])) {
      ValueInfo v = g.value_info[n.outputs[0]];
      v.name = n.inputs[0];
      g.value_info[v.name] = v;
    }
  return report;
}

BatchNormFormReport FreezeBatchNorm(Model& m) {
  BatchNormFormReport report;
  Graph& g = m.graph;
  UnshareStatistics(g);
  std::set<std::string> consumed;
  for (const auto& n : g.nodes)
    for (const auto& in : n.inputs) consumed.insert(in);
  for (const auto& o : g.outputs) consumed.insert(o.name);
  std::set<std::string> taken = AllNames(g);
  std::vector<Node> nodes;
  for (auto& n : g.nodes) {
    if (!(n.domain.empty() && n.op_type == "BatchNormalization" && HasRunningStats(g, n))) {
      nodes.push_back(std::move(n));
      continue;
    }
    for (size_t k = 1; k < n.outputs.size(); ++k)
      OT_CHECK(n.outputs[k].empty() || !consumed.count(n.outputs[k]),
               "--frozen-bn: %s has its statistics output '%s' read by other nodes; it cannot be frozen",
               n.Describe().c_str(), n.outputs[k].c_str());
    const int rank = RankOf(g, n.inputs[0]);
    OT_CHECK(rank >= 2, "--frozen-bn: the rank of %s's input '%s' is unknown; export the model with shapes",
             n.Describe().c_str(), n.inputs[0].c_str());
    const std::string base = n.name.empty() ? n.outputs[0] : n.name;
    auto name = [&](const std::string& what) { return UniqueName(g, taken, base + "/frozen_" + what); };
    auto emit = [&](const std::string& op, std::vector<std::string> ins, const std::string& out) {
      Node e;
      e.name = out;
      e.op_type = op;
      e.inputs = std::move(ins);
      e.outputs = {out};
      nodes.push_back(std::move(e));
      return out;
    };
    HostTensor eps = HostTensor::FromVector<float>({n.GetFloat("epsilon", 1e-5f)}, {}, name("epsilon"));
    std::vector<int64_t> shape(static_cast<size_t>(rank - 1), 1);
    shape[0] = -1;  // [C, 1, ..., 1]: broadcasts against [N, C, ...]
    HostTensor to_channels = HostTensor::FromVector<int64_t>(shape, {rank - 1}, name("shape"));
    g.initializers.push_back(eps);
    g.initializers.push_back(to_channels);
    const std::string std_dev = emit("Sqrt", {emit("Add", {n.inputs[4], eps.name}, name("var_eps"))}, name("std"));
    const std::string a = emit("Div", {n.inputs[1], std_dev}, name("a"));
    const std::string c = emit("Sub", {n.inputs[2], emit("Mul", {n.inputs[3], a}, name("mean_a"))}, name("c"));
    const std::string scaled =
        emit("Mul", {n.inputs[0], emit("Reshape", {a, to_channels.name}, name("a_c"))}, name("scaled"));
    Node add;
    add.name = base;
    add.op_type = "Add";
    add.inputs = {scaled, emit("Reshape", {c, to_channels.name}, name("c_c"))};
    add.outputs = {n.outputs[0]};
    report.frozen_statistics.push_back(n.inputs[3]);
    report.frozen_statistics.push_back(n.inputs[4]);
    report.frozen_statistics.push_back(eps.name);  // a float initializer too, not a parameter
    nodes.push_back(std::move(add));
    report.frozen++;
  }
  g.nodes = std::move(nodes);
  return report;
}

}  // namespace ot
