// The autodiff pass.
#include "graph/autodiff/autodiff.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "graph/exports/class_head.h"
#include "graph/error.h"
#include "graph/autodiff/gradient_registry.h"
#include "graph/passes/fusion.h"
#include "graph/passes/gather_hoist.h"
#include "graph/passes/param_patterns.h"
#include "graph/passes/rank_inference.h"

namespace ot {

namespace {

std::string GraphOutputList(const Graph& g) {
  std::string s;
  for (const auto& o : g.outputs) s += (s.empty() ? "" : ", ") + o.name;
  return s;
}

const ValueInfo* FindValue(const Graph& g, const std::string& name) {
  for (const auto& o : g.outputs) if (o.name == name) return &o;
  auto it = g.value_info.find(name);
  return it == g.value_info.end() ? nullptr : &it->second;
}

bool IsFloatType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kFloat64 || t == DType::kBFloat16;
}

// Ops whose outputs depend on their inputs' shapes only, or are indices, masks or counts:
// they never carry a gradient whatever their element type says.
bool HasNonDifferentiableOutputs(const Node& n) {
  static const std::set<std::string> kOps = {
      "Shape", "Size", "ArgMax", "ArgMin", "NonZero", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
      "Not", "And", "Or", "Xor", "IsNaN", "IsInf", "EyeLike", "RandomNormalLike", "RandomUniformLike",
      "Bernoulli", "Multinomial", "OneHot"};
  return n.domain.empty() && kOps.count(n.op_type) > 0;
}

// Which values can carry a gradient: floating-point values that are not produced by a
// shape, index, mask or comparison op. The element type comes from the graph's inputs,
// initializers, outputs and inferred value_info; where shape inference left it unknown,
// the value counts as differentiable unless its producer says otherwise (Cast's `to`,
// the index output of TopK and MaxPool, Dropout's mask).
class Differentiability {
 public:
  explicit Differentiability(const Graph& g) {
    for (const auto& v : g.inputs) types_[v.name] = v.dtype;
    for (const auto& t : g.initializers) types_[t.name] = t.dtype;
    for (const auto& [name, v] : g.value_info)
      if (v.dtype != DType::kUndefined) types_[name] = v.dtype;
    for (const auto& v : g.outputs)
      if (v.dtype != DType::kUndefined) types_[v.name] = v.dtype;
    for (const auto& n : g.nodes) {
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        const std::string& o = n.outputs[k];
        if (o.empty()) continue;
        bool index_output = n.domain.empty() && k == 1 &&
                            (n.op_type == "TopK" || n.op_type == "MaxPool" || n.op_type == "Dropout");
        bool int_cast = n.domain.empty() && n.op_type == "Cast" &&
                        !IsFloatType(static_cast<DType>(n.GetInt("to", 1)));
        if (HasNonDifferentiableOutputs(n) || index_output || int_cast) blocked_.insert(o);
        if (n.domain.empty() && n.op_type == "Cast" && TypeOf(o) == DType::kUndefined)
          types_[o] = static_cast<DType>(n.GetInt("to", 1));
      }
    }
  }
  bool Differentiable(const std::string& value) const {
    if (value.empty() || blocked_.count(value)) return false;
    auto it = types_.find(value);
    return it == types_.end() || it->second == DType::kUndefined || IsFloatType(it->second);
  }
  DType TypeOf(const std::string& value) const {
    auto it = types_.find(value);
    return it == types_.end() ? DType::kUndefined : it->second;
  }

 private:
  std::map<std::string, DType> types_;
  std::set<std::string> blocked_;
};

// Appends the nodes of an attached loss to a graph: constants, plain ops, and the Reduce*
// ops whose axes are an attribute or (ReduceSum from opset 13, ReduceMean from 18) an input.
class LossNodes {
 public:
  explicit LossNodes(Model& m) : m_(m), opset_(m.OpsetFor("")) {}
  int64_t opset() const { return opset_; }
  std::string Constant(const std::string& name, HostTensor value) {
    Node c;
    c.name = name;
    c.op_type = "Constant";
    c.outputs = {name};
    c.SetTensor("value", std::move(value));
    m_.graph.nodes.push_back(c);
    return name;
  }
  std::string Float(const std::string& name, float v) { return Constant(name, HostTensor::FromVector<float>({v}, {})); }
  Node* Add(const std::string& op, std::vector<std::string> inputs, const std::string& out) {
    Node n;
    n.name = out + "/" + op;
    n.op_type = op;
    n.inputs = std::move(inputs);
    n.outputs = {out};
    m_.graph.nodes.push_back(n);
    return &m_.graph.nodes.back();
  }
  // ReduceSum or ReduceMean over `axes` (all axes when empty), keepdims 0.
  void Reduce(const std::string& op, const std::string& in, const std::string& out, const std::vector<int64_t>& axes) {
    const bool axes_input = opset_ >= (op == "ReduceSum" ? 13 : 18);
    std::vector<std::string> inputs = {in};
    if (!axes.empty() && axes_input)
      inputs.push_back(Constant(out + "/axes", HostTensor::FromVector<int64_t>(axes, {static_cast<int64_t>(axes.size())})));
    Node* n = Add(op, inputs, out);
    n->SetInt("keepdims", 0);
    if (!axes.empty() && !axes_input) n->SetInts("axes", axes);
  }

 private:
  Model& m_;
  const int64_t opset_;
};

