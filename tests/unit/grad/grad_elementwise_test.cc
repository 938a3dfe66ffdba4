// Finite-difference tests of the elementwise gradient rules and their kernels: every
// unary activation with each of its attributes, Clip (bounds as inputs and as
// attributes), Pow, Max/Min (ties), Mean, PRelu (slope broadcasting, opset-6 channel
// slopes), Cast and the piecewise-constant ops; plus the kink conventions (PyTorch's)
// checked value by value, and activations on oneDNN's blocked layouts after a Conv.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "graph/autodiff/autodiff.h"
#include "runtime/ops/math/activation_math.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ModelBuilder;

// Ends the model in loss = ReduceSum(y * w) with w a fixed random weight shaped like y
// (so every element of y's gradient differs); returns the training graph. Models of
// opset 6 (whose Mul has no gradient rule: legacy broadcasting) end in ReduceSumSquare(y).
TrainingGraph EndInWeightedSum(ModelBuilder& b, const std::string& y, std::vector<int64_t> dims,
                               std::vector<std::string> freeze = {}) {
  AutodiffOptions opts;
  opts.freeze = std::move(freeze);
  opts.loss_output = "loss";
  if (b.model().opsets[""] < 7) {
    b.Op("ReduceSumSquare", {y}, "loss").SetInt("keepdims", 0);
  } else {
    testing::AddWeightedSumLoss(b, y, std::move(dims));
    opts.freeze.push_back("loss_w");
    return BuildTrainingGraph(b.Build(), opts);
  }
  b.Output("loss", {});
  return BuildTrainingGraph(b.Build(), opts);
}

// A parameter drawn from [lo, hi], each value moved at least `gap` away from every kink.
void KinkFreeParam(ModelBuilder& b, const std::string& name, std::vector<int64_t> dims, float lo, float hi,
                   const std::vector<float>& kinks, float gap = 0.05f) {
  b.Param(name, dims, lo, hi);
  HostTensor& t = b.model().graph.initializers.back();
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    float& v = t.Data<float>()[i];
    for (float k : kinks)
      if (std::fabs(v - k) < gap) v = v < k ? k - gap : k + gap;
  }
}

struct UnaryCase {
  std::string op;
  int64_t opset;
  std::vector<std::pair<std::string, float>> attrs;
  float lo, hi;
  std::vector<float> kinks;
};

std::string Describe(const UnaryCase& c) {
  std::string s = c.op + " opset " + std::to_string(c.opset);
  for (const auto& [k, v] : c.attrs) s += " " + k + "=" + std::to_string(v);
  return s;
}

