// The cuDNN kernels (runtime/cuda/cudnn_*.cc) against the CPU runtime as the oracle: each
// test runs a one-node model on the CPU and on cuda:0 with the same random inputs and
// compares every output (rtol 1e-4). Gradient ops of the org.onnxtrain domain are called
// directly with the inputs the autodiff pass gives them. Every test skips, with the
// reason, on a machine without a usable CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "graph/autodiff/autodiff.h"
#include "graph/error.h"
#include "graph/autodiff/gradient_registry.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/executor/executor.h"
#include "tests/cuda/cuda_node_case.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/common/test_util.h"

namespace ot {
namespace {

using namespace cuda_case;  // NOLINT: RandomTensor, NodeSpec, RunOn, ExpectSameOnCuda

class CudaDnn : public ::testing::Test {
 protected:
  void SetUp() override {
    OT_REQUIRE_GPU();
  }
};

// ---- Conv ----

TEST_F(CudaDnn, Conv2dWithBiasAndPads) {
  NodeSpec s{"Conv", 17, [](Node& n) { n.SetInts("pads", {1, 1, 1, 1}); }};
  ExpectSameOnCuda(s, {RandomTensor({2, 3, 8, 8}, 1), RandomTensor({4, 3, 3, 3}, 2), RandomTensor({4}, 3)});
}

TEST_F(CudaDnn, ConvGroupedStridedDilated) {
  NodeSpec s{"Conv", 17, [](Node& n) {
               n.SetInt("group", 2);
               n.SetInts("strides", {2, 2});
               n.SetInts("dilations", {2, 2});
               n.SetInts("pads", {2, 2, 2, 2});
             }};
  ExpectSameOnCuda(s, {RandomTensor({2, 4, 9, 9}, 4), RandomTensor({6, 2, 3, 3}, 5)});
}

TEST_F(CudaDnn, ConvDepthwise) {
  NodeSpec s{"Conv", 17, [](Node& n) {
               n.SetInt("group", 8);
               n.SetInts("pads", {1, 1, 1, 1});
             }};
  ExpectSameOnCuda(s, {RandomTensor({2, 8, 7, 7}, 6), RandomTensor({8, 1, 3, 3}, 7), RandomTensor({8}, 8)});
}

TEST_F(CudaDnn, Conv1dAnd3d) {
  NodeSpec s1{"Conv", 17, [](Node& n) {
                n.SetInts("pads", {1, 1});
                n.SetInts("strides", {2});
              }};
  ExpectSameOnCuda(s1, {RandomTensor({2, 3, 11}, 9), RandomTensor({5, 3, 3}, 10), RandomTensor({5}, 11)});
  NodeSpec s3{"Conv", 17, [](Node& n) { n.SetInts("pads", {1, 0, 1, 1, 0, 1}); }};
  ExpectSameOnCuda(s3, {RandomTensor({1, 2, 5, 4, 6}, 12), RandomTensor({3, 2, 3, 2, 3}, 13)});
}

TEST_F(CudaDnn, ConvAutoPadSameWithOddKernel) {
  NodeSpec s{"Conv", 17, [](Node& n) { n.SetString("auto_pad", "SAME_UPPER"); }};
  ExpectSameOnCuda(s, {RandomTensor({1, 2, 6, 7}, 14), RandomTensor({3, 2, 3, 5}, 15)});
}

TEST_F(CudaDnn, ConvUnusedEndPaddingIsSymmetric) {
  // Stride 2 over 9 with pads 1/2: the extra end pad is never reached by a window.
  NodeSpec s{"Conv", 17, [](Node& n) {
               n.SetInts("pads", {1, 1, 2, 2});
               n.SetInts("strides", {2, 2});
             }};
  ExpectSameOnCuda(s, {RandomTensor({1, 2, 9, 9}, 16), RandomTensor({2, 2, 3, 3}, 17)});
}

TEST_F(CudaDnn, ConvUnevenPaddingPadsExplicitly) {
  const std::vector<HostTensor> even_kernel = {RandomTensor({1, 2, 6, 7}, 18), RandomTensor({3, 2, 2, 4}, 19)};
  for (const char* mode : {"SAME_UPPER", "SAME_LOWER"})
    ExpectSameOnCuda(NodeSpec{"Conv", 17, [&](Node& n) { n.SetString("auto_pad", mode); }}, even_kernel);
  // Stride 2 over an even size: TensorFlow-style 0 / 1 padding.
  ExpectSameOnCuda(NodeSpec{"Conv", 17,
                            [](Node& n) {
                              n.SetString("auto_pad", "SAME_UPPER");
                              n.SetInts("strides", {2, 2});
                            }},
                   {RandomTensor({2, 3, 8, 8}, 130), RandomTensor({4, 3, 3, 3}, 131), RandomTensor({4}, 132)});
  ExpectSameOnCuda(NodeSpec{"Conv", 17, [](Node& n) { n.SetInts("pads", {0, 2, 1, 0}); }},
                   {RandomTensor({1, 2, 5, 6}, 133), RandomTensor({2, 2, 3, 3}, 134)});
}

NodeSpec ConvGradSpec(std::vector<bool> outputs, const std::function<void(Node&)>& attrs) {
  NodeSpec s{"ConvGrad", 17, attrs, std::move(outputs), kGradDomain};
  return s;
}

TEST_F(CudaDnn, ConvGradAllOutputs) {
  auto attrs = [](Node& n) {
    n.SetInts("pads", {1, 1, 1, 1});
    n.SetInts("strides", {2, 2});
  };
  // dY is 2 x 4 x 4 x 4 for X 2 x 3 x 8 x 8 and a 3x3 kernel, stride 2, pad 1.
  ExpectSameOnCuda(ConvGradSpec({true, true, true}, attrs),
                   {RandomTensor({2, 4, 4, 4}, 20), RandomTensor({2, 3, 8, 8}, 21), RandomTensor({4, 3, 3, 3}, 22)});
}

TEST_F(CudaDnn, ConvGradGroupedSubsetsOfOutputs) {
  auto attrs = [](Node& n) {
    n.SetInt("group", 2);
    n.SetInts("dilations", {2, 2});
    n.SetInts("pads", {2, 2, 2, 2});
  };
  const std::vector<HostTensor> in = {RandomTensor({2, 6, 7, 7}, 23), RandomTensor({2, 4, 7, 7}, 24),
                                      RandomTensor({6, 2, 3, 3}, 25)};
  ExpectSameOnCuda(ConvGradSpec({true, false, false}, attrs), in);
  ExpectSameOnCuda(ConvGradSpec({false, true, true}, attrs), in);
  ExpectSameOnCuda(ConvGradSpec({false, false, true}, attrs), in);
}

TEST_F(CudaDnn, ConvGradUnevenPadding) {
  auto attrs = [](Node& n) {
    n.SetString("auto_pad", "SAME_UPPER");
    n.SetInts("strides", {2, 2});
  };
  // 8 x 8 at stride 2 gives 4 x 4 with pads 0 before, 1 after.
  const std::vector<HostTensor> in = {RandomTensor({2, 4, 4, 4}, 135), RandomTensor({2, 3, 8, 8}, 136),
                                      RandomTensor({4, 3, 3, 3}, 137)};
  ExpectSameOnCuda(ConvGradSpec({true, true, true}, attrs), in);
  ExpectSameOnCuda(ConvGradSpec({true, false, false}, attrs), in);
  ExpectSameOnCuda(ConvGradSpec({false, true, false}, attrs), in);
}

TEST_F(CudaDnn, ConvGrad1d) {
  auto attrs = [](Node& n) { n.SetInts("pads", {2, 2}); };
  ExpectSameOnCuda(ConvGradSpec({true, true, true}, attrs),
                   {RandomTensor({2, 3, 10}, 26), RandomTensor({2, 2, 10}, 27), RandomTensor({3, 2, 5}, 28)});
}

// ---- BatchNormalization ----

std::vector<HostTensor> BatchNormInputs(const Ints& x_shape, uint32_t seed) {
  const int64_t c = x_shape[1];
  return {RandomTensor(x_shape, seed, -2.f, 3.f), RandomTensor({c}, seed + 1, 0.5f, 1.5f),
          RandomTensor({c}, seed + 2), RandomTensor({c}, seed + 3), RandomTensor({c}, seed + 4, 0.5f, 2.f)};
}

TEST_F(CudaDnn, BatchNormInference) {
  NodeSpec s{"BatchNormalization", 15, [](Node& n) { n.SetFloat("epsilon", 1e-3f); }};
  ExpectSameOnCuda(s, BatchNormInputs({2, 3, 5, 4}, 30));
  ExpectSameOnCuda(s, BatchNormInputs({4, 6}, 31));        // rank 2
  ExpectSameOnCuda(s, BatchNormInputs({2, 3, 2, 3, 4}, 32));  // 3D
}

TEST_F(CudaDnn, BatchNormTrainingModeOpset15) {
  NodeSpec s{"BatchNormalization", 15,
             [](Node& n) {
               n.SetInt("training_mode", 1);
               n.SetFloat("momentum", 0.8f);
             },
             {true, true, true}};
  ExpectSameOnCuda(s, BatchNormInputs({3, 4, 5, 5}, 33));
}

TEST_F(CudaDnn, BatchNormTrainingModeOpset9SavesStatistics) {
  NodeSpec s{"BatchNormalization", 9, [](Node& n) { n.SetFloat("momentum", 0.7f); },
             {true, true, true, true, true}};
  ExpectSameOnCuda(s, BatchNormInputs({4, 3, 6, 2}, 34));
}

TEST_F(CudaDnn, BatchNormTrainingOp) {
  NodeSpec s{"BatchNormTraining", 17, [](Node& n) { n.SetFloat("epsilon", 1e-5f); },
             {true, true, true, true, true}, kGradDomain};
  ExpectSameOnCuda(s, BatchNormInputs({2, 5, 3, 3}, 35));
  NodeSpec y_only{"BatchNormTraining", 17, [](Node&) {}, {true, false, false, true, false}, kGradDomain};
  ExpectSameOnCuda(y_only, BatchNormInputs({2, 5, 7}, 36));
}

TEST_F(CudaDnn, BatchNormalizationGrad) {
  const Ints shape = {3, 4, 5, 5};
  // dY, X, scale, saved_mean, saved_var (population variance, positive).
  std::vector<HostTensor> in = {RandomTensor(shape, 40), RandomTensor(shape, 41, -2.f, 2.f),
                                RandomTensor({4}, 42, 0.5f, 1.5f), RandomTensor({4}, 43, -0.2f, 0.2f),
                                RandomTensor({4}, 44, 0.5f, 1.5f)};
  NodeSpec all{"BatchNormalizationGrad", 17, [](Node& n) { n.SetFloat("epsilon", 1e-4f); }, {true, true, true},
               kGradDomain};
  ExpectSameOnCuda(all, in, 1e-4, 1e-4);
  NodeSpec dx_only{"BatchNormalizationGrad", 17, [](Node&) {}, {true, false, false}, kGradDomain};
  ExpectSameOnCuda(dx_only, in, 1e-4, 1e-4);
}

// ---- Pooling ----

TEST_F(CudaDnn, MaxPoolStridedPadded) {
  NodeSpec s{"MaxPool", 17, [](Node& n) {
               n.SetInts("kernel_shape", {3, 3});
               n.SetInts("strides", {2, 2});
               n.SetInts("pads", {1, 1, 1, 1});
             }};
  ExpectSameOnCuda(s, {RandomTensor({2, 3, 9, 9}, 50)});
}

TEST_F(CudaDnn, AveragePoolCountIncludePadBothWays) {
  for (int include : {0, 1}) {
    NodeSpec s{"AveragePool", 17, [include](Node& n) {
                 n.SetInts("kernel_shape", {3, 2});
                 n.SetInts("pads", {1, 1, 1, 1});
                 n.SetInt("count_include_pad", include);
               }};
    ExpectSameOnCuda(s, {RandomTensor({2, 3, 7, 6}, 51)});
  }
}

TEST_F(CudaDnn, Pool1dAnd3d) {
  NodeSpec s1{"MaxPool", 17, [](Node& n) {
                n.SetInts("kernel_shape", {3});
                n.SetInts("strides", {2});
              }};
  ExpectSameOnCuda(s1, {RandomTensor({2, 3, 11}, 52)});
  NodeSpec s3{"AveragePool", 17, [](Node& n) {
                n.SetInts("kernel_shape", {2, 2, 2});
                n.SetInts("strides", {2, 2, 2});
              }};
  ExpectSameOnCuda(s3, {RandomTensor({1, 2, 4, 6, 4}, 53)});
}

TEST_F(CudaDnn, GlobalPools) {
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    NodeSpec s{op, 17};
    ExpectSameOnCuda(s, {RandomTensor({2, 5, 7, 6}, 54)});
    ExpectSameOnCuda(s, {RandomTensor({2, 5, 9}, 55)});
  }
}

// Windows cuDNN cannot describe run on our own pooling kernels.
TEST_F(CudaDnn, PoolCeilModeUnevenPadsAndDilations) {
  auto ceil = [](Node& n) {
    n.SetInts("kernel_shape", {3, 3});
    n.SetInts("strides", {2, 2});
    n.SetInt("ceil_mode", 1);
  };
  auto uneven = [](Node& n) {
    n.SetInts("kernel_shape", {2, 3});
    n.SetInts("pads", {0, 1, 1, 0});
  };
  auto dilated = [](Node& n) {
    n.SetInts("kernel_shape", {2, 2});
    n.SetInts("dilations", {2, 3});
    n.SetInts("pads", {1, 1, 1, 1});
  };
  const HostTensor x = RandomTensor({2, 3, 8, 9}, 56);
  for (const char* op : {"MaxPool", "AveragePool"}) {
    ExpectSameOnCuda(NodeSpec{op, 17, ceil}, {x});
    ExpectSameOnCuda(NodeSpec{op, 17, uneven}, {x});
    ExpectSameOnCuda(NodeSpec{op, 17,
                              [&](Node& n) {
                                uneven(n);
                                n.SetInt("count_include_pad", 1);
                              }},
                     {x});
  }
  ExpectSameOnCuda(NodeSpec{"MaxPool", 17, dilated}, {x});
  ExpectSameOnCuda(NodeSpec{"MaxPool", 17,
                            [](Node& n) {
                              n.SetInts("kernel_shape", {3});
                              n.SetInts("strides", {2});
                              n.SetInt("ceil_mode", 1);
                            }},
                   {RandomTensor({2, 3, 10}, 57)});
}

void ExpectPoolGradSame(const std::string& forward, const std::function<void(Node&)>& attrs, const Ints& x_shape,
                        uint32_t seed) {
  // The forward on the CPU gives dY's shape.
  const HostTensor x = RandomTensor(x_shape, seed);
  const HostTensor y = RunOn(Device::CPU(), NodeSpec{forward, 17, attrs}, {x})[0];
  NodeSpec grad{forward + "Grad", 17, attrs, {true}, kGradDomain};
  ExpectSameOnCuda(grad, {RandomTensor(y.dims, seed + 1), x});
}

TEST_F(CudaDnn, PoolGradients) {
  auto window = [](Node& n) {
    n.SetInts("kernel_shape", {3, 3});
    n.SetInts("strides", {2, 2});
    n.SetInts("pads", {1, 1, 1, 1});
  };
  ExpectPoolGradSame("MaxPool", window, {2, 3, 9, 9}, 60);
  ExpectPoolGradSame("AveragePool", window, {2, 3, 9, 9}, 62);
  ExpectPoolGradSame(
      "AveragePool",
      [&](Node& n) {
        window(n);
        n.SetInt("count_include_pad", 1);
      },
      {2, 3, 9, 9}, 64);
  ExpectPoolGradSame("GlobalAveragePool", [](Node&) {}, {2, 4, 5, 6}, 66);
  ExpectPoolGradSame("GlobalMaxPool", [](Node&) {}, {2, 4, 5, 6}, 68);
  ExpectPoolGradSame("MaxPool", [](Node& n) { n.SetInts("kernel_shape", {2}); }, {2, 3, 8}, 70);
}

TEST_F(CudaDnn, PoolGradientsOnOwnKernels) {
  auto ceil = [](Node& n) {
    n.SetInts("kernel_shape", {3, 3});
    n.SetInts("strides", {2, 2});
    n.SetInt("ceil_mode", 1);
  };
  auto uneven = [](Node& n) {
    n.SetInts("kernel_shape", {2, 3});
    n.SetInts("pads", {0, 1, 1, 0});
    n.SetInt("count_include_pad", 1);
  };
  ExpectPoolGradSame("MaxPool", ceil, {2, 3, 8, 9}, 72);
  ExpectPoolGradSame("AveragePool", ceil, {2, 3, 8, 9}, 74);
  ExpectPoolGradSame("AveragePool", uneven, {2, 3, 8, 9}, 76);
  ExpectPoolGradSame(
      "MaxPool",
      [](Node& n) {
        n.SetInts("kernel_shape", {2, 2});
        n.SetInts("dilations", {2, 2});
      },
      {1, 2, 7, 7}, 78);
}

// ---- Activations ----

TEST_F(CudaDnn, Activations) {
  const HostTensor x = RandomTensor({2, 3, 4, 5}, 80, -3.f, 3.f);
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Elu"}) ExpectSameOnCuda(NodeSpec{op, 17}, {x});
  ExpectSameOnCuda(NodeSpec{"Elu", 17, [](Node& n) { n.SetFloat("alpha", 0.5f); }}, {x});
  ExpectSameOnCuda(NodeSpec{"Relu", 17}, {RandomTensor({7}, 81)});  // rank 1
}

TEST_F(CudaDnn, ActivationGradientsFromOutput) {
  const HostTensor dy = RandomTensor({2, 3, 4, 5}, 82);
  const HostTensor x = RandomTensor({2, 3, 4, 5}, 83, -3.f, 3.f);
  for (const char* op : {"Relu", "Sigmoid", "Tanh"}) {
    const HostTensor y = RunOn(Device::CPU(), NodeSpec{op, 17}, {x})[0];
    ExpectSameOnCuda(NodeSpec{std::string(op) + "Grad", 17, [](Node&) {}, {true}, kGradDomain}, {dy, y});
  }
}

// ---- Softmax ----

TEST_F(CudaDnn, SoftmaxAndLogSoftmaxAxisSemanticsByOpset) {
  const HostTensor x = RandomTensor({2, 3, 4, 5}, 90, -4.f, 4.f);
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    ExpectSameOnCuda(NodeSpec{op, 11}, {x});                                             // 2D at axis 1
    ExpectSameOnCuda(NodeSpec{op, 11, [](Node& n) { n.SetInt("axis", 2); }}, {x});       // 2D at axis 2
    ExpectSameOnCuda(NodeSpec{op, 13}, {x});                                             // last axis
    ExpectSameOnCuda(NodeSpec{op, 13, [](Node& n) { n.SetInt("axis", 1); }}, {x});       // middle axis
    ExpectSameOnCuda(NodeSpec{op, 13, [](Node& n) { n.SetInt("axis", -4); }}, {x});      // first axis
  }
}

