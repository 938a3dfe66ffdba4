// Finite-difference tests of the sequence gradient rules and their kernels (LSTM, GRU and
// RNN through LSTMGrad, GRUGrad and RNNGrad), and forward identities between directions
// and layouts that ONNX's backend cases do not cover.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "graph/autodiff/autodiff.h"
#include "graph/autodiff/gradient_registry.h"
#include "runtime/cpu/recurrent/rnn_math.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ModelBuilder;

struct RnnCase {
  explicit RnnCase(std::string o) : op(std::move(o)) {}
  std::string op;                      // LSTM, GRU or RNN
  std::string direction = "forward";   // forward, reverse, bidirectional
  int64_t layout = 0;
  int64_t seq = 3, batch = 3, input = 3, hidden = 3;
  bool bias = true, init_h = false, init_c = false, peephole = false;
  std::vector<int32_t> lens;           // sequence_lens; empty: absent
  int64_t lbr = -1;                    // GRU linear_before_reset; -1: attribute absent
  float clip = 0.f;                    // 0: no clip attribute
  std::vector<std::string> acts;       // empty: defaults
  std::vector<float> alpha, beta;
  std::vector<int> consumed = {0, 1, 2};  // outputs that reach the loss (Y, Y_h, Y_c)
  int layers = 1;                      // 2: a second node of the same kind fed by the first's Y
  bool input_forget = false;           // LSTM: forget gate = 1 - input gate
  bool no_y = false;                   // the node does not produce Y (its gradient op then
                                       // recomputes the forward step by step)

  int64_t Dirs() const { return direction == "bidirectional" ? 2 : 1; }
  int64_t Gates() const { return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1; }
  int NumOutputs() const { return op == "LSTM" ? 3 : 2; }
  std::string Name() const {
    std::string s = op + (no_y ? " (no Y)" : "") + (input_forget ? " input_forget" : "") + " " + direction + " layout " + std::to_string(layout) + " seq " + std::to_string(seq) +
                    " batch " + std::to_string(batch) + " input " + std::to_string(input) + " hidden " +
                    std::to_string(hidden) + (bias ? " B" : "") + (init_h ? " h0" : "") + (init_c ? " c0" : "") +
                    (peephole ? " P" : "") + (lens.empty() ? "" : " lens") + " lbr " + std::to_string(lbr) +
                    " clip " + std::to_string(clip) + " layers " + std::to_string(layers) + " outputs";
    for (int k : consumed) s += " " + std::to_string(k);
    for (const std::string& a : acts) s += " " + a;
    return s;
  }
};

Attribute Floats(std::vector<float> v) {
  Attribute a;
  a.kind = Attribute::Kind::kFloats;
  a.floats = std::move(v);
  return a;
}