TEST(GradElementwise, UnaryActivationsMatchFiniteDifferences) {
  const std::vector<UnaryCase> cases = {
      {"Erf", 13, {}, -2.f, 2.f, {}},
      {"Sin", 13, {}, -3.f, 3.f, {}},
      {"Cos", 13, {}, -3.f, 3.f, {}},
      {"Tan", 13, {}, -1.2f, 1.2f, {}},
      {"Asin", 13, {}, -0.9f, 0.9f, {}},
      {"Acos", 13, {}, -0.9f, 0.9f, {}},
      {"Atan", 13, {}, -3.f, 3.f, {}},
      {"Sinh", 13, {}, -2.f, 2.f, {}},
      {"Cosh", 13, {}, -2.f, 2.f, {}},
      {"Asinh", 13, {}, -2.f, 2.f, {}},
      {"Acosh", 13, {}, 1.2f, 3.f, {}},
      {"Atanh", 13, {}, -0.9f, 0.9f, {}},
      {"Abs", 13, {}, -1.f, 1.f, {0.f}},
      {"Reciprocal", 13, {}, 0.5f, 2.f, {}},
      {"HardSigmoid", 13, {}, -4.f, 4.f, {-2.5f, 2.5f}},
      {"HardSigmoid", 6, {{"alpha", 0.5f}, {"beta", 0.3f}}, -2.f, 3.f, {-0.6f, 1.4f}},
      {"HardSigmoid", 17, {{"alpha", 1.f / 6}, {"beta", 0.5f}}, -4.f, 4.f, {-3.f, 3.f}},
      {"HardSwish", 14, {}, -5.f, 5.f, {-3.f, 3.f}},
      {"Softplus", 13, {}, -3.f, 3.f, {}},
      {"Softsign", 13, {}, -3.f, 3.f, {}},
      {"Elu", 13, {}, -2.f, 2.f, {0.f}},
      {"Elu", 6, {{"alpha", 0.5f}}, -2.f, 2.f, {0.f}},
      {"Selu", 13, {}, -2.f, 2.f, {0.f}},
      {"Selu", 6, {{"alpha", 1.2f}, {"gamma", 0.8f}}, -2.f, 2.f, {0.f}},
      {"Celu", 12, {}, -2.f, 2.f, {0.f}},
      {"Celu", 13, {{"alpha", 0.7f}}, -2.f, 2.f, {0.f}},
      {"Mish", 18, {}, -3.f, 3.f, {}},
      {"ThresholdedRelu", 10, {}, -2.f, 3.f, {1.f}},
      {"ThresholdedRelu", 13, {{"alpha", 0.3f}}, -2.f, 2.f, {0.3f}},
      {"Shrink", 9, {}, -2.f, 2.f, {-0.5f, 0.5f}},
      {"Shrink", 13, {{"lambd", 0.4f}, {"bias", 0.2f}}, -2.f, 2.f, {-0.4f, 0.4f}},
      {"LeakyRelu", 13, {{"alpha", 0.2f}}, -2.f, 2.f, {0.f}},
      {"Tanh", 13, {}, -2.f, 2.f, {}},
      {"Sigmoid", 13, {}, -3.f, 3.f, {}},
  };
  for (const UnaryCase& c : cases) {
    SCOPED_TRACE(Describe(c));
    ModelBuilder b;
    b.Opset(c.opset);
    KinkFreeParam(b, "x", {2, 3, 5}, c.lo, c.hi, c.kinks);
    Node& n = b.Op(c.op, {"x"}, "y");
    for (const auto& [k, v] : c.attrs) n.SetFloat(k, v);
    TrainingGraph tg = EndInWeightedSum(b, "y", {2, 3, 5});
    // A step of 5e-3 keeps the rounding of the float32 loss well below the tolerance
    // and stays clear of the kinks (0.05 away).
    ExpectGradientsMatchFiniteDifferences(tg, {}, 5e-3f);
  }
}

// Reciprocal on negative inputs too (the parameter is |p| with fixed signs).
TEST(GradElementwise, ReciprocalOfNegativeValues) {
  ModelBuilder b;
  KinkFreeParam(b, "p", {3, 7}, 0.5f, 2.f, {});
  HostTensor signs(DType::kFloat32, {3, 7}, "signs");
  for (int64_t i = 0; i < 21; ++i) signs.Data<float>()[i] = i % 3 ? -1.f : 1.f;
  b.Const(signs);
  b.Op("Mul", {"p", "signs"}, "x");
  b.Op("Reciprocal", {"x"}, "y");
  ExpectGradientsMatchFiniteDifferences(EndInWeightedSum(b, "y", {3, 7}, {"signs"}), {}, 1e-3f);
}

struct ClipCase {
  int64_t opset;
  bool has_min, has_max;
};

TEST(GradElementwise, ClipMatchesFiniteDifferences) {
  for (const ClipCase& c : {ClipCase{13, true, true}, ClipCase{13, false, true}, ClipCase{13, true, false},
                            ClipCase{11, true, true}, ClipCase{6, true, true}, ClipCase{6, false, true}}) {
    SCOPED_TRACE("opset " + std::to_string(c.opset) + (c.has_min ? " min" : "") + (c.has_max ? " max" : ""));
    ModelBuilder b;
    b.Opset(c.opset);
    KinkFreeParam(b, "x", {3, 5, 3}, -2.f, 2.f, {-0.5f, 1.f});
    std::vector<std::string> ins = {"x"};
    Node* n = nullptr;
    if (c.opset >= 11) {
      b.Const(HostTensor::FromVector<float>({-0.5f}, {}, "lo")).Const(HostTensor::FromVector<float>({1.f}, {}, "hi"));
      ins.push_back(c.has_min ? "lo" : "");
      if (c.has_max) ins.push_back("hi");
      n = &b.Op("Clip", ins, "y");
    } else {
      n = &b.Op("Clip", ins, "y");
      if (c.has_min) n->SetFloat("min", -0.5f);
      if (c.has_max) n->SetFloat("max", 1.f);
    }
    std::vector<std::string> frozen;
    if (c.opset >= 11) frozen = {"lo", "hi"};
    TrainingGraph tg = EndInWeightedSum(b, "y", {3, 5, 3}, frozen);
    ExpectGradientsMatchFiniteDifferences(tg, {}, c.opset < 7 ? 1e-2f : 1e-3f);
  }
}

