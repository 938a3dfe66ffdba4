// Autodiff tests: gradients of the training graph against central finite differences,
// export/reload round trip, and the errors of the pass.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "graph/autodiff/autodiff.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ModelBuilder;

// A small net that uses every rule with fan-out and broadcasting.
Model MixedNet() {
  ModelBuilder b;
  b.Input("x", DType::kFloat32, {3, 5});
  b.Param("w1", {4, 5}, -0.8f, 0.8f).Param("b1", {4}, -0.3f, 0.3f).Param("g", {4}, 0.5f, 1.5f);
  b.Param("q", {1, 4}, 1.5f, 2.5f).Param("c", {4}, -0.2f, 0.2f).Param("w2", {4, 3}, -1.f, 1.f);
  b.Op("Gemm", {"x", "w1", "b1"}, "h").SetInt("transB", 1);
  b.Op("Tanh", {"h"}, "a");
  b.Op("Relu", {"h"}, "r");
  b.Op("LeakyRelu", {"h"}, "lr").SetFloat("alpha", 0.2f);
  b.Op("Add", {"a", "r"}, "s0");
  b.Op("Add", {"s0", "lr"}, "s");
  b.Op("Mul", {"s", "g"}, "m");
  b.Op("Div", {"m", "q"}, "d");
  b.Op("Sub", {"d", "c"}, "t");
  b.Op("Sigmoid", {"t"}, "u");
  b.Op("Transpose", {"u"}, "ut").SetInts("perm", {1, 0});
  b.Op("Transpose", {"ut"}, "uu").SetInts("perm", {1, 0});
  b.Op("Flatten", {"uu"}, "f");
  b.Op("MatMul", {"f", "w2"}, "logits");
  b.Output("logits", {3, 3});
  return b.Build();
}

// Conv (groups, pads), BatchNorm in training mode, pools, Concat, softmax family,
// reductions: the ops of the reference models and their neighbours.
Model ConvNet() {
  ModelBuilder b;
  b.Input("x", DType::kFloat32, {3, 2, 5, 5});
  b.Param("w", {4, 1, 3, 3}, -0.5f, 0.5f).Param("cb", {4}, -0.1f, 0.1f);
  b.Param("scale", {4}, 0.5f, 1.5f).Param("shift", {4}, -0.2f, 0.2f);
  b.Param("rm", {4}, -0.1f, 0.1f).Param("rv", {4}, 0.9f, 1.1f).Param("fc", {3, 8}, -0.7f, 0.7f);
  Node& conv = b.Op("Conv", {"x", "w", "cb"}, "c");
  conv.SetInt("group", 2);
  conv.SetInts("pads", {1, 1, 1, 1});
  Node& bn = b.Op("BatchNormalization", {"c", "scale", "shift", "rm", "rv"}, "n");
  bn.outputs = {"n"};
  b.Op("Relu", {"n"}, "r");
  Node& mp = b.Op("MaxPool", {"r"}, "mp");
  mp.SetInts("kernel_shape", {2, 2});
  mp.SetInts("strides", {2, 2});
  Node& ap = b.Op("AveragePool", {"n"}, "ap");
  ap.SetInts("kernel_shape", {3, 3});
  ap.SetInts("strides", {2, 2});
  ap.SetInts("pads", {1, 1, 1, 1});
  b.Op("GlobalAveragePool", {"mp"}, "g1");
  b.Op("GlobalMaxPool", {"ap"}, "g2");
  b.Op("Concat", {"g1", "g2"}, "cat").SetInt("axis", 1);
  b.Op("Flatten", {"cat"}, "f");
  b.Op("LogSoftmax", {"f"}, "ls").SetInt("axis", 1);
  b.Op("Softmax", {"f"}, "sm").SetInt("axis", 1);
  Node& rm = b.Op("ReduceMean", {"ls"}, "mean");
  rm.SetInts("axes", {1});
  b.Op("Mul", {"sm", "mean"}, "mix");
  b.Op("Add", {"f", "mix"}, "f2");
  b.Op("Gemm", {"f2", "fc"}, "logits").SetInt("transB", 1);
  b.Output("logits", {3, 3});
  return b.Build();
}

