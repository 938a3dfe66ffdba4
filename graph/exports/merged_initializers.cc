// Parameters merged by the dynamo exporter's optimizer, taken apart (see merged_initializers.h).
#include "graph/exports/merged_initializers.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <unordered_map>
#include <utility>

#include "graph/error.h"

namespace ot {

namespace {

// onnx_ir's DeduplicateInitializersPass leaves larger tensors alone (its size_limit).
constexpr int64_t kMergeLimit = 1024;

bool IsFloating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat64;
}

// "val_<n>": a tensor the exporter's constant folding made (a transposed weight), owned by no
// module name.
bool IsFoldedName(const std::string& s) {
  return s.size() > 4 && s.rfind("val_", 0) == 0 && s.find_first_not_of("0123456789", 4) == std::string::npos;
}

// The module that ran `node` (the scope before its op name; "" for the model itself), or
// false when the exporter did not record it.
bool ModuleOf(const Node& node, std::string* module) {
  const std::vector<std::string> scopes = NameScopes(node);
  if (scopes.empty()) return false;
  *module = scopes.size() >= 2 ? scopes[scopes.size() - 2] : "";
  return true;
}

bool Within(const std::string& module, const std::string& owner) {
  return owner.empty() || module == owner || module.rfind(owner + ".", 0) == 0;
}

size_t Depth(const std::string& module) {
  return module.empty() ? 0 : 1 + static_cast<size_t>(std::count(module.begin(), module.end(), '.'));
}

std::string Join(const std::string& module, const std::string& rest) { return module.empty() ? rest : module + "." + rest; }

// The name module `other` gives the parameter that `name` (owned by `owner`, last component
// `leaf`) is for `keeper`, the module on the owner's line that read it: the same path below
// (encoder.layers.0.self_attn reads encoder.layers.0.self_attn.out_proj.weight, so
// encoder.layers.1.self_attn's is encoder.layers.1.self_attn.out_proj.weight) or above it.
// `owner` "" for a folded val_<n>: `other`'s module path then prefixes the name.
std::string CopyName(const std::string& name, const std::string& owner, const std::string& leaf,
                     const std::string& keeper, const std::string& other) {
  if (owner.empty() || !(Within(owner, keeper) || Within(keeper, owner))) return Join(other, leaf);
  if (Within(owner, keeper)) return Join(other, keeper.empty() ? name : name.substr(keeper.size() + 1));
  const size_t up = Depth(keeper) - Depth(owner);  // the owner is `up` modules above the keeper
  if (Depth(other) < up) return Join(other, leaf);
  std::string base = other;
  for (size_t k = 0; k < up; ++k) {
    const size_t dot = base.rfind('.');
    base = dot == std::string::npos ? "" : base.substr(0, dot);
  }
  return Join(base, leaf);
}


// The exporter's FX form of a name: "p_" and the dotted path with underscores.
std::string Placeholder(const std::string& name) {
  std::string p = "p_" + name;
  std::replace(p.begin(), p.end(), '.', '_');
  return p;
}

// The parameters (%p_...) that the FX node an ONNX node came from read (its metadata
// pkg.torch.onnx.fx_node: "%linear_7 : [...] = call_function[...](args = (%gelu_1,
// %p_encoder_layers_1_linear2_weight, %p_encoder_layers_1_linear2_bias), ...)").
std::vector<std::string> FxParameters(const Node& node) {
  std::vector<std::string> out;
  auto it = node.metadata.find("pkg.torch.onnx.fx_node");
  if (it == node.metadata.end()) return out;
  const std::string& s = it->second;
  for (size_t at = s.find("%p_"); at != std::string::npos; at = s.find("%p_", at + 1)) {
    size_t end = at + 1;
    while (end < s.size() && (std::isalnum(static_cast<unsigned char>(s[end])) || s[end] == '_')) ++end;
    out.push_back(s.substr(at + 1, end - at - 1));
  }
  return out;
}

// The copy's name checked against what the readers' FX nodes read: `guess` when one of them
// read it; else the parameter among them ending in `leaf` spelled with the longest known
// module path (a module's own parameter read by its parent: nn.MultiheadAttention reads
// out_proj.bias); else `guess`.
std::string ConfirmedName(const std::string& guess, const std::string& leaf, const std::vector<std::string>& read,
                          const std::set<std::string>& modules) {
  if (std::find(read.begin(), read.end(), Placeholder(guess)) != read.end()) return guess;
  std::string best;
  for (const std::string& p : read) {
    if (p.size() <= leaf.size() + 1 || p.compare(p.size() - leaf.size() - 1, std::string::npos, "_" + leaf) != 0) continue;
    const std::string module_part = p.substr(0, p.size() - leaf.size() - 1);
    for (const std::string& m : modules)
      if (Placeholder(m) == module_part && m.size() + leaf.size() + 1 > best.size()) best = m + "." + leaf;
  }
  return best.empty() ? guess : best;
}

}  // namespace

std::vector<std::string> NameScopes(const Node& node) {
  auto it = node.metadata.find("pkg.torch.onnx.name_scopes");
  if (it == node.metadata.end()) return {};
  std::vector<std::string> scopes;
  const std::string& s = it->second;
  for (size_t open = s.find('\''); open != std::string::npos; open = s.find('\'', open + 1)) {
    const size_t close = s.find('\'', open + 1);
    if (close == std::string::npos) break;
    scopes.push_back(s.substr(open + 1, close - open - 1));
    open = close;
  }
  return scopes;
}