// Sign, Floor, Ceil and Round pass no gradient: loss = sum(w * (op(x) + x)) has dx = w.
TEST(GradElementwise, PiecewiseConstantOpsHaveZeroGradient) {
  for (const char* op : {"Sign", "Floor", "Ceil", "Round"}) {
    SCOPED_TRACE(op);
    ModelBuilder b;
    KinkFreeParam(b, "x", {2, 7}, -2.6f, 2.6f, {-2.5f, -2.f, -1.5f, -1.f, -0.5f, 0.f, 0.5f, 1.f, 1.5f, 2.f, 2.5f});
    b.Op(op, {"x"}, "c");
    b.Op("Add", {"c", "x"}, "y");
    ExpectGradientsMatchFiniteDifferences(EndInWeightedSum(b, "y", {2, 7}), {}, 1e-2f);
  }
}

// Cast float32 -> float64 -> float32 around a float64 Sin, and float32 -> float32.
TEST(GradElementwise, CastBetweenFloatTypes) {
  ModelBuilder b;
  b.Param("x", {3, 5}, -1.f, 1.f);
  b.Op("Cast", {"x"}, "d").SetInt("to", static_cast<int64_t>(DType::kFloat64));
  b.Op("Sin", {"d"}, "sd");
  b.Op("Cast", {"sd"}, "f").SetInt("to", static_cast<int64_t>(DType::kFloat32));
  b.Op("Cast", {"f"}, "g").SetInt("to", static_cast<int64_t>(DType::kFloat32));
  b.Op("Mul", {"g", "g"}, "y");
  ExpectGradientsMatchFiniteDifferences(EndInWeightedSum(b, "y", {3, 5}), {}, 1e-3f);
}

struct PowCase {
  std::vector<int64_t> a, b;  // b empty: a constant exponent
  float exponent;             // the constant (float32, or int64 when integral_exponent)
  bool integral_exponent;
};

TEST(GradElementwise, PowMatchesFiniteDifferences) {
  const std::vector<PowCase> cases = {
      {{2, 3, 5}, {3, 1}, 0, false},  // both trained, exponent broadcast
      {{5}, {2, 3, 5}, 0, false},     // base broadcast
      {{2, 3, 5}, {}, 2.f, false},    // x^2 (LayerNorm's decomposition)
      {{2, 3, 5}, {}, 0.5f, false},
      {{2, 3, 5}, {}, -1.5f, false},
      {{2, 3, 5}, {}, 3.f, true},  // int64 exponent (opset 12+)
  };
  for (const PowCase& c : cases) {
    SCOPED_TRACE("A " + ShapeString(c.a) + " B " + (c.b.empty() ? std::to_string(c.exponent) : ShapeString(c.b)));
    ModelBuilder b;
    b.Opset(13);
    b.Param("a", c.a, 0.5f, 2.f);
    if (!c.b.empty()) {
      b.Param("e", c.b, -1.5f, 2.5f);
    } else if (c.integral_exponent) {
      b.Const(HostTensor::FromVector<int64_t>({static_cast<int64_t>(c.exponent)}, {}, "e"));
    } else {
      b.Const(HostTensor::FromVector<float>({c.exponent}, {}, "e"));
    }
    b.Op("Pow", {"a", "e"}, "y");
    const std::vector<int64_t> out = c.a.size() >= c.b.size() ? c.a : c.b;
    const std::vector<std::string> frozen = c.b.empty() ? std::vector<std::string>{"e"} : std::vector<std::string>{};
    TrainingGraph tg = EndInWeightedSum(b, "y", out, frozen);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 5e-3f);
  }
}

