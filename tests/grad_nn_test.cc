// Finite-difference tests of the nn gradient rules and their kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "graph/autodiff.h"
#include "runtime/executor.h"
#include "tests/grad_check.h"

namespace ot {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ModelBuilder;

// Ends a model in loss = ReduceSum(y * w) over all axes, with w a fixed random weight of
// y's shape (so every element of y's gradient differs), and returns the training graph.
TrainingGraph WithWeightedSumLoss(ModelBuilder& b, const std::string& y, std::vector<int64_t> dims,
                                  std::vector<std::string> freeze = {}) {
  HostTensor w(DType::kFloat32, dims, "loss_w");
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < w.NumElements(); ++i) w.Data<float>()[i] = u(b.rng());
  b.Const(w);
  b.Op("Mul", {y, "loss_w"}, "weighted");
  b.Op("ReduceSum", {"weighted"}, "loss").SetInt("keepdims", 0);
  b.Output("loss", {});
  AutodiffOptions opts;
  opts.freeze = std::move(freeze);
  opts.freeze.push_back("loss_w");
  return BuildTrainingGraph(b.Build(), opts);
}

// --- LayerNormalization ---------------------------------------------------------------

struct LayerNormCase {
  int64_t axis;
  std::vector<int64_t> scale, bias;  // bias empty: no B input
  int outputs;                       // 1: Y; 3: Y, Mean, InvStdDev
};

TrainingGraph LayerNormModel(const LayerNormCase& c, std::vector<int64_t> xdims = {2, 3, 5}) {
  ModelBuilder b;
  b.Opset(17);
  b.Param("x", xdims, -1.f, 1.f).Param("scale", c.scale, 0.5f, 1.5f);
  std::vector<std::string> ins = {"x", "scale"};
  if (!c.bias.empty()) {
    b.Param("bias", c.bias, -0.5f, 0.5f);
    ins.push_back("bias");
  }
  Node& ln = b.Op("LayerNormalization", ins, "y");
  ln.SetInt("axis", c.axis);
  ln.SetFloat("epsilon", 1e-3f);
  if (c.outputs == 3) ln.outputs = {"y", "mean", "inv_std"};
  return WithWeightedSumLoss(b, "y", xdims);
}

TEST(GradNn, LayerNormalizationMatchesFiniteDifferences) {
  const std::vector<LayerNormCase> cases = {
      {-1, {5}, {5}, 1},       {-2, {3, 5}, {3, 5}, 3}, {-2, {5}, {1, 5}, 1},
      {1, {3, 1}, {}, 1},      {0, {2, 3, 5}, {3, 5}, 3}, {2, {1}, {5}, 1},
  };
  for (const LayerNormCase& c : cases) {
    SCOPED_TRACE("axis " + std::to_string(c.axis) + " scale " + ShapeString(c.scale) + " bias " + ShapeString(c.bias));
    TrainingGraph tg = LayerNormModel(c);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
}

TEST(GradNn, LayerNormalizationRank4AndOddSizes) {
  TrainingGraph tg = LayerNormModel({-1, {7}, {7}, 1}, {3, 1, 2, 7});
  ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
}

// The forward against a direct computation: Y, Mean and InvStdDev over axis -2 of [2,3,5].
TEST(GradNn, LayerNormalizationForwardOutputs) {
  ModelBuilder b;
  b.Opset(17);
  b.Input("x", DType::kFloat32, {2, 3, 5});
  b.Param("scale", {3, 5}, 0.5f, 1.5f).Param("bias", {5}, -0.5f, 0.5f);
  Node& ln = b.Op("LayerNormalization", {"x", "scale", "bias"}, "y");
  ln.SetInt("axis", -2);
  ln.SetFloat("epsilon", 1e-2f);
  ln.outputs = {"y", "mean", "inv_std"};
  b.Output("y", {2, 3, 5}).Output("mean", {2, 1, 1}).Output("inv_std", {2, 1, 1});
  Model m = b.Build();
  HostTensor x(DType::kFloat32, {2, 3, 5});
  for (int64_t i = 0; i < 30; ++i) x.Data<float>()[i] = std::sin(0.7f * static_cast<float>(i)) + 0.1f * static_cast<float>(i);
  const float* scale = m.graph.initializers[0].Data<float>();
  const float* bias = m.graph.initializers[1].Data<float>();
  Executor exec(m);
  auto out = exec.Run({{"x", Tensor::FromHost(x)}}, {"y", "mean", "inv_std"});
  ASSERT_EQ(out[1].shape(), (Shape{2, 1, 1}));
  for (int r = 0; r < 2; ++r) {
    double mu = 0, var = 0;
    for (int j = 0; j < 15; ++j) mu += x.Data<float>()[r * 15 + j];
    mu /= 15;
    for (int j = 0; j < 15; ++j) var += std::pow(x.Data<float>()[r * 15 + j] - mu, 2);
    var /= 15;
    const double inv = 1 / std::sqrt(var + 1e-2);
    EXPECT_NEAR(out[1].ToHost().Data<float>()[r], mu, 1e-5);
    EXPECT_NEAR(out[2].ToHost().Data<float>()[r], inv, 1e-4);
    for (int j = 0; j < 15; ++j) {
      const double want = (x.Data<float>()[r * 15 + j] - mu) * inv * scale[j] + bias[j % 5];
      EXPECT_NEAR(out[0].ToHost().Data<float>()[r * 15 + j], want, 1e-4) << r << "," << j;
    }
  }
}

// --- Reductions whose gradient depends on the values ----------------------------------

struct ReduceCase {
  std::string op;
  int64_t opset;
  std::vector<int64_t> axes;  // empty: all (attribute or input omitted)
  int64_t keepdims;
  bool axes_as_input;
};

std::vector<int64_t> ReducedDims(const std::vector<int64_t>& in, const std::vector<int64_t>& axes, bool keep) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < in.size(); ++d) {
    bool r = axes.empty();
    for (int64_t a : axes) r = r || (a < 0 ? a + static_cast<int64_t>(in.size()) : a) == static_cast<int64_t>(d);
    if (!r) out.push_back(in[d]);
    else if (keep) out.push_back(1);
  }
  return out;
}

