// Attribute reading and input checks of LSTM, GRU and RNN (see rnn_shapes.h).
#include "runtime/ops/shapes/rnn_shapes.h"

#include <algorithm>
#include <cctype>

#include "graph/error.h"

namespace ot {
namespace {

const char* CellName(RnnCell cell) {
  switch (cell) {
    case RnnCell::kLSTM: return "LSTM";
    case RnnCell::kGRU: return "GRU";
    case RnnCell::kRNN: return "RNN";
  }
  return "?";
}

struct ActivationInfo {
  const char* name;
  RnnActivationKind kind;
  bool uses_alpha, uses_beta;
  float alpha, beta;  // defaults
};

const ActivationInfo kActivations[] = {
    {"sigmoid", RnnActivationKind::kSigmoid, false, false, 0.f, 0.f},
    {"tanh", RnnActivationKind::kTanh, false, false, 0.f, 0.f},
    {"relu", RnnActivationKind::kRelu, false, false, 0.f, 0.f},
    {"leakyrelu", RnnActivationKind::kLeakyRelu, true, false, 0.01f, 0.f},
    {"thresholdedrelu", RnnActivationKind::kThresholdedRelu, true, false, 1.f, 0.f},
    {"scaledtanh", RnnActivationKind::kScaledTanh, true, true, 1.f, 1.f},
    {"hardsigmoid", RnnActivationKind::kHardSigmoid, true, true, 0.2f, 0.5f},
    {"elu", RnnActivationKind::kElu, true, false, 1.f, 0.f},
    {"softsign", RnnActivationKind::kSoftsign, false, false, 0.f, 0.f},
    {"softplus", RnnActivationKind::kSoftplus, false, false, 0.f, 0.f},
    {"affine", RnnActivationKind::kAffine, true, true, 1.f, 0.f},
};

// The activations of every direction; alpha and beta lists are consumed in order by the
// functions that take them.
// "LSTM (opset 14) node 'name': " for errors about what this build does not support.
std::string UnsupportedPrefix(const Node& node, RnnCell cell, int64_t opset) {
  return std::string(CellName(cell)) + " (opset " + std::to_string(opset) + ") node '" + node.name + "': ";
}

std::vector<RnnActivation> ReadActivations(const Node& node, RnnCell cell, int64_t opset, int per_dir, int64_t dirs) {
  std::vector<std::string> names;
  auto it = node.attrs.find("activations");
  if (it != node.attrs.end()) names = it->second.strings;
  if (names.empty()) {
    const std::vector<std::string> defaults =
        cell == RnnCell::kLSTM ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
        : cell == RnnCell::kGRU ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                : std::vector<std::string>{"Tanh"};
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  } else if (static_cast<int64_t>(names.size()) == per_dir && dirs == 2) {
    std::vector<std::string> twice = names;
    names.insert(names.end(), twice.begin(), twice.end());
  }
  if (static_cast<int64_t>(names.size()) != per_dir * dirs)
    throw Error(node.Describe() + ": " + std::to_string(names.size()) + " activations given, " +
                std::to_string(per_dir * dirs) + " expected (" + std::to_string(per_dir) + " per direction)");
  const std::vector<float> alphas = node.GetFloats("activation_alpha");
  const std::vector<float> betas = node.GetFloats("activation_beta");
  size_t ai = 0, bi = 0;
  std::vector<RnnActivation> out;
  for (const std::string& name : names) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    const ActivationInfo* info = nullptr;
    for (const ActivationInfo& a : kActivations)
      if (lower == a.name) info = &a;
    if (!info)
      throw UnsupportedError(UnsupportedPrefix(node, cell, opset) + "activation '" + name +
                             "' is not supported (Sigmoid, Tanh, Relu, LeakyRelu, ThresholdedRelu, ScaledTanh, "
                             "HardSigmoid, Elu, Softsign, Softplus, Affine are)");
    RnnActivation a{info->kind, info->alpha, info->beta};
    if (info->uses_alpha && ai < alphas.size()) a.alpha = alphas[ai++];
    if (info->uses_beta && bi < betas.size()) a.beta = betas[bi++];
    out.push_back(a);
  }
  return out;
}

bool Present(const KernelContext& ctx, int i) { return ctx.OptionalInput(i) != nullptr; }

}  // namespace

int RnnNumForwardInputs(RnnCell cell) { return cell == RnnCell::kLSTM ? 8 : 6; }