HostTensor Random(std::vector<int64_t> dims, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  HostTensor t(DType::kFloat32, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.Data<float>()[i] = u(rng);
  return t;
}

std::vector<int64_t> StateDims(const RnnCase& c) {
  return c.layout == 0 ? std::vector<int64_t>{c.Dirs(), c.batch, c.hidden}
                       : std::vector<int64_t>{c.batch, c.Dirs(), c.hidden};
}
std::vector<int64_t> YDims(const RnnCase& c) {
  return c.layout == 0 ? std::vector<int64_t>{c.seq, c.Dirs(), c.batch, c.hidden}
                       : std::vector<int64_t>{c.batch, c.seq, c.Dirs(), c.hidden};
}

// Adds layer `l` (input `x` of width `input`) and returns its output names (Y, Y_h[, Y_c]).
std::vector<std::string> AddRecurrentLayer(ModelBuilder& b, const RnnCase& c, int l, const std::string& x,
                                           int64_t input) {
  const std::string p = "l" + std::to_string(l) + "_";
  const int64_t d = c.Dirs(), gh = c.Gates() * c.hidden;
  b.Param(p + "W", {d, gh, input}, -0.6f, 0.6f).Param(p + "R", {d, gh, c.hidden}, -0.6f, 0.6f);
  std::vector<std::string> ins = {x, p + "W", p + "R", "", "", "", "", ""};
  if (c.bias) {
    b.Param(p + "B", {d, 2 * gh}, -0.5f, 0.5f);
    ins[3] = p + "B";
  }
  if (!c.lens.empty()) {
    b.Const(HostTensor::FromVector<int32_t>(c.lens, {c.batch}, p + "lens"));
    ins[4] = p + "lens";
  }
  if (c.init_h) {
    b.Param(p + "h0", StateDims(c), -0.8f, 0.8f);
    ins[5] = p + "h0";
  }
  if (c.init_c) {
    b.Param(p + "c0", StateDims(c), -0.8f, 0.8f);
    ins[6] = p + "c0";
  }
  if (c.peephole) {
    b.Param(p + "P", {d, 3 * c.hidden}, -0.5f, 0.5f);
    ins[7] = p + "P";
  }
  if (c.op != "LSTM") ins.resize(6);
  while (ins.back().empty()) ins.pop_back();
  Node& n = b.Op(c.op, ins, p + "Y");
  n.outputs = {p + "Y", p + "Y_h"};
  if (c.op == "LSTM") n.outputs.push_back(p + "Y_c");
  if (c.no_y) n.outputs[0] = "";
  n.SetInt("hidden_size", c.hidden);
  n.SetString("direction", c.direction);
  if (c.layout != 0) n.SetInt("layout", c.layout);
  if (c.lbr >= 0) n.SetInt("linear_before_reset", c.lbr);
  if (c.clip > 0.f) n.SetFloat("clip", c.clip);
  if (c.input_forget) n.SetInt("input_forget", 1);
  if (!c.acts.empty()) {
    Attribute a;
    a.kind = Attribute::Kind::kStrings;
    a.strings = c.acts;
    n.attrs["activations"] = a;
  }
  if (!c.alpha.empty()) n.attrs["activation_alpha"] = Floats(c.alpha);
  if (!c.beta.empty()) n.attrs["activation_beta"] = Floats(c.beta);
  return n.outputs;
}

// X, the layers, and loss = sum over consumed outputs k of ReduceSum(out_k * w_k) with fixed
// random weights w_k; X and every weight and state are trained.
TrainingGraph RecurrentModel(const RnnCase& c) {
  ModelBuilder b;
  b.Opset(14);
  const std::vector<int64_t> xdims =
      c.layout == 0 ? std::vector<int64_t>{c.seq, c.batch, c.input} : std::vector<int64_t>{c.batch, c.seq, c.input};
  b.Param("X", xdims, -1.f, 1.f);
  std::vector<std::string> outs = AddRecurrentLayer(b, c, 0, "X", c.input);
  for (int l = 1; l < c.layers; ++l) {
    // Y [seq, dirs, batch, hidden] -> [seq, batch, dirs*hidden] as torch exports it
    // (layout 1: Y [batch, seq, dirs, hidden] -> [batch, seq, dirs*hidden]).
    std::string y = outs[0];
    if (c.layout == 0) {
      b.Op("Transpose", {y}, y + "_t").attrs["perm"] = GradientBuilder::AttrInts({0, 2, 1, 3});
      y += "_t";
    }
    const std::vector<int64_t> shape = c.layout == 0 ? std::vector<int64_t>{c.seq, c.batch, c.Dirs() * c.hidden}
                                                     : std::vector<int64_t>{c.batch, c.seq, c.Dirs() * c.hidden};
    b.Const(HostTensor::FromVector<int64_t>(shape, {3}, y + "_shape"));
    b.Op("Reshape", {y, y + "_shape"}, y + "_r");
    outs = AddRecurrentLayer(b, c, l, y + "_r", c.Dirs() * c.hidden);
  }
  AutodiffOptions opts;
  std::string total;
  for (int k : c.consumed) {
    if (k >= c.NumOutputs()) continue;
    const std::vector<int64_t> dims = k == 0 ? YDims(c) : StateDims(c);
    HostTensor w(DType::kFloat32, dims, "loss_w" + std::to_string(k));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (int64_t i = 0; i < w.NumElements(); ++i) w.Data<float>()[i] = u(b.rng());
    b.Const(w);
    opts.freeze.push_back(w.name);
    const std::string m = outs[static_cast<size_t>(k)] + "_w";
    b.Op("Mul", {outs[static_cast<size_t>(k)], w.name}, m);
    b.Op("ReduceSum", {m}, m + "_sum").SetInt("keepdims", 0);
    if (total.empty()) {
      total = m + "_sum";
    } else {
      b.Op("Add", {total, m + "_sum"}, total + "+");
      total += "+";
    }
  }
  b.Op("Identity", {total}, "loss");
  b.Output("loss", {});
  return BuildTrainingGraph(b.Build(), opts);
}

void CheckCase(const RnnCase& c, float eps = 1e-2f, double tol = 2e-2) {
  SCOPED_TRACE(c.Name());
  TrainingGraph tg = RecurrentModel(c);
  ExpectGradientsMatchFiniteDifferences(tg, {}, eps, tol);
}

// Every direction x initial state x layout, batch 1 and 3, odd sizes.
TEST(GradSequence, LstmDirectionsStatesLayouts) {
  for (const char* dir : {"forward", "reverse", "bidirectional"})
    for (int states = 0; states < 2; ++states)
      for (int64_t layout : {0, 1}) {
        RnnCase c("LSTM");
        c.direction = dir;
        c.layout = layout;
        c.init_h = c.init_c = states == 1;
        c.batch = layout == 0 ? 3 : 1;
        c.hidden = 3;
        CheckCase(c);
      }
}

TEST(GradSequence, GruDirectionsStatesLayouts) {
  for (const char* dir : {"forward", "reverse", "bidirectional"})
    for (int64_t lbr : {1, 0})
      for (int states = 0; states < 2; ++states) {
        RnnCase c("GRU");
        c.direction = dir;
        c.lbr = lbr;
        c.init_h = states == 1;
        c.layout = states;
        c.batch = states == 1 ? 1 : 2;
        c.hidden = states == 1 ? 3 : 5;
        CheckCase(c);
      }
}

TEST(GradSequence, RnnDirectionsStatesLayouts) {
  for (const char* dir : {"forward", "reverse", "bidirectional"})
    for (int states = 0; states < 2; ++states)
      for (int64_t layout : {0, 1}) {
        RnnCase c("RNN");
        c.direction = dir;
        c.layout = layout;
        c.init_h = states == 1;
        c.batch = states == 1 ? 1 : 3;
        c.hidden = 7;
        CheckCase(c);
      }
}

// Only some outputs consumed (the others get no gradient), and no bias.
TEST(GradSequence, SubsetsOfOutputs) {
  for (const char* op : {"LSTM", "GRU", "RNN"})
    for (const std::vector<int>& consumed : std::vector<std::vector<int>>{{0}, {1}, {2}, {1, 2}}) {
      RnnCase c(op);
      if (consumed == std::vector<int>{2} && c.op != "LSTM") continue;
      c.direction = "bidirectional";
      c.consumed = consumed;
      c.bias = consumed.size() == 1;
      c.init_h = true;
      c.init_c = true;
      c.lbr = 1;
      c.no_y = consumed[0] == 1;
      CheckCase(c);
    }
}

// Without Y the gradient ops recompute the forward step by step: every cell and direction.
TEST(GradSequence, WithoutYOutput) {
  for (const char* op : {"LSTM", "GRU", "RNN"})
    for (int64_t lbr : {0, 1}) {
      if (std::string(op) != "GRU" && lbr == 0) continue;
      RnnCase c(op);
      c.direction = "bidirectional";
      c.consumed = {1, 2};
      c.no_y = true;
      c.lbr = lbr;
      c.init_h = c.init_c = true;
      c.peephole = c.op == "LSTM";
      c.seq = 4;
      c.lens = {4, 1, 3};
      CheckCase(c);
    }
}

// input_forget couples the gates (f = 1 - i): with peepholes, lens, both recompute paths.
TEST(GradSequence, LstmInputForget) {
  for (bool no_y : {false, true}) {
    RnnCase c("LSTM");
    c.direction = "bidirectional";
    c.input_forget = true;
    c.peephole = true;
    c.init_h = c.init_c = true;
    c.seq = 4;
    c.lens = {4, 2, 3};
    c.no_y = no_y;
    c.consumed = no_y ? std::vector<int>{1, 2} : std::vector<int>{0, 1, 2};
    CheckCase(c);
  }
}

// input_forget by value: one step from c0 with R = 0 and no bias gives
// c1 = (1 - i) c0 + i g and h1 = o tanh(c1), i = sigmoid(W_i x), o = sigmoid(W_o x), g = tanh(W_c x).
TEST(GradSequence, LstmInputForgetValues) {
  const int64_t I = 3, H = 4;
  HostTensor x = Random({1, 1, I}, 21), w = Random({1, 4 * H, I}, 22), c0 = Random({1, 1, H}, 23);
  HostTensor r(DType::kFloat32, {1, 4 * H, H}), h0(DType::kFloat32, {1, 1, H});
  std::fill(r.Data<float>(), r.Data<float>() + r.NumElements(), 0.f);
  std::fill(h0.Data<float>(), h0.Data<float>() + h0.NumElements(), 0.f);
  ModelBuilder b;
  b.Opset(14);
  b.Input("X", DType::kFloat32, {1, 1, I}).Input("W", DType::kFloat32, {1, 4 * H, I});
  b.Input("R", DType::kFloat32, {1, 4 * H, H}).Input("h0", DType::kFloat32, {1, 1, H}).Input("c0", DType::kFloat32, {1, 1, H});
  Node& n = b.Op("LSTM", {"X", "W", "R", "", "", "h0", "c0"}, "Y");
  n.outputs = {"Y", "Y_h", "Y_c"};
  n.SetInt("hidden_size", H);
  n.SetInt("input_forget", 1);
  Executor exec(b.Build());
  auto out = exec.Run({{"X", Tensor::FromHost(x)}, {"W", Tensor::FromHost(w)}, {"R", Tensor::FromHost(r)},
                       {"h0", Tensor::FromHost(h0)}, {"c0", Tensor::FromHost(c0)}},
                      {"Y_h", "Y_c"});
  auto dot = [&](int64_t row) {
    double s = 0;
    for (int64_t k = 0; k < I; ++k) s += static_cast<double>(w.Data<float>()[row * I + k]) * x.Data<float>()[k];
    return s;
  };
  for (int64_t j = 0; j < H; ++j) {
    const double i = 1 / (1 + std::exp(-dot(j))), o = 1 / (1 + std::exp(-dot(H + j))), g = std::tanh(dot(3 * H + j));
    const double c1 = (1 - i) * c0.Data<float>()[j] + i * g;
    EXPECT_NEAR(out[1].ToHost().Data<float>()[j], c1, 1e-6) << j;
    EXPECT_NEAR(out[0].ToHost().Data<float>()[j], o * std::tanh(c1), 1e-6) << j;
  }
}

// Two layers chained through Transpose and Reshape, as torch exports nn.LSTM(num_layers=2).
TEST(GradSequence, TwoLayers) {
  for (const char* op : {"LSTM", "GRU", "RNN"})
    for (const char* dir : {"forward", "bidirectional"}) {
      RnnCase c(op);
      c.direction = dir;
      c.layers = 2;
      c.hidden = 3;
      c.seq = 3;
      c.batch = 2;
      c.init_h = c.init_c = true;
      c.lbr = 1;
      CheckCase(c);
    }
}

TEST(GradSequence, LstmPeepholesAndSequenceLens) {
  for (const char* dir : {"forward", "reverse", "bidirectional"}) {
    RnnCase c("LSTM");
    c.direction = dir;
    c.peephole = true;
    c.init_h = c.init_c = true;
    c.seq = 4;
    c.lens = {4, 2, 3};
    c.hidden = 3;
    CheckCase(c);
  }
}

TEST(GradSequence, SequenceLensGruRnn) {
  for (const char* op : {"GRU", "RNN"})
    for (int64_t layout : {0, 1}) {
      RnnCase c(op);
      c.direction = "bidirectional";
      c.layout = layout;
      c.seq = 4;
      c.lens = {1, 4, 0};
      c.init_h = true;
      c.lbr = layout;
      CheckCase(c);
    }
}

// Smooth non-default activations with their alpha and beta.
TEST(GradSequence, Activations) {
  RnnCase lstm("LSTM");
  lstm.direction = "bidirectional";
  lstm.acts = {"Sigmoid", "ScaledTanh", "Softsign", "HardSigmoid", "Tanh", "Affine"};
  lstm.alpha = {0.9f, 0.1f, 0.7f};
  lstm.beta = {1.1f, 0.5f, 0.2f};
  lstm.hidden = 3;
  CheckCase(lstm);
  RnnCase gru("GRU");
  gru.acts = {"Softplus", "Elu"};
  gru.alpha = {1.f};
  gru.lbr = 0;
  CheckCase(gru);
  RnnCase rnn("RNN");
  rnn.direction = "reverse";
  rnn.acts = {"Softsign"};
  CheckCase(rnn);
}

// clip cuts pre-activations off at +-clip: the gradient is zero there. The thresholds are
// chosen so that no pre-activation of these draws lies within the difference step of a
// kink at +-clip (with 0.5 for LSTM one does, and the central difference straddles it).
TEST(GradSequence, Clip) {
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    RnnCase c(op);
    c.clip = std::string(op) == "LSTM" ? 0.6f : 0.7f;
    c.lbr = 1;
    c.init_h = true;
    CheckCase(c, 1e-3f, 3e-2);
  }
}

