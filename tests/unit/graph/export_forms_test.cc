// The graph rewrites for models exported from PyTorch (graph/batch_dim, graph/batch_norm_form):
// constant shapes that hold the batch are found through Constant/Unsqueeze/Concat chains; a
// fixed batch becomes symbolic; BatchNormalization statistics shared with scale and bias are
// made state again; folded BatchNorm is restored after its convolution; a frozen
// BatchNormalization computes what ONNX's inference BatchNormalization computes (the oneDNN
// kernel and a double-precision formula written here); Reshape targets holding the batch are
// rewritten; class-score heads (graph/class_head) are found and their classifier replaced;
// parameters the dynamo exporter merged for their equal values are taken apart again.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "graph/exports/batch_dim.h"
#include "graph/autodiff/autodiff.h"
#include "graph/exports/batch_norm_form.h"
#include "graph/exports/class_head.h"
#include "graph/exports/merged_initializers.h"
#include "graph/error.h"
#include "runtime/executor/executor.h"
#include "tests/common/test_util.h"

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
  // The statistics, and the epsilon constant the frozen form adds (an initializer that must
  // not train either).
  ASSERT_EQ(r.frozen_statistics.size(), 3u);
  EXPECT_EQ(r.frozen_statistics[0], "bn.running_mean");
  EXPECT_EQ(r.frozen_statistics[1], "bn.running_var");
  const HostTensor* eps = frozen.graph.FindInitializer(r.frozen_statistics[2]);
  ASSERT_NE(eps, nullptr);
  EXPECT_EQ(eps->NumElements(), 1);
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

TEST(BatchDim, ReshapeHoldingTheBatchIsRewritten) {
  // x.view(2, -1) exported at batch 2: the target [2, -1] becomes [0, -1] and the model runs
  // with any batch.
  Model m = ReshapeModel([](Model& g) {
    g.graph.initializers.push_back(HostTensor::FromVector<int64_t>({2, -1}, {2}, "shape"));
    return std::string("shape");
  });
  const std::vector<std::string> notes = FreeReshapesOfBatch(m, 2);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("[2, -1]"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("[0, -1]"), std::string::npos) << notes[0];
  EXPECT_TRUE(NodesHoldingBatch(m, 2).empty());
  Executor exec(WithSymbolicBatch(m, 2));
  EXPECT_EQ(exec.Run({{"x", Tensor::FromHost(Random({5, 3, 4, 5}, 1, -1, 1, "x"))}})[0].shape(), (Shape{5, 60}));
  // allowzero=1: 0 would be a zero dimension; [2, 60] becomes [-1, 60], [2, -1] stays.
  for (bool known_rest : {true, false}) {
    Model z = ReshapeModel([&](Model& g) {
      g.opsets[""] = 14;
      g.graph.initializers.push_back(HostTensor::FromVector<int64_t>({2, known_rest ? 60 : -1}, {2}, "shape"));
      return std::string("shape");
    });
    z.graph.nodes.back().SetInt("allowzero", 1);
    EXPECT_EQ(FreeReshapesOfBatch(z, 2).size(), known_rest ? 1u : 0u);
    EXPECT_EQ(NodesHoldingBatch(z, 2).empty(), known_rest);
  }
}

// scores [N, K, 1, 1] (or [N, K]) -> Softmax(axis) -> Flatten -> prob, at `opset`.
Model SoftmaxHeadModel(const std::vector<Dim>& scores, int64_t axis, int64_t opset, const std::string& op = "Softmax") {
  Model m;
  m.opsets[""] = opset;
  m.graph.inputs.push_back(Value("s", scores));
  Node sm = MakeNode(op, {"s"}, {"p"});
  sm.SetInt("axis", axis);
  m.graph.nodes.push_back(sm);
  Node flat = MakeNode("Flatten", {"p"}, {"prob"});
  flat.SetInt("axis", 1);
  m.graph.nodes.push_back(flat);
  m.graph.outputs.push_back(Value("prob", {{-1, "N"}, scores[1]}));
  return m;
}

