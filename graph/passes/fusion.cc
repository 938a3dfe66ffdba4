#include "graph/passes/fusion.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/autodiff/gradient_registry.h"
#include "graph/op_domains.h"
#include "graph/passes/rank_inference.h"

namespace ot {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

class Fuser {
 public:
  explicit Fuser(Model& m) : m_(m), g_(m.graph) {
    for (const auto& o : g_.outputs) graph_outputs_.insert(o.name);
    Index();
  }

  FusionCounts Run(bool attention) {
    FusionCounts counts;
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (IsOp(g_.nodes[i], "Erf") && FuseGelu(i)) ++counts.gelu;
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (IsOp(g_.nodes[i], "Sqrt") && FuseLayerNorm(i)) ++counts.layer_norm;
    ranks_ = InferRanks(g_, m_.OpsetFor(""));
    for (size_t i = 0; i < g_.nodes.size() && attention; ++i)
      if (IsOp(g_.nodes[i], "Softmax") && FuseAttention(i)) ++counts.attention;
    Finish();
    return counts;
  }

  BatchNormReluFusion RunBatchNormRelu() {
    BatchNormReluFusion counts;
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (IsOp(g_.nodes[i], "BatchNormTraining", kGradDomain) && g_.nodes[i].GetInt("relu", 0) == 0)
        FuseBatchNormRelu(i, &counts);
    Finish();
    return counts;
  }

  int RunWeightTransposes() {
    int count = 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node& n = g_.nodes[i];
      if (removed_.count(i) || n.inputs.empty() || !n.HasOutput(0)) continue;
      const Node* p = ProducerNode(n.inputs[0]);
      if (!p || !IsOp(*p, "Transpose") || p->GetInts("perm") != std::vector<int64_t>{1, 0} || p->inputs.empty())
        continue;
      if (IsOp(n, "TransposeLastTwo", kGradDomain) && n.inputs.size() == 1) {
        // TransposeLastTwo(Transpose(W, [1, 0])) is W: a view of it.
        n.inputs[0] = p->inputs[0];
        n.op_type = "Identity";
        n.domain = "";
        n.attrs.clear();
        ++count;
      }
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      // Transpose(Gemm(A, B, transA=1), [1, 0]) is Gemm(B, A, transA=1): (A^T B)^T = B^T A.
      const Node& t = g_.nodes[i];
      if (removed_.count(i) || !IsOp(t, "Transpose") || t.GetInts("perm") != std::vector<int64_t>{1, 0} ||
          t.inputs.size() != 1 || !t.HasOutput(0))
        continue;
      auto it = producer_.find(t.inputs[0]);
      if (it == producer_.end() || removed_.count(it->second) || !Private(t.inputs[0])) continue;
      Node& gemm = g_.nodes[it->second];
      if (!IsOp(gemm, "Gemm") || gemm.inputs.size() != 2 || gemm.outputs.size() != 1 || gemm.GetInt("transA", 0) != 1 ||
          gemm.GetInt("transB", 0) != 0 || gemm.GetFloat("alpha", 1.f) != 1.f)
        continue;
      std::swap(gemm.inputs[0], gemm.inputs[1]);
      g_.value_info.erase(gemm.outputs[0]);
      gemm.outputs[0] = t.outputs[0];
      removed_.insert(i);
      ++count;
    }
    Finish();
    return count;
  }

  int RunMatMulBias() {
    int count = 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if ((IsOp(g_.nodes[i], "MatMul") && FuseMatMulBias(i)) || (IsOp(g_.nodes[i], "Gemm") && FuseGemmBias(i))) ++count;
    Finish();
    return count;
  }

  int RunAddRelu() {
    int count = 0;
    if (m_.OpsetFor("") >= 7)
      for (size_t i = 0; i < g_.nodes.size(); ++i)
        if (IsOp(g_.nodes[i], "Add") && FuseAddRelu(i)) ++count;
    Finish();
    return count;
  }

 private:
  // An `op` of `domain` ("": ai.onnx, either spelling).
  static bool IsOp(const Node& n, const char* op, const char* domain = "") {
    const bool same_domain = *domain ? n.domain == domain : IsOnnxDomain(n.domain);
    return same_domain && n.op_type == op;
  }

  // Drops the fused-away nodes (every fusion removes one); declares the org.onnxtrain opset.
  void Finish() {
    if (removed_.empty()) return;
    std::vector<Node> kept;
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (!removed_.count(i)) kept.push_back(std::move(g_.nodes[i]));
    g_.nodes = std::move(kept);
    if (!m_.opsets.count(kGradDomain)) m_.opsets[kGradDomain] = 1;
  }

