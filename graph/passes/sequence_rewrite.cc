// Rewrite of SplitToSequence and its readers into Split (see sequence_rewrite.h).
#include "graph/passes/sequence_rewrite.h"

#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/onnx_io.h"

namespace ot {
namespace {

// ai.onnx ops that take or give sequences.
const std::set<std::string>& SequenceOps() {
  static const std::set<std::string> ops = {"SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase",
                                            "SequenceAt", "SequenceLength", "SequenceMap", "SplitToSequence",
                                            "ConcatFromSequence"};
  return ops;
}

bool IsOp(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

class SequenceRewriter {
 public:
  explicit SequenceRewriter(Model& m) : m_(m), g_(m.graph) {
    auto it = m.opsets.find("");
    opset_ = it == m.opsets.end() ? 1 : it->second;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      for (const auto& o : n.outputs) {
        if (o.empty()) continue;
        producer_[o] = i;
        names_.insert(o);
      }
      for (const auto& in : n.inputs) {
        if (in.empty()) continue;
        std::vector<size_t>& r = readers_[in];
        if (r.empty() || r.back() != i) r.push_back(i);
      }
    }
    for (const auto& t : g_.initializers) names_.insert(t.name);
    for (const auto& v : g_.inputs) names_.insert(v.name);
  }

  int Run() {
    bool any = false;
    for (const Node& n : g_.nodes) any = any || (n.domain.empty() && SequenceOps().count(n.op_type));
    if (!any) return 0;
    // Replacement nodes by the index of the SplitToSequence they stand for.
    std::map<size_t, std::vector<Node>> replacements;
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (IsOp(g_.nodes[i], "SplitToSequence")) replacements[i] = RewriteSplit(i);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (!n.domain.empty() || !SequenceOps().count(n.op_type) || removed_.count(i)) continue;
      std::string what = "sequences are not supported (onnx-train runs tensors only)";
      if (IsOp(n, "SequenceAt") || IsOp(n, "ConcatFromSequence") || IsOp(n, "SequenceLength")) {
        auto p = n.HasInput(0) ? producer_.find(n.inputs[0]) : producer_.end();
        const std::string from = p == producer_.end() ? "a graph input" : g_.nodes[p->second].Describe();
        what = "reads the sequence '" + (n.HasInput(0) ? n.inputs[0] : std::string()) + "' made by " + from +
               "; only sequences made by SplitToSequence are supported";
      }
      throw UnsupportedError(n.Describe() + ": " + what +
                             ". onnx-train rewrites only SplitToSequence read by SequenceAt at constant positions, "
                             "ConcatFromSequence or SequenceLength (torch.split/chunk) into Split; export the model "
                             "with the optimizer on (torch.onnx.export(..., dynamo=True, optimize=True)) or without "
                             "sequence ops");
    }
    std::vector<Node> nodes;
    nodes.reserve(g_.nodes.size());
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      auto r = replacements.find(i);
      if (r != replacements.end()) {
        for (Node& n : r->second) nodes.push_back(std::move(n));
        continue;
      }
      if (!removed_.count(i)) nodes.push_back(std::move(g_.nodes[i]));
    }
    g_.nodes = std::move(nodes);
    for (const auto& t : new_initializers_) g_.initializers.push_back(t);
    return static_cast<int>(removed_.size());
  }

 private:
  [[noreturn]] void Refuse(const Node& n, const std::string& what) const {
    throw UnsupportedError(n.Describe() + ": " + what);
  }

  std::string Fresh(const std::string& hint) {
    std::string name = hint;
    for (int k = 1; names_.count(name); ++k) name = hint + "_" + std::to_string(k);
    names_.insert(name);
    return name;
  }

  std::string ConstInt64s(const std::vector<int64_t>& v, const std::string& hint, bool scalar = false) {
    HostTensor t = HostTensor::FromVector<int64_t>(
        v, scalar ? std::vector<int64_t>{} : std::vector<int64_t>{static_cast<int64_t>(v.size())}, Fresh(hint));
    new_initializers_.push_back(t);
    return t.name;
  }