std::map<std::string, Tensor> ConvFeeds(const TrainingGraph& tg) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.f, 1.f);
  HostTensor x(DType::kFloat32, {3, 2, 5, 5});
  for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = n(rng);
  return {{"x", Tensor::FromHost(x)}, {tg.labels, Tensor::FromHost(HostTensor::FromVector<int64_t>({1, 0, 2}, {3}))}};
}

std::map<std::string, Tensor> Feeds(const TrainingGraph& tg) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.f, 1.f);
  HostTensor x(DType::kFloat32, {3, 5});
  for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = n(rng);
  return {{"x", Tensor::FromHost(x)}, {tg.labels, Tensor::FromHost(HostTensor::FromVector<int64_t>({2, 0, 1}, {3}))}};
}

TEST(Autodiff, MixedNetGradientsMatchFiniteDifferences) {
  TrainingGraph tg = BuildTrainingGraph(MixedNet());
  EXPECT_EQ(tg.loss, "loss");
  EXPECT_EQ(tg.labels, "labels");
  EXPECT_EQ(tg.params.size(), 6u);
  ExpectGradientsMatchFiniteDifferences(tg, Feeds(tg));
}

TEST(Autodiff, ConvNetGradientsMatchFiniteDifferences) {
  TrainingGraph tg = BuildTrainingGraph(ConvNet());
  // Running statistics are state, not parameters; they get update outputs instead.
  EXPECT_EQ(std::count(tg.params.begin(), tg.params.end(), "rm"), 0);
  EXPECT_EQ(tg.state_updates.size(), 2u);
  ExpectGradientsMatchFiniteDifferences(tg, ConvFeeds(tg));
}

// The running variance moves towards the population batch variance as the ONNX operator
// says, or towards the unbiased one (times M / (M - 1), M = 75 values per channel here) in
// a model PyTorch exported, as PyTorch trains it.
TEST(Autodiff, BatchNormRunningStatisticsFollowOnnxMomentum) {
  for (const std::string producer : {"", "pytorch"}) {
  SCOPED_TRACE("producer '" + producer + "'");
  Model model = ConvNet();
  model.producer_name = producer;
  TrainingGraph tg = BuildTrainingGraph(model);
  ExecutorOptions opts;
  opts.state_updates = tg.state_updates;
  Executor exec(tg.model, opts);
  auto feeds = ConvFeeds(tg);
  HostTensor rm0 = exec.FindState("rm")->ToHost(), rv0 = exec.FindState("rv")->ToHost();
  // The batch statistics of the convolution output, computed here from "c".
  Executor forward(tg.model);
  HostTensor c = forward.Run(feeds, {"c"})[0].ToHost();
  exec.Run(feeds, {tg.loss});
  HostTensor rm1 = exec.FindState("rm")->ToHost(), rv1 = exec.FindState("rv")->ToHost();
  const int64_t n = 3, ch = 4, hw = 25;
  for (int64_t k = 0; k < ch; ++k) {
    double sum = 0, sq = 0;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < hw; ++i) {
        double v = c.Data<float>()[(b * ch + k) * hw + i];
        sum += v;
        sq += v * v;
      }
    double mean = sum / (n * hw), var = sq / (n * hw) - mean * mean;
    if (producer == "pytorch") var *= static_cast<double>(n * hw) / (n * hw - 1);
    EXPECT_NEAR(rm1.Data<float>()[k], 0.9 * rm0.Data<float>()[k] + 0.1 * mean, 1e-5);
    EXPECT_NEAR(rv1.Data<float>()[k], 0.9 * rv0.Data<float>()[k] + 0.1 * var, 1e-4);
  }
  }
}

