// Parity tests of our own CUDA math kernels (runtime/cuda/elementwise/elementwise.cu, reduce.cu,
// loss_optimizer.cu and their *_ops.cc kernel classes) against the CPU runtime as the
// oracle: each test builds a one-node model, runs it on the CPU and on cuda:0 with the
// same random inputs, and compares every output. Dropout's masks come from another
// generator on the GPU, so its test checks the mask's properties instead. These tests
// skip with the reason when there is no CUDA device. The CudaMathHostLogic tests run
// everywhere: they call the kernels' per-element functions (runtime/cuda/math_device.h)
// on the host and compare them with the CPU runtime.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "graph/error.h"
#include "graph/autodiff/gradient_registry.h"
#include "graph/passes/optimizer_pass.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_device.h"
#include "runtime/executor/executor.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/common/test_util.h"

namespace ot {
namespace {

using Feeds = std::vector<std::pair<std::string, HostTensor>>;
using Opsets = std::map<std::string, int64_t>;

class CudaMathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OT_REQUIRE_GPU();
  }
};

Node MakeNode(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
              const std::string& domain = "") {
  Node n;
  n.name = "node";
  n.op_type = op;
  n.domain = domain;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

// A model of one node whose inputs are graph inputs (types and shapes from the feeds).
Model OneNodeModel(const Node& node, const Opsets& opsets) {
  Model m;
  m.opsets = opsets;
  for (const auto& name : node.inputs) {
    if (name.empty()) continue;
    ValueInfo v;
    v.name = name;
    m.graph.inputs.push_back(v);
  }
  for (const auto& name : node.outputs) {
    if (name.empty()) continue;
    ValueInfo v;
    v.name = name;
    m.graph.outputs.push_back(v);
  }
  m.graph.nodes.push_back(node);
  return m;
}

std::vector<HostTensor> RunOn(Executor& exec, const Device& device, const Feeds& feeds) {
  std::map<std::string, Tensor> inputs;
  for (const auto& [name, host] : feeds) inputs[name] = Tensor::FromHost(host, device);
  std::vector<HostTensor> out;
  for (const Tensor& t : exec.Run(inputs)) out.push_back(t.ToHost());
  return out;
}

std::vector<HostTensor> RunModel(const Model& m, const Device& device, const Feeds& feeds) {
  ExecutorOptions options;
  options.device = device;
  Executor exec(m, options);
  return RunOn(exec, device, feeds);
}

Device Gpu() { return Device::Parse("cuda:0"); }

// Runs the node on the CPU and on the GPU and compares every output.
void ExpectParity(const Node& node, const Opsets& opsets, const Feeds& feeds, double rtol = 1e-5, double atol = 1e-6) {
  Model m = OneNodeModel(node, opsets);
  std::vector<HostTensor> cpu = RunModel(m, Device::CPU(), feeds);
  std::vector<HostTensor> gpu = RunModel(m, Gpu(), feeds);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_EQ(testing::CompareTensors(cpu[i], gpu[i], rtol, atol), "")
        << node.op_type << " output " << i << " (" << m.graph.outputs[i].name << ")";
}

// Uniform values in [lo, hi); integers rounded; bool a fair coin.
HostTensor Random(DType type, const Shape& shape, std::mt19937& rng, double lo = -2, double hi = 2) {
  HostTensor t(type, shape);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    const double v = dist(rng);
    switch (type) {
      case DType::kFloat32: t.Data<float>()[i] = static_cast<float>(v); break;
      case DType::kFloat64: t.Data<double>()[i] = v; break;
      case DType::kInt32: t.Data<int32_t>()[i] = static_cast<int32_t>(std::lround(v)); break;
      case DType::kInt64: t.Data<int64_t>()[i] = std::lround(v); break;
      case DType::kBool: t.Data<uint8_t>()[i] = v >= (lo + hi) / 2; break;
      default: ADD_FAILURE() << "no random values for " << DTypeName(type);
    }
  }
  return t;
}

template <typename T>
HostTensor Values(const Shape& shape, const std::vector<T>& v) {
  return HostTensor::FromVector(v, shape);
}

HostTensor Scalar(float v) { return HostTensor::FromVector(std::vector<float>{v}, {}); }
HostTensor Int64s(const std::vector<int64_t>& v) {
  return HostTensor::FromVector(v, {static_cast<int64_t>(v.size())});
}

const Opsets kOpset13 = {{"", 13}};

// ---------------------------------------------------------------------------------------
TEST_F(CudaMathTest, BinaryOpsBroadcastFloat) {
  std::mt19937 rng(1);
  const std::vector<std::pair<Shape, Shape>> shapes = {{{2, 3, 4}, {2, 3, 4}}, {{}, {2, 3, 4}},
                                                       {{2, 3, 4}, {}},        {{2, 1, 4}, {3, 1}},
                                                       {{4}, {2, 3, 4}},       {{5, 1, 1, 2}, {1, 3, 2, 1}}};
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Less", "LessOrEqual", "Greater",
                         "GreaterOrEqual"}) {
    for (const auto& [sa, sb] : shapes) {
      SCOPED_TRACE(std::string(op) + " " + ShapeString(sa) + " " + ShapeString(sb));
      const bool pow = std::string(op) == "Pow";
      HostTensor a = Random(DType::kFloat32, sa, rng, pow ? 0.1 : -2, 2);
      HostTensor b = Random(DType::kFloat32, sb, rng);
      if (std::string(op) == "Equal") b = a.NumElements() == b.NumElements() ? a : b;  // some equal elements
      ExpectParity(MakeNode(op, {"a", "b"}, {"y"}), kOpset13, {{"a", a}, {"b", b}});
    }
  }
}

TEST_F(CudaMathTest, BinaryOpsIntegerTypes) {
  std::mt19937 rng(2);
  for (DType type : {DType::kInt32, DType::kInt64, DType::kFloat64}) {
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Less", "Equal", "Pow"}) {
      SCOPED_TRACE(std::string(op) + " " + DTypeName(type));
      HostTensor a = Random(type, {3, 4}, rng, -9, 9);
      HostTensor b = Random(type, {4}, rng, 1, 4);  // never zero
      ExpectParity(MakeNode(op, {"a", "b"}, {"y"}), kOpset13, {{"a", a}, {"b", b}});
    }
  }
}

TEST_F(CudaMathTest, PowMixedTypes) {
  std::mt19937 rng(3);
  HostTensor base = Random(DType::kFloat32, {2, 5}, rng, 0.2, 3);
  ExpectParity(MakeNode("Pow", {"a", "b"}, {"y"}), kOpset13,
               {{"a", base}, {"b", Values<int64_t>({5}, {0, 1, 2, 3, -2})}});
  ExpectParity(MakeNode("Pow", {"a", "b"}, {"y"}), kOpset13,
               {{"a", Values<int64_t>({4}, {2, -3, 1, 0})}, {"b", Values<float>({4}, {2.f, 3.f, 0.5f, 2.f})}});
}

TEST_F(CudaMathTest, VariadicOps) {
  std::mt19937 rng(4);
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
    SCOPED_TRACE(op);
    ExpectParity(MakeNode(op, {"a", "b", "c"}, {"y"}), kOpset13,
                 {{"a", Random(DType::kFloat32, {3, 1}, rng)},
                  {"b", Random(DType::kFloat32, {2, 3, 4}, rng)},
                  {"c", Random(DType::kFloat32, {4}, rng)}});
    ExpectParity(MakeNode(op, {"a"}, {"y"}), kOpset13, {{"a", Random(DType::kFloat32, {2, 3}, rng)}});
  }
}

