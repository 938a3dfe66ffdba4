// Issue 37's findings in the CUDA runtime, each checked on the GPU where it shows (every
// test skips, with the reason, on a machine without a usable CUDA device; the math the
// kernels share with the CPU is tested on the CPU by window_taps_test and
// batchnorm_math_test, and every launch's check by cuda_launch_checks.sh):
//   - a convolution's workspace is capped by KernelSettings::cuda_workspace_limit;
//   - under CUDA graph replay, device error flags (labels out of range) still fail the run;
//   - Gather checks its indices on every run, not only on the planning one;
//   - the caching allocator holds a freed block back while another stream still uses it;
//   - pooling gradients on our own kernel are the same bits every run, and so are GatherGrad,
//     ResizeGrad and PReluGrad's slope gradient (no atomics);
//   - BatchNorm's saved variance keeps its digits when it is far below epsilon.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "graph/error.h"
#include "graph/op_domains.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/core/device.h"
#include "runtime/executor/executor.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/common/test_util.h"

namespace ot {
namespace {

const Device kCuda{DeviceType::kCUDA, 0};

HostTensor Random(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  HostTensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.Data<float>()[i] = dist(gen);
  return t;
}

// One node named `name` reading graph inputs in0, in1, ... (an undefined HostTensor leaves
// that input out) and writing out0, out1, ... (an empty output name in `outputs` leaves that
// output out).
Model OneNode(const std::string& op, const std::string& domain, const std::string& name,
              const std::vector<HostTensor>& inputs, const std::vector<bool>& outputs,
              const std::function<void(Node&)>& attrs, int64_t opset = 17) {
  Model m;
  m.opsets[""] = opset;
  if (!domain.empty()) m.opsets[domain] = 1;
  Node n;
  n.name = name;
  n.op_type = op;
  n.domain = domain;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype == DType::kUndefined) {  // an absent optional input
      n.inputs.push_back("");
      continue;
    }
    ValueInfo v;
    v.name = "in" + std::to_string(i);
    v.dtype = inputs[i].dtype;
    m.graph.inputs.push_back(v);
    n.inputs.push_back(v.name);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i]) {
      n.outputs.push_back("");
      continue;
    }
    n.outputs.push_back("out" + std::to_string(i));
    m.graph.outputs.push_back(ValueInfo{n.outputs.back(), DType::kUndefined, false, {}});
  }
  if (attrs) attrs(n);
  m.graph.nodes.push_back(n);
  return m;
}

std::map<std::string, Tensor> Feeds(const std::vector<HostTensor>& inputs, Device device) {
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].dtype != DType::kUndefined) feeds["in" + std::to_string(i)] = Tensor::FromHost(inputs[i], device);
  return feeds;
}

std::vector<HostTensor> ToHost(const std::vector<Tensor>& ts) {
  std::vector<HostTensor> out;
  for (const Tensor& t : ts) out.push_back(t.ToHost());
  return out;
}

ExecutorOptions OnCuda(bool graphs = false, size_t workspace_limit = 0) {
  ExecutorOptions o;
  o.device = kCuda;
  o.cuda_graphs = graphs;
  o.cuda_workspace_limit = workspace_limit;
  return o;
}

class CudaFindings : public ::testing::Test {
 protected:
  void SetUp() override { OT_REQUIRE_GPU(); }
};

// ---- convolution workspace cap ----