// Cross entropy (or, `nll`, the negative log-likelihood of log-probabilities) of the class
// scores `logits` [N, C, d...] against the class indices `labels` [N, d...], mean over the
// positions whose label is not `ignore_index`, as PyTorch's CrossEntropyLoss(ignore_index=,
// label_smoothing=eps) and NLLLoss, into the value `out`; value names start with `prefix`.
// Without smoothing one SoftmaxCrossEntropyLoss (NegativeLogLikelihoodLoss); with it, in
// ordinary ONNX nodes that have gradient rules,
//   out = (1 - eps) * nll - eps * sum(mean_c log p_c * kept) / sum(kept)
// with kept = (labels != ignore_index) as float: PyTorch's smoothing term for reduction
// 'mean' without weights, also over the positions not ignored.
void EmitCrossEntropy(Model& m, const std::string& logits, int rank, const std::string& labels, float eps,
                      int64_t ignore_index, bool nll, const std::string& prefix, const std::string& out) {
  Graph& g = m.graph;
  LossNodes b(m);
  const int64_t opset = b.opset();
  Node sce;
  sce.name = prefix + (nll ? "/NegativeLogLikelihoodLoss" : "/SoftmaxCrossEntropyLoss");
  sce.op_type = nll ? "NegativeLogLikelihoodLoss" : "SoftmaxCrossEntropyLoss";
  OT_CHECK(!nll || opset >= 12, "--loss nll needs an opset 12 or newer model (this one is %lld); re-export it with "
           "opset_version=12 or more", (long long)opset);
  if (opset < 12) {  // ONNX has the op from opset 12; older models get ours
    sce.domain = kGradDomain;
    m.opsets[kGradDomain] = 1;
  }
  sce.inputs = {logits, labels};
  sce.outputs = {eps > 0.f ? prefix + "/nll" : out};
  if (!nll) sce.outputs.push_back(prefix + "/log_prob");
  sce.SetString("reduction", "mean");
  sce.SetInt("ignore_index", ignore_index);
  g.nodes.push_back(sce);
  if (eps == 0.f) return;
  OT_CHECK(!nll, "label smoothing is CrossEntropyLoss's; PyTorch's NLLLoss has none: leave out --label-smoothing");
  // Before opset 13 LogSoftmax flattens from its axis on: right only for [N, C] logits.
  OT_CHECK(opset >= 13 || rank == 2,
           "label smoothing on logits of rank %d needs an opset 13 or newer model (this one is %lld); re-export it "
           "with opset_version=13 or more",
           rank, (long long)opset);
  b.Add("LogSoftmax", {logits}, prefix + "/smooth_log_prob")->SetInt("axis", 1);
  b.Reduce("ReduceMean", prefix + "/smooth_log_prob", prefix + "/smooth_class_mean", {1});
  const std::string ignore = b.Constant(prefix + "/ignore_index", HostTensor::FromVector<int64_t>({ignore_index}, {}));
  b.Add("Equal", {labels, ignore}, prefix + "/ignored");
  b.Add("Not", {prefix + "/ignored"}, prefix + "/kept_bool");
  b.Add("Cast", {prefix + "/kept_bool"}, prefix + "/kept")->SetInt("to", static_cast<int64_t>(DType::kFloat32));
  b.Add("Mul", {prefix + "/smooth_class_mean", prefix + "/kept"}, prefix + "/smooth_kept");
  b.Reduce("ReduceSum", prefix + "/smooth_kept", prefix + "/smooth_sum", {});
  b.Reduce("ReduceSum", prefix + "/kept", prefix + "/kept_count", {});
  b.Add("Div", {prefix + "/smooth_sum", prefix + "/kept_count"}, prefix + "/smooth_mean_log_prob");
  b.Add("Mul", {prefix + "/nll", b.Float(prefix + "/one_minus_eps", 1.f - eps)}, prefix + "/nll_scaled");
  b.Add("Mul", {prefix + "/smooth_mean_log_prob", b.Float(prefix + "/eps", eps)}, prefix + "/smooth_scaled");
  b.Add("Sub", {prefix + "/nll_scaled", prefix + "/smooth_scaled"}, out);
}

// The element-wise losses of `output` against float targets `labels` of its shape, mean
// over all elements, in ONNX ops with gradient rules (d = output - labels):
//   mse: d * d   l1: |d|   smooth-l1: |d| < beta ? 0.5 d^2 / beta : |d| - 0.5 beta
//   bce-with-logits: softplus(x) - x * y  (= -(y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))))
void EmitElementwiseLoss(Model& m, LossKind kind, const std::string& output, const std::string& labels, float beta,
                         const std::string& out) {
  LossNodes b(m);
  std::string element;
  if (kind == LossKind::kBceWithLogits) {
    b.Add("Softplus", {output}, "loss/softplus");
    b.Add("Mul", {output, labels}, "loss/output_times_target");
    element = b.Add("Sub", {"loss/softplus", "loss/output_times_target"}, "loss/element")->outputs[0];
  } else {
    b.Add("Sub", {output, labels}, "loss/diff");
    if (kind == LossKind::kMse) {
      element = b.Add("Mul", {"loss/diff", "loss/diff"}, "loss/element")->outputs[0];
    } else if (kind == LossKind::kL1 || beta == 0.f) {  // SmoothL1Loss(beta=0) is L1Loss
      element = b.Add("Abs", {"loss/diff"}, "loss/element")->outputs[0];
    } else {
      b.Add("Abs", {"loss/diff"}, "loss/abs_diff");
      b.Add("Less", {"loss/abs_diff", b.Float("loss/beta", beta)}, "loss/quadratic_part");
      b.Add("Mul", {"loss/diff", "loss/diff"}, "loss/square");
      b.Add("Mul", {"loss/square", b.Float("loss/half_over_beta", 0.5f / beta)}, "loss/quadratic");
      b.Add("Sub", {"loss/abs_diff", b.Float("loss/half_beta", 0.5f * beta)}, "loss/linear");
      element = b.Add("Where", {"loss/quadratic_part", "loss/quadratic", "loss/linear"}, "loss/element")->outputs[0];
    }
  }
  b.Reduce("ReduceMean", element, out, {});
}