TEST_F(CudaDnn, SoftmaxGradients) {
  const HostTensor x = RandomTensor({2, 3, 4, 5}, 91, -4.f, 4.f);
  const HostTensor dy = RandomTensor({2, 3, 4, 5}, 92);
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (int coerce : {0, 1}) {
      for (int64_t axis : {1, -1}) {
        auto attrs = [&](Node& n) {
          n.SetInt("axis", axis);
          n.SetInt("coerce_2d", coerce);
        };
        // Y from the forward of the same semantics (opset 11 coerces, 13 does not).
        const HostTensor y =
            RunOn(Device::CPU(), NodeSpec{op, coerce ? 11 : 13, [&](Node& n) { n.SetInt("axis", axis); }}, {x})[0];
        ExpectSameOnCuda(NodeSpec{std::string(op) + "Grad", 17, attrs, {true}, kGradDomain}, {dy, y});
      }
    }
  }
}

// ---- LRN ----

TEST_F(CudaDnn, LrnOddSize) {
  NodeSpec s{"LRN", 17, [](Node& n) {
               n.SetInt("size", 5);
               n.SetFloat("alpha", 2e-3f);
               n.SetFloat("beta", 0.75f);
               n.SetFloat("bias", 1.5f);
             }};
  ExpectSameOnCuda(s, {RandomTensor({2, 7, 4, 3}, 100, -2.f, 2.f)});
}

