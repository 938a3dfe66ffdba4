// Tests of the CUDA runtime against the CPU runtime as the oracle: the same one-node model
// and inputs run through an Executor on each device and the outputs are compared (data
// movement exactly, matrix products within float tolerance), then the executor's CUDA
// behaviour (host feeds copied over, device-resident results, CUDA graph replay, training
// state updated on the device) and ONNX's backend node cases on CUDA. Without a GPU every
// test is skipped with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <set>

#include "graph/error.h"
#include "graph/autodiff/gradient_registry.h"
#include "graph/onnx_io.h"
#include "graph/tensor_proto.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/executor/executor.h"
#include "runtime/core/kernel_registry.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/common/test_util.h"
#include "train/training_session.h"

namespace ot {
namespace {

const Device kCuda{DeviceType::kCUDA, 0};


using AttrSetter = std::function<void(Node&)>;

struct NodeCase {
  NodeCase(std::string op_type, std::vector<HostTensor> node_inputs, int outputs = 1, AttrSetter set_attrs = {},
           int64_t opset_version = 17, std::string op_domain = "")
      : op(std::move(op_type)), inputs(std::move(node_inputs)), num_outputs(outputs), attrs(std::move(set_attrs)),
        opset(opset_version), domain(std::move(op_domain)) {}
  std::string op;
  std::vector<HostTensor> inputs;  // an input of undefined dtype is left absent
  int num_outputs;
  AttrSetter attrs;
  int64_t opset;
  std::string domain;
};

ExecutorOptions On(Device device, bool cuda_graphs = false) {
  ExecutorOptions o;
  o.device = device;
  o.cuda_graphs = cuda_graphs;
  return o;
}

// A model of one node whose inputs are graph inputs "in0", "in1", ... and whose outputs
// are "out0", "out1", ...
Model SingleNodeModel(const NodeCase& c) {
  Model m;
  m.opsets[""] = c.opset;
  if (!c.domain.empty()) m.opsets[c.domain] = 1;
  Node n;
  n.name = "node";
  n.op_type = c.op;
  n.domain = c.domain;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i].dtype == DType::kUndefined) {
      n.inputs.push_back("");
      continue;
    }
    ValueInfo v;
    v.name = "in" + std::to_string(i);
    v.dtype = c.inputs[i].dtype;
    m.graph.inputs.push_back(v);
    n.inputs.push_back(v.name);
  }
  for (int i = 0; i < c.num_outputs; ++i) {
    n.outputs.push_back("out" + std::to_string(i));
    m.graph.outputs.push_back(ValueInfo{n.outputs.back(), DType::kUndefined, false, {}});
  }
  if (c.attrs) c.attrs(n);
  m.graph.nodes.push_back(n);
  return m;
}

// Host tensors as feeds on `device`; on CUDA they stay on the host when `host_feeds`
// (the executor copies them over).
std::map<std::string, Tensor> Feeds(const std::vector<HostTensor>& inputs, Device device, bool host_feeds = false) {
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].dtype != DType::kUndefined)
      feeds["in" + std::to_string(i)] = Tensor::FromHost(inputs[i], host_feeds ? Device::CPU() : device);
  return feeds;
}

std::vector<HostTensor> RunOn(const Model& m, const std::vector<HostTensor>& inputs, Device device) {
  Executor exec(m, On(device));
  std::vector<HostTensor> out;
  for (const Tensor& t : exec.Run(Feeds(inputs, device))) {
    EXPECT_EQ(t.device(), device);
    out.push_back(t.ToHost());
  }
  return out;
}