  // The constant integer values of `value` (an initializer or a Constant node's output).
  std::optional<std::vector<int64_t>> StaticInts(const std::string& value, bool* scalar) const {
    auto p = producer_.find(value);
    const Node* prod = p == producer_.end() ? nullptr : &g_.nodes[p->second];
    if (const HostTensor* t = g_.FindStatic(value, prod)) {
      if (t->dtype != DType::kInt64 && t->dtype != DType::kInt32) return std::nullopt;
      *scalar = t->dims.empty();
      return t->AsInt64s();
    }
    if (prod && IsOp(*prod, "Constant") && prod->HasAttr("value_int")) {
      *scalar = true;
      return std::vector<int64_t>{prod->GetInt("value_int", 0)};
    }
    if (prod && IsOp(*prod, "Constant") && prod->HasAttr("value_ints")) {
      *scalar = false;
      return prod->GetInts("value_ints");
    }
    return std::nullopt;
  }

  // Static dims of `value` (-1 where dynamic); empty optional when its shape is unknown.
  std::optional<std::vector<int64_t>> KnownDims(const std::string& value) {
    if (const HostTensor* t = g_.FindInitializer(value)) return t->dims;
    auto from = [](const ValueInfo& v) -> std::optional<std::vector<int64_t>> {
      if (!v.has_shape) return std::nullopt;
      std::vector<int64_t> d;
      for (const Dim& x : v.dims) d.push_back(x.IsStatic() ? x.value : -1);
      return d;
    };
    if (const ValueInfo* v = g_.FindInput(value)) return from(*v);
    auto vi = g_.value_info.find(value);
    if (vi != g_.value_info.end() && vi->second.has_shape) return from(vi->second);
    InferOnce();
    auto inf = inferred_.find(value);
    if (inf != inferred_.end()) return inf->second;
    return std::nullopt;
  }