TEST(Autodiff, DropoutGradientReusesTheMask) {
  ModelBuilder b;
  b.Input("x", DType::kFloat32, {4, 6});
  b.Param("w", {6, 5}, -1.f, 1.f);
  b.Op("MatMul", {"x", "w"}, "h");
  Node& d = b.Op("Dropout", {"h"}, "dr");
  d.SetInt("seed", 3);
  b.Op("Identity", {"dr"}, "logits");
  b.Output("logits", {4, 5});
  Model m = b.Build();
  m.opsets[""] = 13;
  HostTensor ratio = HostTensor::FromVector<float>({0.25f}, {}, "ratio");
  m.graph.initializers.push_back(ratio);
  m.graph.nodes[1].inputs = {"h", "ratio"};
  TrainingGraph tg = BuildTrainingGraph(m);
  Executor exec(tg.model);
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  HostTensor x(DType::kFloat32, {4, 6});
  for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = nd(rng);
  std::map<std::string, Tensor> feeds = {{"x", Tensor::FromHost(x)},
                                         {"labels", Tensor::FromHost(HostTensor::FromVector<int64_t>({0, 1, 4, 2}, {4}))}};
  auto out = exec.Run(feeds, {"dr/mask", "dr", "w/grad"});
  HostTensor mask = out[0].ToHost(), y = out[1].ToHost(), gw = out[2].ToHost();
  // Expected dW = x^T (mask / 0.75 * (softmax(y) - onehot) / N), computed here.
  const int64_t labels[4] = {0, 1, 4, 2};
  std::vector<double> dh(20);
  int dropped = 0;
  for (int64_t r = 0; r < 4; ++r) {
    double mx = -1e30, z = 0;
    for (int64_t c = 0; c < 5; ++c) mx = std::max(mx, double(y.Data<float>()[r * 5 + c]));
    for (int64_t c = 0; c < 5; ++c) z += std::exp(y.Data<float>()[r * 5 + c] - mx);
    for (int64_t c = 0; c < 5; ++c) {
      bool keep = mask.Data<uint8_t>()[r * 5 + c] != 0;
      dropped += !keep;
      double p = std::exp(y.Data<float>()[r * 5 + c] - mx) / z - (c == labels[r] ? 1 : 0);
      dh[static_cast<size_t>(r * 5 + c)] = keep ? p / 4 / 0.75 : 0;
      if (!keep) {
        EXPECT_EQ(y.Data<float>()[r * 5 + c], 0.f);
      }
    }
  }
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      double e = 0;
      for (int64_t r = 0; r < 4; ++r) e += x.Data<float>()[r * 6 + i] * dh[static_cast<size_t>(r * 5 + j)];
      EXPECT_NEAR(gw.Data<float>()[i * 5 + j], e, 1e-5) << i << "," << j;
    }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, 20);
}

