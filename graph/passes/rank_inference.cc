#include "graph/passes/rank_inference.h"

#include <algorithm>
#include <set>
#include <vector>

#include "graph/autodiff/gradient_registry.h"
#include "graph/op_domains.h"

namespace ot {
namespace {

class RankInference {
 public:
  RankInference(const Graph& g, int64_t opset) : g_(g), opset_(opset) {
    for (const auto& v : g.inputs)
      if (v.has_shape) ranks_[v.name] = static_cast<int>(v.dims.size());
    for (const auto& t : g.initializers) ranks_[t.name] = static_cast<int>(t.dims.size());
    for (const auto& [name, v] : g.value_info)
      if (v.has_shape) ranks_[name] = static_cast<int>(v.dims.size());
    for (const auto& v : g.outputs)
      if (v.has_shape) ranks_[v.name] = static_cast<int>(v.dims.size());
    for (const auto& n : g.nodes)
      for (const auto& o : n.outputs)
        if (!o.empty()) producer_[o] = &n;
  }

  std::map<std::string, int> Run() {
    for (size_t idx : g_.TopologicalOrder()) {
      const Node& n = g_.nodes[idx];
      // org.onnxtrain's fused Gelu, LayerNormalization and Attention (graph/passes/fusion.h) give
      // the ranks of the ONNX ops of those names.
      const bool fused = n.domain == kGradDomain &&
                         (n.op_type == "Gelu" || n.op_type == "LayerNormalization" || n.op_type == "Attention");
      if (!IsOnnxDomain(n.domain) && !fused) continue;
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        const std::string& o = n.outputs[k];
        if (o.empty() || ranks_.count(o)) continue;
        const int r = OutputRank(n, k);
        if (r >= 0) ranks_[o] = r;
      }
    }
    return ranks_;
  }

 private:
  int RankOf(const std::string& v) const {
    auto it = ranks_.find(v);
    return it == ranks_.end() ? -1 : it->second;
  }
  int In(const Node& n, size_t i) const { return i < n.inputs.size() && !n.inputs[i].empty() ? RankOf(n.inputs[i]) : -1; }

  // The static contents of a value: an initializer or a Constant node's tensor.
  const HostTensor* StaticTensor(const std::string& v) const {
    auto it = producer_.find(v);
    return g_.FindStatic(v, it == producer_.end() ? nullptr : it->second);
  }

  // Number of elements of a 1-D value (a shape), -1 when unknown.
  int64_t Length1D(const std::string& v, int depth = 0) const {
    if (v.empty() || depth > 32) return -1;
    if (const HostTensor* t = StaticTensor(v)) return t->dims.size() == 1 ? t->dims[0] : -1;
    auto vi = g_.value_info.find(v);
    if (vi != g_.value_info.end() && vi->second.has_shape && vi->second.dims.size() == 1 &&
        vi->second.dims[0].IsStatic())
      return vi->second.dims[0].value;
    auto it = producer_.find(v);
    if (it == producer_.end()) return -1;
    const Node& p = *it->second;
    if (!p.domain.empty()) return -1;
    if (p.op_type == "Shape" && !p.HasAttr("start") && !p.HasAttr("end")) return In(p, 0);
    if (p.op_type == "Concat") {
      int64_t total = 0;
      for (const auto& in : p.inputs) {
        const int64_t l = Length1D(in, depth + 1);
        if (l < 0) return -1;
        total += l;
      }
      return total;
    }
    if (p.op_type == "Unsqueeze" && In(p, 0) == 0) return 1;
    if (p.op_type == "Cast" || p.op_type == "Identity") return Length1D(p.inputs[0], depth + 1);
    return -1;
  }

  // Axes given as an attribute (older opsets) or a static input.
  bool Axes(const Node& n, size_t input, std::vector<int64_t>* axes) const {
    if (n.HasAttr("axes")) {
      *axes = n.GetInts("axes");
      return true;
    }
    if (input < n.inputs.size() && !n.inputs[input].empty()) {
      const HostTensor* t = StaticTensor(n.inputs[input]);
      if (!t) return false;
      *axes = t->AsInt64s();
      return true;
    }
    axes->clear();  // absent
    return true;
  }

  int Broadcast(const Node& n) const {
    int r = 0;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const int ri = In(n, i);
      if (ri < 0) return -1;
      r = std::max(r, ri);
    }
    return n.inputs.empty() ? -1 : r;
  }