// --- Forward identities ----------------------------------------------------------------


// Runs one recurrent node on X, W, R, B, h0 (given as inputs) and returns Y, Y_h.
std::vector<HostTensor> RunNode(const std::string& op, const std::string& dir, int64_t layout, int64_t lbr,
                                const HostTensor& x, const HostTensor& w, const HostTensor& r, const HostTensor& bias,
                                const HostTensor& h0) {
  ModelBuilder b;
  b.Opset(14);
  for (const auto* t : {&x, &w, &r, &bias, &h0}) b.Input(t == &x ? "X" : t == &w ? "W" : t == &r ? "R" : t == &bias ? "B" : "h0",
                                                        DType::kFloat32, t->dims);
  Node& n = b.Op(op, {"X", "W", "R", "B", "", "h0"}, "Y");
  n.outputs = {"Y", "Y_h"};
  n.SetInt("hidden_size", r.dims[2]);
  n.SetString("direction", dir);
  n.SetInt("layout", layout);
  if (lbr >= 0) n.SetInt("linear_before_reset", lbr);
  Executor exec(b.Build());
  auto out = exec.Run({{"X", Tensor::FromHost(x)}, {"W", Tensor::FromHost(w)}, {"R", Tensor::FromHost(r)},
                       {"B", Tensor::FromHost(bias)}, {"h0", Tensor::FromHost(h0)}},
                      {"Y", "Y_h"});
  return {out[0].ToHost(), out[1].ToHost()};
}

