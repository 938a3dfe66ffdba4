// Convolutions that oneDNN 2.6 runs in channels-last (nhwc) because nChw16c has only its
// reference kernel for them: grouped with 8 channels per group (RegNet), and the weight
// gradient of a 5x5 depthwise convolution (EfficientNet). Finite differences through
// grouped Conv -> depthwise Conv (linear in every parameter, so the central difference
// is exact up to float32 rounding; the loss is a weighted sum of a small output).
#include <gtest/gtest.h>

#include "graph/autodiff/autodiff.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ModelBuilder;

TrainingGraph GroupedDepthwiseModel(int64_t kernel, int64_t stride) {
  ModelBuilder b;
  b.Opset(15);
  const std::vector<int64_t> xdims{2, 16, 5, 4};
  b.Param("x", xdims, -1.f, 1.f).Param("w", {16, 8, 3, 3}, -0.3f, 0.3f);
  b.Param("dw", {16, 1, kernel, kernel}, -0.3f, 0.3f);
  Node& conv = b.Op("Conv", {"x", "w"}, "r");
  conv.SetInt("group", 2);
  conv.SetInts("pads", {1, 1, 1, 1});
  Node& dw = b.Op("Conv", {"r", "dw"}, "y");
  dw.SetInt("group", 16);
  const int64_t pad = kernel / 2;
  dw.SetInts("pads", {pad, pad, pad, pad});
  dw.SetInts("strides", {stride, stride});
  const std::vector<int64_t> ydims{2, 16, (5 + 2 * pad - kernel) / stride + 1, (4 + 2 * pad - kernel) / stride + 1};
  HostTensor lw(DType::kFloat32, ydims, "loss_w");
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < lw.NumElements(); ++i) lw.Data<float>()[i] = u(b.rng());
  b.Const(lw);
  b.Op("Mul", {"y", "loss_w"}, "weighted");
  b.Op("ReduceSum", {"weighted"}, "loss").SetInt("keepdims", 0);
  b.Output("loss", {});
  return testing::TrainFrozenLossWeights(b.Build());
}

TEST(ConvLayouts, GroupedEightPerGroupAndDepthwiseFiveByFive) {
  for (auto [kernel, stride] : {std::pair<int64_t, int64_t>{5, 1}, {5, 2}, {3, 1}}) {
    SCOPED_TRACE("depthwise " + std::to_string(kernel) + "x" + std::to_string(kernel) + " stride " +
                 std::to_string(stride));
    TrainingGraph tg = GroupedDepthwiseModel(kernel, stride);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 5e-2f);  // linear: any step is exact but for rounding
  }
}

// Depthwise weight gradients on maps within the window's reach, where oneDNN has no
// depthwise kernel and ours runs (conv_depthwise.h): 5x5 and 3x3 on 2x2 maps (EfficientNet's
// and MobileNetV2's last stages), a 4x3 map at stride 2, dilation 2, channels that do not fill
// the last block of 8 or 16, and a bias. Central differences of a loss linear in the
// depthwise weights, through a ReLU-free chain (exact up to float32 rounding).
struct DepthwiseCase {
  int64_t channels, h, w, kernel, stride, dilation;
  bool bias;
};

TrainingGraph DepthwiseModel(const DepthwiseCase& c) {
  ModelBuilder b;
  b.Opset(15);
  b.Param("x", {3, c.channels, c.h, c.w}, -1.f, 1.f).Param("dw", {c.channels, 1, c.kernel, c.kernel}, -0.3f, 0.3f);
  std::vector<std::string> inputs = {"x", "dw"};
  if (c.bias) {
    b.Param("db", {c.channels}, -0.3f, 0.3f);
    inputs.push_back("db");
  }
  Node& dw = b.Op("Conv", inputs, "y");
  dw.SetInt("group", c.channels);
  const int64_t reach = c.dilation * (c.kernel - 1), pad = reach / 2;
  dw.SetInts("pads", {pad, pad, pad, pad});
  dw.SetInts("strides", {c.stride, c.stride});
  dw.SetInts("dilations", {c.dilation, c.dilation});
  const std::vector<int64_t> ydims{3, c.channels, (c.h + 2 * pad - reach - 1) / c.stride + 1,
                                   (c.w + 2 * pad - reach - 1) / c.stride + 1};
  testing::AddWeightedSumLoss(b, "y", ydims);
  return testing::TrainFrozenLossWeights(b.Build());
}

TEST(ConvLayouts, DepthwiseWeightGradientOnMapsWithinTheWindow) {
  const DepthwiseCase cases[] = {
      {40, 2, 2, 5, 1, 1, false}, {24, 2, 2, 3, 1, 1, true}, {32, 4, 3, 5, 2, 1, false},
      {20, 3, 3, 3, 1, 2, true},  {16, 4, 4, 5, 1, 1, false}, {48, 6, 5, 3, 1, 1, false},
  };
  bool ours = false;
  for (const DepthwiseCase& c : cases) {
    SCOPED_TRACE(std::to_string(c.channels) + " channels, " + std::to_string(c.h) + "x" + std::to_string(c.w) +
                 " map, kernel " + std::to_string(c.kernel) + ", stride " + std::to_string(c.stride) + ", dilation " +
                 std::to_string(c.dilation) + (c.bias ? ", bias" : ""));
    TrainingGraph tg = DepthwiseModel(c);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 5e-2f);
    Executor exec(tg.model);
    exec.Run({}, tg.grads);
    ours = ours || exec.PlanNotes().find("depthwise(ours") != std::string::npos;
  }
  // At least the 2x2 maps run on ours (oneDNN 2.6-2.7 has no depthwise kernel there).
  EXPECT_TRUE(ours);
}

}  // namespace
}  // namespace ot