// Runs the case on both devices and compares every output.
void ExpectSameOnCuda(const NodeCase& c, double rtol = 0, double atol = 0) {
  SCOPED_TRACE(c.op);
  const Model m = SingleNodeModel(c);
  std::vector<HostTensor> cpu = RunOn(m, c.inputs, Device::CPU());
  std::vector<HostTensor> gpu = RunOn(m, c.inputs, kCuda);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(cpu[i].dtype, gpu[i].dtype) << "output " << i;
    EXPECT_EQ(cpu[i].dims, gpu[i].dims) << "output " << i;
    std::string diff = testing::CompareTensors(cpu[i], gpu[i], rtol, atol);
    EXPECT_TRUE(diff.empty()) << "output " << i << ": " << diff;
  }
}

HostTensor Random(Shape shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  HostTensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.Data<float>()[i] = dist(gen);
  return t;
}
HostTensor Ints(std::vector<int64_t> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return HostTensor::FromVector(v, shape);
}
HostTensor Int32s(std::vector<int32_t> v, Shape shape) { return HostTensor::FromVector(v, shape); }
HostTensor Absent() { return HostTensor(); }

AttrSetter IntAttr(const std::string& key, int64_t v) {
  return [key, v](Node& n) { n.SetInt(key, v); };
}
AttrSetter IntsAttr(const std::string& key, std::vector<int64_t> v) {
  return [key, v](Node& n) { n.SetInts(key, v); };
}

// ---------------------------------------------------------------------------------------
// Data movement.

TEST(CudaDataMovement, ReshapeLikeOps) {
  OT_REQUIRE_GPU();
  ExpectSameOnCuda({"Reshape", {Random({2, 3, 4}, 1), Ints({4, -1, 0})}});
  ExpectSameOnCuda({"Flatten", {Random({2, 3, 4, 5}, 2)}, 1, IntAttr("axis", 2)});
  ExpectSameOnCuda({"Identity", {Ints({1, 2, 3})}});
  ExpectSameOnCuda({"Squeeze", {Random({1, 3, 1, 2}, 3), Ints({0, -2})}});
  ExpectSameOnCuda({"Unsqueeze", {Random({3, 2}, 4), Ints({0, 3})}});
  ExpectSameOnCuda({"Squeeze", {Random({1, 3, 1}, 5)}, 1, IntsAttr("axes", {2}), 11});
}

TEST(CudaDataMovement, HostValueOps) {
  OT_REQUIRE_GPU();
  ExpectSameOnCuda({"Shape", {Random({2, 3, 4}, 1)}, 1, [](Node& n) { n.SetInt("start", 1); }});
  ExpectSameOnCuda({"Size", {Random({2, 3, 4}, 1)}});
  ExpectSameOnCuda({"ConstantOfShape", {Ints({2, 3})}, 1,
                    [](Node& n) { n.SetTensor("value", HostTensor::FromVector(std::vector<float>{2.5f}, {1})); }});
  ExpectSameOnCuda({"Constant", {}, 1, [](Node& n) { n.SetFloats("value_floats", {1.f, 2.f, 3.f}); }});
}

TEST(CudaDataMovement, Transpose) {
  OT_REQUIRE_GPU();
  ExpectSameOnCuda({"Transpose", {Random({2, 3, 4, 5}, 1)}, 1, IntsAttr("perm", {0, 2, 3, 1})});
  ExpectSameOnCuda({"Transpose", {Random({7, 9}, 2)}});
  ExpectSameOnCuda({"Transpose", {Ints({1, 2, 3, 4, 5, 6}, {2, 3})}});
  ExpectSameOnCuda({"Transpose", {Random({1, 4, 1, 3}, 3)}, 1, IntsAttr("perm", {3, 1, 0, 2})});
}