// Reverse on X equals forward on X reversed in time; bidirectional is forward and reverse
// side by side; layout 1 is layout 0 with batch and time swapped.
TEST(GradSequence, ForwardDirectionAndLayoutIdentities) {
  const int64_t T = 5, Bn = 2, I = 3, H = 4;
  for (const char* op : {"LSTM", "GRU", "RNN"})
    for (int64_t lbr : {0, 1}) {
      if (std::string(op) != "GRU" && lbr == 1) continue;
      SCOPED_TRACE(std::string(op) + " lbr " + std::to_string(lbr));
      const int64_t G = std::string(op) == "LSTM" ? 4 : std::string(op) == "GRU" ? 3 : 1;
      HostTensor x = Random({T, Bn, I}, 1), w = Random({2, G * H, I}, 2), r = Random({2, G * H, H}, 3),
                 bias = Random({2, 2 * G * H}, 4), h0 = Random({2, Bn, H}, 5);
      auto slice = [](const HostTensor& t, int64_t d) {  // direction d of a [2, ...] tensor
        std::vector<int64_t> dims = t.dims;
        dims[0] = 1;
        HostTensor s(DType::kFloat32, dims);
        const int64_t n = s.NumElements();
        std::copy(t.Data<float>() + d * n, t.Data<float>() + (d + 1) * n, s.Data<float>());
        return s;
      };
      HostTensor xr(DType::kFloat32, {T, Bn, I});
      for (int64_t t = 0; t < T; ++t)
        std::copy(x.Data<float>() + t * Bn * I, x.Data<float>() + (t + 1) * Bn * I, xr.Data<float>() + (T - 1 - t) * Bn * I);
      auto bi = RunNode(op, "bidirectional", 0, lbr, x, w, r, bias, h0);
      auto fw = RunNode(op, "forward", 0, lbr, x, slice(w, 0), slice(r, 0), slice(bias, 0), slice(h0, 0));
      auto rv = RunNode(op, "reverse", 0, lbr, x, slice(w, 1), slice(r, 1), slice(bias, 1), slice(h0, 1));
      auto fr = RunNode(op, "forward", 0, lbr, xr, slice(w, 1), slice(r, 1), slice(bias, 1), slice(h0, 1));
      for (int64_t t = 0; t < T; ++t)
        for (int64_t b = 0; b < Bn; ++b)
          for (int64_t j = 0; j < H; ++j) {
            const float f = fw[0].Data<float>()[(t * Bn + b) * H + j];
            const float rvv = rv[0].Data<float>()[(t * Bn + b) * H + j];
            EXPECT_NEAR(rvv, fr[0].Data<float>()[((T - 1 - t) * Bn + b) * H + j], 1e-5);
            EXPECT_EQ(bi[0].Data<float>()[((t * 2 + 0) * Bn + b) * H + j], f);
            EXPECT_EQ(bi[0].Data<float>()[((t * 2 + 1) * Bn + b) * H + j], rvv);
          }
      for (int64_t i = 0; i < Bn * H; ++i) {
        EXPECT_NEAR(rv[1].Data<float>()[i], fr[1].Data<float>()[i], 1e-5);
        EXPECT_EQ(bi[1].Data<float>()[i], fw[1].Data<float>()[i]);
        EXPECT_EQ(bi[1].Data<float>()[Bn * H + i], rv[1].Data<float>()[i]);
      }
      // Layout 1: X [batch, seq, input], h0 [batch, dirs, hidden], Y [batch, seq, dirs, hidden].
      HostTensor x1(DType::kFloat32, {Bn, T, I}), h01(DType::kFloat32, {Bn, 2, H});
      for (int64_t t = 0; t < T; ++t)
        for (int64_t b = 0; b < Bn; ++b)
          for (int64_t k = 0; k < I; ++k) x1.Data<float>()[(b * T + t) * I + k] = x.Data<float>()[(t * Bn + b) * I + k];
      for (int64_t d = 0; d < 2; ++d)
        for (int64_t b = 0; b < Bn; ++b)
          for (int64_t j = 0; j < H; ++j) h01.Data<float>()[(b * 2 + d) * H + j] = h0.Data<float>()[(d * Bn + b) * H + j];
      auto l1 = RunNode(op, "bidirectional", 1, lbr, x1, w, r, bias, h01);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < 2; ++d)
          for (int64_t b = 0; b < Bn; ++b)
            for (int64_t j = 0; j < H; ++j)
              EXPECT_EQ(l1[0].Data<float>()[((b * T + t) * 2 + d) * H + j], bi[0].Data<float>()[((t * 2 + d) * Bn + b) * H + j]);
      for (int64_t d = 0; d < 2; ++d)
        for (int64_t b = 0; b < Bn; ++b)
          for (int64_t j = 0; j < H; ++j)
            EXPECT_EQ(l1[1].Data<float>()[(b * 2 + d) * H + j], bi[1].Data<float>()[(d * Bn + b) * H + j]);
    }
}