TEST_F(CudaMathTest, Where) {
  std::mt19937 rng(5);
  for (DType type : {DType::kFloat32, DType::kInt64, DType::kBool}) {
    SCOPED_TRACE(DTypeName(type));
    ExpectParity(MakeNode("Where", {"c", "x", "y"}, {"out"}), kOpset13,
                 {{"c", Random(DType::kBool, {2, 1, 4}, rng)},
                  {"x", Random(type, {3, 4}, rng, -5, 5)},
                  {"y", Random(type, {2, 3, 1}, rng, -5, 5)}});
  }
}

TEST_F(CudaMathTest, UnaryOps) {
  std::mt19937 rng(6);
  HostTensor mixed = Random(DType::kFloat32, {4, 33}, rng, -40, 40);
  const std::vector<float> halves = {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 3.49f, -3.51f};
  for (const char* op : {"Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Ceil", "Floor", "Round", "LeakyRelu",
                         "Softplus"}) {
    SCOPED_TRACE(op);
    const std::string name = op;
    HostTensor x = name == "Log" || name == "Sqrt" ? Random(DType::kFloat32, {4, 33}, rng, 0.01, 50)
                   : name == "Exp"                 ? Random(DType::kFloat32, {4, 33}, rng, -10, 10)
                   : name == "Round"               ? Values<float>({8}, halves)
                                                   : mixed;
    Node n = MakeNode(op, {"x"}, {"y"});
    if (name == "LeakyRelu") n.SetFloat("alpha", 0.2f);
    // oneDNN's soft_relu (the CPU's Softplus) loses about 4e-6 to cancellation below -10.
    ExpectParity(n, kOpset13, {{"x", x}}, 2e-6, name == "Softplus" ? 1e-5 : 1e-6);
  }
  ExpectParity(MakeNode("Neg", {"x"}, {"y"}), kOpset13, {{"x", Random(DType::kInt64, {7}, rng, -9, 9)}});
  ExpectParity(MakeNode("Floor", {"x"}, {"y"}), kOpset13, {{"x", Random(DType::kFloat64, {7}, rng, -9, 9)}});
}

TEST_F(CudaMathTest, Clip) {
  std::mt19937 rng(7);
  HostTensor x = Random(DType::kFloat32, {3, 5}, rng, -3, 3);
  ExpectParity(MakeNode("Clip", {"x", "lo", "hi"}, {"y"}), kOpset13,
               {{"x", x}, {"lo", Scalar(-1.f)}, {"hi", Scalar(0.5f)}});
  ExpectParity(MakeNode("Clip", {"x", "", "hi"}, {"y"}), kOpset13, {{"x", x}, {"hi", Scalar(0.5f)}});
  ExpectParity(MakeNode("Clip", {"x", "lo", "hi"}, {"y"}), kOpset13,
               {{"x", x}, {"lo", Scalar(1.f)}, {"hi", Scalar(0.f)}});
  Node legacy = MakeNode("Clip", {"x"}, {"y"});
  legacy.SetFloat("min", -0.25f);
  ExpectParity(legacy, {{"", 6}}, {{"x", x}});
  ExpectParity(MakeNode("Clip", {"x", "lo", "hi"}, {"y"}), kOpset13,
               {{"x", Random(DType::kInt64, {9}, rng, -9, 9)},
                {"lo", HostTensor::FromVector(std::vector<int64_t>{-2}, {})},
                {"hi", HostTensor::FromVector(std::vector<int64_t>{4}, {})}});
}

TEST_F(CudaMathTest, CastAndCastLike) {
  HostTensor f = Values<float>({8}, {-3.7f, -0.5f, 0.f, 0.49f, 2.5f, 3e9f, -3e9f, NAN});
  for (DType to : {DType::kInt32, DType::kInt64, DType::kFloat64, DType::kBool, DType::kUInt8, DType::kInt8}) {
    SCOPED_TRACE(DTypeName(to));
    Node n = MakeNode("Cast", {"x"}, {"y"});
    n.SetInt("to", static_cast<int64_t>(to));
    ExpectParity(n, kOpset13, {{"x", f}});
  }
  std::mt19937 rng(8);
  Node to_float = MakeNode("Cast", {"x"}, {"y"});
  to_float.SetInt("to", static_cast<int64_t>(DType::kFloat32));
  ExpectParity(to_float, kOpset13, {{"x", Random(DType::kInt64, {6}, rng, -100, 100)}});
  ExpectParity(to_float, kOpset13, {{"x", Random(DType::kBool, {6}, rng)}});
  ExpectParity(to_float, kOpset13, {{"x", f}});  // same type: a copy
  ExpectParity(MakeNode("CastLike", {"x", "like"}, {"y"}), {{"", 15}},
               {{"x", Random(DType::kFloat32, {5}, rng, -9, 9)}, {"like", Values<int32_t>({1}, {0})}});
}

TEST_F(CudaMathTest, LeakyReluGrad) {
  std::mt19937 rng(9);
  Node n = MakeNode("LeakyReluGrad", {"dy", "x"}, {"dx"}, kGradDomain);
  n.SetFloat("alpha", 0.3f);
  ExpectParity(n, {{"", 13}, {kGradDomain, 1}},
               {{"dy", Random(DType::kFloat32, {4, 6}, rng)}, {"x", Random(DType::kFloat32, {4, 6}, rng)}});
}

// ---------------------------------------------------------------------------------------
TEST_F(CudaMathTest, Reductions) {
  std::mt19937 rng(10);
  const std::vector<std::vector<int64_t>> axes_cases = {{1}, {0, 2}, {}, {-1}, {0, 1, 2}};
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}) {
    const std::string name = op;
    const bool positive = name == "ReduceLogSum";
    HostTensor x = Random(DType::kFloat32, {3, 4, 5}, rng, positive ? 0.1 : -1.5, 1.5);
    for (const auto& axes : axes_cases) {
      for (int keepdims : {0, 1}) {
        SCOPED_TRACE(name + " axes " + ShapeString(axes) + " keepdims " + std::to_string(keepdims));
        Node n = MakeNode(op, {"x"}, {"y"});
        if (!axes.empty()) n.SetInts("axes", axes);
        n.SetInt("keepdims", keepdims);
        // The CPU sums in float (oneDNN), the GPU in double: a few float ulps of the terms.
        ExpectParity(n, {{"", 11}}, {{"x", x}}, 1e-5, 1e-5);
      }
    }
  }
}

TEST_F(CudaMathTest, LargeReductionsUseTheBlockPath) {
  std::mt19937 rng(11);
  HostTensor x = Random(DType::kFloat32, {3, 1000, 7}, rng);
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceLogSumExp", "ReduceL2"}) {
    for (const std::vector<int64_t>& axes : std::vector<std::vector<int64_t>>{{1}, {0, 1}, {0, 2}, {}}) {
      SCOPED_TRACE(std::string(op) + " axes " + ShapeString(axes));
      Node n = MakeNode(op, {"x"}, {"y"});
      if (!axes.empty()) n.SetInts("axes", axes);
      ExpectParity(n, {{"", 11}}, {{"x", x}}, 1e-5, 2e-4);  // thousands of float terms on the CPU
    }
  }
}