TEST(ClassHead, SoftmaxOverTheClassAxisIsFoundAndOthersRefused) {
  const std::vector<Dim> flat = {{-1, "N"}, {10, ""}}, unit = {{-1, "N"}, {10, ""}, {1, ""}, {1, ""}},
                         spatial = {{-1, "N"}, {10, ""}, {2, ""}, {2, ""}};
  ClassHead h = FindClassHead(SoftmaxHeadModel(unit, 1, 11), "prob");
  EXPECT_EQ(h.scores, "s");
  EXPECT_EQ(h.activation, "Softmax");
  EXPECT_TRUE(HasUnitTrailingAxes(Value("s", unit)));
  EXPECT_EQ(FindClassHead(SoftmaxHeadModel(flat, -1, 13, "LogSoftmax"), "prob").activation, "LogSoftmax");
  EXPECT_EQ(FindClassHead(SoftmaxHeadModel(spatial, 1, 13), "prob").scores, "s");  // per-position classes
  // Over the batch; over the last axis of [N, K, 1, 1]; before opset 13 over K*2*2 values.
  for (const Model& bad : {SoftmaxHeadModel(flat, 0, 13), SoftmaxHeadModel(unit, -1, 13),
                           SoftmaxHeadModel(spatial, 1, 11)}) {
    try {
      FindClassHead(bad, "prob");
      ADD_FAILURE() << "a softmax off the class axis was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not the class axis"), std::string::npos) << e.what();
    }
  }
}

TEST(ClassHead, LossReadsScoresBeforeTheSoftmaxAsNByK) {
  // [N, 4, 1, 1] scores -> Softmax -> Flatten: the attached loss is the cross-entropy of the
  // scores (not of the probabilities), labels [N].
  Model m = SoftmaxHeadModel({{-1, "N"}, {4, ""}, {1, ""}, {1, ""}}, 1, 11);
  m.graph.inputs[0].name = "x";
  m.graph.initializers.push_back(HostTensor::FromVector<float>({0.5f, -1.f, 2.f, 0.25f}, {1, 4, 1, 1}, "w"));
  m.graph.nodes.insert(m.graph.nodes.begin(), MakeNode("Mul", {"x", "w"}, {"s"}));
  m.graph.value_info["s"] = Value("s", {{-1, "N"}, {4, ""}, {1, ""}, {1, ""}});  // as shape inference gives
  TrainingGraph tg = BuildTrainingGraph(m);
  const ValueInfo* labels = tg.model.graph.FindInput(tg.labels);
  ASSERT_TRUE(labels);
  EXPECT_EQ(labels->dims.size(), 1u);
  HostTensor x = Random({3, 4, 1, 1}, 7, -2, 2, "x");
  HostTensor y = HostTensor::FromVector<int64_t>({2, 0, 3}, {3}, "labels");
  std::vector<Tensor> out = Executor(tg.model).Run({{"x", Tensor::FromHost(x)}, {tg.labels, Tensor::FromHost(y)}},
                                                   {tg.loss});
  const float w[4] = {0.5f, -1.f, 2.f, 0.25f};
  double want = 0;
  for (int i = 0; i < 3; ++i) {
    double z = 0;
    for (int k = 0; k < 4; ++k) z += std::exp(double(x.Data<float>()[i * 4 + k]) * w[k]);
    want += std::log(z) - double(x.Data<float>()[i * 4 + y.Data<int64_t>()[i]]) * w[y.Data<int64_t>()[i]];
  }
  EXPECT_NEAR(out[0].ToHost().Data<float>()[0], want / 3, 1e-5);
}