// clip changes the output when pre-activations exceed it, and nothing when none does.
TEST(GradSequence, ClipTakesEffect) {
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    SCOPED_TRACE(op);
    const int64_t G = std::string(op) == "LSTM" ? 4 : std::string(op) == "GRU" ? 3 : 1;
    auto run = [&](float clip) {
      ModelBuilder b;
      b.Opset(14);
      b.Input("X", DType::kFloat32, {3, 2, 3});
      b.Param("W", {1, G * 4, 3}, -1.f, 1.f).Param("R", {1, G * 4, 4}, -1.f, 1.f);
      Node& n = b.Op(op, {"X", "W", "R"}, "Y");
      n.SetInt("hidden_size", 4);
      if (clip > 0.f) n.SetFloat("clip", clip);
      Executor exec(b.Build());
      return exec.Run({{"X", Tensor::FromHost(Random({3, 2, 3}, 9))}}, {"Y"})[0].ToHost();
    };
    const HostTensor none = run(0.f), loose = run(100.f), tight = run(0.3f);
    double diff = 0;
    for (int64_t i = 0; i < none.NumElements(); ++i) {
      EXPECT_EQ(none.Data<float>()[i], loose.Data<float>()[i]);
      diff = std::max(diff, static_cast<double>(std::fabs(none.Data<float>()[i] - tight.Data<float>()[i])));
    }
    EXPECT_GT(diff, 1e-2);
  }
}