TEST(CudaDataMovement, ConcatAndSplit) {
  OT_REQUIRE_GPU();
  ExpectSameOnCuda({"Concat", {Random({2, 3, 4}, 1), Random({2, 1, 4}, 2), Random({2, 5, 4}, 3)}, 1, IntAttr("axis", 1)});
  ExpectSameOnCuda({"Concat", {Random({2, 3}, 1), Random({2, 0}, 2), Random({2, 2}, 3)}, 1, IntAttr("axis", -1)});
  ExpectSameOnCuda({"Concat", {Ints({1, 2}), Ints({3})}, 1, IntAttr("axis", 0)});
  ExpectSameOnCuda({"Split", {Random({4, 6, 2}, 1), Ints({1, 2, 3})}, 3, IntAttr("axis", 1)});
  ExpectSameOnCuda({"Split", {Random({4, 6}, 2)}, 2, IntAttr("axis", 0)});
  ExpectSameOnCuda({"Split", {Random({4, 6}, 3)}, 3, [](Node& n) {
                      n.SetInt("axis", 1);
                      n.SetInts("split", {2, 2, 2});
                    }, 11});
}

TEST(CudaDataMovement, Slice) {
  OT_REQUIRE_GPU();
  ExpectSameOnCuda({"Slice", {Random({5, 6, 7}, 1), Ints({1, -1}), Ints({4, -6}), Ints({0, 2}), Ints({2, -2})}});
  ExpectSameOnCuda({"Slice", {Random({5, 6}, 2), Ints({0}), Ints({100}), Absent(), Absent()}});
  ExpectSameOnCuda({"Slice", {Random({5, 6}, 3), Ints({10}), Ints({-100}), Ints({1}), Ints({-1})}});
  ExpectSameOnCuda({"Slice", {Random({5, 6}, 4)}, 1, [](Node& n) {
                      n.SetInts("starts", {1});
                      n.SetInts("ends", {3});
                      n.SetInts("axes", {1});
                    }, 9});
}

TEST(CudaDataMovement, GatherFamily) {
  OT_REQUIRE_GPU();
  ExpectSameOnCuda({"Gather", {Random({5, 4, 3}, 1), Ints({0, -1, 2, 2, 1, 0}, {2, 3})}, 1, IntAttr("axis", 1)});
  ExpectSameOnCuda({"Gather", {Ints({10, 20, 30, 40}), Int32s({3, 0}, {2})}});
  ExpectSameOnCuda({"Gather", {Random({6, 2}, 2), HostTensor::FromVector(std::vector<int64_t>{4}, {})}});  // scalar index
  ExpectSameOnCuda({"GatherElements", {Random({3, 4}, 3), Ints({0, 3, -1, 1, 2, 2}, {3, 2})}, 1, IntAttr("axis", 1)});
  ExpectSameOnCuda({"GatherElements", {Random({3, 4, 2}, 4), Ints({2, 0, 1, 1, 0, 2, 1, 0}, {2, 2, 2})}, 1,
                    IntAttr("axis", 0)});
}

TEST(CudaDataMovement, TileExpandPad) {
  OT_REQUIRE_GPU();
  ExpectSameOnCuda({"Tile", {Random({2, 3}, 1), Ints({3, 2})}});
  ExpectSameOnCuda({"Expand", {Random({3, 1}, 2), Ints({2, 1, 4})}});
  ExpectSameOnCuda({"Expand", {Ints({1, 2, 3}), Ints({2, 3})}});
  for (const char* mode : {"constant", "reflect", "edge"}) {
    SCOPED_TRACE(mode);
    ExpectSameOnCuda({"Pad", {Random({2, 3, 4}, 3), Ints({0, 2, 1, 0, 1, 3})}, 1,
                      [mode](Node& n) { n.SetString("mode", mode); }});
  }
  ExpectSameOnCuda({"Pad", {Random({3, 4}, 4), Ints({-1, 2, 1, -2}), HostTensor::FromVector(std::vector<float>{7.f}, {})}});
  ExpectSameOnCuda({"Pad", {Random({3, 4}, 5)}, 1, [](Node& n) {
                      n.SetInts("pads", {1, 1, 0, 2});
                      n.SetFloat("value", 1.5f);
                    }, 10});
}