// A Softmax or LogSoftmax over the last axis that produces the per-token scores `output`
// ([N, T, V]): its input, so that cross-entropy reads the scores before it; `output`
// itself otherwise. Throws ot::Error for one over another axis.
std::string PerTokenScores(const Model& m, const std::string& output) {
  for (const auto& n : m.graph.nodes) {
    if (n.outputs.empty() || n.outputs[0] != output || !n.domain.empty()) continue;
    if ((n.op_type != "Softmax" && n.op_type != "LogSoftmax") || !n.HasInput(0)) return output;
    const int64_t axis = n.GetInt("axis", m.OpsetFor("") < 13 ? 1 : -1);
    OT_CHECK(axis == -1 || axis == 2,
             "the model's output '%s' comes from %s over axis %lld, which is not the class axis 2 (the last) of "
             "per-token scores [N, T, V]; export the model without the final %s, or with it over dim -1",
             output.c_str(), n.Describe().c_str(), (long long)axis, n.op_type.c_str());
    return n.inputs[0];
  }
  return output;
}

// Attaches the loss options.loss asks for (cross-entropy when kAuto) to the first output
// (or options.logits_output); returns the loss name, and sets *labels to the labels input
// and tg's loss_kind and loss_input. With mixed targets the loss is lambda * CE(labels) +
// (1 - lambda) * CE(labels_b), with the inputs kMixLabelsInput and kMixLambdaInput: CE is
// linear in a soft target, so this equals CE against torchvision's mixed (smoothed) one-hot
// targets.
std::string AttachLoss(Model& m, const AutodiffOptions& options, std::string* labels, TrainingGraph* tg) {
  Graph& g = m.graph;
  OT_CHECK(!g.outputs.empty(), "the model has no outputs to attach a loss to");
  const LossKind kind = options.loss == LossKind::kAuto ? LossKind::kCrossEntropy : options.loss;
  const char* kind_name = LossKindName(kind);
  std::string logits = options.logits_output.empty() ? g.outputs[0].name : options.logits_output;
  const ValueInfo* out_info = FindValue(g, logits);
  const int out_rank = out_info && out_info->has_shape ? static_cast<int>(out_info->dims.size()) : -1;
  const float eps = options.label_smoothing;
  OT_CHECK(eps >= 0.f && eps < 1.f, "label smoothing %g is outside [0, 1); give a value such as 0.1", eps);
  OT_CHECK(eps == 0.f || kind == LossKind::kCrossEntropy,
           "label smoothing is cross-entropy's; --loss %s has none: leave out --label-smoothing", kind_name);
  OT_CHECK(!options.mixed_targets || kind == LossKind::kCrossEntropy,
           "Mixup and CutMix mix class labels for cross-entropy; --loss %s cannot use them: leave out --mixup-alpha "
           "and --cutmix-alpha", kind_name);
  tg->loss_kind = kind;
  ValueInfo lab;
  lab.name = options.labels_name;
  OT_CHECK(!g.FindInput(lab.name) && !g.FindInitializer(lab.name), "the model already has a value named '%s'",
           lab.name.c_str());
  ValueInfo loss;
  loss.name = "loss";
  loss.dtype = DType::kFloat32;
  loss.has_shape = true;

  if (!IsClassIndexLoss(kind)) {
    OT_CHECK(out_info, "cannot attach the loss: '%s' is not a value of the model; outputs are: %s", logits.c_str(),
             GraphOutputList(g).c_str());
    OT_CHECK(out_info->dtype == DType::kFloat32, "cannot attach --loss %s to '%s': it is %s, not float32", kind_name,
             logits.c_str(), DTypeName(out_info->dtype).c_str());
    OT_CHECK(options.smooth_l1_beta >= 0.f && std::isfinite(options.smooth_l1_beta),
             "--smooth-l1-beta %g must be 0 or more (PyTorch's default is 1.0)", options.smooth_l1_beta);
    lab.dtype = DType::kFloat32;
    lab.has_shape = out_info->has_shape;
    lab.dims = out_info->dims;
    g.inputs.push_back(lab);
    EmitElementwiseLoss(m, kind, logits, lab.name, options.smooth_l1_beta, "loss");
    g.outputs.insert(g.outputs.begin(), loss);
    *labels = lab.name;
    tg->loss_input = logits;
    return "loss";
  }

  // Class indices. Per-token scores [N, T, V] have their classes last; everything else,
  // [N, K, 1] (a 1x1-conv head) and a Conv1d's [N, C, L] included, on axis 1.
  const bool per_token = out_rank == 3 && ScoresHaveClassesLast(m, *out_info);
  if (kind == LossKind::kCrossEntropy) {
    if (per_token) {
      logits = PerTokenScores(m, logits);
    } else {
      // A final Softmax or LogSoftmax (zoo models): the loss reads the class scores before it.
      const ClassHead head = FindClassHead(m, logits);
      logits = head.scores;
      if (!head.activation.empty() && !FindValue(g, logits)) {
        ValueInfo scores;  // shape inference left it unknown
        scores.name = logits;
        scores.dtype = DType::kFloat32;
        g.value_info[logits] = scores;
      }
    }
  }
  if (per_token && !FindValue(g, logits)) {
    ValueInfo scores = *out_info;  // the Softmax's input has the output's shape
    scores.name = logits;
    g.value_info[logits] = scores;
  }
  tg->loss_input = logits;
  const ValueInfo* info = FindValue(g, logits);
  OT_CHECK(info, "cannot attach the loss: '%s' is not a value of the model; outputs are: %s", logits.c_str(),
           GraphOutputList(g).c_str());
  if (!per_token && HasUnitTrailingAxes(*info)) {
    // Class scores [N, K, 1, 1] (a 1x1-conv head) are read as [N, K]; labels [N].
    Node flatten;
    flatten.name = logits + "/class_scores/Flatten";
    flatten.op_type = "Flatten";
    flatten.inputs = {logits};
    flatten.outputs = {logits + "/class_scores"};
    flatten.SetInt("axis", 1);
    g.nodes.push_back(flatten);
    ValueInfo flat = *info;
    flat.name = flatten.outputs[0];
    flat.dims.resize(2);
    g.value_info[flat.name] = flat;
    logits = flat.name;
    info = &g.value_info[flat.name];
  }
  OT_CHECK(info->dtype == DType::kFloat32, "cannot attach the loss to '%s': it is %s, not float logits",
           logits.c_str(), DTypeName(info->dtype).c_str());
  OT_CHECK(!info->has_shape || info->dims.size() >= 2,
           "cannot attach the loss to '%s' of shape %s: logits need shape [N, C] or [N, C, d1, ...]", logits.c_str(),
           info->ShapeString().c_str());
  lab.dtype = DType::kInt64;
  if (info->has_shape) {
    lab.has_shape = true;
    lab.dims.push_back(info->dims[0]);
    if (per_token) lab.dims.push_back(info->dims[1]);
    else
      for (size_t d = 2; d < info->dims.size(); ++d) lab.dims.push_back(info->dims[d]);
  }
  int rank = info->has_shape ? static_cast<int>(info->dims.size()) : -1;
  // Per token: scores [N, T, V] -> [N*T, V] and labels [N, T] -> [N*T], one contiguous row of
  // classes per token (the mean over the tokens that count is the same). Transposed to
  // [N, V, T] instead, the loss kernels read each token's classes T apart: with GPT-2's
  // 50257-token vocabulary that loss took a third of the training step.
  const auto token_rows = [&](const std::string& labels) {
    if (!per_token) return labels;
    LossNodes b(m);
    const std::string shape = b.Constant(labels + "/token_rows/shape", HostTensor::FromVector<int64_t>({-1}, {1}));
    b.Add("Reshape", {labels, shape}, labels + "/token_rows");
    return labels + "/token_rows";
  };
  if (per_token) {
    Node f;
    f.name = "loss/token_rows/Flatten";
    f.op_type = "Flatten";
    f.inputs = {logits};
    f.outputs = {"loss/token_rows"};
    f.SetInt("axis", 2);
    g.nodes.push_back(f);
    logits = f.outputs[0];
    rank = 2;
  }
  g.inputs.push_back(lab);
  const bool nll = kind == LossKind::kNll;
  if (!options.mixed_targets) {
    EmitCrossEntropy(m, logits, rank, token_rows(lab.name), eps, options.ignore_index, nll, "loss", "loss");
  } else {
    ValueInfo lab_b = lab;
    lab_b.name = kMixLabelsInput;
    ValueInfo lambda;
    lambda.name = kMixLambdaInput;
    lambda.dtype = DType::kFloat32;
    lambda.has_shape = true;
    for (const ValueInfo* v : {&lab_b, &lambda})
      OT_CHECK(!g.FindInput(v->name) && !g.FindInitializer(v->name), "the model already has a value named '%s'",
               v->name.c_str());
    g.inputs.push_back(lab_b);
    g.inputs.push_back(lambda);
    EmitCrossEntropy(m, logits, rank, token_rows(lab.name), eps, options.ignore_index, nll, "loss/a", "loss/a/ce");
    EmitCrossEntropy(m, logits, rank, token_rows(lab_b.name), eps, options.ignore_index, nll, "loss/b", "loss/b/ce");
    // loss = ce_b + lambda * (ce_a - ce_b)
    for (auto [op, inputs, out] :
         std::vector<std::tuple<const char*, std::vector<std::string>, std::string>>{
             {"Sub", {"loss/a/ce", "loss/b/ce"}, "loss/mix_diff"},
             {"Mul", {"loss/mix_diff", lambda.name}, "loss/mix_scaled"},
             {"Add", {"loss/b/ce", "loss/mix_scaled"}, "loss"}}) {
      Node n;
      n.name = out + "/" + op;
      n.op_type = op;
      n.inputs = inputs;
      n.outputs = {out};
      g.nodes.push_back(n);
    }
  }
  g.outputs.insert(g.outputs.begin(), loss);
  *labels = lab.name;
  return "loss";
}