TEST_F(CudaMathTest, ReduceSumAxesInputAndIntegers) {
  std::mt19937 rng(12);
  HostTensor x = Random(DType::kFloat32, {2, 3, 4}, rng);
  ExpectParity(MakeNode("ReduceSum", {"x", "axes"}, {"y"}), kOpset13, {{"x", x}, {"axes", Int64s({-1, 0})}});
  Node noop = MakeNode("ReduceSum", {"x", "axes"}, {"y"});
  noop.SetInt("noop_with_empty_axes", 1);
  ExpectParity(noop, kOpset13, {{"x", x}, {"axes", HostTensor(DType::kInt64, {0})}});
  ExpectParity(MakeNode("ReduceSum", {"x"}, {"y"}), kOpset13, {{"x", x}});
  for (DType type : {DType::kInt32, DType::kInt64}) {
    for (const char* op : {"ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean"}) {
      SCOPED_TRACE(std::string(op) + " " + DTypeName(type));
      Node n = MakeNode(op, {"x"}, {"y"});
      n.SetInts("axes", {1});
      ExpectParity(n, {{"", 11}}, {{"x", Random(type, {3, 4, 2}, rng, -5, 5)}});
    }
  }
}

TEST_F(CudaMathTest, ArgMaxArgMin) {
  std::mt19937 rng(13);
  HostTensor x = Random(DType::kInt64, {3, 6, 4}, rng, -2, 2);  // many ties
  HostTensor xf = Random(DType::kFloat32, {3, 6, 4}, rng);
  for (const char* op : {"ArgMax", "ArgMin"}) {
    for (int64_t axis : {0, 1, -1}) {
      for (int last : {0, 1}) {
        SCOPED_TRACE(std::string(op) + " axis " + std::to_string(axis) + " last " + std::to_string(last));
        Node n = MakeNode(op, {"x"}, {"y"});
        n.SetInt("axis", axis);
        n.SetInt("select_last_index", last);
        n.SetInt("keepdims", last);
        ExpectParity(n, kOpset13, {{"x", x}});
        ExpectParity(n, kOpset13, {{"x", xf}});
      }
    }
  }
}

TEST_F(CudaMathTest, SumToShapeAndReduceGrad) {
  std::mt19937 rng(14);
  const Opsets opsets = {{"", 13}, {kGradDomain, 1}};
  HostTensor g = Random(DType::kFloat32, {4, 3, 5}, rng);
  for (const Shape& target : std::vector<Shape>{{3, 1}, {5}, {4, 3, 5}, {1, 3, 5}, {}, {4, 1, 1}}) {
    SCOPED_TRACE("SumToShape " + ShapeString(target));
    ExpectParity(MakeNode("SumToShape", {"g", "shape"}, {"y"}, kGradDomain), opsets,
                 {{"g", g}, {"shape", Int64s(target)}}, 1e-5, 1e-5);
  }
  HostTensor big = Random(DType::kFloat32, {256, 10}, rng);  // a bias gradient: many rows per output
  ExpectParity(MakeNode("SumToShape", {"g", "shape"}, {"y"}, kGradDomain), opsets,
               {{"g", big}, {"shape", Int64s({10})}}, 1e-5, 1e-4);

  Node mean = MakeNode("ReduceGrad", {"dy", "shape"}, {"dx"}, kGradDomain);
  mean.SetInts("axes", {1});
  mean.SetInt("mean", 1);
  ExpectParity(mean, opsets, {{"dy", Random(DType::kFloat32, {2, 1, 5}, rng)}, {"shape", Int64s({2, 3, 5})}});
  Node all = MakeNode("ReduceGrad", {"dy", "shape"}, {"dx"}, kGradDomain);
  ExpectParity(all, opsets, {{"dy", Random(DType::kFloat32, {}, rng)}, {"shape", Int64s({2, 3, 5})}});
  Node by_input = MakeNode("ReduceGrad", {"dy", "shape", "axes"}, {"dx"}, kGradDomain);
  ExpectParity(by_input, opsets,
               {{"dy", Random(DType::kFloat32, {3}, rng)}, {"shape", Int64s({2, 3, 5})}, {"axes", Int64s({0, -1})}});
}

// ---------------------------------------------------------------------------------------
struct LossCase {
  std::string reduction;
  bool weight;
  bool ignore;
  DType labels;
  Shape scores;
};

std::vector<LossCase> LossCases() {
  std::vector<LossCase> cases;
  for (const char* r : {"none", "sum", "mean"})
    for (bool w : {false, true})
      for (bool ig : {false, true})
        cases.push_back({r, w, ig, ig ? DType::kInt32 : DType::kInt64, w ? Shape{3, 4, 2, 3} : Shape{6, 5}});
  return cases;
}

HostTensor Labels(DType type, const Shape& scores, std::mt19937& rng, bool with_ignored) {
  Shape shape = scores;
  shape.erase(shape.begin() + 1);
  HostTensor t(type, shape);
  std::uniform_int_distribution<int64_t> dist(0, scores[1] - 1);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    int64_t v = with_ignored && i % 3 == 1 ? -100 : dist(rng);
    if (type == DType::kInt64) t.Data<int64_t>()[i] = v;
    else t.Data<int32_t>()[i] = static_cast<int32_t>(v);
  }
  return t;
}

TEST_F(CudaMathTest, LossesForward) {
  std::mt19937 rng(15);
  for (const LossCase& c : LossCases()) {
    for (const char* op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}) {
      SCOPED_TRACE(std::string(op) + " " + c.reduction + " weight " + std::to_string(c.weight) + " ignore " +
                   std::to_string(c.ignore) + " " + ShapeString(c.scores));
      const bool sce = std::string(op) == "SoftmaxCrossEntropyLoss";
      std::vector<std::string> inputs = {"x", "labels"};
      Feeds feeds = {{"x", Random(DType::kFloat32, c.scores, rng, -4, 4)},
                     {"labels", Labels(c.labels, c.scores, rng, c.ignore)}};
      if (c.weight) {
        inputs.push_back("w");
        feeds.push_back({"w", Random(DType::kFloat32, {c.scores[1]}, rng, 0.1, 2)});
      }
      Node n =
          MakeNode(op, inputs, sce ? std::vector<std::string>{"loss", "log_prob"} : std::vector<std::string>{"loss"});
      n.SetString("reduction", c.reduction);
      if (c.ignore) n.SetInt("ignore_index", -100);
      ExpectParity(n, kOpset13, feeds, 1e-5, 1e-6);
    }
  }
  // The gradient-domain loss of opset < 12 models, with float64 scores.
  Node old = MakeNode("SoftmaxCrossEntropyLoss", {"x", "labels"}, {"loss"}, kGradDomain);
  ExpectParity(old, {{"", 11}, {kGradDomain, 1}},
               {{"x", Random(DType::kFloat64, {5, 7}, rng)}, {"labels", Labels(DType::kInt64, {5, 7}, rng, false)}});
}