TEST(CudaDataMovement, GradientOps) {
  OT_REQUIRE_GPU();
  ExpectSameOnCuda({"ConcatGrad", {Random({2, 6, 3}, 1), Random({2, 1, 3}, 2), Random({2, 5, 3}, 3)}, 2,
                    IntAttr("axis", 1), 17, kGradDomain});
  ExpectSameOnCuda({"PadGrad", {Random({4, 7}, 1), Random({3, 4}, 2), Ints({-1, 2, 2, 1})}, 1, {}, 17, kGradDomain});
  ExpectSameOnCuda({"TransposeLastTwo", {Random({2, 3, 4, 5}, 1)}, 1, {}, 17, kGradDomain});
}

// ---------------------------------------------------------------------------------------
// cuBLAS.

TEST(CudaMatrixProducts, Gemm) {
  OT_REQUIRE_GPU();
  const double rtol = 1e-5, atol = 1e-5;
  ExpectSameOnCuda({"Gemm", {Random({5, 7}, 1), Random({7, 3}, 2)}}, rtol, atol);
  ExpectSameOnCuda({"Gemm", {Random({7, 5}, 1), Random({3, 7}, 2), Random({3}, 3)}, 1,
                    [](Node& n) {
                      n.SetInt("transA", 1);
                      n.SetInt("transB", 1);
                      n.SetFloat("alpha", 0.5f);
                      n.SetFloat("beta", 2.f);
                    }},
                   rtol, atol);
  ExpectSameOnCuda({"Gemm", {Random({5, 7}, 1), Random({7, 3}, 2), Random({5, 1}, 3)}}, rtol, atol);
  ExpectSameOnCuda({"Gemm", {Random({5, 7}, 1), Random({7, 3}, 2), Random({5, 3}, 3)}, 1,
                    [](Node& n) { n.SetFloat("beta", 0.f); }},
                   rtol, atol);
  ExpectSameOnCuda({"Gemm", {Random({5, 0}, 1), Random({0, 3}, 2), Random({1, 3}, 3)}, 1,
                    [](Node& n) { n.SetFloat("beta", 3.f); }},
                   rtol, atol);
  ExpectSameOnCuda({"Gemm", {Random({64, 300}, 4), Random({10, 300}, 5), Random({10}, 6)}, 1, IntAttr("transB", 1)},
                   1e-4, 1e-4);
}

TEST(CudaMatrixProducts, MatMulBroadcasting) {
  OT_REQUIRE_GPU();
  const double rtol = 1e-5, atol = 1e-5;
  ExpectSameOnCuda({"MatMul", {Random({4, 6}, 1), Random({6, 3}, 2)}}, rtol, atol);
  ExpectSameOnCuda({"MatMul", {Random({2, 3, 4, 6}, 1), Random({6, 5}, 2)}}, rtol, atol);       // B shared
  ExpectSameOnCuda({"MatMul", {Random({4, 6}, 1), Random({3, 6, 5}, 2)}}, rtol, atol);          // A shared
  ExpectSameOnCuda({"MatMul", {Random({3, 4, 6}, 1), Random({3, 6, 5}, 2)}}, rtol, atol);       // plain batch
  ExpectSameOnCuda({"MatMul", {Random({2, 1, 4, 6}, 1), Random({1, 3, 6, 5}, 2)}}, rtol, atol); // both broadcast
  ExpectSameOnCuda({"MatMul", {Random({6}, 1), Random({2, 6, 5}, 2)}}, rtol, atol);
  ExpectSameOnCuda({"MatMul", {Random({2, 4, 6}, 1), Random({6}, 2)}}, rtol, atol);
  ExpectSameOnCuda({"MatMul", {Random({6}, 1), Random({6}, 2)}}, rtol, atol);
  ExpectSameOnCuda({"MatMul", {Random({3, 0}, 1), Random({0, 2}, 2)}}, rtol, atol);
}

// ---------------------------------------------------------------------------------------
// Executor on CUDA.