// True when a BatchNormalization node's running mean and variance are initializers (state
// that training updates); false for a normaliser over computed statistics.
bool IsRunningStatsState(const Graph& g, const Node& n) {
  return n.HasInput(3) && n.HasInput(4) && g.FindInitializer(n.inputs[3]) && g.FindInitializer(n.inputs[4]);
}

// The float value of `name` when it is a constant scalar (an initializer or a Constant
// node's value); NaN otherwise.
float ConstantScalar(const Graph& g, const std::string& name) {
  const Node* producer = nullptr;
  for (const auto& n : g.nodes)
    if (!n.outputs.empty() && n.outputs[0] == name) producer = &n;
  return g.StaticScalar(name, producer);
}

// A Dropout whose ratio is a constant 0 (torch exports nn.Dropout(0.0) and the dropout of
// torchvision's ViT so, in training mode) passes its input through unchanged; in training
// it would still copy it, write a mask and keep both alive until its gradient. Its
// consumers read its input instead (an Identity stays where its output is a graph
// output). A mask that something reads keeps the node.
void RemoveInertDropout(Model& m) {
  Graph& g = m.graph;
  std::set<std::string> consumed, graph_outputs;
  for (const auto& n : g.nodes)
    for (const auto& in : n.inputs) consumed.insert(in);
  for (const auto& o : g.outputs) graph_outputs.insert(o.name);
  std::vector<bool> inert(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op_type != "Dropout" || !n.domain.empty() || !n.HasInput(0) || n.outputs.empty()) continue;
    if (n.outputs.size() > 1 && !n.outputs[1].empty() &&
        (consumed.count(n.outputs[1]) || graph_outputs.count(n.outputs[1])))
      continue;  // the mask is read
    const float ratio = m.OpsetFor("") >= 12 ? (n.HasInput(1) ? ConstantScalar(g, n.inputs[1]) : 0.5f)
                                             : n.GetFloat("ratio", 0.5f);
    inert[i] = ratio == 0.f;
  }
  std::map<std::string, std::string> replace;  // Dropout output -> its input
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (!inert[i]) {
      kept.push_back(std::move(n));
      continue;
    }
    if (graph_outputs.count(n.outputs[0])) {
      Node id;
      id.name = n.name;
      id.op_type = "Identity";
      id.inputs = {n.inputs[0]};
      id.outputs = {n.outputs[0]};
      kept.push_back(std::move(id));
    } else {
      replace[n.outputs[0]] = n.inputs[0];
    }
  }
  for (auto& n : kept)
    for (auto& in : n.inputs)
      for (auto it = replace.find(in); it != replace.end(); it = replace.find(in)) in = it->second;
  g.nodes = std::move(kept);
}

