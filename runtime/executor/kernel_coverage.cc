// Kernel coverage of a model (see kernel_coverage.h).
#include "runtime/executor/kernel_coverage.h"

#include "runtime/core/kernel_registry.h"

namespace ot {

KernelCoverage CheckKernelCoverage(const Model& model, DeviceType device) {
  KernelCoverage c;
  std::map<std::string, int> ops;
  for (const Node& n : model.graph.nodes) {
    ++c.nodes;
    ops[n.domain + "." + n.op_type]++;
    const int64_t opset = model.OpsetFor(n.domain);
    if (KernelRegistry::Global().Find(n.domain, n.op_type, opset, device)) continue;
    c.missing[(n.domain.empty() ? "" : n.domain + ".") + n.op_type + " (opset " + std::to_string(opset) + ")"]
        .push_back("'" + n.name + "'");
    ++c.missing_nodes;
  }
  c.ops = ops.size();
  return c;
}

std::string KernelCoverage::Describe(const std::string& device) const {
  std::string msg = std::to_string(missing_nodes) + " node(s) whose op onnx-train does not support on " + device + ": ";
  bool first = true;
  for (const auto& [op, names] : missing) {
    msg += (first ? "" : "; ") + op + ": " + std::to_string(names.size()) + (names.size() == 1 ? " node " : " nodes ");
    for (size_t k = 0; k < names.size() && k < 3; ++k) msg += (k ? ", " : "") + names[k];
    if (names.size() > 3) msg += ", ...";
    first = false;
  }
  return msg;
}

}  // namespace ot
