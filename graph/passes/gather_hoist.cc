// HoistPositionGathers (graph/passes/gather_hoist.h): Gathers of the first or last position
// moved above the position-wise ops that feed them.
#include "graph/passes/gather_hoist.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/op_domains.h"
#include "graph/passes/rank_inference.h"

namespace ot {
namespace {

const std::set<std::string>& UnaryPositionwiseOps() {
  static const std::set<std::string> ops = {"Erf",      "Relu", "Gelu",  "Tanh", "Sigmoid", "Neg",      "Abs",
                                            "Sqrt",     "Exp",  "Identity", "Cast", "LeakyRelu", "Elu", "Softplus",
                                            "Clip"};
  return ops;
}

const std::set<std::string>& BinaryElementwiseOps() {
  static const std::set<std::string> ops = {"Add", "Sub", "Mul", "Div"};
  return ops;
}

// The Gather's indices when they are a constant of rank 0 or 1 whose values are all 0 or
// all -1 (-1 from opset 11, which defines negative indices): its rank, else nothing.
std::optional<int> FirstOrLastPosition(const Graph& g, const Node* producer, const std::string& indices,
                                       int64_t opset) {
  const HostTensor* t = g.FindStatic(indices, producer);
  if (t == nullptr || t->dims.size() > 1 || t->NumElements() == 0) return std::nullopt;
  std::vector<int64_t> values;
  if (t->dtype == DType::kInt64) values.assign(t->Data<int64_t>(), t->Data<int64_t>() + t->NumElements());
  else if (t->dtype == DType::kInt32) values.assign(t->Data<int32_t>(), t->Data<int32_t>() + t->NumElements());
  else return std::nullopt;
  const int64_t first = values[0];
  if (first != 0 && !(first == -1 && opset >= 11)) return std::nullopt;
  for (int64_t v : values)
    if (v != first) return std::nullopt;
  return static_cast<int>(t->dims.size());
}

class GatherHoist {
 public:
  explicit GatherHoist(Model& m) : g_(m.graph), opset_(m.OpsetFor("")), ranks_(InferRanks(g_, opset_)) {}

  int Run() {
    int moved = 0;
    while (HoistOne()) ++moved;
    return moved;
  }

 private:
  // One Gather moved above its producer; false when none can be.
  bool HoistOne() {
    Index();
    for (size_t gi = 0; gi < g_.nodes.size(); ++gi) {
      const Node& gather = g_.nodes[gi];
      if (!IsOnnxDomain(gather.domain) || gather.op_type != "Gather" || gather.inputs.size() != 2 ||
          gather.outputs.size() != 1)
        continue;
      const std::string& v = gather.inputs[0];
      const std::optional<int> index_rank = FirstOrLastPosition(g_, Producer(gather.inputs[1]), gather.inputs[1], opset_);
      auto rank = ranks_.find(v);
      auto p = producer_.find(v);
      if (!index_rank || rank == ranks_.end() || p == producer_.end() || graph_outputs_.count(v) ||
          readers_[v] != 1)
        continue;
      const int r = rank->second;
      int64_t axis = gather.GetInt("axis", 0);
      if (axis < 0) axis += r;
      if (axis < 0 || axis >= r) continue;
      std::vector<int> gathered_axis;  // per input of the producer: its axis to gather, or -1
      if (!Plan(g_.nodes[p->second], static_cast<int>(axis), r, &gathered_axis)) continue;
      Apply(gi, p->second, gathered_axis, *index_rank, r);
      return true;
    }
    return false;
  }

  void Index() {
    producer_.clear();
    readers_.clear();
    graph_outputs_.clear();
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      for (const auto& o : g_.nodes[i].outputs)
        if (!o.empty()) producer_[o] = i;
      for (const auto& in : g_.nodes[i].inputs)
        if (!in.empty()) ++readers_[in];
    }
    for (const auto& o : g_.outputs) graph_outputs_.insert(o.name);
  }

  const Node* Producer(const std::string& value) const {
    auto it = producer_.find(value);
    return it == producer_.end() ? nullptr : &g_.nodes[it->second];
  }

  int Rank(const std::string& value) const {
    auto it = ranks_.find(value);
    return it == ranks_.end() ? -1 : it->second;
  }