// Max/Min of three broadcast inputs, with two-way ties between the first two at some
// positions: central differences see half of the gradient there, as the rule gives.
TEST(GradElementwise, MaxMinWithBroadcastingAndTies) {
  for (const char* op : {"Max", "Min"}) {
    for (bool ties : {false, true}) {
      SCOPED_TRACE(std::string(op) + (ties ? " with ties" : ""));
      ModelBuilder b;
      b.Opset(13);
      // Distinct values 0.05 apart, shuffled, so no untied pair is within the step.
      b.Param("a", {2, 3, 5}, 0.f, 1.f).Param("b", {3, 1}, 0.f, 1.f).Param("c", {5}, 0.f, 1.f);
      std::vector<int> perm(38);
      for (int i = 0; i < 38; ++i) perm[static_cast<size_t>(i)] = i;
      std::shuffle(perm.begin(), perm.end(), b.rng());
      auto& inits = b.model().graph.initializers;
      float* a = inits[0].Data<float>();
      float* bv = inits[1].Data<float>();
      float* cv = inits[2].Data<float>();
      for (int i = 0; i < 30; ++i) a[i] = 0.05f * static_cast<float>(perm[static_cast<size_t>(i)]) - 1.f;
      for (int i = 0; i < 3; ++i) bv[i] = 0.05f * static_cast<float>(perm[static_cast<size_t>(30 + i)]) - 1.f;
      for (int i = 0; i < 5; ++i) cv[i] = 0.05f * static_cast<float>(perm[static_cast<size_t>(33 + i)]) - 1.f;
      if (ties) {
        // a[0, j, 0] = b[j] at three positions; c[0] is kept out of the way.
        cv[0] = std::string(op) == "Max" ? -2.f : 2.f;
        for (int j = 0; j < 3; ++j) a[j * 5] = bv[j];
      }
      b.Op(op, {"a", "b", "c"}, "y");
      ExpectGradientsMatchFiniteDifferences(EndInWeightedSum(b, "y", {2, 3, 5}), {}, 1e-3f);
    }
  }
}

TEST(GradElementwise, MaxMinOneAndTwoInputs) {
  ModelBuilder b;
  b.Opset(8);
  b.Param("a", {4, 3}, -1.f, 1.f).Param("b", {4, 1}, -1.f, 1.f);
  b.Op("Min", {"a"}, "m");
  b.Op("Max", {"m", "b"}, "y");
  ExpectGradientsMatchFiniteDifferences(EndInWeightedSum(b, "y", {4, 3}), {}, 1e-3f);
}

TEST(GradElementwise, MeanWithBroadcasting) {
  ModelBuilder b;
  b.Param("a", {2, 3, 5}, -1.f, 1.f).Param("b", {3, 1}, -1.f, 1.f).Param("c", {5}, -1.f, 1.f);
  b.Op("Mean", {"a", "b", "c"}, "m");
  b.Op("Mul", {"m", "m"}, "y");
  ExpectGradientsMatchFiniteDifferences(EndInWeightedSum(b, "y", {2, 3, 5}), {}, 1e-3f);
}

struct PReluCase {
  int64_t opset;
  std::vector<int64_t> slope;
};

TEST(GradElementwise, PReluMatchesFiniteDifferences) {
  for (const PReluCase& c : {PReluCase{13, {3, 1, 1}}, PReluCase{16, {5}}, PReluCase{9, {1}},
                             PReluCase{13, {2, 3, 4, 5}}, PReluCase{6, {3}}, PReluCase{6, {1}}}) {
    SCOPED_TRACE("opset " + std::to_string(c.opset) + " slope " + ShapeString(c.slope));
    ModelBuilder b;
    b.Opset(c.opset);
    KinkFreeParam(b, "x", {2, 3, 4, 5}, -1.f, 1.f, {0.f});
    b.Param("slope", c.slope, 0.05f, 0.5f);
    b.Op("PRelu", {"x", "slope"}, "y");
    ExpectGradientsMatchFiniteDifferences(EndInWeightedSum(b, "y", {2, 3, 4, 5}), {}, c.opset < 7 ? 1e-2f : 5e-3f);
  }
}