TEST_F(CudaDnn, LrnEvenSizeFollowsOnnxWindow) {
  // The CPU kernel has no even sizes; check against ONNX's formula directly.
  const int64_t size = 4;
  const float alpha = 1e-2f, beta = 0.6f, bias = 2.f;
  const HostTensor x = RandomTensor({2, 6, 3}, 101, -2.f, 2.f);
  NodeSpec s{"LRN", 17, [&](Node& n) {
               n.SetInt("size", size);
               n.SetFloat("alpha", alpha);
               n.SetFloat("beta", beta);
               n.SetFloat("bias", bias);
             }};
  const HostTensor y = RunOn(kCuda, s, {x})[0];
  HostTensor expected(DType::kFloat32, x.dims);
  const int64_t n_batch = 2, channels = 6, spatial = 3;
  for (int64_t n = 0; n < n_batch; ++n)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t p = 0; p < spatial; ++p) {
        double sum = 0;
        for (int64_t k = c - (size - 1) / 2; k <= c + size / 2; ++k)
          if (k >= 0 && k < channels) {
            const double v = x.Data<float>()[(n * channels + k) * spatial + p];
            sum += v * v;
          }
        const int64_t at = (n * channels + c) * spatial + p;
        expected.Data<float>()[at] =
            static_cast<float>(x.Data<float>()[at] / std::pow(bias + alpha / size * sum, beta));
      }
  EXPECT_EQ(testing::CompareTensors(expected, y, 1e-4, 1e-5), "");
}