  void Index() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      for (const auto& o : g_.nodes[i].outputs)
        if (!o.empty()) producer_[o] = i;
      for (const auto& in : g_.nodes[i].inputs)
        if (!in.empty()) readers_[in].push_back(i);
    }
  }

  // The node producing `v` when it is `op` and not yet fused away; -1 otherwise.
  long Producer(const std::string& v, const char* op) const {
    auto it = producer_.find(v);
    if (it == producer_.end() || removed_.count(it->second) || !IsOp(g_.nodes[it->second], op)) return -1;
    return static_cast<long>(it->second);
  }
  // The only reader of `v` when it is `op` of `domain` and `v` is no graph output; -1 otherwise.
  long SoleReader(const std::string& v, const char* op, const char* domain = "") const {
    auto it = readers_.find(v);
    if (graph_outputs_.count(v) || it == readers_.end() || it->second.size() != 1) return -1;
    const size_t r = it->second[0];
    return !removed_.count(r) && IsOp(g_.nodes[r], op, domain) ? static_cast<long>(r) : -1;
  }
  size_t Readers(const std::string& v) const {
    auto it = readers_.find(v);
    return it == readers_.end() ? 0 : it->second.size();
  }
  const Node* ProducerNode(const std::string& v) const {
    auto it = producer_.find(v);
    return it == producer_.end() ? nullptr : &g_.nodes[it->second];
  }
  float Scalar(const std::string& v) const { return g_.StaticScalar(v, ProducerNode(v)); }
  // The initializer behind `v`: itself, or through Identity nodes (PyTorch's export shares
  // initializers of equal values, so a second LayerNorm's fresh weight arrives as an
  // Identity of the first's); null when `v` is computed.
  const HostTensor* Parameter(const std::string& v) const {
    std::string name = v;
    for (int depth = 0; depth < 8; ++depth) {
      if (const HostTensor* t = g_.FindInitializer(name)) return t;
      const Node* p = ProducerNode(name);
      if (!p || !IsOp(*p, "Identity")) return nullptr;
      name = p->inputs[0];
    }
    return nullptr;
  }
  static bool Near(float v, double want) { return std::fabs(v - want) <= 1e-5 * std::fabs(want); }
  // The input of a binary node other than `v`; "" when `v` is not one of its two inputs.
  static std::string Other(const Node& n, const std::string& v) {
    if (n.inputs.size() != 2) return "";
    if (n.inputs[0] == v) return n.inputs[1];
    if (n.inputs[1] == v) return n.inputs[0];
    return "";
  }

  // Replaces node `last`'s place with `fused` (keeping the graph's topological order: all
  // its inputs exist before `last`) and removes the pattern's nodes.
  void Replace(const std::vector<size_t>& pattern, size_t last, Node fused) {
    for (size_t i : pattern)
      if (i != last) removed_.insert(i);
    g_.nodes[last] = std::move(fused);
  }

  // erf form, either association:
  //   y = Mul(Mul(x, Add(Erf(Div(x, sqrt2)), 1)), 0.5)      (torch.onnx's gelu)
  //   y = Mul(Mul(x, 0.5), Add(Erf(Div(x, sqrt2)), 1))      (x * 0.5 * (1 + erf(x / sqrt2)))
  // and Mul(x, 1/sqrt2) for the Div.
  bool FuseGelu(size_t erf) {
    const Node& e = g_.nodes[erf];
    long scale = Producer(e.inputs[0], "Div");
    std::string x;
    if (scale >= 0 && Near(Scalar(g_.nodes[scale].inputs[1]), std::sqrt(2.0))) {
      x = g_.nodes[scale].inputs[0];
    } else {
      scale = Producer(e.inputs[0], "Mul");
      if (scale < 0) return false;
      const Node& s = g_.nodes[scale];
      for (int k = 0; k < 2 && x.empty(); ++k)
        if (Near(Scalar(s.inputs[1 - k]), std::sqrt(0.5))) x = s.inputs[k];
      if (x.empty()) return false;
    }
    if (Readers(e.inputs[0]) != 1 || graph_outputs_.count(e.inputs[0])) return false;
    const long add = SoleReader(e.outputs[0], "Add");
    if (add < 0 || !Near(Scalar(Other(g_.nodes[add], e.outputs[0])), 1.0)) return false;
    const long mul1 = SoleReader(g_.nodes[add].outputs[0], "Mul");
    if (mul1 < 0) return false;
    const std::string other = Other(g_.nodes[mul1], g_.nodes[add].outputs[0]);
    std::vector<size_t> pattern = {static_cast<size_t>(scale), erf, static_cast<size_t>(add), static_cast<size_t>(mul1)};
    size_t last;
    if (other == x) {  // (x * (1 + erf)) * 0.5
      const long mul2 = SoleReader(g_.nodes[mul1].outputs[0], "Mul");
      if (mul2 < 0 || !Near(Scalar(Other(g_.nodes[mul2], g_.nodes[mul1].outputs[0])), 0.5)) return false;
      pattern.push_back(static_cast<size_t>(mul2));
      last = static_cast<size_t>(mul2);
    } else {  // (x * 0.5) * (1 + erf)
      const long half = Producer(other, "Mul");
      if (half < 0 || Readers(other) != 1 || graph_outputs_.count(other) ||
          !Near(Scalar(Other(g_.nodes[half], x)), 0.5))
        return false;
      pattern.push_back(static_cast<size_t>(half));
      last = static_cast<size_t>(mul1);
    }
    Node fused;
    fused.name = g_.nodes[last].name.empty() ? "Gelu_fused_" + std::to_string(erf) : g_.nodes[last].name + "/Gelu";
    fused.op_type = "Gelu";
    fused.domain = kGradDomain;
    fused.inputs = {x};
    fused.outputs = {g_.nodes[last].outputs[0]};
    Replace(pattern, last, std::move(fused));
    return true;
  }

  // ReduceMean axes of a node (attribute, or input 1 from opset 18) when all negative and
  // a contiguous suffix ending at -1; 0 otherwise, else the number of axes.
  int SuffixAxes(const Node& n) const {
    std::vector<int64_t> axes = n.GetInts("axes");
    if (!n.HasAttr("axes") && n.HasInput(1)) {
      const HostTensor* t = g_.FindStatic(n.inputs[1], ProducerNode(n.inputs[1]));
      if (!t) return 0;
      axes = t->AsInt64s();
    }
    if (axes.empty() || n.GetInt("keepdims", 1) == 0) return 0;
    std::set<int64_t> s(axes.begin(), axes.end());
    const int k = static_cast<int>(s.size());
    for (int i = 1; i <= k; ++i)
      if (!s.count(-i)) return 0;
    return k;
  }

  //   mean = ReduceMean(x, axes); d = Sub(x, mean); var = ReduceMean(Pow(d, 2), axes)
  //   y = Div(d, Sqrt(Add(var, eps))) [Mul(y, gamma) [Add(., beta)]]
  // with axes the last k (negative); gamma is required (LayerNormalization's Scale).
  bool FuseLayerNorm(size_t sqrt) {
    const Node& sq = g_.nodes[sqrt];
    const long add_eps = Producer(sq.inputs[0], "Add");
    if (add_eps < 0 || Readers(sq.inputs[0]) != 1) return false;
    const Node& ae = g_.nodes[add_eps];
    long var = -1;
    float eps = std::nanf("");
    for (int k = 0; k < 2 && var < 0; ++k) {
      var = Producer(ae.inputs[k], "ReduceMean");
      if (var >= 0) eps = Scalar(ae.inputs[1 - k]);
    }
    if (var < 0 || !(eps >= 0.f) || Readers(g_.nodes[var].outputs[0]) != 1) return false;
    const long pow = Producer(g_.nodes[var].inputs[0], "Pow");
    if (pow < 0 || Readers(g_.nodes[pow].outputs[0]) != 1 || Scalar(g_.nodes[pow].inputs[1]) != 2.f) return false;
    const std::string d = g_.nodes[pow].inputs[0];
    const long sub = Producer(d, "Sub");
    if (sub < 0 || Readers(d) != 2 || graph_outputs_.count(d)) return false;
    const std::string x = g_.nodes[sub].inputs[0];
    const long mean = Producer(g_.nodes[sub].inputs[1], "ReduceMean");
    if (mean < 0 || g_.nodes[mean].inputs[0] != x || Readers(g_.nodes[mean].outputs[0]) != 1) return false;
    const int k = SuffixAxes(g_.nodes[mean]);
    if (k == 0 || SuffixAxes(g_.nodes[var]) != k) return false;
    const long div = SoleReader(sq.outputs[0], "Div");
    if (div < 0 || g_.nodes[div].inputs[0] != d) return false;
    const long scale = SoleReader(g_.nodes[div].outputs[0], "Mul");
    if (scale < 0) return false;
    const std::string gamma = Other(g_.nodes[scale], g_.nodes[div].outputs[0]);
    const HostTensor* gamma_t = Parameter(gamma);
    if (!gamma_t) return false;
    std::vector<size_t> pattern = {static_cast<size_t>(mean), static_cast<size_t>(sub), static_cast<size_t>(pow),
                                   static_cast<size_t>(var), static_cast<size_t>(add_eps), sqrt,
                                   static_cast<size_t>(div), static_cast<size_t>(scale)};
    // Scale must be X's normalised shape (or broadcast to it with its own rank).
    if (static_cast<int>(gamma_t->dims.size()) > k) return false;
    size_t last = static_cast<size_t>(scale);
    std::string beta;
    const long bias = SoleReader(g_.nodes[scale].outputs[0], "Add");
    if (bias >= 0) {
      const std::string b = Other(g_.nodes[bias], g_.nodes[scale].outputs[0]);
      const HostTensor* bt = Parameter(b);
      if (bt && static_cast<int>(bt->dims.size()) <= k) {
        beta = b;
        pattern.push_back(static_cast<size_t>(bias));
        last = static_cast<size_t>(bias);
      }
    }
    Node fused;
    fused.name = g_.nodes[last].name.empty() ? "LayerNorm_fused_" + std::to_string(sqrt)
                                             : g_.nodes[last].name + "/LayerNormalization";
    fused.op_type = "LayerNormalization";
    fused.domain = kGradDomain;
    fused.inputs = {x, gamma};
    if (!beta.empty()) fused.inputs.push_back(beta);
    fused.outputs = {g_.nodes[last].outputs[0]};
    Attribute axis;
    axis.kind = Attribute::Kind::kInt;
    axis.i = -k;
    fused.attrs["axis"] = axis;
    Attribute epsilon;
    epsilon.kind = Attribute::Kind::kFloat;
    epsilon.f = eps;
    fused.attrs["epsilon"] = epsilon;
    Replace(pattern, last, std::move(fused));
    return true;
  }

  // BatchNormTraining(X, ...) -> Y; Relu(Y) -> Z, and where its gradient has that form,
  // ReluGrad(dZ, Z) -> dY; BatchNormalizationGrad(dY, X, ...): see fusion.h.
  void FuseBatchNormRelu(size_t i, BatchNormReluFusion* counts) {
    Node& bn = g_.nodes[i];
    if (!bn.HasOutput(0)) return;
    const long r = SoleReader(bn.outputs[0], "Relu");
    if (r < 0 || !g_.nodes[r].HasOutput(0)) return;
    const std::string z = g_.nodes[r].outputs[0];
    long rg = -1, bg = -1;
    auto z_readers = readers_.find(z);
    if (z_readers != readers_.end())
      for (size_t k : z_readers->second) {
        const Node& c = g_.nodes[k];
        if (!IsOp(c, "ReluGrad", kGradDomain) || c.inputs.size() != 2 || c.inputs[1] != z || !c.HasOutput(0))
          continue;
        const long b = SoleReader(c.outputs[0], "BatchNormalizationGrad", kGradDomain);
        if (b >= 0 && g_.nodes[b].GetInt("relu", 0) == 0 && g_.nodes[b].inputs.size() == 5 &&
            g_.nodes[b].inputs[0] == c.outputs[0] && bn.HasOutput(3) && g_.nodes[b].inputs[3] == bn.outputs[3]) {
          rg = static_cast<long>(k);
          bg = b;
          break;
        }
      }
    g_.value_info.erase(bn.outputs[0]);
    bn.outputs[0] = z;
    bn.SetInt("relu", 1);
    removed_.insert(static_cast<size_t>(r));
    ++counts->forward;
    if (rg < 0) return;
    std::string mask = z + "_relu_mask";
    for (int k = 1; producer_.count(mask) || readers_.count(mask) || g_.FindInitializer(mask); ++k)
      mask = z + "_relu_mask_" + std::to_string(k);
    producer_[mask] = i;
    bn.outputs.resize(6);
    bn.outputs[5] = mask;
    Node& grad = g_.nodes[bg];
    g_.value_info.erase(grad.inputs[0]);
    grad.inputs[0] = g_.nodes[rg].inputs[0];
    grad.inputs.push_back(mask);
    grad.SetInt("relu", 1);
    removed_.insert(static_cast<size_t>(rg));
    ++counts->backward;
  }

  // MatMul(A, W) -> Y; Add(Y, bias) -> Z becomes MatMulAdd(A, W, bias) -> Z where bias is a
  // float32 [N] initializer and W an initializer, or a Transpose or Cast of one (PyTorch's
  // Linear: MatMul(X, Transpose(weight)); --amp adds a Cast), whose product ends in N. Y may
  // have Shape readers besides the Add (the Add's gradient): they read Z, of Y's shape.
  bool FuseMatMulBias(size_t i) {
    Node& mm = g_.nodes[i];
    if (mm.inputs.size() != 2 || mm.inputs[0].empty() || mm.inputs[1].empty() || !mm.HasOutput(0) ||
        mm.outputs.size() != 1 || graph_outputs_.count(mm.outputs[0]))
      return false;
    auto it = readers_.find(mm.outputs[0]);
    if (it == readers_.end()) return false;
    long r = -1;
    std::vector<size_t> shapes;
    for (size_t k : it->second) {
      if (removed_.count(k)) return false;
      if (IsOp(g_.nodes[k], "Add") && r < 0) r = static_cast<long>(k);
      else if (IsOp(g_.nodes[k], "Shape")) shapes.push_back(k);
      else return false;
    }
    if (r < 0 || !g_.nodes[r].HasOutput(0)) return false;
    const Node& add = g_.nodes[r];
    if (add.inputs.size() != 2 || add.inputs[0] == add.inputs[1]) return false;
    const std::string bias = add.inputs[0] == mm.outputs[0] ? add.inputs[1] : add.inputs[0];
    const HostTensor* b = g_.FindInitializer(bias);
    if (!b || b->dtype != DType::kFloat32 || b->dims.size() != 1) return false;
    // N from W's initializer, through a Cast and a Transpose.
    std::string w = mm.inputs[1];
    std::vector<int64_t> perm;
    for (int depth = 0; depth < 3 && !g_.FindInitializer(w); ++depth) {
      const Node* p = ProducerNode(w);
      if (!p || p->inputs.empty()) return false;
      if (IsOp(*p, "Cast") && p->inputs.size() == 1) {
        w = p->inputs[0];
      } else if (IsOp(*p, "Transpose") && perm.empty()) {
        perm = p->GetInts("perm");
        w = p->inputs[0];
        if (perm.empty()) perm = {1, 0};
      } else {
        return false;
      }
    }
    const HostTensor* wt = g_.FindInitializer(w);
    if (!wt || wt->dims.size() != 2 || (!perm.empty() && perm != std::vector<int64_t>{1, 0})) return false;
    if (wt->dims[perm.empty() ? 1 : 0] != b->dims[0]) return false;
    const std::string z = add.outputs[0];
    g_.value_info.erase(mm.outputs[0]);
    for (size_t k : shapes) g_.nodes[k].inputs[0] = z;
    mm.inputs.push_back(bias);
    mm.outputs = {z};
    mm.op_type = "MatMulAdd";
    mm.domain = kGradDomain;
    removed_.insert(static_cast<size_t>(r));
    return true;
  }

  // The readers of v: one `op` node (returned, -1 if none or several) and Shape nodes (into *shapes).
  long OneReaderBesidesShapes(const std::string& v, const char* op, std::vector<size_t>* shapes,
                              const char* domain = "") const {
    auto it = readers_.find(v);
    if (graph_outputs_.count(v) || it == readers_.end()) return -1;
    long r = -1;
    for (size_t k : it->second) {
      if (removed_.count(k)) return -1;
      if (IsOp(g_.nodes[k], op, domain) && r < 0) r = static_cast<long>(k);
      else if (IsOp(g_.nodes[k], "Shape")) shapes->push_back(k);
      else return -1;
    }
    return r;
  }
  // The float32 [N] initializer that Add node `add` adds to `v`, N = n; empty if none.
  std::string BiasOf(const Node& add, const std::string& v, int64_t n) const {
    if (add.inputs.size() != 2 || add.inputs[0] == add.inputs[1] || !add.HasOutput(0)) return "";
    const std::string bias = add.inputs[0] == v ? add.inputs[1] : add.inputs[0];
    const HostTensor* b = g_.FindInitializer(bias);
    return b && b->dtype == DType::kFloat32 && b->dims == std::vector<int64_t>{n} ? bias : "";
  }
  // Gemm(A, W) -> P [; Reshape(P, s) -> Y]; Add(Y, bias) -> Z (graph/passes/fusion.h's
  // FoldTransposedWeights writes Linear layers so) becomes Gemm(A, W, bias) -> P [; Reshape(P, s)]
  // -> Z: the bias as Gemm's C ([N], broadcast over the rows), W an initializer or a Cast of one.
  // Where FuseAddRelu has made the Add an AddRelu (a feed-forward layer's linear1 and ReLU),
  // the Gemm becomes org.onnxtrain Gemm with relu=1: oneDNN applies the ReLU after the bias as
  // it writes the rows, and ReluGrad reads Z as before.
  bool FuseGemmBias(size_t i) {
    Node& gemm = g_.nodes[i];
    if (gemm.inputs.size() != 2 || gemm.inputs[0].empty() || gemm.inputs[1].empty() || !gemm.HasOutput(0) ||
        gemm.outputs.size() != 1 || gemm.GetFloat("beta", 1.f) != 1.f)
      return false;
    std::string w = gemm.inputs[1];
    if (const Node* cast = ProducerNode(w); cast && IsOp(*cast, "Cast") && cast->inputs.size() == 1) w = cast->inputs[0];
    const HostTensor* wt = g_.FindInitializer(w);
    if (!wt || wt->dims.size() != 2) return false;
    const int64_t n = wt->dims[gemm.GetInt("transB", 0) ? 0 : 1];
    std::vector<size_t> shapes_p, shapes_y;
    const std::string p = gemm.outputs[0];
    long reshape = OneReaderBesidesShapes(p, "Reshape", &shapes_p);
    std::string y = p;
    if (reshape >= 0) {
      if (g_.nodes[reshape].inputs.empty() || g_.nodes[reshape].inputs[0] != p || !g_.nodes[reshape].HasOutput(0))
        return false;
      y = g_.nodes[reshape].outputs[0];
    } else {
      shapes_p.clear();
    }
    long add = OneReaderBesidesShapes(y, "Add", &shapes_y);
    bool relu = false;
    if (add < 0) {
      shapes_y.clear();
      add = OneReaderBesidesShapes(y, "AddRelu", &shapes_y, kGradDomain);
      relu = add >= 0;
    }
    if (add < 0) return false;
    const std::string bias = BiasOf(g_.nodes[add], y, n);
    if (bias.empty()) return false;
    if (relu) {
      gemm.domain = kGradDomain;
      gemm.SetInt("relu", 1);
    }
    const std::string z = g_.nodes[add].outputs[0];
    for (size_t k : shapes_y) g_.nodes[k].inputs[0] = z;  // Y and Z have one shape
    g_.value_info.erase(y);
    gemm.inputs.push_back(bias);
    if (reshape >= 0) g_.nodes[reshape].outputs[0] = z;
    else gemm.outputs[0] = z;
    removed_.insert(static_cast<size_t>(add));
    return true;
  }

  // Add(A, B) -> Y; Relu(Y) -> Z becomes AddRelu(A, B) -> Z.
  bool FuseAddRelu(size_t i) {
    Node& add = g_.nodes[i];
    if (add.inputs.size() != 2 || add.inputs[0].empty() || add.inputs[1].empty() || !add.HasOutput(0)) return false;
    const long r = SoleReader(add.outputs[0], "Relu");
    if (r < 0 || !g_.nodes[r].HasOutput(0)) return false;
    g_.value_info.erase(add.outputs[0]);
    add.outputs = {g_.nodes[r].outputs[0]};
    add.op_type = "AddRelu";
    add.domain = kGradDomain;
    add.attrs.clear();
    removed_.insert(static_cast<size_t>(r));
    return true;
  }

  // One attention chain: the nodes it replaces, Q, K^T and V as the MatMuls read them
  // (after the scalings), the mask and the product of the scalar factors.
  struct AttentionMatch {
    std::vector<size_t> nodes;
    std::string q, kt, v, mask;
    bool mask_bool = false;
    double scale = 1;
    size_t qk = 0, mask_node = 0;  // slots of MatMul(Q, K^T) and of the Add / Where
  };

  // A value read by one node only and no graph output (free to rewrite).
  bool Private(const std::string& v) const { return Readers(v) == 1 && !graph_outputs_.count(v); }
  long LiveProducer(const std::string& v) const {
    auto it = producer_.find(v);
    return it == producer_.end() || removed_.count(it->second) ? -1 : static_cast<long>(it->second);
  }
  int Rank(const std::string& v) const {
    auto it = ranks_.find(v);
    return it == ranks_.end() ? -1 : it->second;
  }
  // A static scalar, of any number type, or a Cast of one to float (torch 1.13 writes
  // baddbmm's beta and alpha as Cast(Constant(1))); NaN otherwise.
  double Number(const std::string& v) const {
    const Node* p = ProducerNode(v);
    if (p && IsOp(*p, "Cast") && p->GetInt("to", 0) == static_cast<int64_t>(DType::kFloat32)) return Number(p->inputs[0]);
    const HostTensor* t = g_.FindStatic(v, p);
    if (t && t->NumElements() == 1 && (t->dtype == DType::kInt64 || t->dtype == DType::kInt32))
      return static_cast<double>(t->AsInt64s()[0]);
    return Scalar(v);
  }
  // Mul(x, c), Mul(c, x) or Div(x, c) with c a static scalar: x, and the factor (c or 1/c).
  bool ScalarFactor(const Node& n, std::string* x, double* factor) const {
    if (n.inputs.size() != 2 || !(IsOp(n, "Mul") || IsOp(n, "Div"))) return false;
    for (int k = 0; k < (IsOp(n, "Mul") ? 2 : 1); ++k) {
      const double c = Number(n.inputs[1 - k]);
      if (std::isfinite(c) && c != 0) {
        *x = n.inputs[k];
        *factor = IsOp(n, "Div") ? 1 / c : c;
        return true;
      }
    }
    return false;
  }
  // Peels scalar Mul/Div off `v` (a private value), multiplying them into a->scale.
  std::string Unscaled(std::string v, AttentionMatch* a) const {
    for (int depth = 0; depth < 4; ++depth) {
      const long p = LiveProducer(v);
      std::string x;
      double f = 1;
      if (p < 0 || !Private(v) || !ScalarFactor(g_.nodes[p], &x, &f)) break;
      a->scale *= f;
      a->nodes.push_back(static_cast<size_t>(p));
      v = x;
    }
    return v;
  }
  // From the Softmax's input back to MatMul(Q, K^T): the mask (Add, or Where(cond, ., -inf))
  // nearest the Softmax, scalar factors before it.
  bool MatchScores(std::string s, bool scaled, AttentionMatch* a) const {
    for (int depth = 0; depth < 8; ++depth) {
      const long p = LiveProducer(s);
      if (p < 0 || !Private(s)) return false;
      const Node& n = g_.nodes[p];
      const size_t i = static_cast<size_t>(p);
      std::string x;
      double f = 1;
      if (IsOp(n, "MatMul") && n.inputs.size() == 2) {
        a->nodes.push_back(i);
        a->qk = i;
        a->q = n.inputs[0];
        a->kt = n.inputs[1];
        return true;
      }
      if (ScalarFactor(n, &x, &f)) {
        a->scale *= f;
        a->nodes.push_back(i);
        s = x;
        scaled = true;
        continue;
      }
      if (!a->mask.empty() || scaled) return false;  // one mask, and not scaled after it
      if (IsOp(n, "Add") && n.inputs.size() == 2) {
        for (int k = 0; k < 2; ++k) {  // either side may be the scores
          AttentionMatch t = *a;
          t.mask = n.inputs[1 - k];
          t.mask_node = i;
          t.nodes.push_back(i);
          if (n.inputs[0] != n.inputs[1] && MatchScores(n.inputs[k], false, &t)) {
            *a = t;
            return true;
          }
        }
        return false;
      }
      if (IsOp(n, "Where") && n.inputs.size() == 3) {
        const double fill = Number(n.inputs[2]);
        if (!(std::isinf(fill) && fill < 0)) return false;
        a->mask = n.inputs[0];
        a->mask_bool = true;
        a->mask_node = i;
        a->nodes.push_back(i);
        s = n.inputs[1];
        continue;
      }
      return false;
    }
    return false;
  }
  // Unsqueeze's axes: the attribute (before opset 13) or a static input; empty if neither.
  std::vector<int64_t> UnsqueezeAxes(const Node& n) const {
    if (n.HasAttr("axes")) return n.GetInts("axes");
    const HostTensor* axes = n.HasInput(1) ? g_.FindStatic(n.inputs[1], ProducerNode(n.inputs[1])) : nullptr;
    return axes ? axes->AsInt64s() : std::vector<int64_t>{};
  }
  // The mask as a constant [.., T, T] with leading ones (through Mul by 1 and Unsqueeze at
  // axis 0) when it is exactly causal: additive 0 / -inf, or bool true / false.
  bool IsCausalMask(std::string v, bool bool_mask) const {
    const HostTensor* t = nullptr;
    for (int depth = 0; depth < 4 && !t; ++depth) {
      const Node* p = ProducerNode(v);
      t = g_.FindStatic(v, p);
      std::string x;
      double f = 0;
      if (t || !p) break;
      if (ScalarFactor(*p, &x, &f) && f == 1) v = x;
      else if (IsOp(*p, "Unsqueeze") && UnsqueezeAxes(*p) == std::vector<int64_t>{0}) v = p->inputs[0];
      else return false;
    }
    if (!t || t->dims.size() < 2) return false;
    const int64_t n = t->dims.back();
    if (t->dims[t->dims.size() - 2] != n || t->NumElements() != n * n) return false;
    if (bool_mask != (t->dtype == DType::kBool) || (!bool_mask && t->dtype != DType::kFloat32)) return false;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const bool keep = j <= i;
        if (bool_mask ? (t->Data<uint8_t>()[i * n + j] != 0) != keep
                      : (keep ? t->Data<float>()[i * n + j] != 0.f : t->Data<float>()[i * n + j] != kNegInf))
          return false;
      }
    return true;
  }
  // A fresh value name from `base`.
  std::string Fresh(const std::string& base) const {
    std::string v = base;
    for (int k = 1; producer_.count(v) || readers_.count(v) || g_.FindInitializer(v); ++k) v = base + "_" + std::to_string(k);
    return v;
  }

  // Softmax(scores) -> P; MatMul(P, V): see fusion.h.
  bool FuseAttention(size_t softmax) {
    const Node& sm = g_.nodes[softmax];
    if (sm.inputs.empty() || !sm.HasOutput(0) || sm.outputs.size() != 1) return false;
    const long pv = SoleReader(sm.outputs[0], "MatMul");
    if (pv < 0 || g_.nodes[pv].inputs.size() != 2 || g_.nodes[pv].inputs[0] != sm.outputs[0]) return false;
    AttentionMatch a;
    a.nodes = {softmax, static_cast<size_t>(pv)};
    if (!MatchScores(sm.inputs[0], false, &a)) return false;
    a.q = Unscaled(a.q, &a);
    a.kt = Unscaled(a.kt, &a);
    a.v = g_.nodes[pv].inputs[1];
    const int r = Rank(sm.inputs[0]);
    if ((r != 3 && r != 4) || Rank(a.q) != r || Rank(a.kt) != r || Rank(a.v) != r) return false;
    const int64_t axis = sm.GetInt("axis", m_.OpsetFor("") >= 13 ? -1 : 1);
    if (axis != -1 && axis != r - 1) return false;
    const int mask_rank = a.mask.empty() ? 0 : Rank(a.mask);
    if (!a.mask.empty() && (mask_rank < 1 || mask_rank > r)) return false;
    const bool causal = !a.mask.empty() && IsCausalMask(a.mask, a.mask_bool);

    const Node& out = g_.nodes[pv];
    Node fused;
    fused.name = out.name.empty() ? "Attention_fused_" + std::to_string(softmax) : out.name + "/Attention";
    fused.op_type = "Attention";
    fused.domain = kGradDomain;
    // Outputs 4 and 5, the row logsumexp and the probabilities where the kernel keeps them
    // (empty otherwise), are for the gradient (see its rule).
    fused.outputs = {out.outputs[0], "", "", "", Fresh(out.outputs[0] + "/logsumexp"), Fresh(out.outputs[0] + "/probs")};
    fused.SetFloat("scale", static_cast<float>(a.scale));
    if (r == 3) {  // [batch * heads, T, d]: one head of [batch, sequence, hidden]
      fused.SetInt("q_num_heads", 1);
      fused.SetInt("kv_num_heads", 1);
    }
    if (causal) fused.SetInt("is_causal", 1);
    else if (!a.mask.empty()) fused.SetInt("broadcast_mask", 1);
    for (size_t i : a.nodes)
      if (i != static_cast<size_t>(pv)) removed_.insert(i);

    // torch 1.13's nn.MultiheadAttention holds Q, K and V sequence-first ([T, n, d]) and
    // transposes them to [n, T, d] (K to [n, d, T]) for the products and Y back: the fused
    // node reads and writes the sequence-first tensors (sequence_first=1), no Transpose.
    if (r == 3) {
      const long tq = LiveProducer(a.q), tk = LiveProducer(a.kt), tv = LiveProducer(a.v);
      const long ty = SoleReader(out.outputs[0], "Transpose");
      auto transposes = [&](long i, const std::string& v, const std::vector<int64_t>& perm) {
        return i >= 0 && IsOp(g_.nodes[i], "Transpose") && Private(v) && g_.nodes[i].GetInts("perm") == perm;
      };
      if (transposes(tq, a.q, {1, 0, 2}) && transposes(tk, a.kt, {1, 2, 0}) && transposes(tv, a.v, {1, 0, 2}) &&
          ty >= 0 && g_.nodes[ty].GetInts("perm") == std::vector<int64_t>{1, 0, 2} && g_.nodes[ty].HasOutput(0)) {
        fused.inputs = {g_.nodes[tq].inputs[0], g_.nodes[tk].inputs[0], g_.nodes[tv].inputs[0]};
        fused.outputs[0] = g_.nodes[ty].outputs[0];
        fused.SetInt("sequence_first", 1);
        for (long i : {tq, tk, tv, ty}) removed_.insert(static_cast<size_t>(i));
      }
    }
    // K from K^T: change the permutation of a Transpose that only K^T reads, or transpose.
    std::vector<int64_t> swap_last(static_cast<size_t>(r));
    for (int d = 0; d < r; ++d) swap_last[static_cast<size_t>(d)] = d;
    std::swap(swap_last[static_cast<size_t>(r - 2)], swap_last[static_cast<size_t>(r - 1)]);
    std::string k = a.kt;
    const long kt = LiveProducer(a.kt);
    if (fused.GetInt("sequence_first", 0)) {
      // inputs set above
    } else if (kt >= 0 && IsOp(g_.nodes[kt], "Transpose") && Private(a.kt)) {
      Node& t = g_.nodes[kt];
      std::vector<int64_t> perm = t.GetInts("perm");
      if (perm.empty())
        for (int d = r - 1; d >= 0; --d) perm.push_back(d);
      if (static_cast<int>(perm.size()) != r) {
        Undo(a);
        return false;
      }
      std::swap(perm[static_cast<size_t>(r - 2)], perm[static_cast<size_t>(r - 1)]);
      t.SetInts("perm", perm);
      g_.value_info.erase(a.kt);
    } else {
      Node t;
      t.name = fused.name + "/K";
      t.op_type = "Transpose";
      t.inputs = {a.kt};
      k = Fresh(a.kt + "/untransposed");
      t.outputs = {k};
      t.SetInts("perm", swap_last);
      producer_[k] = a.qk;
      g_.nodes[a.qk] = std::move(t);
      removed_.erase(a.qk);
    }
    if (!fused.GetInt("sequence_first", 0)) fused.inputs = {a.q, k, a.v};
    if (!a.mask.empty() && !causal) {
      std::string mask = a.mask;
      if (r == 3 && mask_rank == 3) {  // [n, T, T] over [batch, heads = 1, T, T]: [n, 1, T, T]
        Node u;
        u.name = fused.name + "/mask";
        u.op_type = "Unsqueeze";
        mask = Fresh(a.mask + "/per_head");
        if (m_.OpsetFor("") >= 13) {
          const std::string axes = Fresh(mask + "/axes");
          g_.initializers.push_back(HostTensor::FromVector<int64_t>({1}, {1}, axes));
          u.inputs = {a.mask, axes};
        } else {
          u.inputs = {a.mask};
          u.SetInts("axes", {1});
        }
        u.outputs = {mask};
        producer_[mask] = a.mask_node;
        g_.nodes[a.mask_node] = std::move(u);
        removed_.erase(a.mask_node);
      }
      fused.inputs.push_back(mask);
    }
    g_.nodes[static_cast<size_t>(pv)] = std::move(fused);
    return true;
  }
  // Nothing has been rewritten yet: forget a match's removals.
  void Undo(const AttentionMatch& a) {
    for (size_t i : a.nodes) removed_.erase(i);
  }

  Model& m_;
  Graph& g_;
  std::map<std::string, int> ranks_;
  std::set<std::string> graph_outputs_;
  std::map<std::string, size_t> producer_;
  std::map<std::string, std::vector<size_t>> readers_;
  std::set<size_t> removed_;
};

}  // namespace