// The gradients at kinks, value by value: Clip passes nothing at its bounds (as torch's
// hardtanh/ReLU6), HardSwish has x/3 + 1/2 at -3 and 3, HardSigmoid nothing at +-3,
// Abs 0 at 0, and a tie of three Max inputs splits the gradient in thirds.
TEST(GradElementwise, KinkConventions) {
  auto grad_of = [](ModelBuilder& b, const std::string& op, std::vector<float> xs,
                    std::vector<std::pair<std::string, float>> attrs = {}) {
    b.Const(HostTensor::FromVector<float>(xs, {static_cast<int64_t>(xs.size())}, "x0"));
    b.Param("zero", {static_cast<int64_t>(xs.size())}, 0.f, 0.f);
    b.Op("Add", {"x0", "zero"}, "x");
    Node& n = b.Op(op, {"x"}, "y");
    for (const auto& [k, v] : attrs) n.SetFloat(k, v);
    b.Op("ReduceSum", {"y"}, "loss").SetInt("keepdims", 0);
    b.Output("loss", {});
    AutodiffOptions opts;
    opts.freeze = {"x0"};
    TrainingGraph tg = BuildTrainingGraph(b.Build(), opts);
    Executor exec(tg.model);
    HostTensor g = exec.Run({}, {tg.grads[0]})[0].ToHost();
    return std::vector<float>(g.Data<float>(), g.Data<float>() + g.NumElements());
  };
  {
    ModelBuilder b;
    b.Opset(10);
    EXPECT_EQ(grad_of(b, "Clip", {0.f, 6.f, 3.f, -1.f, 7.f}, {{"min", 0.f}, {"max", 6.f}}),
              (std::vector<float>{0.f, 0.f, 1.f, 0.f, 0.f}));
  }
  {
    ModelBuilder b;
    b.Opset(14);
    std::vector<float> g = grad_of(b, "HardSwish", {-3.f, 3.f, -3.5f, 3.5f, 0.f});
    const std::vector<float> want = {-0.5f, 1.5f, 0.f, 1.f, 0.5f};
    for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(g[i], want[i]) << i;
  }
  {
    ModelBuilder b;
    std::vector<float> g = grad_of(b, "HardSigmoid", {-3.f, 3.f, 0.f}, {{"alpha", 1.f / 6}, {"beta", 0.5f}});
    EXPECT_EQ(g[0], 0.f);
    EXPECT_EQ(g[1], 0.f);
    EXPECT_FLOAT_EQ(g[2], 1.f / 6);
  }
  {
    ModelBuilder b;
    EXPECT_EQ(grad_of(b, "Abs", {0.f, -2.f, 2.f}), (std::vector<float>{0.f, -1.f, 1.f}));
  }
  {
    ModelBuilder b;
    b.Param("a", {3}, 0.f, 0.f).Param("b", {3}, 0.f, 0.f).Param("c", {3}, 0.f, 0.f);
    auto& inits = b.model().graph.initializers;
    const float values[3][3] = {{1.f, 1.f, 1.f}, {1.f, 2.f, 0.f}, {1.f, 2.f, 3.f}};
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < 3; ++i) inits[static_cast<size_t>(k)].Data<float>()[i] = values[k][i];
    b.Op("Max", {"a", "b", "c"}, "y");
    b.Op("ReduceSum", {"y"}, "loss").SetInt("keepdims", 0);
    b.Output("loss", {});
    TrainingGraph tg = BuildTrainingGraph(b.Build(), {});
    Executor exec(tg.model);
    auto out = exec.Run({}, tg.grads);
    // Position 0: three-way tie; 1: a tie of b and c; 2: c alone.
    const float want[3][3] = {{1.f / 3, 0.f, 0.f}, {1.f / 3, 0.5f, 0.f}, {1.f / 3, 0.5f, 1.f}};  // [input][position]
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < 3; ++i)
        EXPECT_FLOAT_EQ(out[static_cast<size_t>(k)].ToHost().Data<float>()[i], want[k][i]) << k << "," << i;
  }
}