  int OutputRank(const Node& n, size_t k) const {
    static const std::set<std::string> kSameAsFirst = {
        "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Cast",
        "CastLike", "Identity", "Softmax", "LogSoftmax", "Gelu", "Silu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish",
        "Softplus", "Softsign", "Clip", "Floor", "Ceil", "Round", "Sign", "Not", "IsNaN", "IsInf", "Mish",
        "ThresholdedRelu", "Shrink", "Sin", "Cos", "Trilu", "CumSum", "Transpose", "Slice", "Pad", "Tile",
        "Resize", "Upsample", "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool",
        "GlobalMaxPool", "LRN", "InstanceNormalization", "GroupNormalization", "RMSNormalization", "LpNormalization",
        "SpaceToDepth", "DepthToSpace", "Hardmax", "ReverseSequence", "ScatterElements", "ScatterND", "GatherElements",
        "Compress", "Attention"};
    static const std::set<std::string> kBroadcast = {
        "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less", "Greater",
        "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "PRelu", "Mod", "BitShift"};
    static const std::set<std::string> kReductions = {
        "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
    const std::string& op = n.op_type;
    if (op == "Compress") return n.HasAttr("axis") ? In(n, 0) : 1;
    if (kSameAsFirst.count(op)) return k == 0 ? In(n, 0) : -1;
    if (op == "Dropout" || op == "BatchNormalization" || op == "LayerNormalization" || op == "Split")
      return op == "Split" || k == 0 ? In(n, 0) : -1;
    if (kBroadcast.count(op)) return Broadcast(n);
    if (op == "MatMul") {
      const int ra = In(n, 0), rb = In(n, 1);
      if (ra < 1 || rb < 1) return -1;
      if (ra == 1 && rb == 1) return 0;
      if (ra == 1) return rb - 1;
      if (rb == 1) return ra - 1;
      return std::max(ra, rb);
    }
    if (op == "Gemm" || op == "Flatten") return 2;
    if (op == "Shape") return 1;
    if (op == "Size") return 0;
    if (op == "Constant") {
      const HostTensor* t = n.GetTensor("value");
      return t ? static_cast<int>(t->dims.size()) : -1;
    }
    if (op == "Reshape") {
      const int64_t l = Length1D(n.inputs.size() > 1 ? n.inputs[1] : "");
      return l < 0 ? -1 : static_cast<int>(l);
    }
    if (op == "ConstantOfShape") {
      const int64_t l = Length1D(n.inputs[0]);
      return l < 0 ? -1 : static_cast<int>(l);
    }
    if (op == "Expand") {
      const int64_t l = Length1D(n.inputs.size() > 1 ? n.inputs[1] : "");
      const int r = In(n, 0);
      return l < 0 || r < 0 ? -1 : std::max(r, static_cast<int>(l));
    }
    if (op == "Concat") {
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (In(n, i) >= 0) return In(n, i);
      return -1;
    }
    if (op == "Gather") {
      const int rd = In(n, 0), ri = In(n, 1);
      return rd < 1 || ri < 0 ? -1 : rd - 1 + ri;
    }
    if (op == "Squeeze" || op == "Unsqueeze") {
      std::vector<int64_t> axes;
      const int r = In(n, 0);
      if (r < 0 || !Axes(n, 1, &axes)) return -1;
      if (op == "Unsqueeze") return r + static_cast<int>(axes.size());
      return axes.empty() ? -1 : r - static_cast<int>(axes.size());  // no axes: unit dims unknown
    }
    if (kReductions.count(op) || op == "ArgMax" || op == "ArgMin") {
      const int r = In(n, 0);
      if (r < 0) return -1;
      if (n.GetInt("keepdims", 1) != 0) return r;
      if (op == "ArgMax" || op == "ArgMin") return r - 1;
      std::vector<int64_t> axes;
      const bool axes_input = op == "ReduceSum" ? opset_ >= 13 : opset_ >= 18;
      if (!Axes(n, axes_input ? 1 : n.inputs.size(), &axes)) return -1;
      if (axes.empty()) return n.GetInt("noop_with_empty_axes", 0) != 0 ? r : 0;
      return r - static_cast<int>(std::set<int64_t>(axes.begin(), axes.end()).size());
    }
    return -1;
  }

  const Graph& g_;
  int64_t opset_;
  std::map<std::string, int> ranks_;
  std::map<std::string, const Node*> producer_;
};

}  // namespace

std::map<std::string, int> InferRanks(const Graph& g, int64_t opset) { return RankInference(g, opset).Run(); }

}  // namespace ot