// Each activation by value: one RNN step with W = I, R = 0 and no bias gives Y = f(X).
// The expected values are ONNX's definitions written out here.
TEST(GradSequence, ActivationValues) {
  struct Act {
    std::string name;
    std::vector<float> alpha, beta;
    std::function<double(double)> f;
  };
  const std::vector<Act> acts = {
      {"Sigmoid", {}, {}, [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"Tanh", {}, {}, [](double v) { return std::tanh(v); }},
      {"Relu", {}, {}, [](double v) { return std::max(v, 0.0); }},
      {"LeakyRelu", {0.3f}, {}, [](double v) { return v < 0 ? 0.3 * v : v; }},
      {"LeakyRelu", {}, {}, [](double v) { return v < 0 ? 0.01 * v : v; }},
      {"ThresholdedRelu", {0.4f}, {}, [](double v) { return v > 0.4 ? v : 0.0; }},
      {"ScaledTanh", {1.5f}, {0.7f}, [](double v) { return 1.5 * std::tanh(0.7 * v); }},
      {"HardSigmoid", {0.3f}, {0.4f}, [](double v) { return std::min(1.0, std::max(0.0, 0.3 * v + 0.4)); }},
      {"HardSigmoid", {}, {}, [](double v) { return std::min(1.0, std::max(0.0, 0.2 * v + 0.5)); }},
      {"Elu", {0.6f}, {}, [](double v) { return v < 0 ? 0.6 * (std::exp(v) - 1) : v; }},
      {"Softsign", {}, {}, [](double v) { return v / (1 + std::fabs(v)); }},
      {"Softplus", {}, {}, [](double v) { return std::log(1 + std::exp(v)); }},
      {"Affine", {2.f}, {-0.5f}, [](double v) { return 2 * v - 0.5; }},
  };
  const int64_t n = 8;
  HostTensor x = Random({1, 1, n}, 11, -3.f, 3.f);
  HostTensor w(DType::kFloat32, {1, n, n}), r(DType::kFloat32, {1, n, n});
  for (int64_t i = 0; i < n * n; ++i) {
    w.Data<float>()[i] = i % (n + 1) == 0 ? 1.f : 0.f;
    r.Data<float>()[i] = 0.f;
  }
  w.name = "W";
  r.name = "R";
  for (const Act& a : acts) {
    SCOPED_TRACE(a.name);
    ModelBuilder b;
    b.Opset(14);
    b.Input("X", DType::kFloat32, {1, 1, n});
    b.Const(w).Const(r);
    Node& node = b.Op("RNN", {"X", "W", "R"}, "Y");
    node.SetInt("hidden_size", n);
    Attribute names;
    names.kind = Attribute::Kind::kStrings;
    names.strings = {a.name};
    node.attrs["activations"] = names;
    if (!a.alpha.empty()) node.attrs["activation_alpha"] = Floats(a.alpha);
    if (!a.beta.empty()) node.attrs["activation_beta"] = Floats(a.beta);
    Executor exec(b.Build());
    HostTensor y = exec.Run({{"X", Tensor::FromHost(x)}}, {"Y"})[0].ToHost();
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y.Data<float>()[i], a.f(x.Data<float>()[i]), 1e-5) << i;
  }
}