RnnSpec PlanRnn(const Node& node, RnnCell cell, int64_t opset, const KernelContext& ctx) {
  RnnSpec s;
  s.cell = cell;
  s.gates = cell == RnnCell::kLSTM ? 4 : cell == RnnCell::kGRU ? 3 : 1;
  s.acts_per_dir = cell == RnnCell::kLSTM ? 3 : cell == RnnCell::kGRU ? 2 : 1;
  const std::string where = node.Describe() + ": ";
  const std::string direction = node.GetString("direction", "forward");
  if (direction == "bidirectional") {
    s.dirs = 2;
  } else if (direction == "reverse") {
    s.reverse = true;
  } else if (direction != "forward") {
    throw Error(where + "direction '" + direction + "' is not forward, reverse or bidirectional");
  }
  s.layout = node.GetInt("layout", 0);
  if (s.layout != 0 && s.layout != 1) throw Error(where + "layout " + std::to_string(s.layout) + " is not 0 or 1");
  s.input_forget = cell == RnnCell::kLSTM && node.GetInt("input_forget", 0) != 0;
  if (node.HasAttr("clip")) {
    s.has_clip = true;
    s.clip = node.GetFloat("clip", 0.f);
    if (!(s.clip > 0.f)) throw Error(where + "clip must be positive");
  }
  s.linear_before_reset = cell == RnnCell::kGRU && node.GetInt("linear_before_reset", 0) != 0;
  s.acts = ReadActivations(node, cell, opset, s.acts_per_dir, s.dirs);

  const int n_in = RnnNumForwardInputs(cell);
  const Tensor& x = ctx.Input(0);
  const Tensor& w = ctx.Input(1);
  const Tensor& r = ctx.Input(2);
  for (int i = 0; i < n_in; ++i) {
    const Tensor* t = ctx.OptionalInput(i);
    if (!t || i == 4) continue;
    if (t->dtype() != DType::kFloat32)
      throw UnsupportedError(UnsupportedPrefix(node, cell, opset) + "data type " + DTypeName(t->dtype()) +
                             " of input " + std::to_string(i) + " is not supported (float32 only)");
  }
  if (x.rank() != 3) throw Error(where + "X must have rank 3, got " + x.Describe());
  s.seq = x.dim(s.layout == 0 ? 0 : 1);
  s.batch = x.dim(s.layout == 0 ? 1 : 0);
  s.input = x.dim(2);
  if (r.rank() != 3) throw Error(where + "R must have rank 3, got " + r.Describe());
  s.hidden = node.GetInt("hidden_size", r.dim(2));
  const int64_t gh = s.gates * s.hidden;
  auto expect = [&](const Tensor& t, const Shape& want, const char* what) {
    if (t.shape() != want)
      throw Error(where + what + " must be " + ShapeString(want) + " (hidden_size " + std::to_string(s.hidden) +
                  ", " + std::to_string(s.dirs) + " direction(s), layout " + std::to_string(s.layout) + "), got " +
                  t.Describe());
  };
  expect(w, {s.dirs, gh, s.input}, "W");
  expect(r, {s.dirs, gh, s.hidden}, "R");
  const Shape state = s.layout == 0 ? Shape{s.dirs, s.batch, s.hidden} : Shape{s.batch, s.dirs, s.hidden};
  if (Present(ctx, 3)) {
    s.has_bias = true;
    expect(*ctx.OptionalInput(3), {s.dirs, 2 * gh}, "B");
  }
  if (Present(ctx, 4)) {
    s.has_seq_lens = true;
    const Tensor& l = *ctx.OptionalInput(4);
    if (l.dtype() != DType::kInt32 && l.dtype() != DType::kInt64)
      throw Error(where + "sequence_lens must be int32, got " + l.Describe());
    expect(l, {s.batch}, "sequence_lens");
  }
  if (Present(ctx, 5)) {
    s.has_init_h = true;
    expect(*ctx.OptionalInput(5), state, "initial_h");
  }
  if (cell == RnnCell::kLSTM) {
    if (Present(ctx, 6)) {
      s.has_init_c = true;
      expect(*ctx.OptionalInput(6), state, "initial_c");
    }
    if (Present(ctx, 7)) {
      s.has_peephole = true;
      expect(*ctx.OptionalInput(7), {s.dirs, 3 * s.hidden}, "P");
    }
  }
  s.y = s.layout == 0 ? Shape{s.seq, s.dirs, s.batch, s.hidden} : Shape{s.batch, s.seq, s.dirs, s.hidden};
  s.y_h = state;
  return s;
}