TEST(ClassHead, ClassifierIsReplacedWithAFreshLayer) {
  // x [N, 8] -> Gemm(fc.weight [6, 8], fc.bias [6], transB) -> Reshape [1, 6] -> Softmax.
  Model m;
  m.opsets[""] = 11;
  m.graph.inputs.push_back(Value("x", {{1, ""}, {8, ""}}));
  m.graph.initializers.push_back(Random({6, 8}, 3, -1, 1, "fc.weight"));
  m.graph.initializers.push_back(Random({6}, 4, -1, 1, "fc.bias"));
  m.graph.initializers.push_back(HostTensor::FromVector<int64_t>({1, 6}, {2}, "target"));
  Node fc = MakeNode("Gemm", {"x", "fc.weight", "fc.bias"}, {"s"});
  fc.name = "fc";
  fc.SetInt("transB", 1);
  fc.SetFloat("alpha", 2.f);
  m.graph.nodes.push_back(fc);
  m.graph.nodes.push_back(MakeNode("Reshape", {"s", "target"}, {"r"}));
  m.graph.nodes.push_back(MakeNode("Softmax", {"r"}, {"prob"}));
  m.graph.outputs.push_back(Value("prob", {{1, ""}, {6, ""}}));
  const std::string note = ReplaceClassifier(m, 3, 5);
  EXPECT_NE(note.find("'fc' (Gemm 8x6"), std::string::npos) << note;
  EXPECT_NE(note.find("3-way"), std::string::npos) << note;
  const HostTensor* w = m.graph.FindInitializer("fc.weight");
  const HostTensor* b = m.graph.FindInitializer("fc.bias");
  ASSERT_TRUE(w && b);
  EXPECT_EQ(w->dims, (Ints{3, 8}));
  EXPECT_EQ(b->dims, (Ints{3}));
  float largest = 0.f;
  for (int64_t i = 0; i < w->NumElements(); ++i) largest = std::max(largest, std::fabs(w->Data<float>()[i]));
  EXPECT_LE(largest, 1.f / std::sqrt(8.f));
  EXPECT_GT(largest, 0.f);
  EXPECT_EQ(m.graph.outputs[0].dims[1].value, 3);
  Executor exec(m);
  EXPECT_EQ(exec.Run({{"x", Tensor::FromHost(Random({1, 8}, 1, -1, 1, "x"))}})[0].shape(), (Shape{1, 3}));
  // The same seed gives the same layer.
  Model again = m;
  ReplaceClassifier(again, 3, 5);
  EXPECT_EQ(again.graph.FindInitializer("fc.weight")->bytes, w->bytes);
  // Nothing to replace: one error naming the output.
  Model bare = SoftmaxHeadModel({{-1, "N"}, {10, ""}}, 1, 11);
  try {
    ReplaceClassifier(bare, 3, 0);
    ADD_FAILURE() << "a model without a classifier was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("found no classifier layer for the output 'prob'"), std::string::npos)
        << e.what();
  }
}

// SeparateMergedInitializers (graph/exports/merged_initializers.h): a node run by module M
// (as the dynamo exporter records it) reading initializer P.
Node& ScopedAdd(Model& m, const std::string& module, const std::string& in, const std::string& param,
                const std::string& out, const std::string& fx_param = "") {
  Node n;
  n.op_type = "Add";
  n.name = "add_" + out;
  n.inputs = {in, param};
  n.outputs = {out};
  std::string scopes = "['', ";
  std::string path;
  for (size_t start = 0; !module.empty() && start <= module.size();) {
    const size_t dot = module.find('.', start);
    path = module.substr(0, dot);
    scopes += "'" + path + "', ";
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  n.metadata["pkg.torch.onnx.name_scopes"] = scopes + "'add']";
  if (!fx_param.empty())
    n.metadata["pkg.torch.onnx.fx_node"] = "%add : [num_users=1] = call_function[target=torch.ops.aten.linear.default]"
                                           "(args = (%x, %p_" + fx_param + "), kwargs = {})";
  m.graph.nodes.push_back(n);
  return m.graph.nodes.back();
}

Model MergedModel(int64_t elements) {
  Model m;
  m.producer_name = "pytorch";
  m.opsets[""] = 18;
  m.graph.inputs.push_back(Value("x", {Dim{elements, ""}}));
  HostTensor ones(DType::kFloat32, {elements}, "layers.0.norm1.weight");
  for (int64_t i = 0; i < elements; ++i) ones.Data<float>()[i] = 1.f;
  m.graph.initializers.push_back(ones);
  return m;
}

TEST(MergedInitializers, EachModuleGetsItsOwnCopyUnderItsName) {
  Model m = MergedModel(16);
  ScopedAdd(m, "layers.0.norm1", "x", "layers.0.norm1.weight", "a");
  ScopedAdd(m, "layers.0.norm1", "a", "layers.0.norm1.weight", "b");  // the owner reads it twice: one copy
  ScopedAdd(m, "layers.0.norm2", "b", "layers.0.norm1.weight", "c");
  ScopedAdd(m, "layers.1.norm1", "c", "layers.0.norm1.weight", "d");
  // nn.MultiheadAttention-like: the parent reads its submodule's parameter itself.
  m.graph.initializers.push_back(HostTensor(DType::kFloat32, {16}, "layers.0.attn.out_proj.bias"));
  ScopedAdd(m, "layers.0.attn", "d", "layers.0.attn.out_proj.bias", "e");
  ScopedAdd(m, "layers.1.attn", "e", "layers.0.attn.out_proj.bias", "f");
  m.graph.outputs.push_back(Value("f", {Dim{16, ""}}));
  const MergedInitializersReport r = SeparateMergedInitializers(m);
  EXPECT_EQ(r.merged, 2);
  EXPECT_EQ(r.restored, (std::vector<std::string>{"layers.0.norm2.weight", "layers.1.norm1.weight",
                                                  "layers.1.attn.out_proj.bias"}));
  EXPECT_EQ(m.graph.nodes[0].inputs[1], "layers.0.norm1.weight");
  EXPECT_EQ(m.graph.nodes[1].inputs[1], "layers.0.norm1.weight");
  EXPECT_EQ(m.graph.nodes[2].inputs[1], "layers.0.norm2.weight");
  EXPECT_EQ(m.graph.nodes[3].inputs[1], "layers.1.norm1.weight");
  EXPECT_EQ(m.graph.nodes[5].inputs[1], "layers.1.attn.out_proj.bias");
  const HostTensor* copy = m.graph.FindInitializer("layers.1.norm1.weight");
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->dims, Ints{16});
  EXPECT_EQ(copy->Data<float>()[15], 1.f);
  EXPECT_NE(r.Describe().find("had merged 2 small parameter tensors"), std::string::npos) << r.Describe();
}