// x[B, 6] -> MatMul(w[6, 4]) -> Transpose -> Concat with itself -> y[8, B]
Model ChainModel() {
  Model m;
  m.opsets[""] = 17;
  m.graph.inputs.push_back(ValueInfo{"x", DType::kFloat32, true, {Dim{-1, "batch"}, Dim{6, ""}}});
  m.graph.initializers.push_back(Random({6, 4}, 9));
  m.graph.initializers.back().name = "w";
  auto add = [&](const std::string& op, std::vector<std::string> in, const std::string& out, AttrSetter attrs = {}) {
    Node n;
    n.name = out + "_node";
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = {out};
    if (attrs) attrs(n);
    m.graph.nodes.push_back(n);
  };
  add("MatMul", {"x", "w"}, "h");
  add("Transpose", {"h"}, "ht");
  add("Concat", {"ht", "ht"}, "y", IntAttr("axis", 0));
  m.graph.outputs.push_back(ValueInfo{"y", DType::kFloat32, false, {}});
  return m;
}

TEST(CudaExecutor, HostFeedsAreCopiedAndResultsStayOnTheDevice) {
  OT_REQUIRE_GPU();
  Executor cpu(ChainModel());
  Executor gpu(ChainModel(), On(kCuda));
  const HostTensor x = Random({3, 6}, 1);
  std::vector<Tensor> out = gpu.Run({{"x", Tensor::FromHost(x)}});  // a CPU tensor
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].device(), kCuda);
  EXPECT_EQ(testing::CompareTensors(cpu.Run({{"x", Tensor::FromHost(x)}})[0].ToHost(), out[0].ToHost(), 1e-5, 1e-5), "");
}

TEST(CudaExecutor, CudaGraphReplayMatchesTheCpu) {
  OT_REQUIRE_GPU();
  Executor cpu(ChainModel());
  Executor gpu(ChainModel(), On(kCuda, true));
  std::vector<Tensor> kept;  // results of earlier runs must not be overwritten by later ones
  std::vector<HostTensor> expected;
  for (uint32_t run = 0; run < 5; ++run) {
    const HostTensor x = Random({run == 4 ? 2 : 3, 6}, 100 + run);  // the last one is a new shape
    expected.push_back(cpu.Run({{"x", Tensor::FromHost(x)}})[0].ToHost());
    kept.push_back(gpu.Run({{"x", Tensor::FromHost(x, kCuda)}})[0]);
  }
  for (size_t i = 0; i < kept.size(); ++i)
    EXPECT_EQ(testing::CompareTensors(expected[i], kept[i].ToHost(), 1e-5, 1e-5), "") << "run " << i;
  EXPECT_EQ(gpu.NumPlans(), 2u);
}

// x[4, 8] -> Gemm(w, b) -> logits[4, 3]: three SGD steps with momentum on each device.
Model LinearModel() {
  Model m;
  m.opsets[""] = 17;
  m.graph.inputs.push_back(ValueInfo{"x", DType::kFloat32, true, {Dim{4, ""}, Dim{8, ""}}});
  m.graph.initializers.push_back(Random({3, 8}, 21));
  m.graph.initializers.back().name = "w";
  m.graph.initializers.push_back(Random({3}, 22));
  m.graph.initializers.back().name = "b";
  Node n;
  n.name = "fc";
  n.op_type = "Gemm";
  n.inputs = {"x", "w", "b"};
  n.outputs = {"logits"};
  n.SetInt("transB", 1);
  m.graph.nodes.push_back(n);
  m.graph.outputs.push_back(ValueInfo{"logits", DType::kFloat32, true, {Dim{4, ""}, Dim{3, ""}}});
  return m;
}

struct TrainRun {
  std::vector<float> losses;
  std::map<std::string, HostTensor> state;
};