// The vectorisable exp, sigmoid and tanh of the CPU cells against double, over a sweep
// of |x| <= kRnnGateBound (exp to twice that), as rnn_math.h states.
TEST(GradSequence, GateMathAccuracy) {
  double exp_rel = 0, sig_rel = 0, tanh_abs = 0;
  for (int i = -400000; i <= 400000; ++i) {
    const float x = cpu::kRnnGateBound * static_cast<float>(i) / 400000.f;
    const double e = std::exp(2.0 * x), s = 1 / (1 + std::exp(-static_cast<double>(x)));
    exp_rel = std::max(exp_rel, std::fabs(cpu::ExpApprox(2 * x) - e) / e);
    sig_rel = std::max(sig_rel, std::fabs(cpu::SigmoidApprox(x) - s) / s);
    tanh_abs = std::max(tanh_abs, std::fabs(cpu::TanhApprox(x) - std::tanh(static_cast<double>(x))));
  }
  std::cout << "gate math: exp " << exp_rel << " relative, sigmoid " << sig_rel << " relative, tanh " << tanh_abs
            << " absolute\n";
  EXPECT_LT(exp_rel, 1.6 * 5.97e-8);   // 1.6 ulp
  EXPECT_LT(sig_rel, 2.6 * 5.97e-8);   // 2.6 ulp
  EXPECT_LT(tanh_abs, 1.9e-7);
}