TEST(MergedInitializers, NamesFromTheExportersFxNodeWhenThePathsDiffer) {
  // A zero bias merged across roles: linear2.bias kept, read by an attention module for its
  // out_proj.bias (the FX node names the parameter it read).
  Model m = MergedModel(16);
  m.graph.initializers[0].name = "layers.0.linear2.bias";
  m.graph.initializers.push_back(HostTensor(DType::kFloat32, {16, 16}, "layers.0.attn.out_proj.weight"));
  ScopedAdd(m, "layers.0.linear2", "x", "layers.0.linear2.bias", "a");
  ScopedAdd(m, "layers.0.attn", "a", "layers.0.linear2.bias", "b", "layers_0_attn_out_proj_bias");
  SeparateMergedInitializers(m);
  EXPECT_EQ(m.graph.nodes[1].inputs[1], "layers.0.attn.out_proj.bias");
}

TEST(MergedInitializers, LeavesTiesItCannotTellApart) {
  // Over 1024 elements (an embedding tied to the output layer): the exporter does not merge those.
  Model big = MergedModel(1025);
  ScopedAdd(big, "layers.0.norm1", "x", "layers.0.norm1.weight", "a");
  ScopedAdd(big, "layers.1.norm1", "a", "layers.0.norm1.weight", "b");
  EXPECT_EQ(SeparateMergedInitializers(big).merged, 0);
  // A parameter of the model itself, read inside its layers (passed down): stays shared.
  Model root = MergedModel(16);
  root.graph.initializers[0].name = "pos";
  ScopedAdd(root, "layers.0", "x", "pos", "a");
  ScopedAdd(root, "layers.1", "a", "pos", "b");
  EXPECT_EQ(SeparateMergedInitializers(root).merged, 0);
  // No module recorded (another exporter), or not PyTorch's: nothing to go by.
  Model plain = MergedModel(16);
  ScopedAdd(plain, "layers.0.norm1", "x", "layers.0.norm1.weight", "a");
  ScopedAdd(plain, "layers.1.norm1", "a", "layers.0.norm1.weight", "b").metadata.clear();
  EXPECT_EQ(SeparateMergedInitializers(plain).merged, 0);
  Model other = MergedModel(16);
  other.producer_name = "tf2onnx";
  ScopedAdd(other, "layers.0.norm1", "x", "layers.0.norm1.weight", "a");
  ScopedAdd(other, "layers.1.norm1", "a", "layers.0.norm1.weight", "b");
  EXPECT_EQ(SeparateMergedInitializers(other).merged, 0);
}

}  // namespace
}  // namespace ot