// Dropout with a constant ratio of 0 (torch's nn.Dropout(0.0) in a training export) is
// passed through: no Dropout or DropoutGrad in the training graph, the gradient of the
// plain MatMul; one with a ratio above 0, or whose mask is read, stays.
TEST(Autodiff, DropoutOfRatioZeroIsPassedThrough) {
  for (float r : {0.f, 0.25f}) {
    SCOPED_TRACE("ratio " + std::to_string(r));
    ModelBuilder b;
    b.Input("x", DType::kFloat32, {4, 6});
    b.Param("w", {6, 5}, -1.f, 1.f);
    b.Op("MatMul", {"x", "w"}, "h");
    b.Op("Dropout", {"h"}, "dr");
    b.Op("Dropout", {"dr"}, "dr2");  // a chain of two
    b.Op("Identity", {"dr2"}, "logits");
    b.Output("logits", {4, 5});
    Model m = b.Build();
    m.opsets[""] = 13;
    Node ratio;
    ratio.name = "ratio_const";
    ratio.op_type = "Constant";
    ratio.outputs = {"ratio"};
    Attribute value;
    value.kind = Attribute::Kind::kTensor;
    value.t = HostTensor::FromVector<float>({r}, {});
    ratio.attrs["value"] = value;
    m.graph.nodes.insert(m.graph.nodes.begin(), ratio);
    m.graph.nodes[2].inputs = {"h", "ratio"};
    m.graph.nodes[3].inputs = {"dr", "ratio"};
    TrainingGraph tg = BuildTrainingGraph(m);
    int dropouts = 0;
    for (const auto& n : tg.model.graph.nodes) dropouts += n.op_type == "Dropout" || n.op_type == "DropoutGrad";
    EXPECT_EQ(dropouts, r == 0.f ? 0 : 4);
    if (r != 0.f) continue;
    Executor exec(tg.model);
    HostTensor x(DType::kFloat32, {4, 6});
    for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = static_cast<float>(i % 7) * 0.3f - 0.9f;
    auto out = exec.Run({{"x", Tensor::FromHost(x)},
                         {"labels", Tensor::FromHost(HostTensor::FromVector<int64_t>({0, 1, 4, 2}, {4}))}},
                        {"logits", "w/grad"});
    HostTensor y = out[0].ToHost(), gw = out[1].ToHost();
    const HostTensor* w = tg.model.graph.FindInitializer("w");
    ASSERT_NE(w, nullptr);
    const int64_t labels[4] = {0, 1, 4, 2};
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        double e = 0;
        for (int64_t row = 0; row < 4; ++row) {
          double h[5], mx = -1e30, z = 0;
          for (int64_t c = 0; c < 5; ++c) {
            h[c] = 0;
            for (int64_t k = 0; k < 6; ++k) h[c] += double(x.Data<float>()[row * 6 + k]) * w->Data<float>()[k * 5 + c];
            mx = std::max(mx, h[c]);
          }
          for (int64_t c = 0; c < 5; ++c) z += std::exp(h[c] - mx);
          e += x.Data<float>()[row * 6 + i] * ((std::exp(h[j] - mx) / z - (j == labels[row] ? 1 : 0)) / 4);
        }
        EXPECT_NEAR(gw.Data<float>()[i * 5 + j], e, 1e-5) << i << "," << j;
      }
  }
}