// ---- A training step end to end ----

// Conv / BatchNorm / Relu / MaxPool / strided SAME conv / Sigmoid / AveragePool /
// GlobalAveragePool / Gemm, trained through the autodiff pass.
Model SmallConvNet() {
  Model m;
  m.opsets[""] = 15;
  std::mt19937 rng(11);
  auto param = [&](const std::string& name, const Ints& dims, float lo, float hi) {
    HostTensor t = RandomTensor(dims, static_cast<uint32_t>(rng()), lo, hi);
    t.name = name;
    m.graph.initializers.push_back(t);
  };
  auto op = [&](const std::string& type, std::vector<std::string> ins, std::string out) -> Node& {
    Node n;
    n.name = type + "_" + std::to_string(m.graph.nodes.size());
    n.op_type = type;
    n.inputs = std::move(ins);
    n.outputs = {std::move(out)};
    m.graph.nodes.push_back(n);
    return m.graph.nodes.back();
  };
  ValueInfo x;
  x.name = "x";
  x.dtype = DType::kFloat32;
  x.has_shape = true;
  for (int64_t d : {4, 3, 8, 8}) x.dims.push_back(Dim{d, ""});
  m.graph.inputs.push_back(x);
  param("w1", {6, 3, 3, 3}, -0.4f, 0.4f);
  param("b1", {6}, -0.1f, 0.1f);
  param("scale", {6}, 0.5f, 1.5f);
  param("shift", {6}, -0.2f, 0.2f);
  param("rm", {6}, -0.1f, 0.1f);
  param("rv", {6}, 0.9f, 1.1f);
  param("w2", {8, 6, 3, 3}, -0.3f, 0.3f);
  param("fc", {5, 8}, -0.7f, 0.7f);
  op("Conv", {"x", "w1", "b1"}, "c1").SetInts("pads", {1, 1, 1, 1});
  op("BatchNormalization", {"c1", "scale", "shift", "rm", "rv"}, "n1");
  op("Relu", {"n1"}, "r1");
  Node& mp = op("MaxPool", {"r1"}, "p1");
  mp.SetInts("kernel_shape", {2, 2});
  mp.SetInts("strides", {2, 2});
  Node& c2 = op("Conv", {"p1", "w2"}, "c2");
  c2.SetString("auto_pad", "SAME_UPPER");
  c2.SetInts("strides", {2, 2});
  op("Sigmoid", {"c2"}, "s2");
  Node& ap = op("AveragePool", {"s2"}, "p2");
  ap.SetInts("kernel_shape", {2, 2});
  ap.SetInts("pads", {0, 0, 1, 1});
  op("GlobalAveragePool", {"p2"}, "g");
  op("Flatten", {"g"}, "f");
  op("Gemm", {"f", "fc"}, "logits").SetInt("transB", 1);
  ValueInfo out;
  out.name = "logits";
  out.dtype = DType::kFloat32;
  m.graph.outputs.push_back(out);
  return m;
}