TrainRun TrainLinear(Device device, bool graphs) {
  TrainingConfig config;
  config.optimizer.momentum = 0.9f;
  config.executor.device = device;
  config.executor.cuda_graphs = graphs;
  TrainingSession session(LinearModel(), config);
  TrainRun r;
  for (uint32_t step = 0; step < 3; ++step) {
    const HostTensor labels = Ints({0, 2, 1, 2});
    StepResult s = session.Step(Tensor::FromHost(Random({4, 8}, 50 + step), device), Tensor::FromHost(labels, device),
                                0.1f);
    r.losses.push_back(s.loss);
  }
  for (auto& [name, t] : session.StateTensors()) r.state[name] = t->ToHost(name);
  return r;
}

TEST(CudaExecutor, TrainingStepsUpdateStateOnTheDevice) {
  OT_REQUIRE_GPU();
  TrainRun cpu = TrainLinear(Device::CPU(), false);
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "with CUDA graphs" : "kernel by kernel");
    TrainRun gpu;
    try {
      gpu = TrainLinear(kCuda, graphs);
    } catch (const UnsupportedError& e) {
      // A GPU is present (OT_REQUIRE_GPU): a training step that cannot run on it is a failure.
      FAIL() << "the training graph needs kernels the CUDA runtime lacks: " << e.what();
    }
    ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
    for (size_t i = 0; i < cpu.losses.size(); ++i) EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-5) << "step " << i;
    for (const auto& [name, t] : cpu.state)
      EXPECT_EQ(testing::CompareTensors(t, gpu.state.at(name), 1e-4, 1e-5), "") << name;
  }
}

TEST(CudaExecutor, MissingDeviceIsOneClearError) {
  // Runs everywhere: a device index beyond the count names the count.
  try {
    Executor exec(ChainModel(), On(Device{DeviceType::kCUDA, 97}));
    FAIL() << "an executor on cuda:97 was made";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("CUDA"), std::string::npos) << what;
    if (cuda::DeviceCount() > 0) {
      EXPECT_NE(what.find("cuda:97"), std::string::npos) << what;
    }
  }
}

// ---------------------------------------------------------------------------------------
// ONNX backend node cases on CUDA: every case whose ops all have CUDA kernels must match
// the expected outputs (the CPU runtime's conformance_test does the same on the CPU).
// tests/conformance/conformance_passing_cuda.txt pins what passes as conformance_passing.txt does on
// the CPU: a listed case that is skipped or fails, a listed case missing from the test
// data, or fewer passes than listed fails the sweep, and cases that pass without being
// listed are named (new passes: add them). Without the list the sweep fails, except in a
// run that writes it: ONNXTRAIN_CUDA_CONFORMANCE_LIST_OUT=FILE (on a GPU host; what
// scripts/gpu-check.sh does, into $OUT) writes the cases that passed in this run.