  // ONNX shape inference over the model as it was loaded, for files that record no shapes.
  void InferOnce() {
    if (inferred_done_) return;
    inferred_done_ = true;
    try {
      onnx::ModelProto proto;
      ModelToProto(m_, &proto);
      onnx::shape_inference::InferShapes(proto);
      for (const auto& v : proto.graph().value_info()) {
        if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) continue;
        std::vector<int64_t> dims;
        for (const auto& d : v.type().tensor_type().shape().dim())
          dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
        inferred_[v.name()] = dims;
      }
    } catch (const std::exception&) {
      // The shapes stay unknown; the caller says which one it needed.
    }
  }

  std::vector<Node> RewriteSplit(size_t index) {
    const Node split_node = g_.nodes[index];
    const Node& n = split_node;
    if (!n.HasInput(0) || !n.HasOutput(0)) Refuse(n, "SplitToSequence needs an input and an output");
    const std::string& x = n.inputs[0];
    const std::string& seq = n.outputs[0];
    for (const auto& v : g_.outputs)
      if (v.name == seq) Refuse(n, "its sequence '" + seq + "' is a graph output; only tensors are supported");
    const int64_t axis = n.GetInt("axis", 0);
    const bool keepdims = n.GetInt("keepdims", 1) != 0;

    // The chunk sizes.
    std::vector<int64_t> sizes;
    auto axis_length = [&]() {
      std::optional<std::vector<int64_t>> dims = KnownDims(x);
      int64_t len = -1;
      if (dims) {
        const int64_t rank = static_cast<int64_t>(dims->size());
        if (axis < -rank || axis >= rank)
          throw Error(n.Describe() + ": axis " + std::to_string(axis) + " is out of range for the input '" + x +
                      "' of rank " + std::to_string(rank));
        len = (*dims)[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
      }
      if (len < 0)
        Refuse(n, "the length of axis " + std::to_string(axis) + " of its input '" + x +
                      "' is not static, so the number of chunks is not known when the model loads; export with that "
                      "dimension fixed or with split as a list of lengths");
      return len;
    };
    const bool has_split = n.HasInput(1);
    if (has_split) {
      bool scalar = false;
      std::optional<std::vector<int64_t>> split = StaticInts(n.inputs[1], &scalar);
      if (!split) Refuse(n, "its split input '" + n.inputs[1] + "' is not a constant integer tensor");
      if (scalar) {
        const int64_t chunk = split->at(0), len = axis_length();
        if (chunk <= 0) throw Error(n.Describe() + ": the chunk size " + std::to_string(chunk) + " must be positive");
        for (int64_t done = 0; done < len; done += chunk) sizes.push_back(std::min(chunk, len - done));
      } else {
        sizes = *split;
        for (int64_t s : sizes)
          if (s < 0) throw Error(n.Describe() + ": split has a negative length " + std::to_string(s));
      }
    } else {
      sizes.assign(static_cast<size_t>(axis_length()), 1);
    }
    const int64_t count = static_cast<int64_t>(sizes.size());
    if (count == 0) Refuse(n, "it makes an empty sequence (the axis has length 0)");
    const bool squeeze = !keepdims && !has_split;

    // Readers of the sequence: what each chunk is called.
    std::vector<std::string> chunk_names(static_cast<size_t>(count));  // the value each reader sees
    std::vector<Node> after;  // nodes after the Split (Squeeze, Identity, Concat, Constant)
    std::vector<const Node*> concats, lengths;
    std::vector<std::pair<int64_t, std::string>> extra_reads;  // a second reader of the same position
    auto it = readers_.find(seq);
    const std::vector<size_t> readers = it == readers_.end() ? std::vector<size_t>{} : it->second;
    for (size_t r : readers) {
      const Node& rd = g_.nodes[r];
      if (rd.NumInputs() > 0 && rd.inputs[0] != seq && std::count(rd.inputs.begin(), rd.inputs.end(), seq))
        Refuse(rd, "reads the sequence '" + seq + "' of " + n.Describe() + " as other than its first input");
      if (IsOp(rd, "SequenceAt")) {
        bool scalar = false;
        std::optional<std::vector<int64_t>> pos = rd.HasInput(1) ? StaticInts(rd.inputs[1], &scalar) : std::nullopt;
        if (!pos || pos->size() != 1)
          Refuse(rd, "its position '" + (rd.HasInput(1) ? rd.inputs[1] : std::string()) +
                         "' in the sequence of " + n.Describe() + " is not a constant integer");
        int64_t p = pos->at(0);
        if (p < -count || p >= count)
          throw Error(rd.Describe() + ": position " + std::to_string(p) + " is out of range for the " +
                      std::to_string(count) + " chunks of " + n.Describe());
        if (p < 0) p += count;
        std::string& name = chunk_names[static_cast<size_t>(p)];
        if (name.empty()) name = rd.outputs.at(0);
        else extra_reads.emplace_back(p, rd.outputs.at(0));
      } else if (IsOp(rd, "ConcatFromSequence")) {
        concats.push_back(&rd);
      } else if (IsOp(rd, "SequenceLength")) {
        lengths.push_back(&rd);
      } else {
        Refuse(rd, "reads the sequence '" + seq + "' of " + n.Describe() +
                       "; only SequenceAt at a constant position, ConcatFromSequence and SequenceLength may read it");
      }
      removed_.insert(r);
    }
    removed_.insert(index);
    // Every chunk needs a value when a ConcatFromSequence reads them all.
    const std::string base = seq.empty() ? "sequence" : seq;
    for (int64_t k = 0; k < count; ++k) {
      std::string& name = chunk_names[static_cast<size_t>(k)];
      if (name.empty()) name = Fresh(base + (concats.empty() ? "_unused_" : "_chunk_") + std::to_string(k));
    }
    const std::string prefix = n.name.empty() ? base : n.name;

    // The Split, its outputs squeezed where the sequence held squeezed chunks.
    Node split;
    split.name = prefix + "/Split";
    split.op_type = "Split";
    split.metadata = n.metadata;
    split.inputs = {x};
    split.SetInt("axis", axis);
    if (opset_ >= 13) split.inputs.push_back(ConstInt64s(sizes, base + "_split_sizes"));
    else split.SetInts("split", sizes);
    std::vector<Node> out;
    for (int64_t k = 0; k < count; ++k) {
      const std::string& name = chunk_names[static_cast<size_t>(k)];
      if (!squeeze) {
        split.outputs.push_back(name);
        continue;
      }
      const std::string raw = Fresh(name + "_unsqueezed");
      split.outputs.push_back(raw);
      Node sq;
      sq.name = prefix + "/Squeeze_" + std::to_string(k);
      sq.op_type = "Squeeze";
      sq.metadata = n.metadata;
      sq.inputs = {raw};
      sq.outputs = {name};
      if (opset_ >= 13) sq.inputs.push_back(ConstInt64s({axis}, base + "_squeeze_axes"));
      else sq.SetInts("axes", {axis});
      after.push_back(std::move(sq));
    }
    out.push_back(std::move(split));
    for (const auto& [p, y] : extra_reads) {
      Node id;
      id.name = prefix + "/Identity_" + y;
      id.op_type = "Identity";
      id.inputs = {chunk_names[static_cast<size_t>(p)]};
      id.outputs = {y};
      after.push_back(std::move(id));
    }
    for (const Node* c : concats) {
      if (!c->HasAttr("axis")) throw Error(c->Describe() + ": ConcatFromSequence needs the attribute axis");
      const int64_t cat_axis = c->GetInt("axis", 0);
      std::vector<std::string> parts = chunk_names;
      if (c->GetInt("new_axis", 0) != 0) {
        for (int64_t k = 0; k < count; ++k) {
          Node un;
          un.name = c->name + "/Unsqueeze_" + std::to_string(k);
          un.op_type = "Unsqueeze";
          un.metadata = c->metadata;
          un.inputs = {chunk_names[static_cast<size_t>(k)]};
          const std::string o = Fresh(chunk_names[static_cast<size_t>(k)] + "_stacked");
          un.outputs = {o};
          if (opset_ >= 13) un.inputs.push_back(ConstInt64s({cat_axis}, base + "_stack_axes"));
          else un.SetInts("axes", {cat_axis});
          parts[static_cast<size_t>(k)] = o;
          after.push_back(std::move(un));
        }
      }
      Node cat;
      cat.name = c->name;
      cat.op_type = "Concat";
      cat.metadata = c->metadata;
      cat.inputs = parts;
      cat.outputs = {c->outputs.at(0)};
      cat.SetInt("axis", cat_axis);
      after.push_back(std::move(cat));
    }
    for (const Node* l : lengths) {
      Node k;
      k.name = l->name;
      k.op_type = "Constant";
      k.metadata = l->metadata;
      k.outputs = {l->outputs.at(0)};
      k.SetTensor("value", HostTensor::FromVector<int64_t>({count}, {}));
      after.push_back(std::move(k));
    }
    for (Node& a : after) out.push_back(std::move(a));
    return out;
  }

  Model& m_;
  Graph& g_;
  int64_t opset_ = 1;
  std::map<std::string, size_t> producer_;
  std::map<std::string, std::vector<size_t>> readers_;
  std::set<std::string> names_;
  std::set<size_t> removed_;
  std::vector<HostTensor> new_initializers_;
  bool inferred_done_ = false;
  std::map<std::string, std::vector<int64_t>> inferred_;
};

}  // namespace

int RewriteSequenceOps(Model& model) { return SequenceRewriter(model).Run(); }

}  // namespace ot