TEST_F(CudaDnn, TrainingStepOfASmallConvNetMatchesTheCpu) {
  const TrainingGraph tg = BuildTrainingGraph(SmallConvNet());
  std::vector<std::string> fetches = {tg.loss};
  fetches.insert(fetches.end(), tg.grads.begin(), tg.grads.end());
  for (const auto& [value, state] : tg.state_updates) fetches.push_back(value);
  const HostTensor x = RandomTensor({4, 3, 8, 8}, 120, -2.f, 2.f);
  const HostTensor labels = HostTensor::FromVector<int64_t>({1, 0, 4, 2}, {4});
  auto run = [&](const Device& device) {
    ExecutorOptions options;
    options.device = device;
    Executor exec(tg.model, options);
    std::vector<HostTensor> out;
    for (const Tensor& t :
         exec.Run({{"x", Tensor::FromHost(x, device)}, {tg.labels, Tensor::FromHost(labels, device)}}, fetches))
      out.push_back(t.ToHost());
    return out;
  };
  const std::vector<HostTensor> cpu = run(Device::CPU());
  std::vector<HostTensor> gpu;
  try {
    gpu = run(kCuda);
  } catch (const UnsupportedError& e) {
    // A GPU is present (the fixture requires one): every op of this training step has a CUDA
    // kernel, so one missing is a failure, not a skip.
    FAIL() << "the training graph has ops without a CUDA kernel: " << e.what();
  }
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_EQ(testing::CompareTensors(cpu[i], gpu[i], 1e-3, 1e-5), "") << fetches[i];
}

}  // namespace
}  // namespace ot