std::string MergedInitializersReport::Describe() const {
  if (merged == 0) return "";
  return StrFormat("PyTorch's dynamo exporter (optimize=True) had merged %d small parameter tensor%s with equal values "
                   "that different modules own (a fresh model's LayerNorm weights and biases, layers made by "
                   "copy.deepcopy); each module trains its own again: %zu restored under their module's names (%s). "
                   "Export with optimize=False to keep every parameter as it is",
                   merged, merged == 1 ? "" : "s", restored.size(), FirstNames(restored).c_str());
}

MergedInitializersReport SeparateMergedInitializers(Model& model) {
  MergedInitializersReport report;
  if (model.producer_name != "pytorch") return report;
  Graph& g = model.graph;
  std::unordered_map<std::string, std::vector<std::pair<size_t, size_t>>> readers;  // node, input slot
  std::set<std::string> taken;
  for (const auto& t : g.initializers) taken.insert(t.name);
  for (const auto& v : g.inputs) taken.insert(v.name);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (size_t k = 0; k < g.nodes[i].inputs.size(); ++k)
      if (!g.nodes[i].inputs[k].empty()) readers[g.nodes[i].inputs[k]].emplace_back(i, k);
    for (const auto& o : g.nodes[i].outputs) taken.insert(o);
  }
  std::set<std::string> paths;  // module paths: of the initializers' names and of the recorded scopes
  auto add_paths = [&paths](std::string path) {
    for (size_t dot; !path.empty(); path = (dot = path.rfind('.')) == std::string::npos ? "" : path.substr(0, dot))
      paths.insert(path);
  };
  for (const auto& t : g.initializers)
    if (t.name.find('.') != std::string::npos) add_paths(t.name.substr(0, t.name.rfind('.')));
  for (const auto& n : g.nodes)
    for (const auto& scope : NameScopes(n)) add_paths(scope);
  std::set<std::string> outputs;
  for (const auto& o : g.outputs) outputs.insert(o.name);

  std::vector<HostTensor> copies;
  for (const HostTensor& t : g.initializers) {
    if (!IsFloating(t.dtype) || t.NumElements() > kMergeLimit || outputs.count(t.name)) continue;
    const bool folded = IsFoldedName(t.name);
    if (folded && t.NumElements() <= 1) continue;  // the exporter's scalar constants stay constants
    auto it = readers.find(t.name);
    if (it == readers.end() || it->second.size() < 2) continue;
    // Readers by module, in graph order; all must say which module ran them.
    std::vector<std::pair<std::string, std::vector<std::pair<size_t, size_t>>>> modules;
    bool known = true;
    for (const auto& r : it->second) {
      std::string m;
      if (!ModuleOf(g.nodes[r.first], &m)) {
        known = false;
        break;
      }
      auto found = std::find_if(modules.begin(), modules.end(), [&](const auto& e) { return e.first == m; });
      if (found == modules.end()) {
        modules.push_back({m, {}});
        found = modules.end() - 1;
      }
      found->second.push_back(r);
    }
    if (!known || modules.size() < 2) continue;
    const size_t dot = t.name.rfind('.');
    const std::string owner = dot == std::string::npos ? "" : t.name.substr(0, dot);
    const std::string leaf = dot == std::string::npos ? t.name : t.name.substr(dot + 1);
    // Modules on the owner's line (the owner, its submodules, the modules above it: nn.MultiheadAttention
    // reads its out_proj's weight itself) keep the tensor; the first of them names the others' copies.
    std::vector<bool> keeps(modules.size(), false);
    size_t keeper = modules.size();
    for (size_t i = 0; i < modules.size() && !folded; ++i) {
      keeps[i] = Within(modules[i].first, owner) || Within(owner, modules[i].first);
      if (keeps[i] && keeper == modules.size()) keeper = i;
    }
    if (keeper == modules.size()) keeps[keeper = 0] = true;
    int made = 0;
    for (size_t i = 0; i < modules.size(); ++i) {
      if (keeps[i]) continue;
      std::string base = CopyName(t.name, folded ? "" : owner, leaf, modules[keeper].first, modules[i].first);
      if (!folded) {
        std::vector<std::string> read;
        for (const auto& r : modules[i].second) {
          const std::vector<std::string> p = FxParameters(g.nodes[r.first]);
          read.insert(read.end(), p.begin(), p.end());
        }
        base = ConfirmedName(base, leaf, read, paths);
      }
      std::string name = base;
      for (int k = 1; taken.count(name); ++k) name = base + "_" + std::to_string(k);
      taken.insert(name);
      HostTensor copy = t;
      copy.name = name;
      copies.push_back(std::move(copy));
      for (const auto& r : modules[i].second) g.nodes[r.first].inputs[r.second] = name;
      report.restored.push_back(name);
      ++made;
    }
    if (made > 0) ++report.merged;
  }
  for (auto& c : copies) g.initializers.push_back(std::move(c));
  return report;
}

}  // namespace ot