// Puts BatchNormalization and Dropout into training mode for the training graph:
// BatchNormalization becomes kGradDomain's BatchNormTraining (Y, new running mean and
// variance, saved batch mean and variance; the last two feed the gradient), Dropout gets
// training_mode=true and its mask output.
void ConvertToTrainingMode(Model& m, TrainingGraph& tg) {
  Graph& g = m.graph;
  std::set<std::string> consumed;
  for (const auto& n : g.nodes)
    for (const auto& in : n.inputs) consumed.insert(in);
  for (auto& n : g.nodes) {
    if (!n.domain.empty()) continue;
    if (n.op_type == "BatchNormalization") {
      OT_CHECK(n.NumInputs() == 5, "%s: expected 5 inputs (X, scale, B, mean, var)", n.Describe().c_str());
      OT_CHECK(n.GetInt("spatial", 1) == 1, "%s: spatial=0 BatchNormalization cannot be trained", n.Describe().c_str());
      for (size_t k = 1; k < n.outputs.size(); ++k)
        OT_CHECK(n.outputs[k].empty() || !consumed.count(n.outputs[k]),
                 "%s: output '%s' is read by other nodes; onnx-train cannot train such a graph", n.Describe().c_str(),
                 n.outputs[k].c_str());
      // Running statistics that are not initializers (computed tensors, as torch exports
      // F.batch_norm(x, None, None, training=True) for weight standardisation) mean the
      // node is a plain normaliser: batch statistics, no state to update.
      const bool has_state = IsRunningStatsState(g, n);
      Node t;
      t.name = n.name;
      t.op_type = "BatchNormTraining";
      t.domain = kGradDomain;
      t.inputs = n.inputs;
      t.SetFloat("epsilon", n.GetFloat("epsilon", 1e-5f));
      t.SetFloat("momentum", n.GetFloat("momentum", 0.9f));
      // PyTorch's exports keep PyTorch's meaning: the running variance moves towards the
      // unbiased batch variance (the ONNX operator's reference uses the population one).
      if (m.producer_name == "pytorch") t.SetInt("unbiased_running_var", 1);
      const std::string& y = n.outputs[0];
      if (!has_state) {
        t.outputs = {y, y + "/batch_mean", y + "/batch_var", y + "/saved_mean", y + "/saved_var"};
        n = std::move(t);
        m.opsets[kGradDomain] = 1;
        continue;
      }
      t.outputs = {y, StateUpdateName(n.inputs[3]), StateUpdateName(n.inputs[4]), y + "/saved_mean", y + "/saved_var"};
      for (int k : {3, 4}) {
        const HostTensor* stat = g.FindInitializer(n.inputs[static_cast<size_t>(k)]);
        ValueInfo v;
        v.name = t.outputs[static_cast<size_t>(k - 2)];
        v.dtype = DType::kFloat32;
        v.has_shape = true;
        for (int64_t d : stat->dims) v.dims.push_back(Dim{d, ""});
        g.outputs.push_back(v);
        tg.state_updates.emplace_back(v.name, n.inputs[static_cast<size_t>(k)]);
      }
      n = std::move(t);
      m.opsets[kGradDomain] = 1;
    } else if (n.op_type == "Dropout") {
      if (m.OpsetFor("") >= 12) {
        if (n.inputs.size() < 2) n.inputs.resize(2);  // ratio stays default
        HostTensor on = HostTensor::FromVector<uint8_t>({1}, {}, n.name + "/training_mode");
        on.dtype = DType::kBool;
        g.initializers.push_back(on);
        n.inputs.resize(3);
        n.inputs[2] = on.name;
      } else {
        n.attrs.erase("is_test");
      }
      if (n.outputs.size() < 2 || n.outputs[1].empty()) {
        n.outputs.resize(2);
        n.outputs[1] = n.outputs[0] + "/mask";
      }
    }
  }
}

}  // namespace

Model DeriveEvalModel(const Model& model) {
  Model m = model;
  for (auto& n : m.graph.nodes) {
    if (!n.domain.empty()) continue;
    if (n.op_type == "BatchNormalization") {
      if (!IsRunningStatsState(m.graph, n)) continue;  // a normaliser keeps its batch statistics
      n.attrs.erase("training_mode");
      n.outputs.resize(1);
    } else if (n.op_type == "Dropout") {
      n.outputs.resize(1);
      if (n.inputs.size() > 2) n.inputs.resize(2);  // training_mode absent = false
      if (m.OpsetFor("") < 7) n.SetInt("is_test", 1);
    }
  }
  return m;
}

