// Finite-difference and forward tests of the classic ops in the forms ONNX Model Zoo models
// carry at opsets 1-9: LRN's gradient, Add/Sub/Mul/Div and Gemm with the broadcast/axis
// attributes of opsets before 7, Sum and Max of equal shapes, Concat without an axis and
// Reshape with a shape attribute, Dropout with is_test, ImageScaler (rewritten into Mul and
// Add), Upsample 7 and 9, BatchNormalization with is_test/spatial, old pooling and Flatten.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "graph/autodiff/autodiff.h"
#include "graph/passes/legacy_rewrite.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ModelBuilder;
using testing::TrainWithWeightedSumLoss;

// --- LRN --------------------------------------------------------------------------------

TEST(GradLegacy, LrnMatchesFiniteDifferences) {
  for (int64_t batch : {1, 3})
    for (int64_t channels : {3, 5, 7})
      for (int64_t size : {1, 3, 5}) {
        SCOPED_TRACE("batch " + std::to_string(batch) + " channels " + std::to_string(channels) + " size " +
                     std::to_string(size));
        const std::vector<int64_t> dims = {batch, channels, 2, 3};
        ModelBuilder b;
        b.Opset(9);
        b.Param("x", dims, -2.f, 2.f);
        Node& n = b.Op("LRN", {"x"}, "y");
        n.SetInt("size", size);
        // A large alpha so the window's sum matters as much as the element itself.
        n.SetFloat("alpha", 0.9f);
        n.SetFloat("beta", 0.75f);
        n.SetFloat("bias", size == 3 ? 2.f : 1.f);
        TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", dims);
        ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
      }
}

// The AlexNet / GoogLeNet attributes (alpha 1e-4, the default bias) on 5-D input.
TEST(GradLegacy, LrnZooAttributesOnFiveDims) {
  const std::vector<int64_t> dims = {2, 5, 2, 2, 2};
  ModelBuilder b;
  b.Opset(13);
  b.Param("x", dims, -3.f, 3.f);
  Node& n = b.Op("LRN", {"x"}, "y");
  n.SetInt("size", 5);
  n.SetFloat("alpha", 1e-4f);
  TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", dims);
  ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
}

// --- Add/Sub/Mul/Div and Gemm before opset 7 --------------------------------------------

struct LegacyBinaryCase {
  std::vector<int64_t> a, b;
  int broadcast;
  int64_t axis;  // -100: no axis attribute
};

TEST(GradLegacy, LegacyBroadcastBinaryOpsMatchFiniteDifferences) {
  const std::vector<LegacyBinaryCase> cases = {
      {{2, 3, 2, 2}, {3}, 1, 1},        // per channel, as Caffe2 conversions write biases
      {{2, 3, 2, 2}, {3, 1}, 1, 1},     // B has a 1 where A does not
      {{2, 3, 4}, {3, 4}, 1, -100},     // suffix matching
      {{2, 3, 2}, {2}, 1, 0},           // leading axis
      {{2, 3, 2}, {2, 3, 2}, 0, -100},  // equal shapes
  };
  for (int64_t opset : {1, 6})
    for (const char* op : {"Add", "Sub", "Mul", "Div"})
      for (const LegacyBinaryCase& c : cases) {
        SCOPED_TRACE(std::string(op) + " opset " + std::to_string(opset) + " A " + ShapeString(c.a) + " B " +
                     ShapeString(c.b) + " axis " + std::to_string(c.axis));
        ModelBuilder b;
        b.Opset(opset);
        b.Param("a", c.a, -1.f, 1.f).Param("b", c.b, 0.5f, 1.5f);  // B away from 0 for Div
        Node& n = b.Op(op, {"a", "b"}, "y");
        if (c.broadcast) n.SetInt("broadcast", 1);
        if (c.axis != -100) n.SetInt("axis", c.axis);
        TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", c.a);
        ASSERT_EQ(tg.params.size(), 2u);
        ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
      }
}

