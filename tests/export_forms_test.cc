// The graph rewrites for models exported from PyTorch (graph/batch_dim, graph/batch_norm_form):
// constant shapes that hold the batch are found through Constant/Unsqueeze/Concat chains; a
// fixed batch becomes symbolic; BatchNormalization statistics shared with scale and bias are
// made state again; folded BatchNorm is restored after its convolution; a frozen
// BatchNormalization computes what ONNX's inference BatchNormalization computes (the oneDNN
// kernel and a double-precision formula written here).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "graph/batch_dim.h"
#include "graph/batch_norm_form.h"
#include "graph/error.h"
#include "runtime/executor.h"
#include "tests/test_util.h"

namespace ot {
namespace {

using Ints = std::vector<int64_t>;

ValueInfo Value(const std::string& name, const std::vector<Dim>& dims, DType dtype = DType::kFloat32) {
  ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.has_shape = true;
  v.dims = dims;
  return v;
}

Node MakeNode(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs) {
  Node n;
  n.name = outs[0];
  n.op_type = op;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  return n;
}

HostTensor Random(const Ints& shape, uint32_t seed, float lo, float hi, const std::string& name) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  HostTensor t(DType::kFloat32, shape, name);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.Data<float>()[i] = dist(gen);
  return t;
}

// x [2, 3, 4, 5] -> Reshape(x, shape) -> y; `shape` is built by `build` into the model.
Model ReshapeModel(const std::function<std::string(Model&)>& build) {
  Model m;
  m.opsets[""] = 13;
  m.graph.inputs.push_back(Value("x", {{2, ""}, {3, ""}, {4, ""}, {5, ""}}));
  const std::string shape = build(m);
  m.graph.nodes.push_back(MakeNode("Reshape", {"x", shape}, {"y"}));
  m.graph.outputs.push_back(Value("y", {{2, ""}, {60, ""}}));
  return m;
}

TEST(BatchDim, ConstantShapesHoldingTheBatchAreFound) {
  // An initializer [2, 60].
  Model a = ReshapeModel([](Model& m) {
    m.graph.initializers.push_back(HostTensor::FromVector<int64_t>({2, 60}, {2}, "shape"));
    return std::string("shape");
  });
  EXPECT_EQ(FixedBatchSize(a), 2);
  EXPECT_EQ(NodesHoldingBatch(a, 2), std::vector<std::string>{"node 'y' (Reshape)"});
  // torch's x.view(x.size(0), -1) with a fixed batch: Concat(Unsqueeze(Constant 2), Unsqueeze(Constant -1)).
  Model b = ReshapeModel([](Model& m) {
    Node c0 = MakeNode("Constant", {}, {"c0"});
    c0.SetTensor("value", HostTensor::FromVector<int64_t>({2}, {}, ""));
    Node c1 = MakeNode("Constant", {}, {"c1"});
    c1.SetTensor("value", HostTensor::FromVector<int64_t>({-1}, {}, ""));
    m.graph.initializers.push_back(HostTensor::FromVector<int64_t>({0}, {1}, "axes"));
    m.graph.nodes.push_back(c0);
    m.graph.nodes.push_back(c1);
    m.graph.nodes.push_back(MakeNode("Unsqueeze", {"c0", "axes"}, {"u0"}));
    m.graph.nodes.push_back(MakeNode("Unsqueeze", {"c1", "axes"}, {"u1"}));
    Node cat = MakeNode("Concat", {"u0", "u1"}, {"shape"});
    cat.SetInt("axis", 0);
    m.graph.nodes.push_back(cat);
    return std::string("shape");
  });
  EXPECT_EQ(NodesHoldingBatch(b, 2).size(), 1u);
  // [0, -1] copies the batch from the input: nothing holds it.
  Model c = ReshapeModel([](Model& m) {
    m.graph.initializers.push_back(HostTensor::FromVector<int64_t>({0, -1}, {2}, "shape"));
    return std::string("shape");
  });
  EXPECT_TRUE(NodesHoldingBatch(c, 2).empty());
  // A shape computed from the input (Shape) is not a constant.
  Model d = ReshapeModel([](Model& m) {
    m.graph.nodes.push_back(MakeNode("Shape", {"x"}, {"shape"}));
    return std::string("shape");
  });
  EXPECT_TRUE(NodesHoldingBatch(d, 2).empty());
}

TEST(BatchDim, FixedBatchBecomesSymbolic) {
  Model m = ReshapeModel([](Model& g) {
    g.graph.initializers.push_back(HostTensor::FromVector<int64_t>({0, -1}, {2}, "shape"));
    return std::string("shape");
  });
  Model r = WithSymbolicBatch(m, 2);
  EXPECT_EQ(FixedBatchSize(r), 0);
  ASSERT_EQ(r.graph.inputs.size(), 1u);
  EXPECT_FALSE(r.graph.inputs[0].dims[0].IsStatic());
  EXPECT_EQ(r.graph.inputs[0].dims[0].param, "N");
  EXPECT_FALSE(r.graph.outputs[0].dims[0].IsStatic());
  // It runs with another batch.
  Executor exec(r);
  std::vector<Tensor> out = exec.Run({{"x", Tensor::FromHost(Random({5, 3, 4, 5}, 1, -1, 1, "x"))}});
  EXPECT_EQ(out[0].shape(), (Shape{5, 60}));
}

// x [N, C, H, W] -> BatchNormalization(x, scale, bias, mean, var) -> y (inference form).
Model BatchNormModel(int64_t c, bool shared_stats) {
  Model m;
  m.opsets[""] = 15;
  m.producer_name = "pytorch";
  m.graph.inputs.push_back(Value("x", {{-1, "N"}, {c, ""}, {3, ""}, {4, ""}}));
  m.graph.initializers.push_back(Random({c}, 2, 0.5f, 2.f, "bn.weight"));
  m.graph.initializers.push_back(Random({c}, 3, -1.f, 1.f, "bn.bias"));
  if (shared_stats) {  // as torch exports a fresh BatchNorm: statistics are Identity copies
    m.graph.nodes.push_back(MakeNode("Identity", {"bn.weight"}, {"bn.running_var"}));
    m.graph.nodes.push_back(MakeNode("Identity", {"bn.bias"}, {"bn.running_mean"}));
  } else {
    m.graph.initializers.push_back(Random({c}, 4, -0.5f, 0.5f, "bn.running_mean"));
    m.graph.initializers.push_back(Random({c}, 5, 0.2f, 3.f, "bn.running_var"));
  }
  Node bn = MakeNode("BatchNormalization", {"x", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}, {"y"});
  bn.SetFloat("epsilon", 1e-3f);
  m.graph.nodes.push_back(bn);
  m.graph.outputs.push_back(Value("y", {{-1, "N"}, {c, ""}, {3, ""}, {4, ""}}));
  return m;
}

TEST(BatchNormForm, FrozenBatchNormComputesTheInferenceForm) {
  const int64_t c = 6;
  Model m = BatchNormModel(c, false);
  Model frozen = m;
  BatchNormFormReport r = FreezeBatchNorm(frozen);
  EXPECT_EQ(r.frozen, 1);
  EXPECT_EQ(r.frozen_statistics, (std::vector<std::string>{"bn.running_mean", "bn.running_var"}));
  for (const auto& n : frozen.graph.nodes) EXPECT_NE(n.op_type, "BatchNormalization");
  EXPECT_NE(r.Describe().find("--frozen-bn: 1 BatchNormalization node normalises"), std::string::npos) << r.Describe();
  HostTensor x = Random({2, c, 3, 4}, 9, -3.f, 3.f, "x");
  const HostTensor want_kernel = Executor(m).Run({{"x", Tensor::FromHost(x)}})[0].ToHost();
  const HostTensor got = Executor(frozen).Run({{"x", Tensor::FromHost(x)}})[0].ToHost();
  EXPECT_EQ(testing::CompareTensors(want_kernel, got, 1e-5, 1e-5), "");
  // The formula in double precision.
  const auto* s = m.graph.FindInitializer("bn.weight")->Data<float>();
  const auto* b = m.graph.FindInitializer("bn.bias")->Data<float>();
  const auto* mu = m.graph.FindInitializer("bn.running_mean")->Data<float>();
  const auto* var = m.graph.FindInitializer("bn.running_var")->Data<float>();
  HostTensor want(DType::kFloat32, {2, c, 3, 4});
  for (int64_t i = 0; i < want.NumElements(); ++i) {
    const int64_t ch = i / 12 % c;
    want.Data<float>()[i] = static_cast<float>((x.Data<float>()[i] - double{mu[ch]}) /
                                                   std::sqrt(double{var[ch]} + 1e-3) * s[ch] + b[ch]);
  }
  EXPECT_EQ(testing::CompareTensors(want, got, 1e-5, 1e-5), "");
}

TEST(BatchNormForm, StatisticsSharedWithScaleAndBiasBecomeState) {
  Model m = BatchNormModel(4, true);
  BatchNormFormReport r = UseTrainingFormBatchNorm(m);
  EXPECT_EQ(r.inference_nodes, 1);
  EXPECT_EQ(r.restored, 0);
  for (const auto& n : m.graph.nodes) EXPECT_NE(n.op_type, "Identity");
  const HostTensor* var = m.graph.FindInitializer("bn.running_var");
  const HostTensor* scale = m.graph.FindInitializer("bn.weight");
  ASSERT_TRUE(var && scale);
  EXPECT_TRUE(var->bytes == scale->bytes);  // same values, own tensor
  EXPECT_NE(m.graph.FindInitializer("bn.running_mean"), nullptr);
  EXPECT_NE(r.Describe().find("1 BatchNormalization node came in inference form"), std::string::npos) << r.Describe();
}

// x -> Conv(w, b) -> Relu, with torch's names for folded parameters when `folded`.
Model ConvModel(bool folded, const std::string& producer) {
  Model m;
  m.opsets[""] = 13;
  m.producer_name = producer;
  const std::string w = folded ? "onnx::Conv_7" : "c1.weight", b = folded ? "onnx::Conv_8" : "c1.bias";
  m.graph.inputs.push_back(Value("x", {{-1, "N"}, {2, ""}, {5, ""}, {5, ""}}));
  m.graph.initializers.push_back(Random({3, 2, 3, 3}, 6, -1, 1, w));
  m.graph.initializers.push_back(Random({3}, 7, -1, 1, b));
  m.graph.nodes.push_back(MakeNode("Conv", {"x", w, b}, {"c"}));
  m.graph.nodes.push_back(MakeNode("Relu", {"c"}, {"y"}));
  m.graph.outputs.push_back(Value("y", {{-1, "N"}, {3, ""}, {3, ""}, {3, ""}}));
  return m;
}

TEST(BatchNormForm, FoldedBatchNormIsRestoredAfterItsConvolution) {
  Model m = ConvModel(true, "pytorch");
  BatchNormFormReport r = UseTrainingFormBatchNorm(m);
  EXPECT_EQ(r.restored, 1);
  ASSERT_EQ(m.graph.nodes.size(), 3u);
  EXPECT_EQ(m.graph.nodes[0].op_type, "Conv");
  const Node& bn = m.graph.nodes[1];
  EXPECT_EQ(bn.op_type, "BatchNormalization");
  EXPECT_EQ(bn.inputs[0], m.graph.nodes[0].outputs[0]);
  EXPECT_EQ(bn.outputs[0], "c");
  EXPECT_EQ(m.graph.nodes[2].inputs[0], "c");
  const float want[4] = {1.f, 0.f, 0.f, 1.f};
  for (int k = 0; k < 4; ++k) {
    const HostTensor* t = m.graph.FindInitializer(bn.inputs[static_cast<size_t>(k + 1)]);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dims, Ints{3});
    for (int i = 0; i < 3; ++i) EXPECT_EQ(t->Data<float>()[i], want[k]);
  }
  EXPECT_NE(r.Describe().find("PyTorch folded 1 BatchNorm layer into the convolution"), std::string::npos)
      << r.Describe();
  // Still a valid model that runs.
  Executor exec(m);
  EXPECT_EQ(exec.Run({{"x", Tensor::FromHost(Random({2, 2, 5, 5}, 8, -1, 1, "x"))}})[0].shape(), (Shape{2, 3, 3, 3}));
  // Parameters named as the module's, or another producer: nothing to restore.
  Model named = ConvModel(false, "pytorch");
  EXPECT_EQ(UseTrainingFormBatchNorm(named).restored, 0);
  Model other = ConvModel(true, "tf2onnx");
  EXPECT_EQ(UseTrainingFormBatchNorm(other).restored, 0);
  EXPECT_EQ(UseTrainingFormBatchNorm(other).Describe(), "");
}

}  // namespace
}  // namespace ot