TEST(CudaConformance, OnnxNodeCases) {
  OT_REQUIRE_GPU();
  namespace fs = std::filesystem;
  const fs::path base = fs::path(testing::OnnxTestDataDir()) / "node";
  if (!fs::is_directory(base)) GTEST_SKIP() << "no ONNX test data at " << base;
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(base))
    if (fs::is_regular_file(e.path() / "model.onnx")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  int passed = 0, skipped = 0;
  std::vector<std::string> failures;
  const std::string list_path = testing::SourceDir() + "/tests/conformance/conformance_passing_cuda.txt";
  bool list_exists = false;
  const std::set<std::string> pinned = testing::ReadCaseList(list_path, &list_exists);
  std::set<std::string> passed_cases;
  auto skip = [&](const std::string& name, const std::string& why) {
    ++skipped;
    if (pinned.count("node/" + name))
      failures.push_back(name + ": skipped (" + why + "), but " + list_path + " lists it as passing");
  };
  for (const fs::path& dir : cases) {
    const std::string name = dir.filename().string();
    try {
      Model model = LoadModel((dir / "model.onnx").string());
      bool runnable = true;
      for (const auto& n : model.graph.nodes)
        runnable = runnable && KernelRegistry::Global().Find(n.domain, n.op_type, model.OpsetFor(n.domain),
                                                             DeviceType::kCUDA) != nullptr;
      for (const auto* list : {&model.graph.inputs, &model.graph.outputs})
        for (const auto& v : *list)
          runnable = runnable && v.dtype != DType::kBFloat16 && v.dtype != DType::kString &&
                     v.dtype != DType::kUndefined;
      if (!runnable || name == "test_adam_multiple") {  // see conformance_test.cc's KnownDataBugs
        skip(name, "ops or types without CUDA kernels");
        continue;
      }
      Executor exec(model, On(kCuda));
      int sets = 0;
      for (const auto& set : fs::directory_iterator(dir)) {
        if (set.path().filename().string().rfind("test_data_set_", 0) != 0) continue;
        std::map<std::string, Tensor> feeds;
        for (size_t i = 0; i < model.graph.inputs.size(); ++i) {
          const fs::path f = set.path() / ("input_" + std::to_string(i) + ".pb");
          if (!fs::is_regular_file(f)) break;
          feeds[model.graph.inputs[i].name] = Tensor::FromHost(ReadTensorFile(f.string()), kCuda);
        }
        std::vector<Tensor> outs = exec.Run(feeds);
        for (size_t i = 0; i < outs.size(); ++i) {
          HostTensor expected = ReadTensorFile((set.path() / ("output_" + std::to_string(i) + ".pb")).string());
          std::string diff = testing::CompareTensors(expected, outs[i].ToHost(), 1e-3, 1e-5);
          if (!diff.empty()) throw Error("output " + std::to_string(i) + ": " + diff);
        }
        ++sets;
      }
      if (sets == 0) throw Error("no test_data_set_*");
      ++passed;
      passed_cases.insert("node/" + name);
    } catch (const UnsupportedError& e) {
      skip(name, e.what());
    } catch (const std::exception& e) {
      failures.push_back(name + ": " + e.what());
    }
  }
  std::cout << "cuda conformance: " << passed << " passed, " << failures.size() << " failed, " << skipped
            << " skipped (ops without CUDA kernels)\n";
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_GT(passed, 0);
  const char* out = std::getenv("ONNXTRAIN_CUDA_CONFORMANCE_LIST_OUT");
  std::set<std::string> present;
  for (const fs::path& dir : cases) present.insert("node/" + dir.filename().string());
  for (const std::string& c : pinned)
    if (!present.count(c)) ADD_FAILURE() << list_path << " lists " << c << ", which is not in the test data at " << base;
  std::vector<std::string> new_passes;
  for (const std::string& c : passed_cases)
    if (!pinned.count(c)) new_passes.push_back(c);
  if (list_exists && !new_passes.empty()) {
    std::cout << "cuda conformance: " << new_passes.size() << " case(s) pass that " << list_path
              << " does not list (add them to pin them):";
    for (const std::string& c : new_passes) std::cout << " " << c;
    std::cout << "\n";
  }
  if (list_exists)
    EXPECT_GE(passed, static_cast<int>(pinned.size())) << "fewer cases passed than " << list_path << " lists";
  else if (!out)
    ADD_FAILURE() << "no list of passing CUDA cases at " << list_path
                  << "; make it on a GPU host with ONNXTRAIN_CUDA_CONFORMANCE_LIST_OUT=" << list_path
                  << " (scripts/gpu-check.sh writes it to $OUT/conformance_passing_cuda.txt) and commit it";
  if (out) {
    testing::WriteCaseList(out, passed_cases,
                           "# ONNX backend node cases that pass on the CUDA runtime (cuda_runtime_test's\n"
                           "# CudaConformance fails when one of them is skipped or fails). Regenerate on a GPU host with\n"
                           "# ONNXTRAIN_CUDA_CONFORMANCE_LIST_OUT=tests/conformance/conformance_passing_cuda.txt "
                           "build/tests/cuda_runtime_test --gtest_filter=CudaConformance.*\n");
    std::cout << "cuda conformance: wrote " << passed_cases.size() << " passing cases to " << out << "\n";
  }
}

}  // namespace
}  // namespace ot
