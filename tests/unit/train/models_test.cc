// Tests of the reference model builders: architecture (parameter counts, shapes, node
// structure), PyTorch's initialisation statistics, determinism by seed, and the
// `onnx-train make-model` command writing a model that passes the checker.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "models/reference_models.h"
#include "tests/common/test_util.h"

namespace ot {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool IsRunningStat(const std::string& name) {
  return EndsWith(name, ".running_mean") || EndsWith(name, ".running_var");
}

// Trainable parameters (initializers other than batch-norm running statistics).
int64_t TrainableParameterCount(const Model& m) {
  int64_t n = 0;
  for (const auto& t : m.graph.initializers)
    if (!IsRunningStat(t.name)) n += t.NumElements();
  return n;
}

// The recipe's ResNet34 counted from its definition: stem conv 3x3 (no bias) + BN, four
// stages of BasicBlocks (two 3x3 convs + two BNs each, a 1x1 conv + BN downsample where the
// width or stride changes), fc with bias. BN has 2 parameters per channel.
int64_t ExpectedResNet34Parameters(int64_t in_channels, int64_t classes) {
  int64_t n = in_channels * 64 * 9 + 2 * 64;
  const int blocks[] = {3, 4, 6, 3};
  const int64_t widths[] = {64, 128, 256, 512};
  int64_t in = 64;
  for (int s = 0; s < 4; ++s) {
    for (int b = 0; b < blocks[s]; ++b) {
      int64_t c = widths[s];
      n += in * c * 9 + 2 * c + c * c * 9 + 2 * c;
      if (in != c) n += in * c + 2 * c;
      in = c;
    }
  }
  return n + 512 * classes + classes;
}

struct Stats {
  double mean = 0, stddev = 0, max_abs = 0;
};

Stats StatsOf(const HostTensor& t) {
  Stats s;
  const float* p = t.Data<float>();
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    sum += p[i];
    sum_sq += static_cast<double>(p[i]) * p[i];
    s.max_abs = std::max(s.max_abs, std::fabs(static_cast<double>(p[i])));
  }
  double n = static_cast<double>(t.NumElements());
  s.mean = sum / n;
  s.stddev = std::sqrt(std::max(0.0, sum_sq / n - s.mean * s.mean));
  return s;
}

const HostTensor& Initializer(const Model& m, const std::string& name) {
  const HostTensor* t = m.graph.FindInitializer(name);
  if (!t) throw Error("no initializer " + name);
  return *t;
}

std::string TempPath(const std::string& file) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/models_test_" + std::to_string(::getpid()) + "_" + file;
}

TEST(ResNet34, ParameterCountMatchesTorch) {
  Model m = BuildResNet34({});
  // 21,282,122 is what PyTorch 1.13 / torchvision 0.14 print for
  //   m = torchvision.models.resnet34(num_classes=10)
  //   m.conv1 = nn.Conv2d(3, 64, 3, 2, 1, bias=False); m.maxpool = nn.Identity()
  //   sum(p.numel() for p in m.parameters())
  // and torch.onnx.export writes 17,024 running-statistic values besides (the 36
  // num_batches_tracked counters are not exported).
  EXPECT_EQ(TrainableParameterCount(m), 21282122);
  EXPECT_EQ(TrainableParameterCount(m), ExpectedResNet34Parameters(3, 10));
  int64_t stats = 0;
  for (const auto& t : m.graph.initializers)
    if (IsRunningStat(t.name)) stats += t.NumElements();
  EXPECT_EQ(stats, 17024);

  ReferenceModelOptions gray;
  gray.channels = 1;
  gray.height = gray.width = 28;
  gray.classes = 7;
  EXPECT_EQ(TrainableParameterCount(BuildResNet34(gray)), ExpectedResNet34Parameters(1, 7));
}