TEST_F(CudaFindings, ConvolutionWorkspaceStaysUnderTheLimit) {
  const std::vector<HostTensor> fwd_in = {Random({16, 32, 28, 28}, 1), Random({64, 32, 3, 3}, 2)};
  auto pads = [](Node& n) { n.SetInts("pads", {1, 1, 1, 1}); };
  const Model fwd = OneNode("Conv", "", "conv", fwd_in, {true}, pads);
  Executor cpu(fwd);
  const HostTensor expected = cpu.Run(Feeds(fwd_in, Device::CPU()))[0].ToHost();
  for (size_t limit : {size_t{0}, size_t{1}}) {
    SCOPED_TRACE("limit " + std::to_string(limit));
    Executor gpu(fwd, OnCuda(false, limit));
    const HostTensor got = gpu.Run(Feeds(fwd_in, kCuda))[0].ToHost();
    EXPECT_EQ(testing::CompareTensors(expected, got, 1e-4, 1e-4), "");
    const std::string notes = gpu.PlanNotes();
    std::cout << notes;
    if (limit == 1) {
      EXPECT_NE(notes.find("workspace 0 bytes"), std::string::npos) << notes;
    }
  }
  // ConvGrad(dY, X, W) -> dX, dW, dB under the same cap.
  const std::vector<HostTensor> grad_in = {Random({16, 64, 28, 28}, 3), fwd_in[0], fwd_in[1]};
  const Model grad = OneNode("ConvGrad", kGradDomain, "conv_grad", grad_in, {true, true, true}, pads);
  Executor cpu_grad(grad);
  const std::vector<HostTensor> want = ToHost(cpu_grad.Run(Feeds(grad_in, Device::CPU())));
  Executor gpu_grad(grad, OnCuda(false, 1));
  const std::vector<HostTensor> got = ToHost(gpu_grad.Run(Feeds(grad_in, kCuda)));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(testing::CompareTensors(want[i], got[i], 1e-3, 1e-3), "") << i;
  EXPECT_NE(gpu_grad.PlanNotes().find("workspace 0 bytes"), std::string::npos) << gpu_grad.PlanNotes();
}

// ---- device error flags under CUDA graph replay ----

TEST_F(CudaFindings, GraphReplayReportsLabelsOutOfRange) {
  const HostTensor scores = Random({4, 3}, 5);
  const HostTensor good = HostTensor::FromVector<int64_t>({0, 2, 1, 2}, {4});
  const HostTensor bad = HostTensor::FromVector<int64_t>({0, 7, 1, 2}, {4});
  const Model m = OneNode("SoftmaxCrossEntropyLoss", "", "loss_node", {scores, good}, {true}, {}, 13);
  Executor gpu(m, OnCuda(true));
  for (int run = 0; run < 3; ++run) gpu.Run(Feeds({scores, good}, kCuda))[0].ToHost();  // plan, capture, replay
  gpu.Run(Feeds({scores, bad}, kCuda))[0].ToHost();  // replayed: the flag reaches the host with the loss
  try {
    gpu.Run(Feeds({scores, good}, kCuda));
    FAIL() << "a label out of range under CUDA graph replay went unreported";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("loss_node"), std::string::npos) << what;
    EXPECT_NE(what.find("outside [0, 3)"), std::string::npos) << what;
  }
}

// ---- Gather indices on every run ----

void ExpectGatherReportsLaterBadIndex(bool graphs) {
  SCOPED_TRACE(graphs ? "with CUDA graphs" : "kernel by kernel");
  const HostTensor data = Random({10, 4}, 6);
  const HostTensor good = HostTensor::FromVector<int64_t>({1, -2, 3}, {3});
  const HostTensor bad = HostTensor::FromVector<int64_t>({1, 12, 3}, {3});
  const Model m = OneNode("Gather", "", "gather_node", {data, good}, {true}, {});
  Executor gpu(m, OnCuda(graphs));
  for (int run = 0; run < 3; ++run) gpu.Run(Feeds({data, good}, kCuda))[0].ToHost();
  gpu.Run(Feeds({data, bad}, kCuda))[0].ToHost();
  try {
    gpu.Run(Feeds({data, good}, kCuda))[0].ToHost();
    FAIL() << "an index out of range after the planning run went unreported";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("gather_node"), std::string::npos) << what;
    EXPECT_NE(what.find("position 1"), std::string::npos) << what;
  }
}

TEST_F(CudaFindings, GatherChecksIndicesOnEveryRun) {
  ExpectGatherReportsLaterBadIndex(false);
  ExpectGatherReportsLaterBadIndex(true);
}

TEST_F(CudaFindings, GatherChecksLargeIndexTensorsToo) {
  const int64_t n = (int64_t{1} << 20) + 5;
  std::vector<int64_t> idx(static_cast<size_t>(n), 0);
  idx.back() = 10;  // data has 10 rows
  const HostTensor data = Random({10, 2}, 7);
  const HostTensor indices = HostTensor::FromVector(idx, {n});
  const Model m = OneNode("Gather", "", "big_gather", {data, indices}, {true}, {});
  Executor gpu(m, OnCuda());
  EXPECT_THROW(gpu.Run(Feeds({data, indices}, kCuda))[0].ToHost(), Error);
}

// ---- stream-aware caching allocator ----