TEST_F(CudaMathTest, LossGradients) {
  std::mt19937 rng(16);
  const Opsets opsets = {{"", 13}, {kGradDomain, 1}};
  for (const LossCase& c : LossCases()) {
    for (const char* op : {"SoftmaxCrossEntropyLossGrad", "NegativeLogLikelihoodLossGrad"}) {
      SCOPED_TRACE(std::string(op) + " " + c.reduction + " weight " + std::to_string(c.weight) + " ignore " +
                   std::to_string(c.ignore) + " " + ShapeString(c.scores));
      HostTensor labels = Labels(c.labels, c.scores, rng, c.ignore);
      HostTensor dy =
          c.reduction == "none" ? Random(DType::kFloat32, labels.dims, rng) : Random(DType::kFloat32, {}, rng);
      std::vector<std::string> inputs = {"dy", "x", "labels"};
      Feeds feeds = {{"dy", dy}, {"x", Random(DType::kFloat32, c.scores, rng, -4, -0.1)}, {"labels", labels}};
      if (c.weight) {
        inputs.push_back("w");
        feeds.push_back({"w", Random(DType::kFloat32, {c.scores[1]}, rng, 0.1, 2)});
      }
      Node n = MakeNode(op, inputs, {"dx"}, kGradDomain);
      n.SetString("reduction", c.reduction);
      if (c.ignore) n.SetInt("ignore_index", -100);
      ExpectParity(n, opsets, feeds, 1e-5, 1e-6);
    }
  }
}

TEST_F(CudaMathTest, LabelOutOfRangeIsReportedOnTheNextRun) {
  Node n = MakeNode("SoftmaxCrossEntropyLoss", {"x", "labels"}, {"loss"});
  ExecutorOptions options;
  options.device = Gpu();
  Executor exec(OneNodeModel(n, kOpset13), options);
  std::mt19937 rng(17);
  Feeds feeds = {{"x", Random(DType::kFloat32, {4, 5}, rng)}, {"labels", Values<int64_t>({4}, {0, 7, 2, 1})}};
  // The first run cannot know yet (Compute never waits for the device); its output
  // leaves the bad position out. The next run reports it.
  std::vector<HostTensor> first = RunOn(exec, Gpu(), feeds);
  EXPECT_TRUE(std::isfinite(first[0].Data<float>()[0]));
  try {
    RunOn(exec, Gpu(), feeds);
    ADD_FAILURE() << "expected an error for label 7 with 5 classes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside [0, 5)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("batch index 1"), std::string::npos) << e.what();
  }
}

TEST_F(CudaMathTest, IntegerDivisionByZeroIsReported) {
  ExecutorOptions options;
  options.device = Gpu();
  Executor exec(OneNodeModel(MakeNode("Div", {"a", "b"}, {"y"}), kOpset13), options);
  Feeds feeds = {{"a", Values<int64_t>({3}, {4, 5, 6})}, {"b", Values<int64_t>({3}, {2, 0, 3})}};
  RunOn(exec, Gpu(), feeds);
  EXPECT_THROW(RunOn(exec, Gpu(), feeds), Error);
}

// ---------------------------------------------------------------------------------------
TEST_F(CudaMathTest, DropoutTrainingAndInference) {
  std::mt19937 rng(18);
  const int64_t n = 20000;
  HostTensor x = Random(DType::kFloat32, {n}, rng, 0.5, 2);  // never zero
  Node node = MakeNode("Dropout", {"x", "ratio", "training"}, {"y", "mask"});
  ExecutorOptions options;
  options.device = Gpu();
  options.seed = 42;
  Executor exec(OneNodeModel(node, kOpset13), options);
  HostTensor on = HostTensor::FromVector(std::vector<uint8_t>{1}, {});
  on.dtype = DType::kBool;
  HostTensor off = on;
  off.Data<uint8_t>()[0] = 0;
  Feeds feeds = {{"x", x}, {"ratio", Scalar(0.3f)}, {"training", on}};
  std::vector<HostTensor> a = RunOn(exec, Gpu(), feeds);
  std::vector<HostTensor> b = RunOn(exec, Gpu(), feeds);
  int64_t kept = 0, same = 0;
  const float scale = 1.f / (1.f - 0.3f);
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = a[1].Data<uint8_t>()[i] != 0;
    kept += keep;
    same += keep == (b[1].Data<uint8_t>()[i] != 0);
    const float expected = keep ? x.Data<float>()[i] * scale : 0.f;
    ASSERT_NEAR(a[0].Data<float>()[i], expected, 1e-6) << "element " << i;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.7, 0.02);
  EXPECT_LT(same, n - 100) << "two runs drew the same mask";

  feeds[2].second = off;
  std::vector<HostTensor> inference = RunOn(exec, Gpu(), feeds);
  EXPECT_EQ(testing::CompareTensors(x, inference[0], 0, 0), "");
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(inference[1].Data<uint8_t>()[i], 1) << "element " << i;

  // Without training_mode the op is the identity, as on the CPU.
  ExpectParity(MakeNode("Dropout", {"x"}, {"y", "mask"}), kOpset13, {{"x", x}});
  ExpectParity(MakeNode("Dropout", {"x"}, {"y", "mask"}), {{"", 7}}, {{"x", x}});
}

TEST_F(CudaMathTest, DropoutRatioOutOfRangeIsReported) {
  Node node = MakeNode("Dropout", {"x", "ratio", "training"}, {"y"});
  ExecutorOptions options;
  options.device = Gpu();
  Executor exec(OneNodeModel(node, kOpset13), options);
  HostTensor on = HostTensor::FromVector(std::vector<uint8_t>{1}, {});
  on.dtype = DType::kBool;
  std::mt19937 rng(19);
  Feeds feeds = {{"x", Random(DType::kFloat32, {10}, rng)}, {"ratio", Scalar(1.5f)}, {"training", on}};
  RunOn(exec, Gpu(), feeds);
  EXPECT_THROW(RunOn(exec, Gpu(), feeds), Error);
}

TEST_F(CudaMathTest, DropoutGrad) {
  std::mt19937 rng(20);
  const Opsets opsets = {{"", 13}, {kGradDomain, 1}};
  HostTensor dy = Random(DType::kFloat32, {6, 7}, rng);
  HostTensor mask = Random(DType::kBool, {6, 7}, rng);
  Node by_attr = MakeNode("DropoutGrad", {"dy", "mask"}, {"dx"}, kGradDomain);
  by_attr.SetFloat("ratio", 0.25f);
  ExpectParity(by_attr, opsets, {{"dy", dy}, {"mask", mask}});
  ExpectParity(MakeNode("DropoutGrad", {"dy", "mask", "ratio"}, {"dx"}, kGradDomain), opsets,
               {{"dy", dy}, {"mask", mask}, {"ratio", Scalar(0.6f)}});
}