// The remaining rules: strided and dilated Conv with odd sizes, Reshape, Squeeze,
// Unsqueeze, Exp, Log, Sqrt, Neg, Sum, Expand, ReduceSum (axes as an input), Identity,
// LogSoftmax and NegativeLogLikelihoodLoss as the model's own scalar loss.
TEST(Autodiff, RemainingRulesMatchFiniteDifferences) {
  ModelBuilder b;
  b.Input("x", DType::kFloat32, {2, 3, 7, 7});
  b.Input("y", DType::kInt64, {2});
  b.Param("w", {4, 3, 3, 3}, -0.4f, 0.4f).Param("s", {36}, 0.2f, 0.6f).Param("c", {36}, 0.5f, 1.5f);
  b.Param("bias", {1, 36}, -0.3f, 0.3f).Param("fc", {36, 5}, -0.5f, 0.5f);
  Model m = b.Build();
  m.graph.initializers.push_back(HostTensor::FromVector<int64_t>({2, 36}, {2}, "shape"));
  m.graph.initializers.push_back(HostTensor::FromVector<int64_t>({1}, {1}, "axis1"));
  m.graph.initializers.push_back(HostTensor::FromVector<int64_t>({0}, {1}, "axis0"));
  m.graph.initializers.push_back(HostTensor::FromVector<float>({1.f}, {}, "one"));
  auto op = [&](const std::string& type, std::vector<std::string> ins, const std::string& out) -> Node& {
    Node n;
    n.name = type + "_" + std::to_string(m.graph.nodes.size());
    n.op_type = type;
    n.inputs = std::move(ins);
    n.outputs = {out};
    m.graph.nodes.push_back(n);
    return m.graph.nodes.back();
  };
  Node& conv = op("Conv", {"x", "w"}, "conv");
  conv.SetInts("strides", {2, 2});
  conv.SetInts("dilations", {2, 2});
  conv.SetInts("pads", {1, 1, 1, 1});
  op("Reshape", {"conv", "shape"}, "flat");
  op("Unsqueeze", {"flat", "axis1"}, "unsq");
  op("Squeeze", {"unsq", "axis1"}, "sq");
  op("Mul", {"sq", "s"}, "scaled");
  op("Exp", {"scaled"}, "e");
  op("Add", {"e", "one"}, "e1");
  op("Log", {"e1"}, "lg");
  op("Add", {"e", "c"}, "ec");
  op("Sqrt", {"ec"}, "rt");
  op("Neg", {"lg"}, "ng");
  op("Expand", {"bias", "shape"}, "ex");
  op("Sum", {"ng", "rt", "ex"}, "sum");
  op("ReduceSum", {"sum", "axis0"}, "rs");
  op("Add", {"sum", "rs"}, "z");
  op("Identity", {"z"}, "zi");
  op("MatMul", {"zi", "fc"}, "logits");
  op("LogSoftmax", {"logits"}, "lsm").SetInt("axis", 1);
  op("NegativeLogLikelihoodLoss", {"lsm", "y"}, "loss").SetString("reduction", "mean");
  m.graph.outputs.clear();
  b.Output("unused", {});
  ValueInfo loss;
  loss.name = "loss";
  loss.dtype = DType::kFloat32;
  loss.has_shape = true;
  m.graph.outputs.push_back(loss);

  AutodiffOptions opts;
  opts.freeze = {"one"};  // a float constant, not a parameter
  TrainingGraph tg = BuildTrainingGraph(m, opts);
  EXPECT_EQ(tg.loss, "loss");
  EXPECT_TRUE(tg.labels.empty());  // the model brought its own loss
  EXPECT_EQ(tg.params.size(), 5u);
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.f, 1.f);
  HostTensor x(DType::kFloat32, {2, 3, 7, 7});
  for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = nd(rng);
  ExpectGradientsMatchFiniteDifferences(
      tg, {{"x", Tensor::FromHost(x)}, {"y", Tensor::FromHost(HostTensor::FromVector<int64_t>({3, 1}, {2}))}},
      1e-2f);  // a smooth graph: a wider step keeps float32 rounding out of the small gradients
}

TEST(Autodiff, TrainingGraphIsValidOnnxAndRoundTrips) {
  TrainingGraph tg = BuildTrainingGraph(MixedNet());
  std::string path = ::testing::TempDir() + "/autodiff_training.onnx";
  SaveModel(tg.model, path);
  Model back = LoadModel(path);  // runs the ONNX checker
  Executor a(tg.model), b(back);
  auto feeds = Feeds(tg);
  std::vector<std::string> fetch = tg.grads;
  auto ga = a.Run(feeds, fetch), gb = b.Run(feeds, fetch);
  for (size_t i = 0; i < ga.size(); ++i) {
    HostTensor x = ga[i].ToHost(), y = gb[i].ToHost();
    EXPECT_EQ(x.bytes, y.bytes) << fetch[i];
  }
}

TEST(Autodiff, FrozenParametersGetNoGradient) {
  AutodiffOptions o;
  o.freeze = {"w1", "b1"};
  TrainingGraph tg = BuildTrainingGraph(MixedNet(), o);
  EXPECT_EQ(std::count(tg.params.begin(), tg.params.end(), "w1"), 0);
  EXPECT_EQ(tg.params.size(), 4u);
  ExpectGradientsMatchFiniteDifferences(tg, Feeds(tg));
}