TEST(ResNet34, NodeStructureIsTorchExport) {
  Model m = BuildResNet34({});
  std::map<std::string, int> ops;
  for (const auto& n : m.graph.nodes) ops[n.op_type]++;
  EXPECT_EQ(ops["Conv"], 36);
  EXPECT_EQ(ops["BatchNormalization"], 36);
  EXPECT_EQ(ops["Relu"], 33);
  EXPECT_EQ(ops["Add"], 16);
  EXPECT_EQ(ops["GlobalAveragePool"], 1);
  EXPECT_EQ(ops["Flatten"], 1);
  EXPECT_EQ(ops["Gemm"], 1);
  EXPECT_EQ(m.graph.nodes.size(), 124u);
  EXPECT_EQ(m.OpsetFor(""), 14);

  const Node& stem = m.graph.nodes[0];
  EXPECT_EQ(stem.name, "/conv1/Conv");
  EXPECT_EQ(stem.inputs, (std::vector<std::string>{"input", "conv1.weight"}));  // no bias
  EXPECT_EQ(stem.GetInts("strides"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(stem.GetInts("pads"), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(m.graph.nodes[2].op_type, "Relu");  // no max-pool after the stem
  EXPECT_EQ(m.graph.nodes[3].op_type, "Conv");

  for (const auto& n : m.graph.nodes) {
    if (n.op_type != "BatchNormalization") continue;
    EXPECT_EQ(n.GetInt("training_mode", 0), 1) << n.name;
    EXPECT_FLOAT_EQ(n.GetFloat("momentum", 0), 0.9f) << n.name;  // PyTorch's 0.1
    EXPECT_FLOAT_EQ(n.GetFloat("epsilon", 0), 1e-5f) << n.name;
    EXPECT_EQ(n.outputs.size(), 3u) << n.name;
  }
  const Node& fc = m.graph.nodes.back();
  EXPECT_EQ(fc.op_type, "Gemm");
  EXPECT_EQ(fc.GetInt("transB", 0), 1);
  EXPECT_EQ(fc.inputs, (std::vector<std::string>{"/Flatten_output_0", "fc.weight", "fc.bias"}));
  EXPECT_EQ(fc.outputs, (std::vector<std::string>{"logits"}));
}

TEST(ResNet34, ShapesAndStateDictNames) {
  Model m = BuildResNet34({});
  EXPECT_EQ(m.graph.initializers.front().name, "conv1.weight");
  EXPECT_EQ(Initializer(m, "conv1.weight").dims, (std::vector<int64_t>{64, 3, 3, 3}));
  EXPECT_EQ(Initializer(m, "bn1.running_var").dims, (std::vector<int64_t>{64}));
  EXPECT_EQ(Initializer(m, "layer1.2.conv2.weight").dims, (std::vector<int64_t>{64, 64, 3, 3}));
  EXPECT_EQ(Initializer(m, "layer2.0.downsample.0.weight").dims, (std::vector<int64_t>{128, 64, 1, 1}));
  EXPECT_EQ(Initializer(m, "layer2.0.downsample.1.running_mean").dims, (std::vector<int64_t>{128}));
  EXPECT_EQ(Initializer(m, "layer3.5.bn2.weight").dims, (std::vector<int64_t>{256}));
  EXPECT_EQ(Initializer(m, "layer4.2.conv1.weight").dims, (std::vector<int64_t>{512, 512, 3, 3}));
  EXPECT_EQ(Initializer(m, "fc.weight").dims, (std::vector<int64_t>{10, 512}));
  EXPECT_EQ(Initializer(m, "fc.bias").dims, (std::vector<int64_t>{10}));
  EXPECT_EQ(m.graph.FindInitializer("layer1.0.downsample.0.weight"), nullptr);  // identity shortcut
  EXPECT_EQ(m.graph.FindInitializer("layer4.2.bn2.num_batches_tracked"), nullptr);

  ASSERT_EQ(m.graph.inputs.size(), 1u);
  EXPECT_EQ(m.graph.inputs[0].name, "input");
  EXPECT_EQ(m.graph.inputs[0].ShapeString(), "[batch, 3, 32, 32]");
  ASSERT_EQ(m.graph.outputs.size(), 1u);
  EXPECT_EQ(m.graph.outputs[0].name, "logits");
  EXPECT_EQ(m.graph.outputs[0].ShapeString(), "[batch, 10]");
}

// Written, then loaded back through the checker and ONNX shape inference.
TEST(ResNet34, PassesCheckerAndShapeInference) {
  Model m = BuildResNet34({});
  EXPECT_NO_THROW(CheckModel(m));
  std::string path = TempPath("resnet34.onnx");
  SaveModel(m, path);
  Model loaded = LoadModel(path);
  std::remove(path.c_str());
  EXPECT_EQ(loaded.graph.outputs[0].ShapeString(), "[batch, 10]");
  auto it = loaded.graph.value_info.find("/layer4/layer4.2/relu_1/Relu_output_0");
  ASSERT_NE(it, loaded.graph.value_info.end());
  EXPECT_EQ(it->second.ShapeString(), "[batch, 512, 2, 2]");  // 32 / 2 (stem) / 2 / 2 / 2
}

TEST(ResNet34, InitialisationFollowsTorchvision) {
  Model m = BuildResNet34({});
  int convs = 0;
  for (const auto& t : m.graph.initializers) {
    if (t.name == "conv1.weight") {
      // The stem is replaced after torchvision builds the model, so it keeps nn.Conv2d's
      // default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
      double bound = 1.0 / std::sqrt(static_cast<double>(t.dims[1] * t.dims[2] * t.dims[3]));
      Stats s = StatsOf(t);
      EXPECT_LE(s.max_abs, bound);
      EXPECT_GT(s.max_abs, 0.9 * bound);
      EXPECT_NEAR(s.stddev, bound / std::sqrt(3.0), 0.1 * bound / std::sqrt(3.0));
      ++convs;
    } else if (t.dims.size() == 4) {  // conv: kaiming_normal_(mode="fan_out", nonlinearity="relu")
      double fan_out = static_cast<double>(t.dims[0] * t.dims[2] * t.dims[3]);
      double expected = std::sqrt(2.0 / fan_out);
      Stats s = StatsOf(t);
      EXPECT_NEAR(s.stddev, expected, 0.05 * expected) << t.name;
      // Four standard errors of the mean of NumElements() draws.
      EXPECT_NEAR(s.mean, 0.0, 4 * expected / std::sqrt(static_cast<double>(t.NumElements()))) << t.name;
      ++convs;
    } else if (t.name.rfind("fc.", 0) != 0) {  // batch norm: weight 1, bias 0, mean 0, var 1
      float want = EndsWith(t.name, ".weight") || EndsWith(t.name, ".running_var") ? 1.f : 0.f;
      for (int64_t i = 0; i < t.NumElements(); ++i) ASSERT_EQ(t.Data<float>()[i], want) << t.name;
    }
  }
  EXPECT_EQ(convs, 36);
  // fc: nn.Linear default, U(-1/sqrt(512), 1/sqrt(512)) for weight and bias.
  double bound = 1.0 / std::sqrt(512.0);
  Stats w = StatsOf(Initializer(m, "fc.weight"));
  EXPECT_LE(w.max_abs, bound);
  EXPECT_GT(w.max_abs, 0.95 * bound);
  EXPECT_NEAR(w.stddev, bound / std::sqrt(3.0), 0.05 * bound / std::sqrt(3.0));
  EXPECT_LE(StatsOf(Initializer(m, "fc.bias")).max_abs, bound);
}

TEST(ResNet34, DeterministicBySeed) {
  ReferenceModelOptions a;
  a.seed = 7;
  Model m1 = BuildResNet34(a), m2 = BuildResNet34(a);
  ASSERT_EQ(m1.graph.initializers.size(), m2.graph.initializers.size());
  for (size_t i = 0; i < m1.graph.initializers.size(); ++i)
    EXPECT_EQ(m1.graph.initializers[i].bytes, m2.graph.initializers[i].bytes) << m1.graph.initializers[i].name;
  ReferenceModelOptions b = a;
  b.seed = 8;
  Model m3 = BuildResNet34(b);
  EXPECT_NE(Initializer(m1, "conv1.weight").bytes, Initializer(m3, "conv1.weight").bytes);
  EXPECT_NE(Initializer(m1, "fc.weight").bytes, Initializer(m3, "fc.weight").bytes);
}

TEST(SimpleNN, StructureAndInitialisation) {
  ReferenceModelOptions o;
  o.channels = 1;
  o.height = o.width = 28;
  Model m = BuildSimpleNN(o);
  ASSERT_EQ(m.graph.nodes.size(), 2u);
  EXPECT_EQ(m.graph.nodes[0].op_type, "Flatten");
  EXPECT_EQ(m.graph.nodes[0].GetInt("axis", 0), 1);
  EXPECT_EQ(m.graph.nodes[1].op_type, "Gemm");
  EXPECT_EQ(m.graph.nodes[1].GetInt("transB", 0), 1);
  EXPECT_EQ(Initializer(m, "fc.weight").dims, (std::vector<int64_t>{10, 784}));
  EXPECT_EQ(TrainableParameterCount(m), 784 * 10 + 10);
  EXPECT_EQ(m.graph.inputs[0].ShapeString(), "[batch, 1, 28, 28]");
  EXPECT_EQ(m.graph.outputs[0].ShapeString(), "[batch, 10]");
  double bound = 1.0 / 28.0;
  Stats w = StatsOf(Initializer(m, "fc.weight"));
  EXPECT_LE(w.max_abs, bound);
  EXPECT_NEAR(w.stddev, bound / std::sqrt(3.0), 0.05 * bound / std::sqrt(3.0));
  EXPECT_NEAR(w.mean, 0.0, 0.05 * bound);
  EXPECT_NO_THROW(CheckModel(m));
  Model m2 = BuildSimpleNN(o);
  EXPECT_EQ(Initializer(m, "fc.weight").bytes, Initializer(m2, "fc.weight").bytes);
}

TEST(ReferenceModels, RejectsBadOptionsAndNames) {
  ReferenceModelOptions o;
  o.classes = 0;
  EXPECT_THROW(BuildResNet34(o), Error);
  EXPECT_THROW(BuildSimpleNN(o), Error);
  o.classes = 10;
  o.height = 0;
  EXPECT_THROW(BuildResNet34(o), Error);
  try {
    BuildReferenceModel("vgg16", {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("resnet34"), std::string::npos) << e.what();
  }
}

TEST(MakeModelCommand, WritesACheckableModel) {
  std::string path = TempPath("cli_resnet34.onnx");
  std::string cmd = testing::OnnxTrainBinary() + " make-model resnet34 -o " + path +
                    " --input 1x28x28 --classes 5 --seed 3 > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  Model m = LoadModel(path);  // runs the ONNX checker and shape inference
  std::remove(path.c_str());
  EXPECT_EQ(m.graph.inputs[0].ShapeString(), "[batch, 1, 28, 28]");
  EXPECT_EQ(m.graph.outputs[0].ShapeString(), "[batch, 5]");
  ReferenceModelOptions o;
  o.channels = 1;
  o.height = o.width = 28;
  o.classes = 5;
  o.seed = 3;
  Model expected = BuildResNet34(o);
  EXPECT_EQ(Initializer(m, "conv1.weight").bytes, Initializer(expected, "conv1.weight").bytes);

  std::string bad = testing::OnnxTrainBinary() + " make-model resnet34 -o " + path + " --classes 0 2> /dev/null";
  EXPECT_NE(std::system(bad.c_str()), 0);
}

}  // namespace
}  // namespace ot