// A small chain of these kernels (broadcast Add, Softplus, ReduceMean, the loss with its
// device error flag, SumToShape) captured into a CUDA graph and replayed with new values:
// Compute must neither wait nor allocate, and replays must match the CPU.
TEST_F(CudaMathTest, KernelsReplayInACudaGraph) {
  Model m;
  m.opsets = {{"", 13}, {kGradDomain, 1}};
  for (const char* name : {"a", "b", "labels", "shape"}) {
    ValueInfo v;
    v.name = name;
    m.graph.inputs.push_back(v);
  }
  auto add_node = [&](Node n) { m.graph.nodes.push_back(std::move(n)); };
  add_node(MakeNode("Add", {"a", "b"}, {"sum"}));
  add_node(MakeNode("Softplus", {"sum"}, {"soft"}));
  Node mean = MakeNode("ReduceMean", {"soft"}, {"mean"});
  mean.SetInts("axes", {1});
  add_node(mean);
  add_node(MakeNode("SoftmaxCrossEntropyLoss", {"sum", "labels"}, {"loss", "log_prob"}));
  add_node(MakeNode("SumToShape", {"soft", "shape"}, {"bias_grad"}, kGradDomain));
  for (const char* name : {"mean", "loss", "log_prob", "bias_grad"}) {
    ValueInfo v;
    v.name = name;
    m.graph.outputs.push_back(v);
  }
  ExecutorOptions options;
  options.device = Gpu();
  options.cuda_graphs = true;
  Executor gpu(m, options);
  Executor cpu(m);
  EXPECT_EQ(gpu.NumPlans(), 0u);
  std::mt19937 rng(23);
  for (int run = 0; run < 4; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    // Nine labels: the executor keys plans by the values of integer inputs of up to 8
    // elements, and this test wants one plan replayed.
    HostTensor labels(DType::kInt64, {9});
    for (int64_t i = 0; i < 9; ++i) labels.Data<int64_t>()[i] = (i * 3 + run) % 5;
    Feeds feeds = {{"a", Random(DType::kFloat32, {9, 5}, rng)},
                   {"b", Random(DType::kFloat32, {5}, rng)},
                   {"labels", labels},
                   {"shape", Int64s({5})}};
    std::vector<HostTensor> want = RunOn(cpu, Device::CPU(), feeds);
    std::vector<HostTensor> got = RunOn(gpu, Gpu(), feeds);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(testing::CompareTensors(want[i], got[i], 1e-5, 1e-5), "") << m.graph.outputs[i].name;
  }
  EXPECT_EQ(gpu.NumPlans(), 1u);
}

// ---------------------------------------------------------------------------------------
// An optimizer node updating two tensors: inputs R, T, X0, X1, G0, G1, states...
void ExpectOptimizerParity(const std::string& op, int states, const std::map<std::string, float>& attrs, int64_t step,
                           const std::string& domain = kTrainingOpsDomain) {
  std::mt19937 rng(21);
  const std::vector<Shape> shapes = {{3, 4}, {5}};
  std::vector<std::string> inputs = {"R", "T"}, outputs;
  Feeds feeds = {{"R", Scalar(0.05f)}, {"T", HostTensor::FromVector(std::vector<int64_t>{step}, {})}};
  const std::vector<std::string> groups = {"X", "G", "S", "H"};
  for (int k = 0; k < 2 + states; ++k)
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::string name = groups[static_cast<size_t>(k)] + std::to_string(i);
      inputs.push_back(name);
      feeds.push_back({name, Random(DType::kFloat32, shapes[i], rng, k >= 2 ? 0.0 : -1.0, 1.0)});
    }
  for (int k = 0; k < 1 + states; ++k)
    for (size_t i = 0; i < shapes.size(); ++i)
      outputs.push_back("new_" + groups[static_cast<size_t>(k == 0 ? 0 : k + 1)] + std::to_string(i));
  Node n = MakeNode(op, inputs, outputs, domain);
  for (const auto& [key, value] : attrs) n.SetFloat(key, value);
  ExpectParity(n, {{"", 13}, {domain, 1}}, feeds, 1e-5, 1e-6);
}

TEST_F(CudaMathTest, Optimizers) {
  for (int64_t step : {0, 3}) {
    SCOPED_TRACE("step " + std::to_string(step));
    ExpectOptimizerParity("Momentum", 1, {{"alpha", 0.9f}, {"beta", 0.8f}, {"norm_coefficient", 0.01f}}, step);
    ExpectOptimizerParity("SGD", 0, {{"norm_coefficient", 0.01f}}, step, kGradDomain);
    ExpectOptimizerParity("Adagrad", 1, {{"decay_factor", 0.1f}, {"epsilon", 1e-6f}, {"norm_coefficient", 0.02f}},
                          step);
    ExpectOptimizerParity("Adam", 2,
                          {{"alpha", 0.9f}, {"beta", 0.999f}, {"epsilon", 1e-8f}, {"norm_coefficient", 0.01f},
                           {"norm_coefficient_post", 0.001f}},
                          step);
  }
  // Nesterov momentum (a string attribute).
  std::mt19937 rng(22);
  Node n = MakeNode("Momentum", {"R", "T", "X", "G", "V"}, {"X2", "V2"}, kTrainingOpsDomain);
  n.SetString("mode", "nesterov");
  n.SetFloat("alpha", 0.9f);
  n.SetFloat("beta", 1.f);
  ExpectParity(n, {{"", 13}, {kTrainingOpsDomain, 1}},
               {{"R", Scalar(0.1f)},
                {"T", HostTensor::FromVector(std::vector<int64_t>{2}, {})},
                {"X", Random(DType::kFloat32, {7}, rng)},
                {"G", Random(DType::kFloat32, {7}, rng)},
                {"V", Random(DType::kFloat32, {7}, rng)}});
}

// ---------------------------------------------------------------------------------------
// The kernels' per-element logic, run on the host (no GPU needed).

