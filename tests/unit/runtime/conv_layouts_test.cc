// Convolutions that oneDNN 2.6 runs in channels-last (nhwc) because nChw16c has only its
// reference kernel for them: grouped with 8 channels per group (RegNet), and the weight
// gradient of a 5x5 depthwise convolution (EfficientNet). Finite differences through
// grouped Conv -> depthwise Conv (linear in every parameter, so the central difference
// is exact up to float32 rounding; the loss is a weighted sum of a small output).
#include <gtest/gtest.h>

#include "graph/autodiff/autodiff.h"
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
  AutodiffOptions opts;
  opts.freeze = {"loss_w"};
  return BuildTrainingGraph(b.Build(), opts);
}

TEST(ConvLayouts, GroupedEightPerGroupAndDepthwiseFiveByFive) {
  for (auto [kernel, stride] : {std::pair<int64_t, int64_t>{5, 1}, {5, 2}, {3, 1}}) {
    SCOPED_TRACE("depthwise " + std::to_string(kernel) + "x" + std::to_string(kernel) + " stride " +
                 std::to_string(stride));
    TrainingGraph tg = GroupedDepthwiseModel(kernel, stride);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 5e-2f);  // linear: any step is exact but for rounding
  }
}

}  // namespace
}  // namespace ot