// Activations right after a Conv with 24 output channels, which oneDNN writes blocked by
// 16 (nChw16c, the channels padded to 32). The same model with a Reshape between Conv and
// the activation (which hands it plain data) must give the same outputs and gradients;
// the plain path is checked against finite differences above.
TEST(GradElementwise, ActivationsOnBlockedLayoutsAfterConv) {
  const std::vector<std::pair<std::string, std::vector<std::pair<std::string, float>>>> ops = {
      {"Clip", {}}, {"HardSwish", {}}, {"HardSigmoid", {{"alpha", 1.f / 6}, {"beta", 0.5f}}}, {"Erf", {}},
      {"Selu", {}}, {"Softsign", {}}, {"Sin", {}}};
  for (const auto& [op, attrs] : ops) {
    SCOPED_TRACE(op);
    std::vector<std::vector<HostTensor>> results;
    for (bool plain : {false, true}) {
      ModelBuilder b;
      b.Opset(14);
      b.Param("w", {24, 3, 3, 3}, -0.5f, 0.5f).Param("x", {2, 3, 5, 5}, -1.f, 1.f);
      b.Const(HostTensor::FromVector<int64_t>({2, 24, 3, 3}, {4}, "shape"));
      b.Op("Conv", {"x", "w"}, "c");
      std::string in = "c";
      if (plain) in = b.Op("Reshape", {"c", "shape"}, "c_plain").outputs[0];
      std::vector<std::string> ins = {in};
      std::vector<std::string> freeze = {"shape"};
      if (op == "Clip") {
        b.Const(HostTensor::FromVector<float>({-0.3f}, {}, "lo"));
        b.Const(HostTensor::FromVector<float>({0.4f}, {}, "hi"));
        ins = {in, "lo", "hi"};
        freeze = {"shape", "lo", "hi"};
      }
      Node& n = b.Op(op, ins, "y");
      for (const auto& [k, v] : attrs) n.SetFloat(k, v);
      b.Output("y", {2, 24, 3, 3});
      TrainingGraph tg = EndInWeightedSum(b, "y", {2, 24, 3, 3}, freeze);
      Executor exec(tg.model);
      std::vector<std::string> fetch = {"y"};
      fetch.insert(fetch.end(), tg.grads.begin(), tg.grads.end());
      std::vector<HostTensor> host;
      for (const Tensor& t : exec.Run({}, fetch)) host.push_back(t.ToHost());
      results.push_back(std::move(host));
    }
    ASSERT_EQ(results[0].size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      const HostTensor &blocked = results[0][k], &plain = results[1][k];
      ASSERT_EQ(blocked.NumElements(), plain.NumElements());
      for (int64_t i = 0; i < plain.NumElements(); ++i)
        ASSERT_NEAR(blocked.Data<float>()[i], plain.Data<float>()[i], 1e-5 * (1 + std::fabs(plain.Data<float>()[i])))
            << (k == 0 ? "y" : k == 1 ? "dw" : "dx") << "[" << i << "]";
    }
  }
}

// Squeeze-and-excitation's x * s after a Conv with 32 or 24 output channels (blocked by
// 16): x [2, C, 4, 4] and the scale s = Sigmoid(GlobalAveragePool(x)) [2, C, 1, 1] go to
// oneDNN's binary in the blocked layout. Outputs and gradients must equal the same model
// with x made plain first (a Reshape); every op and both argument orders.
TEST(GradElementwise, PerChannelScaleOnBlockedLayout) {
  // ch 24: the second block of 16 is padded; ch 0: a [32, 1, 1] parameter as the scale
  // (ConvNeXt's layer scale) instead of the squeeze-and-excitation branch.
  for (int64_t ch : {32, 24, 0}) {
    const bool layer_scale = ch == 0;
    if (layer_scale) ch = 32;
    for (const char* op : {"Mul", "Add", "Sub", "Div", "Max"}) {
      for (bool scale_first : {false, true}) {
        if (scale_first && std::string(op) == "Div") continue;  // s / x: x near 0 is ill-conditioned
        if ((ch == 24 || layer_scale) && std::string(op) != "Mul") continue;
        SCOPED_TRACE(std::string(op) + (scale_first ? "(s, x)" : "(x, s)") + " channels " + std::to_string(ch) +
                     (layer_scale ? " layer scale" : ""));
        std::vector<std::vector<HostTensor>> results;
        for (bool plain : {false, true}) {
          ModelBuilder b;
          b.Param("w", {ch, 3, 3, 3}, -0.5f, 0.5f).Param("x", {2, 3, 6, 6}, -1.f, 1.f);
          b.Const(HostTensor::FromVector<int64_t>({2, ch, 4, 4}, {4}, "shape"));
          b.Op("Conv", {"x", "w"}, "c");
          std::string in = "c";
          if (plain) in = b.Op("Reshape", {"c", "shape"}, "c_plain").outputs[0];
          if (layer_scale) {
            b.Param("s", {ch, 1, 1}, 0.5f, 1.5f);
          } else {
            b.Op("GlobalAveragePool", {in}, "p");
            b.Op("Sigmoid", {"p"}, "s");
          }
          b.Op(op, scale_first ? std::vector<std::string>{"s", in} : std::vector<std::string>{in, "s"}, "y");
          b.Output("y", {2, ch, 4, 4});
          TrainingGraph tg = EndInWeightedSum(b, "y", {2, ch, 4, 4}, {"shape"});
          Executor exec(tg.model);
          std::vector<std::string> fetch = {"y"};
          fetch.insert(fetch.end(), tg.grads.begin(), tg.grads.end());
          std::vector<HostTensor> host;
          for (const Tensor& t : exec.Run({}, fetch)) host.push_back(t.ToHost());
          results.push_back(std::move(host));
        }
        for (size_t k = 0; k < results[0].size(); ++k) {
          const HostTensor &blocked = results[0][k], &plain = results[1][k];
          ASSERT_EQ(blocked.NumElements(), plain.NumElements());
          for (int64_t i = 0; i < plain.NumElements(); ++i) {
            const float want = plain.Data<float>()[i];
            ASSERT_NEAR(blocked.Data<float>()[i], want, 1e-5 * (1 + std::fabs(want))) << k << "[" << i << "]";
          }
        }
      }
    }
  }
}