TEST(GradLegacy, GemmWithBroadcastBeforeOpset7MatchesFiniteDifferences) {
  for (const std::vector<int64_t>& cdims : {std::vector<int64_t>{4}, std::vector<int64_t>{3, 4}}) {
    SCOPED_TRACE("C " + ShapeString(cdims));
    ModelBuilder b;
    b.Opset(6);
    b.Param("a", {3, 5}, -1.f, 1.f).Param("w", {4, 5}, -1.f, 1.f).Param("c", cdims, -1.f, 1.f);
    Node& n = b.Op("Gemm", {"a", "w", "c"}, "y");
    n.SetInt("transB", 1);
    n.SetFloat("alpha", 1.5f);
    n.SetFloat("beta", 0.5f);
    if (cdims.size() == 1) n.SetInt("broadcast", 1);
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", {3, 4});
    ASSERT_EQ(tg.params.size(), 3u);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
}

// --- Sum, Max, Concat, Reshape, Flatten in their first forms ----------------------------

TEST(GradLegacy, OldSumMaxConcatReshapeFlattenMatchFiniteDifferences) {
  struct Case {
    std::string name;
    int64_t opset;
    std::function<void(ModelBuilder&)> build;  // reads p0, p1 ([2, 3, 2] each), writes y
    std::vector<int64_t> y;
  };
  const std::vector<Case> cases = {
      {"Sum opset 6", 6, [](ModelBuilder& b) { b.Op("Sum", {"p0", "p1"}, "y"); }, {2, 3, 2}},
      {"Max opset 6", 6, [](ModelBuilder& b) { b.Op("Max", {"p0", "p1"}, "y"); }, {2, 3, 2}},
      {"Min opset 1", 1, [](ModelBuilder& b) { b.Op("Min", {"p0", "p1"}, "y"); }, {2, 3, 2}},
      {"Concat opset 1, default axis 1", 1, [](ModelBuilder& b) { b.Op("Concat", {"p0", "p1"}, "y"); }, {2, 6, 2}},
      {"Concat opset 3, axis 2", 3, [](ModelBuilder& b) { b.Op("Concat", {"p0", "p1"}, "y").SetInt("axis", 2); },
       {2, 3, 4}},
      {"Reshape opset 4 (shape attribute)", 4,
       [](ModelBuilder& b) {
         b.Op("Add", {"p0", "p1"}, "s");
         b.Op("Reshape", {"s"}, "y").SetInts("shape", {3, -1, 0});
       },
       {3, 2, 2}},
      {"Flatten opset 1", 1,
       [](ModelBuilder& b) {
         b.Op("Mul", {"p0", "p1"}, "s");
         b.Op("Flatten", {"s"}, "y").SetInt("axis", 2);
       },
       {6, 2}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ModelBuilder b;
    b.Opset(c.opset);
    b.Param("p0", {2, 3, 2}, -1.f, 1.f).Param("p1", {2, 3, 2}, -1.f, 1.f);
    c.build(b);
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", c.y);
    ASSERT_EQ(tg.params.size(), 2u);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-3f);
  }
}

// --- Dropout ----------------------------------------------------------------------------

// Dropout's gradient against its own forward: with loss = sum(w * Y), the gradient of X is
// w * mask / (1 - ratio) and the loss is sum(dX * X). Before opset 7 the training graph
// drops (is_test 0), from 7 to 11 it passes X through.
TEST(GradLegacy, DropoutGradientAgreesWithItsForward) {
  for (int64_t opset : {1, 6, 7, 9, 10}) {
    SCOPED_TRACE("opset " + std::to_string(opset));
    const std::vector<int64_t> dims = {4, 50};
    ModelBuilder b;
    b.Opset(opset);
    b.Param("x", dims, 0.5f, 1.5f);
    Node& n = b.Op("Dropout", {"x"}, "y");
    n.SetFloat("ratio", 0.5f);
    if (opset < 7) n.SetInt("is_test", 0);
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", dims);
    const HostTensor x = *tg.model.graph.FindInitializer("x");
    const HostTensor w = *tg.model.graph.FindInitializer("loss_w");
    Executor exec(tg.model);
    std::vector<Tensor> out = exec.Run({}, {tg.loss, tg.grads[0]});
    const HostTensor dx = out[1].ToHost();
    double loss = 0;
    int dropped = 0;
    for (int64_t i = 0; i < x.NumElements(); ++i) {
      const float g = dx.Data<float>()[i], wi = w.Data<float>()[i];
      if (opset >= 7) {
        ASSERT_FLOAT_EQ(g, wi) << i;
      } else {
        ASSERT_TRUE(g == 0.f || std::fabs(g - 2 * wi) < 1e-6f) << i << ": " << g << " for w " << wi;
        dropped += g == 0.f;
      }
      loss += static_cast<double>(g) * x.Data<float>()[i];
    }
    EXPECT_NEAR(out[0].ToHost().Data<float>()[0], loss, 1e-3);
    if (opset < 7) {
      EXPECT_GT(dropped, 40);
      EXPECT_LT(dropped, 160);
    }
  }
}

// --- ImageScaler ------------------------------------------------------------------------

TEST(GradLegacy, ImageScalerIsRewrittenAndDifferentiable) {
  for (int64_t opset : {1, 6, 9}) {
    SCOPED_TRACE("opset " + std::to_string(opset));
    const std::vector<int64_t> dims = {2, 3, 2, 2};
    const std::vector<float> bias = {-0.5f, 0.25f, 1.f};
    ModelBuilder b;
    b.Opset(opset);
    b.Param("x", dims, -1.f, 1.f);
    Node& n = b.Op("ImageScaler", {"x"}, "y");
    n.SetFloat("scale", 1.5f);
    n.SetFloats("bias", bias);
    ASSERT_EQ(RewriteLegacyOps(b.model()), 1);
    for (const Node& m : b.model().graph.nodes) EXPECT_NE(m.op_type, "ImageScaler");
    // The forward against y = scale * x + bias[c].
    Model fwd = b.model();
    ValueInfo yv;
    yv.name = "y";
    yv.dtype = DType::kFloat32;
    fwd.graph.outputs.push_back(yv);
    const HostTensor y = Executor(fwd).Run({}, {"y"})[0].ToHost();
    const HostTensor& x = fwd.graph.initializers[0];
    ASSERT_EQ(y.dims, dims);
    for (int64_t i = 0; i < y.NumElements(); ++i)
      ASSERT_NEAR(y.Data<float>()[i], 1.5f * x.Data<float>()[i] + bias[static_cast<size_t>((i / 4) % 3)], 1e-6) << i;
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", dims);
    ASSERT_EQ(tg.params.size(), 1u);  // the scale and bias constants are not trained
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
}

// --- Upsample 7 (scales attribute) and 9 (scales input) ----------------------------------

TEST(GradLegacy, UpsampleMatchesFiniteDifferences) {
  for (int64_t opset : {7, 8, 9})
    for (const char* mode : {"nearest", "linear"}) {
      SCOPED_TRACE(std::string(mode) + " opset " + std::to_string(opset));
      const std::vector<float> scales = {1.f, 1.f, 2.f, 3.f};
      ModelBuilder b;
      b.Opset(opset);
      b.Param("x", {2, 2, 3, 2}, -1.f, 1.f);
      std::vector<std::string> ins = {"x"};
      if (opset >= 9) {
        b.Const(HostTensor::FromVector<float>(scales, {4}, "scales"));
        ins.push_back("scales");
      }
      Node& n = b.Op("Upsample", ins, "y");
      n.SetString("mode", mode);
      if (opset < 9) n.SetFloats("scales", scales);
      TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", {2, 2, 6, 6}, opset >= 9 ? std::vector<std::string>{"scales"}
                                                                                   : std::vector<std::string>{});
      ASSERT_EQ(tg.params.size(), 1u);
      ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
    }
}

// --- BatchNormalization with is_test / spatial, old pooling ------------------------------

TEST(GradLegacy, OldBatchNormalizationAndPoolingMatchFiniteDifferences) {
  for (int64_t opset : {6, 7}) {
    for (const char* pool : {"MaxPool", "AveragePool"}) {
      SCOPED_TRACE(std::string(pool) + " after BatchNormalization, opset " + std::to_string(opset));
      ModelBuilder b;
      b.Opset(opset);
      b.Param("x", {3, 2, 4, 4}, -1.f, 1.f).Param("scale", {2}, 0.5f, 1.5f).Param("bias", {2}, -0.5f, 0.5f);
      b.Const(HostTensor::FromVector<float>({0.1f, -0.2f}, {2}, "mean"));
      b.Const(HostTensor::FromVector<float>({1.5f, 0.7f}, {2}, "var"));
      Node& bn = b.Op("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, "h");
      bn.SetInt("spatial", 1);
      if (opset < 7) bn.SetInt("is_test", 1);
      Node& p = b.Op(pool, {"h"}, "y");
      p.SetInts("kernel_shape", {2, 2});
      p.SetInts("strides", {2, 2});
      p.SetInts("pads", {1, 1, 1, 1});
      TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", {3, 2, 3, 3}, {"mean", "var"});
      ASSERT_EQ(tg.params.size(), 3u);
      ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
    }
  }
}

}  // namespace
}  // namespace ot