namespace {

// MatMul(A, Transpose(W, [1, 0])) with W two-dimensional: see fusion.h.
int FoldTransposedWeights(Model& m) {
  const int64_t opset = m.OpsetFor("");
  if (opset < 13) return 0;
  Graph& g = m.graph;
  const std::map<std::string, int> ranks = InferRanks(g, opset);
  auto rank = [&](const std::string& v) {
    if (const HostTensor* t = g.FindInitializer(v)) return static_cast<int>(t->dims.size());
    auto it = ranks.find(v);
    return it == ranks.end() ? -1 : it->second;
  };
  std::set<std::string> graph_outputs;
  for (const auto& o : g.outputs) graph_outputs.insert(o.name);
  std::map<std::string, std::vector<size_t>> readers;
  std::set<std::string> names;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty()) readers[in].push_back(i);
    for (const auto& o : g.nodes[i].outputs) names.insert(o);
  }
  auto fresh = [&](const std::string& base) {
    std::string v = base;
    for (int k = 1; names.count(v) || readers.count(v) || g.FindInitializer(v); ++k) v = base + "_" + std::to_string(k);
    names.insert(v);
    return v;
  };
  std::set<size_t> dropped;                          // the Transposes folded away
  std::map<size_t, std::vector<Node>> replacements;  // MatMul index -> the nodes in its place
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& t = g.nodes[i];
    if (!IsOnnxDomain(t.domain) || t.op_type != "Transpose" || t.inputs.size() != 1 || !t.HasOutput(0)) continue;
    const std::string& w = t.inputs[0];
    const std::string& wt = t.outputs[0];
    const std::vector<int64_t> perm = t.GetInts("perm");
    if (rank(w) != 2 || !(perm.empty() || perm == std::vector<int64_t>{1, 0}) || graph_outputs.count(wt)) continue;
    const auto it = readers.find(wt);
    if (it == readers.end()) continue;
    bool all = true;
    for (size_t r : it->second) {
      const Node& mm = g.nodes[r];
      if (!IsOnnxDomain(mm.domain) || mm.op_type != "MatMul" || mm.inputs.size() != 2 || mm.inputs[0] == wt ||
          mm.inputs[1] != wt || !mm.HasOutput(0) || rank(mm.inputs[0]) < 2 || replacements.count(r)) {
        all = false;
        break;
      }
    }
    if (!all) continue;
    for (size_t r : it->second) {
      const Node& mm = g.nodes[r];
      const std::string& a = mm.inputs[0];
      const std::string& y = mm.outputs[0];
      const int ra = rank(a);
      const std::string base = mm.name.empty() ? y : mm.name;
      std::vector<Node> out;
      auto add = [&](const std::string& op, std::vector<std::string> ins, const std::string& result) -> Node& {
        Node n;
        n.name = base + "/" + op;
        n.op_type = op;
        n.inputs = std::move(ins);
        n.outputs = {result};
        out.push_back(std::move(n));
        return out.back();
      };
      auto constant = [&](const std::string& what, int64_t v) {
        const std::string name = fresh(base + "/" + what);
        add("Constant", {}, name).SetTensor("value", HostTensor::FromVector<int64_t>({v}, {1}));
        out.back().name = name;
        return name;
      };
      if (ra == 2) {
        add("Gemm", {a, w}, y).SetInt("transB", 1);
      } else {  // [..., M, K] as [prod(...) * M, K], then the leading dims back
        const std::string flat = fresh(a + "/flat");
        add("Flatten", {a}, flat).SetInt("axis", ra - 1);
        const std::string product = fresh(y + "/rows");
        add("Gemm", {flat, w}, product).SetInt("transB", 1);
        const std::string shape = fresh(a + "/shape");
        add("Shape", {a}, shape);
        const std::string lead = fresh(a + "/leading");
        const std::string starts = constant("starts", 0), ends = constant("ends", ra - 1);
        add("Slice", {shape, starts, ends}, lead);
        const std::string minus_one = constant("columns", -1);
        const std::string target = fresh(y + "/shape");
        add("Concat", {lead, minus_one}, target).SetInt("axis", 0);
        add("Reshape", {product, target}, y);
      }
      replacements[r] = std::move(out);
    }
    dropped.insert(i);
    g.value_info.erase(wt);
  }
  if (dropped.empty()) return 0;
  std::vector<Node> nodes;
  int folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (dropped.count(i)) continue;
    auto r = replacements.find(i);
    if (r == replacements.end()) {
      nodes.push_back(std::move(g.nodes[i]));
      continue;
    }
    ++folded;
    for (Node& n : r->second) nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);
  return folded;
}

}  // namespace

FusionCounts FuseDecomposedOps(Model& m, bool attention) {
  FusionCounts counts = Fuser(m).Run(attention);
  counts.transposed_weights = FoldTransposedWeights(m);
  return counts;
}
BatchNormReluFusion FuseBatchNormRelu(Model& m) { return Fuser(m).RunBatchNormRelu(); }
int FuseAddRelu(Model& m) { return Fuser(m).RunAddRelu(); }
int FuseMatMulBias(Model& m) { return Fuser(m).RunMatMulBias(); }
int SimplifyWeightTransposes(Model& m) { return Fuser(m).RunWeightTransposes(); }

}  // namespace ot