// Bad input fails with one error naming the node: a PRelu slope that does not broadcast
// to X, Celu with alpha 0, an opset-6 channel slope of the wrong length.
TEST(GradElementwise, BadInputsNameTheNode) {
  auto error_of = [](ModelBuilder& b, std::vector<int64_t> out) -> std::string {
    try {
      TrainingGraph tg = EndInWeightedSum(b, "y", out);
      Executor exec(tg.model);
      exec.Run({}, {tg.loss, tg.grads[0]});
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  {
    ModelBuilder b;
    b.Param("x", {2, 3, 5}, -1.f, 1.f).Param("slope", {4}, 0.1f, 0.2f);
    b.Op("PRelu", {"x", "slope"}, "y");
    const std::string msg = error_of(b, {2, 3, 5});
    EXPECT_NE(msg.find("PRelu_0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("does not broadcast"), std::string::npos) << msg;
  }
  {
    ModelBuilder b;
    b.Opset(6);
    b.Param("x", {2, 3, 5}, -1.f, 1.f).Param("slope", {2}, 0.1f, 0.2f);
    b.Op("PRelu", {"x", "slope"}, "y");
    const std::string msg = error_of(b, {2, 3, 5});
    EXPECT_NE(msg.find("PRelu_0"), std::string::npos) << msg;
  }
  {
    ModelBuilder b;
    b.Opset(12);
    b.Param("x", {3}, -1.f, 1.f);
    b.Op("Celu", {"x"}, "y").SetFloat("alpha", 0.f);
    const std::string msg = error_of(b, {3});
    EXPECT_NE(msg.find("Celu_0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("alpha"), std::string::npos) << msg;
  }
}

// The vectorisable float32 erf and exp behind Erf and its gradient, against the C
// library in double over [-6, 6] (erf) and e^x's whole normal range.
TEST(GradElementwise, FastErfAndExpAccuracy) {
  const UnaryParams p;
  double erf_err = 0, grad_err = 0, exp_err = 0;
  for (float x = -6.f; x <= 6.f; x += 1.f / 4096) {
    erf_err = std::max(erf_err, std::fabs(UnaryForward<UnaryFn::kErf>(x, p) - std::erf(static_cast<double>(x))));
    const double d = 1.1283791670955126 * std::exp(-static_cast<double>(x) * x);
    if (d > 1e-30) grad_err = std::max(grad_err, std::fabs(UnaryDerivative<UnaryFn::kErf>(x, p) - d) / d);
  }
  for (float x = -87.f; x <= 88.f; x += 1.f / 512) {
    const double e = std::exp(static_cast<double>(x));
    exp_err = std::max(exp_err, std::fabs(unary_detail::FastExp(x) - e) / e);
  }
  std::cout << "erf max abs error " << erf_err << ", erf' max rel error " << grad_err << ", exp max rel error "
            << exp_err << "\n";
  EXPECT_LT(erf_err, 4e-7);
  EXPECT_LT(grad_err, 3e-6);  // float32 x*x alone is 6e-8 relative, times x^2 <= 36
  EXPECT_LT(exp_err, 2e-7);
  EXPECT_EQ(unary_detail::FastExp(-100.f), 0.f);
  EXPECT_EQ(UnaryForward<UnaryFn::kErf>(-INFINITY, p), -1.f);
  EXPECT_TRUE(std::isnan(UnaryForward<UnaryFn::kErf>(NAN, p)));
}

}  // namespace
}  // namespace ot