std::string StateUpdateName(const std::string& state) { return state + "/new"; }

std::vector<std::pair<std::string, std::string>> FindStateUpdates(const Model& model) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string suffix = "/new";
  for (const auto& o : model.graph.outputs) {
    if (o.name.size() <= suffix.size() || o.name.compare(o.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    std::string state = o.name.substr(0, o.name.size() - suffix.size());
    if (model.graph.FindInitializer(state)) out.emplace_back(o.name, state);
  }
  return out;
}

namespace {

// False for a float32 tensor holding an infinity or NaN (or without data to read).
bool AllFinite(const HostTensor& t) {
  if (t.bytes.size() != static_cast<size_t>(t.NumElements()) * sizeof(float)) return true;  // no data: unknown
  const float* v = t.Data<float>();
  for (int64_t i = 0; i < t.NumElements(); ++i)
    if (!std::isfinite(v[i])) return false;
  return true;
}

}  // namespace

bool IsExporterConstant(const Model& model, const HostTensor& t) {
  // PyTorch 2.x's dynamo exporter, optimizing, folds the graph's constants into
  // initializers named val_<n> or <name>_cast (a ReLU6's bounds, 1/sqrt(d), eps). A
  // module's parameters keep their dotted names; a folded transform of one (a Linear
  // weight transposed) is val_<n> too, but never a scalar.
  if (model.producer_name != "pytorch" || t.NumElements() > 1 || t.name.find('.') != std::string::npos) return false;
  const bool numbered = t.name.rfind("val_", 0) == 0 && t.name.size() > 4 &&
                        t.name.find_first_not_of("0123456789", 4) == std::string::npos;
  const bool cast = t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, "_cast") == 0;
  return numbered || cast;
}

std::vector<std::string> DefaultTrainableParams(const Model& model, const std::vector<std::string>& freeze,
                                                const std::vector<std::string>& train_only) {
  const std::vector<std::string> frozen = MatchInitializers(model.graph, freeze, "--freeze");
  std::set<std::string> excluded(frozen.begin(), frozen.end());
  if (!train_only.empty()) {
    const std::vector<std::string> kept = MatchInitializers(model.graph, train_only, "--train-only");
    const std::set<std::string> keep(kept.begin(), kept.end());
    for (const auto& t : model.graph.initializers)
      if (!keep.count(t.name)) excluded.insert(t.name);
  }
  for (const auto& n : model.graph.nodes)
    if (n.op_type == "BatchNormalization" && n.domain.empty())
      for (int i : {3, 4})
        if (n.HasInput(i)) excluded.insert(n.inputs[static_cast<size_t>(i)]);
  std::vector<std::string> out;
  for (const auto& t : model.graph.initializers)
    if (t.dtype == DType::kFloat32 && !excluded.count(t.name) && AllFinite(t) && !IsExporterConstant(model, t))
      out.push_back(t.name);
  return out;
}

namespace {
constexpr std::pair<LossKind, const char*> kLossNames[] = {
    {LossKind::kCrossEntropy, "cross-entropy"}, {LossKind::kNll, "nll"},         {LossKind::kMse, "mse"},
    {LossKind::kL1, "l1"},                      {LossKind::kSmoothL1, "smooth-l1"}, {LossKind::kBceWithLogits, "bce-with-logits"},
    {LossKind::kModel, "model"}};
}  // namespace

LossKind ParseLossKind(const std::string& name) {
  std::string names;
  for (const auto& [kind, n] : kLossNames) {
    if (name == n) return kind;
    names += (names.empty() ? "" : ", ") + std::string(n);
  }
  throw Error("unknown --loss '" + name + "'; choose one of " + names);
}

const char* LossKindName(LossKind kind) {
  for (const auto& [k, n] : kLossNames)
    if (k == kind) return n;
  return "cross-entropy";  // kAuto attaches cross-entropy
}

void CheckLabelsFit(const TrainingGraph& tg, DType dtype, const std::vector<int64_t>& dims) {
  if (tg.labels.empty()) return;
  const ValueInfo* lab = tg.model.graph.FindInput(tg.labels);
  if (!lab) return;
  const bool class_index = IsClassIndexLoss(tg.loss_kind);
  bool fits = class_index ? (dtype == DType::kInt64 || dtype == DType::kInt32) : dtype == DType::kFloat32;
  if (lab->has_shape) {
    fits = fits && dims.size() == lab->dims.size();
    for (size_t d = 0; fits && d < dims.size(); ++d)
      fits = d == 0 || !lab->dims[d].IsStatic() || lab->dims[d].value == dims[d];  // any batch size
  }
  if (fits) return;
  const std::string expected = lab->has_shape ? lab->ShapeString() : "[N, ...]";
  throw Error(StrFormat("the labels input '%s' does not fit --loss %s: it is %s%s, the loss needs %s%s (%s '%s')",
                        tg.labels.c_str(), LossKindName(tg.loss_kind), DTypeName(dtype).c_str(),
                        ShapeString(dims).c_str(), class_index ? "int64" : "float32", expected.c_str(),
                        class_index ? "class indices for the scores" : "shaped as the output", tg.loss_input.c_str()));
}