TrainingGraph ReduceModel(const ReduceCase& c) {
  const std::vector<int64_t> xdims = {3, 4, 5};
  ModelBuilder b;
  b.Opset(c.opset);
  // Values away from 0 and (for Max/Min) from ties: |p| in [0.3, 1.3) with fixed signs,
  // positive for Prod and LogSum.
  // Distinct magnitudes 1/60 apart, shuffled, so no two are within the difference step.
  b.Param("p", xdims, 0.f, 1.f);
  std::vector<int> perm(60);
  for (int i = 0; i < 60; ++i) perm[static_cast<size_t>(i)] = i;
  std::shuffle(perm.begin(), perm.end(), b.rng());
  float* pv = b.model().graph.initializers.back().Data<float>();
  for (int i = 0; i < 60; ++i) pv[i] = 0.3f + static_cast<float>(perm[static_cast<size_t>(i)]) / 60.f;
  const bool positive = c.op == "ReduceProd" || c.op == "ReduceLogSum";
  HostTensor signs(DType::kFloat32, xdims, "signs");
  for (int64_t i = 0; i < signs.NumElements(); ++i) signs.Data<float>()[i] = positive || (i * 7) % 3 ? 1.f : -1.f;
  b.Const(signs);
  b.Op("Mul", {"p", "signs"}, "x");
  std::vector<std::string> ins = {"x"};
  if (c.axes_as_input && !c.axes.empty()) {
    b.Const(HostTensor::FromVector<int64_t>(c.axes, {static_cast<int64_t>(c.axes.size())}, "axes"));
    ins.push_back("axes");
  }
  Node& n = b.Op(c.op, ins, "y");
  n.SetInt("keepdims", c.keepdims);
  if (!c.axes_as_input && !c.axes.empty()) n.SetInts("axes", c.axes);
  return WithWeightedSumLoss(b, "y", ReducedDims(xdims, c.axes, c.keepdims != 0), {"signs"});
}

TEST(GradNn, ValueReductionsMatchFiniteDifferences) {
  for (const char* op : {"ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                         "ReduceLogSumExp"}) {
    for (const ReduceCase& c : {ReduceCase{op, 13, {1}, 1, false}, ReduceCase{op, 13, {0, -1}, 0, false},
                                ReduceCase{op, 11, {}, 0, false}, ReduceCase{op, 17, {2}, 0, false},
                                ReduceCase{op, 18, {0, 2}, 1, true}, ReduceCase{op, 18, {}, 0, true}}) {
      SCOPED_TRACE(c.op + " opset " + std::to_string(c.opset) + " axes " + ShapeString(c.axes) + " keepdims " +
                   std::to_string(c.keepdims));
      TrainingGraph tg = ReduceModel(c);
      ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-3f);
    }
  }
}

}  // namespace
}  // namespace ot