// Row-major unravel of i over `shape`, dotted with `strides`.
int64_t NaiveOffset(int64_t i, const Shape& shape, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (size_t d = shape.size(); d-- > 0;) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

TEST(CudaMathHostLogic, BroadcastIndexerMatchesNaiveIndexing) {
  const std::vector<std::vector<Shape>> cases = {{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
                                                 {{}, {2, 3, 4}, {1}},
                                                 {{2, 1, 4}, {3, 1}, {4}},
                                                 {{5, 1, 1, 2}, {1, 3, 2, 1}, {2}},
                                                 {{1, 1, 7}, {6, 1, 1}, {1, 1}},
                                                 {{2, 2, 2, 2, 2, 2, 2, 2, 2}, {2, 2, 2, 2, 2, 2, 2, 2, 2}, {1}},
                                                 {{0, 3}, {3}, {1}}};
  for (const auto& inputs : cases) {
    SCOPED_TRACE(ShapeString(inputs[0]) + " " + ShapeString(inputs[1]) + " " + ShapeString(inputs[2]));
    Node node = MakeNode("Where", {}, {});
    Shape out = BroadcastShapes(BroadcastShapes(inputs[0], inputs[1], node), inputs[2], node);
    cuda::math::BroadcastIndexer ix;
    ASSERT_TRUE(cuda::math::MakeBroadcastIndexer(out, inputs, &ix));
    for (int64_t i = 0; i < NumElements(out); ++i) {
      int64_t off[3];
      cuda::math::BroadcastOffsets<3>(ix, i, off);
      for (int k = 0; k < 3; ++k)
        ASSERT_EQ(off[k], NaiveOffset(i, out, BroadcastStrides(inputs[static_cast<size_t>(k)], out)))
            << "operand " << k << " at output " << i;
    }
  }
  // Nine dimensions that cannot merge are more than a kernel takes.
  cuda::math::BroadcastIndexer ix;
  EXPECT_FALSE(cuda::math::MakeBroadcastIndexer({2, 3, 2, 3, 2, 3, 2, 3, 2}, {{2, 1, 2, 1, 2, 1, 2, 1, 2}}, &ix));
}

// A reduction computed with the kernels' per-output function, kept dims kept.
template <typename T>
HostTensor HostReduce(cuda::math::ReduceOp op, const HostTensor& x, const std::vector<bool>& reduced) {
  Shape out_shape = x.dims;
  int64_t count = 1;
  for (size_t d = 0; d < reduced.size(); ++d)
    if (reduced[d]) {
      count *= out_shape[d];
      out_shape[d] = 1;
    }
  cuda::math::ReduceIndexer ix;
  EXPECT_TRUE(cuda::math::MakeReduceIndexer(x.dims, reduced, &ix));
  HostTensor y(x.dtype, out_shape);
  const auto id = cuda::math::MakeReduceIdentities<T>();
  for (int64_t o = 0; o < y.NumElements(); ++o)
    y.Data<T>()[o] = cuda::math::ReduceOutput<T>(op, x.Data<T>(), o, count, ix, id);
  return y;
}

TEST(CudaMathHostLogic, ReductionsMatchTheCpu) {
  using cuda::math::ReduceOp;
  std::mt19937 rng(30);
  const std::vector<std::pair<const char*, ReduceOp>> ops = {
      {"ReduceSum", ReduceOp::kSum},   {"ReduceMean", ReduceOp::kMean},       {"ReduceMax", ReduceOp::kMax},
      {"ReduceMin", ReduceOp::kMin},   {"ReduceProd", ReduceOp::kProd},       {"ReduceL1", ReduceOp::kL1},
      {"ReduceL2", ReduceOp::kL2},     {"ReduceSumSquare", ReduceOp::kSumSquare}, {"ReduceLogSum", ReduceOp::kLogSum},
      {"ReduceLogSumExp", ReduceOp::kLogSumExp}};
  for (const auto& [name, op] : ops) {
    HostTensor x = Random(DType::kFloat32, {3, 4, 5}, rng, op == ReduceOp::kLogSum ? 0.1 : -1.5, 1.5);
    for (const std::vector<int64_t>& axes : std::vector<std::vector<int64_t>>{{1}, {0, 2}, {0, 1, 2}, {2}}) {
      SCOPED_TRACE(std::string(name) + " axes " + ShapeString(axes));
      std::vector<bool> reduced(3, false);
      for (int64_t a : axes) reduced[static_cast<size_t>(a)] = true;
      Node n = MakeNode(name, {"x"}, {"y"});
      n.SetInts("axes", axes);
      std::vector<HostTensor> cpu = RunModel(OneNodeModel(n, {{"", 11}}), Device::CPU(), {{"x", x}});
      EXPECT_EQ(testing::CompareTensors(cpu[0], HostReduce<float>(op, x, reduced), 1e-5, 1e-5), "");
    }
  }
  for (const auto& [name, op] : std::vector<std::pair<const char*, ReduceOp>>{
           {"ReduceSum", ReduceOp::kSum}, {"ReduceMax", ReduceOp::kMax}, {"ReduceMean", ReduceOp::kMean}}) {
    SCOPED_TRACE(std::string(name) + " int64");
    HostTensor x = Random(DType::kInt64, {3, 4, 2}, rng, -9, 9);
    Node n = MakeNode(name, {"x"}, {"y"});
    n.SetInts("axes", {0, 2});
    std::vector<HostTensor> cpu = RunModel(OneNodeModel(n, {{"", 11}}), Device::CPU(), {{"x", x}});
    EXPECT_EQ(testing::CompareTensors(cpu[0], HostReduce<int64_t>(op, x, {true, false, true}), 0, 0), "");
  }
}

TEST(CudaMathHostLogic, LossesMatchTheCpu) {
  std::mt19937 rng(31);
  const Opsets grad_opsets = {{"", 13}, {kGradDomain, 1}};
  for (const LossCase& c : LossCases()) {
    for (bool softmax : {true, false}) {
      SCOPED_TRACE(std::string(softmax ? "SCE " : "NLL ") + c.reduction + " weight " + std::to_string(c.weight) +
                   " ignore " + std::to_string(c.ignore) + " " + ShapeString(c.scores));
      HostTensor x = Random(DType::kFloat32, c.scores, rng, -4, -0.1);
      HostTensor labels = Labels(DType::kInt64, c.scores, rng, c.ignore);
      HostTensor w = Random(DType::kFloat32, {c.scores[1]}, rng, 0.1, 2);
      cuda::math::LossParams p;
      p.n = c.scores[0];
      p.c = c.scores[1];
      p.d = x.NumElements() / (p.n * p.c);
      p.softmax = softmax;
      p.reduce = c.reduction != "none";
      p.mean = c.reduction == "mean";
      p.has_ignore_index = c.ignore;
      p.ignore_index = -100;
      const float* weight = c.weight ? w.Data<float>() : nullptr;

      // Forward.
      std::vector<std::string> inputs = {"x", "labels"};
      Feeds feeds = {{"x", x}, {"labels", labels}};
      if (c.weight) {
        inputs.push_back("w");
        feeds.push_back({"w", w});
      }
      Node fwd = MakeNode(softmax ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss", inputs,
                          softmax ? std::vector<std::string>{"loss", "log_prob"} : std::vector<std::string>{"loss"});
      fwd.SetString("reduction", c.reduction);
      if (c.ignore) fwd.SetInt("ignore_index", -100);
      std::vector<HostTensor> cpu = RunModel(OneNodeModel(fwd, kOpset13), Device::CPU(), feeds);
      HostTensor loss(DType::kFloat32, p.reduce ? Shape{} : labels.dims);
      HostTensor log_prob(DType::kFloat32, c.scores);
      double loss_sum = 0, weight_sum = 0;
      long long flag = 0;
      for (int64_t pos = 0; pos < p.n * p.d; ++pos) {
        double l = 0, wt = 0;
        cuda::math::LossAtPosition<float, int64_t>(p, x.Data<float>(), labels.Data<int64_t>(), weight,
                                                   softmax ? log_prob.Data<float>() : nullptr, pos, &l, &wt, &flag);
        if (p.reduce) {
          loss_sum += l;
          weight_sum += wt;
        } else {
          loss.Data<float>()[pos] = static_cast<float>(l);
        }
      }
      if (p.reduce) loss.Data<float>()[0] = static_cast<float>(p.mean ? loss_sum / weight_sum : loss_sum);
      EXPECT_EQ(flag, 0);
      EXPECT_EQ(testing::CompareTensors(cpu[0], loss, 1e-5, 1e-6), "") << "loss";
      if (softmax) {
        EXPECT_EQ(testing::CompareTensors(cpu[1], log_prob, 1e-5, 1e-6), "") << "log_prob";
      }

      // Gradient.
      HostTensor dy = p.reduce ? Random(DType::kFloat32, {}, rng) : Random(DType::kFloat32, labels.dims, rng);
      std::vector<std::string> grad_inputs = {"dy", "x", "labels"};
      Feeds grad_feeds = {{"dy", dy}, {"x", x}, {"labels", labels}};
      if (c.weight) {
        grad_inputs.push_back("w");
        grad_feeds.push_back({"w", w});
      }
      Node bwd = MakeNode(softmax ? "SoftmaxCrossEntropyLossGrad" : "NegativeLogLikelihoodLossGrad", grad_inputs,
                          {"dx"}, kGradDomain);
      bwd.SetString("reduction", c.reduction);
      if (c.ignore) bwd.SetInt("ignore_index", -100);
      std::vector<HostTensor> cpu_grad = RunModel(OneNodeModel(bwd, grad_opsets), Device::CPU(), grad_feeds);
      double denominator = 0;
      for (int64_t pos = 0; pos < p.n * p.d; ++pos)
        denominator += cuda::math::LossWeightAt(p, labels.Data<int64_t>(), weight, pos, &flag);
      HostTensor dx(DType::kFloat32, c.scores);
      for (int64_t i = 0; i < dx.NumElements(); ++i)
        dx.Data<float>()[i] = cuda::math::LossGradAt(p, dy.Data<float>(), softmax ? x.Data<float>() : nullptr,
                                                     labels.Data<int64_t>(), weight, denominator, i);
      EXPECT_EQ(testing::CompareTensors(cpu_grad[0], dx, 1e-5, 1e-6), "") << "gradient";
    }
  }
  // A label outside [0, C) raises the flag with 1 + its position and counts for nothing.
  cuda::math::LossParams p;
  p.n = 3;
  p.c = 4;
  p.d = 1;
  const std::vector<int64_t> labels = {1, 9, 2};
  long long flag = 0;
  EXPECT_EQ(cuda::math::LossWeightAt<int64_t>(p, labels.data(), nullptr, 1, &flag), 0.0);
  EXPECT_EQ(flag, 2);
}

TEST(CudaMathHostLogic, OptimizersMatchTheCpu) {
  std::mt19937 rng(32);
  const Opsets opsets = {{"", 13}, {kTrainingOpsDomain, 1}};
  const int64_t n = 11;
  HostTensor x = Random(DType::kFloat32, {n}, rng), g = Random(DType::kFloat32, {n}, rng);
  HostTensor s1 = Random(DType::kFloat32, {n}, rng, 0, 1), s2 = Random(DType::kFloat32, {n}, rng, 0, 1);
  const float r = 0.05f;
  for (int64_t step : {0, 1, 4}) {
    SCOPED_TRACE("step " + std::to_string(step));
    Feeds feeds = {{"R", Scalar(r)}, {"T", HostTensor::FromVector(std::vector<int64_t>{step}, {})}, {"X", x}, {"G", g},
                   {"S1", s1}};
    HostTensor nx(DType::kFloat32, {n}), n1(DType::kFloat32, {n}), n2(DType::kFloat32, {n});
    for (bool nesterov : {false, true}) {
      Node m = MakeNode("Momentum", {"R", "T", "X", "G", "S1"}, {"NX", "N1"}, kTrainingOpsDomain);
      m.SetFloat("alpha", 0.9f);
      m.SetFloat("beta", 0.7f);
      m.SetFloat("norm_coefficient", 0.01f);
      if (nesterov) m.SetString("mode", "nesterov");
      std::vector<HostTensor> cpu = RunModel(OneNodeModel(m, opsets), Device::CPU(), feeds);
      cuda::math::MomentumParams p;
      p.alpha = 0.9f, p.beta = 0.7f, p.norm = 0.01f, p.nesterov = nesterov;
      for (int64_t i = 0; i < n; ++i)
        cuda::math::MomentumUpdate(p, r, step, x.Data<float>()[i], g.Data<float>()[i], s1.Data<float>()[i],
                                   nx.Data<float>() + i, n1.Data<float>() + i);
      EXPECT_EQ(testing::CompareTensors(cpu[0], nx, 1e-6, 1e-7), "") << "Momentum X, nesterov " << nesterov;
      EXPECT_EQ(testing::CompareTensors(cpu[1], n1, 1e-6, 1e-7), "") << "Momentum V, nesterov " << nesterov;
    }
    {
      Node a = MakeNode("Adagrad", {"R", "T", "X", "G", "S1"}, {"NX", "N1"}, kTrainingOpsDomain);
      a.SetFloat("decay_factor", 0.1f);
      a.SetFloat("epsilon", 1e-6f);
      a.SetFloat("norm_coefficient", 0.02f);
      std::vector<HostTensor> cpu = RunModel(OneNodeModel(a, opsets), Device::CPU(), feeds);
      cuda::math::AdagradParams p;
      p.decay = 0.1f, p.epsilon = 1e-6f, p.norm = 0.02f;
      const float rate = cuda::math::AdagradRate(p, r, step);
      for (int64_t i = 0; i < n; ++i)
        cuda::math::AdagradUpdate(p, rate, x.Data<float>()[i], g.Data<float>()[i], s1.Data<float>()[i],
                                  nx.Data<float>() + i, n1.Data<float>() + i);
      EXPECT_EQ(testing::CompareTensors(cpu[0], nx, 1e-6, 1e-7), "") << "Adagrad X";
      EXPECT_EQ(testing::CompareTensors(cpu[1], n1, 1e-6, 1e-7), "") << "Adagrad H";
    }
    {
      Node a = MakeNode("Adam", {"R", "T", "X", "G", "S1", "S2"}, {"NX", "N1", "N2"}, kTrainingOpsDomain);
      a.SetFloat("alpha", 0.8f);
      a.SetFloat("beta", 0.99f);
      a.SetFloat("epsilon", 1e-7f);
      a.SetFloat("norm_coefficient", 0.01f);
      a.SetFloat("norm_coefficient_post", 0.001f);
      Feeds adam_feeds = feeds;
      adam_feeds.push_back({"S2", s2});
      std::vector<HostTensor> cpu = RunModel(OneNodeModel(a, opsets), Device::CPU(), adam_feeds);
      cuda::math::AdamParams p;
      p.alpha = 0.8f, p.beta = 0.99f, p.epsilon = 1e-7f, p.norm = 0.01f, p.norm_post = 0.001f;
      const float rate = cuda::math::AdamRate(p, r, step);
      for (int64_t i = 0; i < n; ++i)
        cuda::math::AdamUpdate(p, rate, x.Data<float>()[i], g.Data<float>()[i], s1.Data<float>()[i],
                               s2.Data<float>()[i], nx.Data<float>() + i, n1.Data<float>() + i, n2.Data<float>() + i);
      EXPECT_EQ(testing::CompareTensors(cpu[0], nx, 1e-6, 1e-7), "") << "Adam X";
      EXPECT_EQ(testing::CompareTensors(cpu[1], n1, 1e-6, 1e-7), "") << "Adam V";
      EXPECT_EQ(testing::CompareTensors(cpu[2], n2, 1e-6, 1e-7), "") << "Adam H";
    }
  }
}

TEST(CudaMathHostLogic, UnaryMatchesTheCpu) {
  using cuda::math::UnaryOp;
  std::mt19937 rng(33);
  const std::vector<std::pair<const char*, UnaryOp>> ops = {
      {"Abs", UnaryOp::kAbs},   {"Neg", UnaryOp::kNeg},     {"Exp", UnaryOp::kExp},
      {"Log", UnaryOp::kLog},   {"Sqrt", UnaryOp::kSqrt},   {"Reciprocal", UnaryOp::kReciprocal},
      {"Ceil", UnaryOp::kCeil}, {"Floor", UnaryOp::kFloor}, {"Round", UnaryOp::kRound},
      {"LeakyRelu", UnaryOp::kLeakyRelu}, {"Softplus", UnaryOp::kSoftplus}};
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    const std::string s = name;
    HostTensor x = s == "Log" || s == "Sqrt" ? Random(DType::kFloat32, {64}, rng, 0.01, 50)
                   : s == "Exp"             ? Random(DType::kFloat32, {64}, rng, -10, 10)
                   : s == "Round" ? Values<float>({8}, {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 3.49f, -3.51f})
                                  : Random(DType::kFloat32, {64}, rng, -40, 40);
    Node n = MakeNode(name, {"x"}, {"y"});
    const float alpha = 0.2f;
    if (s == "LeakyRelu") n.SetFloat("alpha", alpha);
    std::vector<HostTensor> cpu = RunModel(OneNodeModel(n, kOpset13), Device::CPU(), {{"x", x}});
    HostTensor y(DType::kFloat32, x.dims);
    for (int64_t i = 0; i < x.NumElements(); ++i)
      y.Data<float>()[i] = cuda::math::UnaryValue<float>(op, x.Data<float>()[i], alpha);
    // oneDNN's soft_relu (the CPU's Softplus) loses about 4e-6 to cancellation for
    // inputs below -10, where the true value is under 5e-5.
    EXPECT_EQ(testing::CompareTensors(cpu[0], y, 2e-6, s == "Softplus" ? 1e-5 : 1e-6), "");
  }
}

template <typename T, typename E>
void ExpectHostPowMatchesCpu(const HostTensor& a, const HostTensor& b) {
  std::vector<HostTensor> cpu = RunModel(OneNodeModel(MakeNode("Pow", {"a", "b"}, {"y"}), kOpset13), Device::CPU(),
                                         {{"a", a}, {"b", b}});
  HostTensor y(a.dtype, a.dims);
  for (int64_t i = 0; i < a.NumElements(); ++i) y.Data<T>()[i] = cuda::math::PowValue(a.Data<T>()[i], b.Data<E>()[i]);
  EXPECT_EQ(testing::CompareTensors(cpu[0], y, 1e-6, 0), "") << DTypeName(a.dtype) << " ^ " << DTypeName(b.dtype);
}

TEST(CudaMathHostLogic, PowMatchesTheCpu) {
  std::mt19937 rng(34);
  ExpectHostPowMatchesCpu<float, float>(Random(DType::kFloat32, {9}, rng, 0.1, 3), Random(DType::kFloat32, {9}, rng));
  ExpectHostPowMatchesCpu<float, int64_t>(Random(DType::kFloat32, {5}, rng, -3, 3),
                                          Values<int64_t>({5}, {0, 1, 2, 3, -2}));
  ExpectHostPowMatchesCpu<int64_t, int64_t>(Values<int64_t>({6}, {2, -3, 1, -1, 0, 5}),
                                            Values<int64_t>({6}, {10, 3, -4, -3, 2, -1}));
  ExpectHostPowMatchesCpu<int32_t, float>(Values<int32_t>({3}, {2, 9, -2}), Values<float>({3}, {3.f, 0.5f, 2.f}));
}

template <typename S, typename D>
void ExpectHostCastMatchesCpu(const HostTensor& x, DType to) {
  Node n = MakeNode("Cast", {"x"}, {"y"});
  n.SetInt("to", static_cast<int64_t>(to));
  std::vector<HostTensor> cpu = RunModel(OneNodeModel(n, kOpset13), Device::CPU(), {{"x", x}});
  using DS = typename cuda::math::CastElem<D>::Storage;
  DS lowest = 0, highest = 1;
  if constexpr (!std::is_same_v<D, cuda::math::BoolTag> && !std::is_same_v<D, cuda::math::HalfTag>) {
    lowest = std::numeric_limits<D>::lowest();
    highest = std::numeric_limits<D>::max();
  }
  HostTensor y(to, x.dims);
  for (int64_t i = 0; i < x.NumElements(); ++i)
    y.Data<DS>()[i] =
        cuda::math::CastValue<S, D>(x.Data<typename cuda::math::CastElem<S>::Storage>()[i], lowest, highest);
  EXPECT_EQ(testing::CompareTensors(cpu[0], y, 0, 0), "") << DTypeName(x.dtype) << " -> " << DTypeName(to);
}

TEST(CudaMathHostLogic, CastMatchesTheCpu) {
  using cuda::math::BoolTag;
  HostTensor f = Values<float>({9}, {-3.7f, -0.5f, 0.f, 0.49f, 2.5f, 3e9f, -3e9f, 300.f, NAN});
  ExpectHostCastMatchesCpu<float, int32_t>(f, DType::kInt32);
  ExpectHostCastMatchesCpu<float, int64_t>(f, DType::kInt64);
  ExpectHostCastMatchesCpu<float, uint8_t>(f, DType::kUInt8);
  ExpectHostCastMatchesCpu<float, int8_t>(f, DType::kInt8);
  ExpectHostCastMatchesCpu<float, BoolTag>(f, DType::kBool);
  ExpectHostCastMatchesCpu<float, double>(f, DType::kFloat64);
  HostTensor b = Values<uint8_t>({4}, {0, 1, 1, 0});
  b.dtype = DType::kBool;
  ExpectHostCastMatchesCpu<BoolTag, float>(b, DType::kFloat32);
  ExpectHostCastMatchesCpu<BoolTag, int64_t>(b, DType::kInt64);
  ExpectHostCastMatchesCpu<int64_t, float>(Values<int64_t>({4}, {-5, 0, 7, int64_t{1} << 40}), DType::kFloat32);
  ExpectHostCastMatchesCpu<int64_t, int32_t>(Values<int64_t>({3}, {-5, int64_t{1} << 33, 7}), DType::kInt32);
}

// --amp fp16's casts: float32 -> float16 rounds to nearest even (ties, subnormals, the
// overflow to infinity at 65520, NaN) as the CPU's Cast does, and float16 -> float32 is exact.
TEST(CudaMathHostLogic, HalfCastMatchesTheCpu) {
  using cuda::math::HalfTag;
  const float tiny = 5.9604644775390625e-8f;  // 2^-24, the smallest float16 subnormal
  std::vector<float> v = {0.f, -0.f, 1.f, -2.5f, 65504.f, 65519.99f, 65520.f, 1e6f, -1e6f, INFINITY, -INFINITY, NAN,
                          1.f + 1.f / 2048, 1.f + 3.f / 2048, 1.f + 1.f / 4096, tiny, tiny * 0.5f, tiny * 0.50001f,
                          tiny * 1.5f, tiny * 2.5f, 6.1e-5f, 6.1035156e-05f, 3.14159f, -1e-7f, 1e-30f, 2049.f, 4097.f};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-8.f, 8.f);
  for (int i = 0; i < 2000; ++i) v.push_back(std::ldexp(u(rng), static_cast<int>(u(rng) * 3)));
  HostTensor f = Values<float>({static_cast<int64_t>(v.size())}, v);
  ExpectHostCastMatchesCpu<float, HalfTag>(f, DType::kFloat16);
  HostTensor h(DType::kFloat16, {65536});
  for (int i = 0; i < 65536; ++i) h.Data<uint16_t>()[i] = static_cast<uint16_t>(i);  // every bit pattern
  ExpectHostCastMatchesCpu<HalfTag, float>(h, DType::kFloat32);
}

// Without a device the CUDA kernels are still registered, so a CUDA executor fails with
// the reason rather than a missing-kernel list; this runs everywhere.
TEST(CudaMathNoDevice, ReasonIsGivenWhenThereIsNoDevice) {
  if (cuda::DeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(cuda::NoDeviceReason().empty());
}

}  // namespace
}  // namespace ot
