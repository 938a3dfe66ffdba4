// Which ops of a model have a kernel on a device: the executor's check before it plans, and
// `onnx-train check --device D [--training]`, which needs no such device.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "runtime/core/device.h"

namespace ot {

// The nodes of a model that have no kernel on a device, grouped by op and opset:
// "Attention (opset 23)" -> the node names.
struct KernelCoverage {
  std::map<std::string, std::vector<std::string>> missing;
  size_t nodes = 0, missing_nodes = 0;
  size_t ops = 0;  // distinct (domain, op type) pairs of the model
  // "2 node(s) whose op ...: Attention (opset 23): 2 nodes 'a', 'b'; ..." (up to three names an op).
  std::string Describe(const std::string& device) const;
};
KernelCoverage CheckKernelCoverage(const Model& model, DeviceType device);

}  // namespace ot