  // Whether `p` works on each position of `axis` (of its rank-`r` output) alone, and which of
  // its inputs then need the Gather (at which of their axes).
  bool Plan(const Node& p, int axis, int r, std::vector<int>* gathered_axis) const {
    if (!IsOnnxDomain(p.domain) || p.outputs.empty()) return false;
    gathered_axis->assign(p.inputs.size(), -1);
    if (UnaryPositionwiseOps().count(p.op_type)) {
      if (p.outputs.size() != 1 || !p.HasInput(0) || Rank(p.inputs[0]) != r) return false;
      for (size_t k = 1; k < p.inputs.size(); ++k)  // Clip's bounds: scalars
        if (!p.inputs[k].empty() && Rank(p.inputs[k]) != 0) return false;
      (*gathered_axis)[0] = axis;
      return true;
    }
    if (BinaryElementwiseOps().count(p.op_type)) {
      if (p.inputs.size() != 2 || p.outputs.size() != 1 || opset_ < 7) return false;  // numpy broadcasting
      for (size_t k = 0; k < 2; ++k) {
        const int rk = Rank(p.inputs[k]);
        if (rk < 0 || rk > r) return false;
        const int at = axis - (r - rk);  // the operand's own axis, negative where it lacks it
        (*gathered_axis)[k] = at >= 0 ? at : -1;
      }
      return true;
    }
    if (p.op_type == "LayerNormalization") {
      if (!p.HasInput(0) || Rank(p.inputs[0]) != r) return false;
      for (size_t k = 1; k < p.outputs.size(); ++k)
        if (!p.outputs[k].empty() && (readers_.count(p.outputs[k]) || graph_outputs_.count(p.outputs[k])))
          return false;  // mean, inverse deviation read
      int64_t first = p.GetInt("axis", -1);
      if (first < 0) first += r;
      if (first <= axis) return false;  // the normalised axes include the gathered one
      (*gathered_axis)[0] = axis;
      return true;
    }
    if (p.op_type == "Transpose") {
      if (p.inputs.size() != 1 || p.outputs.size() != 1 || Rank(p.inputs[0]) != r) return false;
      const std::vector<int64_t> perm = PermOf(p, r);
      if (static_cast<int>(perm.size()) != r) return false;
      (*gathered_axis)[0] = static_cast<int>(perm[static_cast<size_t>(axis)]);
      return true;
    }
    if (p.op_type == "MatMul") {
      if (p.inputs.size() != 2 || p.outputs.size() != 1 || Rank(p.inputs[1]) != 2 || Rank(p.inputs[0]) != r || r < 2 ||
          axis > r - 2)
        return false;
      (*gathered_axis)[0] = axis;
      return true;
    }
    return false;
  }

  // A Transpose's permutation of rank r (reversed axes when the attribute is absent).
  static std::vector<int64_t> PermOf(const Node& t, int r) {
    std::vector<int64_t> perm = t.GetInts("perm");
    if (perm.empty())
      for (int d = r - 1; d >= 0; --d) perm.push_back(d);
    return perm;
  }

  // The Gather of `value` at `axis` with `gather`'s indices: an existing one, else a new node
  // appended to `added`.
  std::string GatherOf(const std::string& value, int axis, const Node& gather, int index_rank,
                       std::vector<Node>* added) {
    auto same = [&](const Node& n) {
      if (!IsOnnxDomain(n.domain) || n.op_type != "Gather" || n.inputs.size() != 2 || n.inputs[0] != value ||
          n.inputs[1] != gather.inputs[1] || n.outputs.size() != 1)
        return false;
      int64_t a = n.GetInt("axis", 0);
      if (a < 0) a += Rank(value);
      return a == axis;
    };
    for (const auto& n : g_.nodes)
      if (same(n)) return n.outputs[0];
    for (const auto& n : *added)
      if (same(n)) return n.outputs[0];
    Node n;
    n.op_type = "Gather";
    std::string out = value + "/position_" + std::to_string(axis);
    for (int k = 1; producer_.count(out) || Rank(out) >= 0 || g_.FindInitializer(out); ++k)
      out = value + "/position_" + std::to_string(axis) + "_" + std::to_string(k);
    n.name = out + "/Gather";
    n.inputs = {value, gather.inputs[1]};
    n.outputs = {out};
    n.SetInt("axis", axis);
    ranks_[out] = Rank(value) - 1 + index_rank;
    added->push_back(std::move(n));
    return out;
  }

  // The producer at `pi` reads the Gathers of its inputs and writes the output of the Gather at
  // `gi`, which goes.
  void Apply(size_t gi, size_t pi, const std::vector<int>& gathered_axis, int index_rank, int r) {
    const Node gather = g_.nodes[gi];
    std::vector<Node> added;
    {
      Node& p = g_.nodes[pi];
      for (size_t k = 0; k < p.inputs.size(); ++k)
        if (gathered_axis[k] >= 0) p.inputs[k] = GatherOf(p.inputs[k], gathered_axis[k], gather, index_rank, &added);
      if (p.op_type == "Transpose" && index_rank == 0) {
        // The gathered axis goes from the output; the input axes after it shift down by one.
        const int64_t from = gathered_axis[0];
        std::vector<int64_t> perm;
        for (int64_t d : PermOf(p, r))
          if (d != from) perm.push_back(d > from ? d - 1 : d);
        p.SetInts("perm", perm);
      }
      g_.value_info.erase(p.outputs[0]);
      ranks_.erase(p.outputs[0]);
      p.outputs[0] = gather.outputs[0];
      ranks_[gather.outputs[0]] = r - 1 + index_rank;
      if (p.op_type == "LayerNormalization") {
        p.outputs.resize(1);  // the statistics are unread (Plan)
        if (index_rank == 0 && p.GetInt("axis", -1) >= 0) p.SetInt("axis", p.GetInt("axis", -1) - 1);
      }
    }
    g_.nodes.erase(g_.nodes.begin() + static_cast<std::ptrdiff_t>(gi));
    if (gi < pi) --pi;
    g_.nodes.insert(g_.nodes.begin() + static_cast<std::ptrdiff_t>(pi), added.begin(), added.end());
  }

  Graph& g_;
  int64_t opset_;
  std::map<std::string, int> ranks_;
  std::map<std::string, size_t> producer_;
  std::map<std::string, int> readers_;
  std::set<std::string> graph_outputs_;
};

}  // namespace

int HoistPositionGathers(Model& m) { return GatherHoist(m).Run(); }

}  // namespace ot