RnnStepGeometry RnnDirectionGeometry(const RnnSpec& s, int64_t d) {
  RnnStepGeometry g;
  g.cell = s.cell == RnnCell::kLSTM ? RnnStepCell::kLSTM : s.cell == RnnCell::kGRU ? RnnStepCell::kGRU : RnnStepCell::kRNN;
  g.seq = s.seq;
  g.batch = s.batch;
  g.input = s.input;
  g.hidden = s.hidden;
  g.gates = s.gates;
  g.dirs = s.dirs;
  g.d = d;
  g.layout = s.layout;
  g.backward = s.Backward(d);
  g.linear_before_reset = s.linear_before_reset;
  const float clip = s.has_clip ? s.clip : INFINITY;
  g.clip = clip;
  auto act = [&](int k) { return s.acts[static_cast<size_t>(d * s.acts_per_dir + k)]; };
  if (s.cell == RnnCell::kLSTM) {
    g.lstm.f = act(0);
    g.lstm.g = act(1);
    g.lstm.h = act(2);
    g.lstm.clip = clip;
    g.lstm.input_forget = s.input_forget;
  } else if (s.cell == RnnCell::kGRU) {
    g.gru.f = act(0);
    g.gru.g = act(1);
    g.gru.clip = clip;
  } else {
    g.rnn_f = act(0);
  }
  return g;
}

std::vector<int64_t> CheckSequenceLens(const Node& node, const RnnSpec& spec, const std::vector<int64_t>& values) {
  std::vector<int64_t> lens(static_cast<size_t>(spec.batch), spec.seq);
  for (int64_t b = 0; b < spec.batch && b < static_cast<int64_t>(values.size()); ++b) {
    const int64_t v = values[static_cast<size_t>(b)];
    if (v < 0 || v > spec.seq)
      throw Error(node.Describe() + ": sequence_lens[" + std::to_string(b) + "] = " + std::to_string(v) +
                  " is outside [0, " + std::to_string(spec.seq) + "]");
    lens[static_cast<size_t>(b)] = v;
  }
  return lens;
}

std::vector<int64_t> ReadSequenceLens(const Node& node, const RnnSpec& spec, const KernelContext& ctx) {
  const Tensor* l = spec.has_seq_lens ? ctx.OptionalInput(4) : nullptr;
  if (!l) return std::vector<int64_t>(static_cast<size_t>(spec.batch), spec.seq);
  std::vector<int64_t> values(static_cast<size_t>(spec.batch));
  for (int64_t b = 0; b < spec.batch; ++b)
    values[static_cast<size_t>(b)] = l->dtype() == DType::kInt32 ? l->data<int32_t>()[b] : l->data<int64_t>()[b];
  return CheckSequenceLens(node, spec, values);
}

RnnSpec PrepareRnnGradOutputs(const Node& node, RnnCell cell, int64_t opset, KernelContext& ctx) {
  const RnnSpec spec = PlanRnn(node, cell, opset, ctx);
  const int n = RnnNumForwardInputs(cell);
  const int n_out = cell == RnnCell::kLSTM ? 3 : 2;
  for (int i = 0; i <= n_out; ++i) {  // dY, dY_h[, dY_c], then the forward's Y
    const Tensor* g = ctx.OptionalInput(n + i);
    const Shape& want = i == 0 || i == n_out ? spec.y : spec.y_h;
    if (g && (g->dtype() != DType::kFloat32 || g->shape() != want))
      throw Error(node.Describe() + ": input " + std::to_string(n + i) + " " + g->Describe() + " is not float" +
                  ShapeString(want));
  }
  for (int i = 0; i < 3; ++i) ctx.SetOutput(i, DType::kFloat32, ctx.Input(i).shape());
  ctx.SetOutput(3, DType::kFloat32, {spec.dirs, 2 * spec.gates * spec.hidden});
  ctx.SetOutput(4, DType::kFloat32, spec.y_h);
  if (cell == RnnCell::kLSTM) {
    ctx.SetOutput(5, DType::kFloat32, spec.y_h);
    ctx.SetOutput(6, DType::kFloat32, {spec.dirs, 3 * spec.hidden});
  }
  return spec;
}

}  // namespace ot