TEST_F(CudaFindings, FreedBlockWaitsForTheOtherStream) {
  DeviceBackend& backend = BackendFor(DeviceType::kCUDA);
  cuda::Context(0);
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  std::atomic<bool> release{false};
  constexpr size_t kBytes = 3u << 20;
  // A cached block of the size for the allocation below, so that it needs no cudaMalloc
  // (which might wait for the device, and the side stream waits for this thread).
  void* spare = backend.Allocate(kBytes, 0);
  void* used = backend.Allocate(kBytes, 0);
  backend.Free(spare, 0);
  // The side stream is busy (as NCCL would be, writing the block) until `release`.
  ASSERT_EQ(cudaLaunchHostFunc(
                side,
                [](void* flag) {
                  while (!static_cast<std::atomic<bool>*>(flag)->load())
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                },
                &release),
            cudaSuccess);
  backend.RecordStream(used, 0, side);
  backend.Free(used, 0);
  void* next = backend.Allocate(kBytes, 0);
  EXPECT_NE(next, used) << "a block still in use on another stream was handed out again";
  release = true;
  ASSERT_EQ(cudaStreamSynchronize(side), cudaSuccess);
  backend.Free(next, 0);
  void* a = backend.Allocate(kBytes, 0);
  void* b = backend.Allocate(kBytes, 0);
  EXPECT_TRUE(a == used || b == used) << "the held block never came back once its stream was done";
  backend.Free(a, 0);
  backend.Free(b, 0);
  cudaStreamDestroy(side);
}

// ---- deterministic pooling gradients ----

void ExpectPoolGradSameBitsEveryRun(const std::string& op, const std::function<void(Node&)>& attrs, const Shape& x_shape,
                                    const Shape& y_shape) {
  SCOPED_TRACE(op);
  const std::vector<HostTensor> in = {Random(y_shape, 8), Random(x_shape, 9)};
  const Model m = OneNode(op, kGradDomain, "pool_grad", in, {true}, attrs);
  Executor cpu(m);
  const HostTensor expected = cpu.Run(Feeds(in, Device::CPU()))[0].ToHost();
  Executor gpu(m, OnCuda());
  const HostTensor first = gpu.Run(Feeds(in, kCuda))[0].ToHost();
  EXPECT_EQ(testing::CompareTensors(expected, first, 1e-5, 1e-5), "");
  for (int run = 0; run < 5; ++run) {
    const HostTensor again = gpu.Run(Feeds(in, kCuda))[0].ToHost();
    ASSERT_EQ(testing::CompareTensors(first, again, 0, 0), "") << "run " << run << " differs from the first";
  }
}

TEST_F(CudaFindings, PoolingGradientsAreDeterministic) {
  // Uneven pads put these on our own kernel (cuDNN's windows are symmetric).
  auto window = [](Node& n) {
    n.SetInts("kernel_shape", {3, 3});
    n.SetInts("strides", {1, 1});
    n.SetInts("pads", {0, 0, 1, 1});
  };
  ExpectPoolGradSameBitsEveryRun("MaxPoolGrad", window, {8, 16, 40, 40}, {8, 16, 39, 39});
  ExpectPoolGradSameBitsEveryRun("AveragePoolGrad", window, {8, 16, 40, 40}, {8, 16, 39, 39});
  // GoogLeNet's 3x3 stride-2 ceil_mode pool.
  auto ceil = [](Node& n) {
    n.SetInts("kernel_shape", {3, 3});
    n.SetInts("strides", {2, 2});
    n.SetInt("ceil_mode", 1);
  };
  ExpectPoolGradSameBitsEveryRun("MaxPoolGrad", ceil, {4, 32, 28, 28}, {4, 32, 14, 14});
}

// ---- deterministic GatherGrad, ResizeGrad and PReluGrad (no atomics: sorted runs, transposed
// taps, a fixed-order reduction) ----

