// One-node cases run on the CPU and on cuda:0 with the same inputs, for the CUDA kernel tests
// (tests/cuda_*_test.cc): the CPU runtime is the oracle. Gradient ops of the org.onnxtrain
// domain are called directly with the inputs the autodiff pass gives them.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "graph/error.h"
#include "runtime/executor/executor.h"
#include "tests/common/test_util.h"

namespace ot {
namespace cuda_case {

using Ints = std::vector<int64_t>;

inline HostTensor RandomTensor(const Ints& shape, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  HostTensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.Data<float>()[i] = dist(gen);
  return t;
}

// One node under test: op, domain, opset, attributes, and which outputs are requested.
struct NodeSpec {
  NodeSpec(std::string op_type, int64_t opset_version, std::function<void(Node&)> set_attrs = [](Node&) {},
           std::vector<bool> requested = {true}, std::string op_domain = "")
      : op(std::move(op_type)),
        opset(opset_version),
        attrs(std::move(set_attrs)),
        outputs(std::move(requested)),
        domain(std::move(op_domain)) {}
  std::string op;
  int64_t opset;
  std::function<void(Node&)> attrs;
  std::vector<bool> outputs;  // requested outputs, in order ("" for the others)
  std::string domain;         // kGradDomain for gradient ops
};

// Runs the node on `device`: inputs "in0", "in1", ... (an undefined HostTensor leaves that
// optional input out); returns the requested outputs in order.
inline std::vector<HostTensor> RunOn(const Device& device, const NodeSpec& spec, const std::vector<HostTensor>& inputs) {
  Model m;
  m.opsets[""] = spec.opset;
  if (!spec.domain.empty()) m.opsets[spec.domain] = 1;
  Node n;
  n.name = "under_test";
  n.op_type = spec.op;
  n.domain = spec.domain;
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype == DType::kUndefined) {
      n.inputs.push_back("");
      continue;
    }
    ValueInfo v;
    v.name = "in" + std::to_string(i);
    v.dtype = inputs[i].dtype;
    v.has_shape = true;
    for (int64_t d : inputs[i].dims) v.dims.push_back(Dim{d, ""});
    m.graph.inputs.push_back(v);
    n.inputs.push_back(v.name);
    feeds[v.name] = Tensor::FromHost(inputs[i], device);
  }
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    if (!spec.outputs[i]) {
      n.outputs.push_back("");
      continue;
    }
    ValueInfo v;
    v.name = "out" + std::to_string(i);
    v.dtype = DType::kFloat32;
    n.outputs.push_back(v.name);
    m.graph.outputs.push_back(v);
  }
  spec.attrs(n);
  m.graph.nodes.push_back(n);
  ExecutorOptions options;
  options.device = device;
  Executor exec(m, options);
  std::vector<HostTensor> out;
  for (const Tensor& t : exec.Run(feeds)) out.push_back(t.ToHost());
  return out;
}

inline const Device kCuda{DeviceType::kCUDA, 0};

// Runs on both devices and expects the same outputs within tolerance.
inline void ExpectSameOnCuda(const NodeSpec& spec, const std::vector<HostTensor>& inputs, double rtol = 1e-4,
                      double atol = 1e-5) {
  const std::vector<HostTensor> cpu = RunOn(Device::CPU(), spec, inputs);
  const std::vector<HostTensor> gpu = RunOn(kCuda, spec, inputs);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].dims, gpu[i].dims) << spec.op << " output " << i;
    EXPECT_EQ(testing::CompareTensors(cpu[i], gpu[i], rtol, atol), "") << spec.op << " output " << i;
  }
}

}  // namespace cuda_case
}  // namespace ot