// At batch x gates x hidden >= 8192 a step's element-wise work runs on threads: the
// gradients with 2 threads equal those with 1 (every cell; peepholes, lens, both GRU forms).
TEST(GradSequence, ThreadedStepsMatchOneThread) {
  for (const char* op : {"LSTM", "GRU", "RNN"})
    for (int64_t lbr : {0, 1}) {
      if (std::string(op) != "GRU" && lbr == 0) continue;
      RnnCase c(op);
      c.direction = "bidirectional";
      c.seq = 5;
      c.batch = 16;
      c.input = 9;
      c.hidden = std::string(op) == "RNN" ? 512 : 192;
      c.init_h = c.init_c = true;
      c.peephole = c.op == "LSTM";
      c.lens = {5, 3, 1, 5, 4, 2, 5, 5, 0, 5, 1, 3, 5, 2, 4, 5};
      c.lbr = lbr;
      SCOPED_TRACE(c.Name());
      TrainingGraph tg = RecurrentModel(c);
      std::vector<std::string> fetch = tg.grads;
      auto run = [&](int threads) {
        ExecutorOptions o;
        o.num_threads = threads;
        Executor exec(tg.model, o);
        std::vector<HostTensor> out;
        for (const Tensor& t : exec.Run({}, fetch)) out.push_back(t.ToHost());
        return out;
      };
      const std::vector<HostTensor> one = run(1), two = run(2);
      for (size_t i = 0; i < one.size(); ++i)
        for (int64_t k = 0; k < one[i].NumElements(); ++k)
          ASSERT_NEAR(one[i].Data<float>()[k], two[i].Data<float>()[k], 1e-5 + 1e-4 * std::fabs(one[i].Data<float>()[k]))
              << fetch[i] << "[" << k << "]";
    }
}

// Bad input: one error line naming the node and what to fix.
TEST(GradSequence, BadInputErrors) {
  auto error_of = [](const std::string& op, std::vector<int64_t> wdims, const std::string& attr, int64_t value,
                     std::vector<std::string> acts = {}) {
    ModelBuilder b;
    b.Opset(14);
    b.Input("X", DType::kFloat32, {2, 1, 3});
    b.Param("W", wdims, -1.f, 1.f).Param("R", {1, wdims[1], 2}, -1.f, 1.f);
    Node& n = b.Op(op, {"X", "W", "R"}, "Y");
    n.name = "rnn_node";
    n.SetInt("hidden_size", 2);
    if (!attr.empty()) n.SetInt(attr, value);
    if (!acts.empty()) {
      Attribute a;
      a.kind = Attribute::Kind::kStrings;
      a.strings = acts;
      n.attrs["activations"] = a;
    }
    b.Output("Y", {2, 1, 1, 2});
    try {
      Executor exec(b.Build());
      HostTensor x(DType::kFloat32, {2, 1, 3});
      exec.Run({{"X", Tensor::FromHost(x)}}, {"Y"});
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string e = error_of("LSTM", {1, 8, 4}, "", 0);
  EXPECT_NE(e.find("rnn_node"), std::string::npos) << e;
  EXPECT_NE(e.find("W must be [1, 8, 3]"), std::string::npos) << e;
  e = error_of("LSTM", {1, 8, 3}, "", 0, {"Sigmoid", "Gelu", "Tanh"});
  EXPECT_NE(e.find("LSTM (opset 14) node 'rnn_node': activation 'Gelu' is not supported"), std::string::npos) << e;
  e = error_of("GRU", {1, 6, 3}, "layout", 2);
  EXPECT_NE(e.find("layout 2"), std::string::npos) << e;
}

}  // namespace
}  // namespace ot