TEST(Autodiff, ErrorsNameWhatIsWrong) {
  Model m = MixedNet();
  m.graph.nodes[1].op_type = "MeanVarianceNormalization";  // no rule
  m.graph.nodes[9].op_type = "Hardmax";
  try {
    BuildTrainingGraph(m);
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("MeanVarianceNormalization"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Hardmax"), std::string::npos) << msg;
  }
  AutodiffOptions o;
  o.loss_output = "nope";
  EXPECT_THROW(BuildTrainingGraph(MixedNet(), o), Error);
  o = {};
  o.freeze = {"w1", "b1", "g", "q", "c", "w2"};
  EXPECT_THROW(BuildTrainingGraph(MixedNet(), o), Error);
  o.freeze = {"not_a_param"};
  EXPECT_THROW(BuildTrainingGraph(MixedNet(), o), Error);
}

TEST(Autodiff, LabelsOutOfRangeNameTheIndex) {
  TrainingGraph tg = BuildTrainingGraph(MixedNet());
  Executor exec(tg.model);
  auto feeds = Feeds(tg);
  feeds[tg.labels] = Tensor::FromHost(HostTensor::FromVector<int64_t>({2, 7, 1}, {3}));
  try {
    exec.Run(feeds, {tg.loss});
    FAIL();
  } catch (const Error& e) {
    // The value and where it is (the second sample), not just a "7" somewhere.
    EXPECT_NE(std::string(e.what()).find("label 7 at batch index 1 is outside [0, "), std::string::npos) << e.what();
  }
}


// Missing rules are grouped by op type with a count and example node names.
TEST(Autodiff, MissingRulesAreGroupedByOpType) {
  ModelBuilder b;
  b.Input("x", DType::kFloat32, {2, 4});
  b.Param("w", {4, 3}, -1.f, 1.f);
  b.Op("MatMul", {"x", "w"}, "h");
  b.Op("MeanVarianceNormalization", {"h"}, "a1");
  b.Op("MeanVarianceNormalization", {"a1"}, "a2");
  b.Op("MeanVarianceNormalization", {"a2"}, "a3");
  b.Op("Hardmax", {"a3"}, "logits");
  b.Output("logits", {2, 3});
  try {
    BuildTrainingGraph(b.Build());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("no gradient rule for 4 node(s)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("MeanVarianceNormalization (opset 13): 3 nodes, e.g. 'MeanVarianceNormalization_1', "
                       "'MeanVarianceNormalization_2'"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("Hardmax (opset 13): 1 node, e.g. 'Hardmax_4'"), std::string::npos) << msg;
  }
}

// Shape arithmetic on a value computed from the parameters (Shape -> Gather -> Concat ->
// Reshape, as torch exports x.view(x.size(0), -1)) and a comparison mask need no rule:
// they carry no gradient. Here even the ops on that path (Shape's consumers) have no
// gradient rule and must be skipped by the reachability walk.
TEST(Autodiff, ShapeAndMaskSubgraphsNeedNoRule) {
  ModelBuilder b;
  b.Input("x", DType::kFloat32, {3, 2, 2});
  b.Param("s", {3, 2, 2}, 0.5f, 1.5f).Param("w", {4, 3}, -1.f, 1.f);
  b.Const(HostTensor::FromVector<int64_t>({0}, {1}, "zero")).Const(HostTensor::FromVector<int64_t>({-1}, {1}, "minus1"));
  b.Const(HostTensor::FromVector<float>({0.f}, {}, "fzero"));
  b.Op("Mul", {"x", "s"}, "h");
  b.Op("Shape", {"h"}, "shape");
  b.Op("Gather", {"shape", "zero"}, "n");  // no gradient rule for Gather yet: must not be asked
  b.Op("Concat", {"n", "minus1"}, "newshape").SetInt("axis", 0);
  b.Op("Reshape", {"h", "newshape"}, "flat");
  b.Op("Greater", {"flat", "fzero"}, "mask");
  b.Op("Cast", {"mask"}, "maskf").SetInt("to", static_cast<int64_t>(DType::kFloat32));
  b.Op("Mul", {"flat", "maskf"}, "relu");
  b.Op("MatMul", {"relu", "w"}, "logits");
  b.Output("logits", {3, 3});
  AutodiffOptions o;
  o.freeze = {"fzero"};
  TrainingGraph tg = BuildTrainingGraph(b.Build(), o);
  EXPECT_EQ(tg.params, (std::vector<std::string>{"s", "w"}));
  for (const auto& n : tg.model.graph.nodes)
    for (const auto& out : n.outputs) {
      EXPECT_EQ(out.find("shape/grad"), std::string::npos) << out;
      EXPECT_EQ(out.find("mask/grad"), std::string::npos) << out;
    }
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  HostTensor x(DType::kFloat32, {3, 2, 2});
  for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = nd(rng);
  ExpectGradientsMatchFiniteDifferences(
      tg, {{"x", Tensor::FromHost(x)}, {tg.labels, Tensor::FromHost(HostTensor::FromVector<int64_t>({2, 0, 1}, {3}))}});
}

// A loss reached from the parameters only through a Cast to an integer type: one error
// naming that node and what to do.
TEST(Autodiff, IntegerPathIsAnErrorNamingTheNode) {
  ModelBuilder b;
  b.Input("x", DType::kFloat32, {2, 3});
  b.Param("w", {3, 3}, -1.f, 1.f);
  b.Op("MatMul", {"x", "w"}, "h");
  b.Op("Cast", {"h"}, "hi").SetInt("to", static_cast<int64_t>(DType::kInt64));
  b.Op("Cast", {"hi"}, "logits").SetInt("to", static_cast<int64_t>(DType::kFloat32));
  b.Output("logits", {2, 3});
  try {
    BuildTrainingGraph(b.Build());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("node 'Cast_1' (Cast)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("int64"), std::string::npos) << msg;
    EXPECT_NE(msg.find("carries no gradient"), std::string::npos) << msg;
  }
}

// BatchNormalization over computed statistics (weight standardisation, as torch exports
// F.batch_norm(w, None, None, training=True)): a plain differentiable normaliser with
// no running state; the eval model keeps it in training form.
TEST(Autodiff, BatchNormAsNormaliserHasNoState) {
  ModelBuilder b;
  b.Input("x", DType::kFloat32, {3, 6});
  b.Param("w", {1, 4, 6}, -1.f, 1.f);
  b.Const(HostTensor::FromVector<float>({1.f, 1.f, 1.f, 1.f}, {4}, "ones"));
  b.Const(HostTensor::FromVector<float>({0.f, 0.f, 0.f, 0.f}, {4}, "zeros"));
  b.Const(HostTensor::FromVector<int64_t>({2}, {1}, "ax2"));
  b.Const(HostTensor::FromVector<int64_t>({4, 6}, {2}, "wshape"));
  b.Op("ReduceMean", {"w"}, "wm").SetInts("axes", {0, 2});
  b.model().graph.nodes.back().SetInt("keepdims", 0);
  b.Op("Mul", {"w", "w"}, "w2");
  b.Op("ReduceMean", {"w2"}, "wv").SetInts("axes", {0, 2});
  b.model().graph.nodes.back().SetInt("keepdims", 0);
  Node& bn = b.Op("BatchNormalization", {"w", "ones", "zeros", "wm", "wv"}, "wn");
  bn.SetInt("training_mode", 1);
  bn.outputs = {"wn"};
  b.Op("Reshape", {"wn", "wshape"}, "ws");
  b.Op("Gemm", {"x", "ws"}, "logits").SetInt("transB", 1);
  b.Output("logits", {3, 4});
  b.Opset(15);
  AutodiffOptions o;
  o.freeze = {"ones", "zeros"};
  Model fwd = b.Build();
  TrainingGraph tg = BuildTrainingGraph(fwd, o);
  EXPECT_TRUE(tg.state_updates.empty());
  EXPECT_EQ(tg.params, std::vector<std::string>{"w"});
  Model eval = DeriveEvalModel(fwd);
  for (const auto& n : eval.graph.nodes)
    if (n.op_type == "BatchNormalization") {
      EXPECT_EQ(n.GetInt("training_mode", 0), 1);
    }
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.f, 1.f);
  HostTensor x(DType::kFloat32, {3, 6});
  for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = nd(rng);
  ExpectGradientsMatchFiniteDifferences(
      tg, {{"x", Tensor::FromHost(x)}, {tg.labels, Tensor::FromHost(HostTensor::FromVector<int64_t>({2, 0, 3}, {3}))}});
}


}  // namespace
}  // namespace ot