TrainingGraph BuildTrainingGraph(const Model& forward, const AutodiffOptions& options) {
  TrainingGraph tg;
  tg.model = forward;
  Model& m = tg.model;
  Graph& g = m.graph;

  // 1. The loss.
  const bool model_loss = options.loss == LossKind::kModel || !options.loss_output.empty();
  OT_CHECK(options.loss_output.empty() || options.loss == LossKind::kAuto || options.loss == LossKind::kModel,
           "--loss-output '%s' names the model's own loss, but --loss %s asks for an attached one; give one of them",
           options.loss_output.c_str(), LossKindName(options.loss));
  if (model_loss && !options.loss_output.empty()) {
    OT_CHECK(FindValue(g, options.loss_output) != nullptr && std::any_of(g.outputs.begin(), g.outputs.end(),
                                                                           [&](const ValueInfo& v) { return v.name == options.loss_output; }),
             "the loss output '%s' does not exist; the model's outputs are: %s", options.loss_output.c_str(),
             GraphOutputList(g).c_str());
    tg.loss = options.loss_output;
  } else if (model_loss) {
    for (const auto& o : g.outputs)
      if (tg.loss.empty() && o.has_shape && o.dims.empty() && o.dtype == DType::kFloat32) tg.loss = o.name;
    OT_CHECK(!tg.loss.empty(),
             "--loss model needs a float32 scalar output of the model to be the loss; its outputs are: %s",
             GraphOutputList(g).c_str());
  } else if (options.loss == LossKind::kAuto && !g.outputs.empty() && g.outputs[0].has_shape &&
             g.outputs[0].dims.empty() && g.outputs[0].dtype == DType::kFloat32) {
    tg.loss = g.outputs[0].name;  // the model ends in a scalar loss
  } else {
    tg.loss = AttachLoss(m, options, &tg.labels, &tg);
  }
  OT_CHECK(options.label_smoothing == 0.f || !tg.labels.empty(),
           "label smoothing applies to the loss onnx-train attaches, but the model has its own loss '%s'; leave out "
           "--label-smoothing or export the model without its loss",
           tg.loss.c_str());
  // The loss gradient needs SoftmaxCrossEntropyLoss's log_prob output.
  for (auto& n : g.nodes)
    if (n.op_type == "SoftmaxCrossEntropyLoss" && (n.domain.empty() || n.domain == kGradDomain) && !n.HasOutput(1)) {
      n.outputs.resize(2);
      n.outputs[1] = n.outputs[0] + "/log_prob";
    }

  RemoveInertDropout(m);
  if (options.fuse) {
    HoistPositionGathers(m);  // before the fusions: it moves the ops as exported
    FuseDecomposedOps(m, options.fuse_attention);
    FuseSilu(m);
  }
  ConvertToTrainingMode(m, tg);

  // 2. Trainable parameters.
  tg.params = DefaultTrainableParams(m, options.freeze, options.train_only);
  OT_CHECK(!tg.params.empty(), "the model has no trainable float initializers (nothing to train)%s",
           options.freeze.empty() && options.train_only.empty() ? ""
                                                               : "; --freeze or --train-only excluded all of them");

  // 3. Reachability: forward from the parameters through differentiable values (floating
  // point, not shapes, indices or masks; not through a rule's stop inputs), backward from
  // the loss. Shape arithmetic (Shape -> Gather -> Concat -> Reshape's shape input) is
  // thereby never on the path and needs no rule.
  const std::vector<size_t> order = g.TopologicalOrder();
  GradientRegistry& registry = GradientRegistry::Global();
  const Differentiability diff(g);
  std::set<std::string> from_params(tg.params.begin(), tg.params.end());
  auto stop_inputs = [&](const Node& n) -> std::set<int> {
    const GradientRuleDef* def = registry.Find(n.domain, n.op_type, m.OpsetFor(n.domain));
    return def ? std::set<int>(def->stop_gradient_inputs.begin(), def->stop_gradient_inputs.end()) : std::set<int>{};
  };
  std::vector<bool> active(g.nodes.size(), false);
  // Parameters that reach a value-dependent integer conversion (Cast to an integer type,
  // ArgMax, ...): named in the error when such a parameter gets no gradient at all.
  std::map<std::string, std::string> blocked_by;  // value -> the node that cut its gradient
  for (size_t idx : order) {
    const Node& n = g.nodes[idx];
    std::set<int> stops = stop_inputs(n);
    bool reads_param = false;
    for (int i = 0; i < n.NumInputs(); ++i)
      if (n.HasInput(i) && !stops.count(i) && from_params.count(n.inputs[static_cast<size_t>(i)])) reads_param = true;
    if (!reads_param) continue;
    bool any_out = false;
    for (const auto& o : n.outputs) {
      if (o.empty()) continue;
      if (diff.Differentiable(o)) {
        from_params.insert(o);
        any_out = true;
      } else if (n.op_type != "Shape" && n.op_type != "Size") {
        blocked_by[o] = n.Describe() + " (its output '" + o + "' is " + DTypeName(diff.TypeOf(o)) + ")";
      }
    }
    active[idx] = any_out;
  }
  // Values downstream of a cut keep the name of the cut, to explain a missing gradient.
  for (size_t idx : order) {
    const Node& n = g.nodes[idx];
    std::string why;
    for (const auto& in : n.inputs)
      if (!in.empty() && blocked_by.count(in)) why = blocked_by[in];
    if (why.empty()) continue;
    for (const auto& o : n.outputs)
      if (!o.empty() && !blocked_by.count(o) && !from_params.count(o)) blocked_by[o] = why;
  }
  if (!from_params.count(tg.loss)) {
    auto it = blocked_by.find(tg.loss);
    OT_CHECK(it == blocked_by.end(),
             "the loss '%s' depends on the trainable parameters only through %s, which carries no gradient; "
             "keep that path in floating point or freeze the parameters before it (--freeze)",
             tg.loss.c_str(), it == blocked_by.end() ? "" : it->second.c_str());
    throw Error("the loss '" + tg.loss + "' does not depend on any trainable parameter");
  }
  std::set<std::string> to_loss = {tg.loss};
  std::vector<size_t> on_path;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node& n = g.nodes[*it];
    bool feeds_loss = std::any_of(n.outputs.begin(), n.outputs.end(), [&](const std::string& o) {
      return to_loss.count(o) > 0 && from_params.count(o) > 0;
    });
    if (!feeds_loss || !active[*it]) continue;
    on_path.push_back(*it);  // reverse topological order
    for (const auto& in : n.inputs)
      if (!in.empty()) to_loss.insert(in);
  }
  // Missing rules, grouped by op type: "Clip (opset 13): 35 nodes, e.g. 'Clip_3', 'Clip_7'".
  std::map<std::string, std::vector<std::string>> missing;
  for (auto it = on_path.rbegin(); it != on_path.rend(); ++it) {  // forward order
    const Node& n = g.nodes[*it];
    if (!registry.Find(n.domain, n.op_type, m.OpsetFor(n.domain))) {
      std::string key = (n.domain.empty() ? "" : n.domain + ".") + n.op_type + " (opset " +
                        std::to_string(m.OpsetFor(n.domain)) + ")";
      missing[key].push_back(n.name.empty() ? "<unnamed>" : n.name);
    }
  }
  if (!missing.empty()) {
    size_t total = 0;
    for (const auto& [k, v] : missing) total += v.size();
    std::string msg = "no gradient rule for " + std::to_string(total) + " node(s) between the parameters and the loss: ";
    bool first = true;
    for (const auto& [op, names] : missing) {
      msg += (first ? "" : "; ") + op + ": " + std::to_string(names.size()) + (names.size() == 1 ? " node" : " nodes") +
             ", e.g. ";
      for (size_t i = 0; i < names.size() && i < 2; ++i) msg += (i ? ", '" : "'") + names[i] + "'";
      first = false;
    }
    throw Error(msg + ". Freeze the parameters before them (--freeze) or use supported ops.");
  }

  // 4. Reverse walk.
  std::map<std::string, std::vector<std::string>> grads;  // value -> partial gradients
  std::vector<Node> emitted;
  std::vector<HostTensor> constants;
  int counter = 0;
  HostTensor seed = HostTensor::FromVector<float>({1.f}, {}, tg.loss + "/grad_seed");
  constants.push_back(seed);
  grads[tg.loss].push_back(seed.name);
  auto sum_partials = [&](const std::string& value, const std::string& out_name) -> std::string {
    std::vector<std::string>& parts = grads[value];
    if (parts.empty()) return "";
    if (parts.size() == 1 && out_name.empty()) return parts[0];
    Node sum;
    sum.name = value + "/grad/Sum";
    sum.op_type = parts.size() == 1 ? "Identity" : "Sum";
    sum.inputs = parts;
    sum.outputs = {out_name.empty() ? value + "/grad" : out_name};
    emitted.push_back(sum);
    parts = {sum.outputs[0]};
    return sum.outputs[0];
  };
  const std::map<std::string, int> ranks = InferRanks(g, m.OpsetFor(""));
  for (size_t idx : on_path) {
    const Node& n = g.nodes[idx];
    const GradientRuleDef* def = registry.Find(n.domain, n.op_type, m.OpsetFor(n.domain));
    std::vector<std::string> go;
    bool any = false;
    for (const auto& o : n.outputs) {
      go.push_back(o.empty() ? "" : sum_partials(o, ""));
      any = any || !go.back().empty();
    }
    if (!any) continue;
    std::set<int> stops(def->stop_gradient_inputs.begin(), def->stop_gradient_inputs.end());
    std::vector<bool> need(n.inputs.size(), false);
    std::vector<std::string> gi(n.inputs.size());
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      need[i] = !n.inputs[i].empty() && !stops.count(static_cast<int>(i)) && from_params.count(n.inputs[i]) &&
                to_loss.count(n.inputs[i]);
      if (need[i]) gi[i] = n.inputs[i] + "/grad_from/" + (n.name.empty() ? n.op_type : n.name) + "_" + std::to_string(i);
    }
    size_t first_new = emitted.size();
    GradientBuilder builder(n, m.OpsetFor(n.domain), go, need, gi, &emitted, &constants, &counter);
    builder.SetGraph(&g);
    builder.SetRanks(&ranks);
    def->rule(builder);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (!need[i]) continue;
      bool written = false;
      for (size_t e = first_new; e < emitted.size(); ++e)
        for (const auto& o : emitted[e].outputs) written = written || o == gi[i];
      OT_CHECK(written, "internal error: the gradient rule of %s did not produce the gradient of input %zu",
               n.Describe().c_str(), i);
      grads[n.inputs[i]].push_back(gi[i]);
    }
  }

  // 5. Parameter gradients, named "<param>/grad".
  std::vector<std::string> kept;
  for (const auto& p : tg.params) {
    if (grads[p].empty()) continue;  // the loss does not depend on it
    std::string name = p + "/grad";
    std::vector<std::string>& parts = grads[p];
    if (parts.size() == 1) {
      // Rename the single partial at its producer instead of copying it.
      for (auto& e : emitted)
        for (auto& o : e.outputs)
          if (o == parts[0]) o = name;
      for (auto& e : emitted)
        for (auto& i : e.inputs)
          if (i == parts[0]) i = name;
    } else {
      sum_partials(p, name);
    }
    kept.push_back(p);
    tg.grads.push_back(name);
  }
  tg.params = kept;

  for (auto& e : emitted) {
    if (e.domain == kGradDomain) m.opsets[kGradDomain] = 1;
    g.nodes.push_back(std::move(e));
  }
  for (auto& c : constants) g.initializers.push_back(std::move(c));
  for (size_t i = 0; i < tg.params.size(); ++i) {
    const HostTensor* t = g.FindInitializer(tg.params[i]);
    ValueInfo v;
    v.name = tg.grads[i];
    v.dtype = t->dtype;
    v.has_shape = true;
    for (int64_t d : t->dims) v.dims.push_back(Dim{d, ""});
    g.outputs.push_back(v);
  }
  return tg;
}

}  // namespace ot