// Runs the gradient node on the CPU (the oracle) and six times on the GPU: the GPU's outputs
// match the CPU's and have the same bits every run.
void ExpectGradSameBitsEveryRun(const std::string& op, const std::function<void(Node&)>& attrs,
                                const std::vector<HostTensor>& in, const std::vector<bool>& outputs) {
  SCOPED_TRACE(op);
  const Model m = OneNode(op, kGradDomain, "grad", in, outputs, attrs);
  Executor cpu(m);
  const std::vector<Tensor> expected = cpu.Run(Feeds(in, Device::CPU()));
  Executor gpu(m, OnCuda());
  const std::vector<Tensor> first = gpu.Run(Feeds(in, kCuda));
  ASSERT_EQ(first.size(), expected.size());
  for (size_t k = 0; k < first.size(); ++k)
    EXPECT_EQ(testing::CompareTensors(expected[k].ToHost(), first[k].ToHost(), 1e-4, 1e-4), "") << "output " << k;
  for (int run = 0; run < 5; ++run) {
    const std::vector<Tensor> again = gpu.Run(Feeds(in, kCuda));
    for (size_t k = 0; k < first.size(); ++k)
      ASSERT_EQ(testing::CompareTensors(first[k].ToHost(), again[k].ToHost(), 0, 0), "")
          << "output " << k << ", run " << run << " differs from the first";
  }
}

TEST_F(CudaFindings, GatherResizeAndPReluGradientsAreDeterministic) {
  // An embedding's gradient where a few rows (a padding token) take most of 4096 lookups.
  std::vector<int64_t> ids(4096);
  for (size_t k = 0; k < ids.size(); ++k) ids[k] = k % 3 == 0 ? 0 : (k % 7 == 0 ? -1 : static_cast<int64_t>(k % 50));
  ExpectGradSameBitsEveryRun("GatherGrad", [](Node& n) { n.SetInt("axis", 0); },
                             {Random({64, 64, 96}, 10), HostTensor::FromVector(std::vector<int64_t>{100, 96}, {2}),
                              HostTensor::FromVector(ids, {64, 64})},
                             {true});
  // Linear 4x upsampling: every input position is read by many outputs.
  const HostTensor scales = HostTensor::FromVector(std::vector<float>{1.f, 1.f, 4.f, 4.f}, {4});
  ExpectGradSameBitsEveryRun("ResizeGrad",
                             [](Node& n) {
                               n.SetString("mode", "linear");
                               n.SetString("forward_op", "Resize");
                               n.SetInt("forward_opset", 13);
                             },
                             {Random({4, 8, 64, 64}, 11), HostTensor(), scales, HostTensor(),
                              HostTensor::FromVector(std::vector<int64_t>{4, 8, 16, 16}, {4})},
                             {true});
  // A per-channel slope summed over 8 x 32 x 32 elements each.
  ExpectGradSameBitsEveryRun("PReluGrad", [](Node&) {},
                             {Random({8, 16, 32, 32}, 12), Random({8, 16, 32, 32}, 13), Random({16, 1, 1}, 14)},
                             {true, true});
}

// ---- BatchNorm's saved variance ----

TEST_F(CudaFindings, BatchNormVarianceFarBelowEpsilonKeepsItsDigits) {
  HostTensor x(DType::kFloat32, {4, 2, 8, 8});
  for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = 1.f + 1e-6f * static_cast<float>((i * 37) % 11 - 5);
  const HostTensor scale = HostTensor::FromVector<float>({1.f, 2.f}, {2});
  const HostTensor bias = HostTensor::FromVector<float>({0.f, 0.5f}, {2});
  const HostTensor mean = HostTensor::FromVector<float>({0.f, 0.1f}, {2});
  const HostTensor var = HostTensor::FromVector<float>({1.f, 1e-12f}, {2});
  for (int unbiased : {0, 1}) {
    SCOPED_TRACE("unbiased_running_var " + std::to_string(unbiased));
    const std::vector<HostTensor> in = {x, scale, bias, mean, var};
    const Model m = OneNode("BatchNormTraining", kGradDomain, "bn", in, {true, true, true, true, true}, [&](Node& n) {
      n.SetFloat("epsilon", 1e-5f);
      n.SetFloat("momentum", 0.5f);
      n.SetInt("unbiased_running_var", unbiased);
    });
    Executor cpu(m);
    const std::vector<HostTensor> want = ToHost(cpu.Run(Feeds(in, Device::CPU())));
    Executor gpu(m, OnCuda());
    const std::vector<HostTensor> got = ToHost(gpu.Run(Feeds(in, kCuda)));
    // running_var (2) and saved_var (4) are about 1e-12: compared relative to themselves.
    for (size_t i : {size_t{2}, size_t{4}}) EXPECT_EQ(testing::CompareTensors(want[i], got[i], 1e-3, 1e-16), "") << i;
    EXPECT_EQ(testing::CompareTensors(want[1], got[1], 1e-5, 1e-6), "");
  }
}

}  // namespace
}  // namespace ot
