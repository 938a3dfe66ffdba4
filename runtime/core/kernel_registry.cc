// The global kernel registry.
#include "runtime/core/kernel_registry.h"
#include "graph/op_domains.h"

#include <algorithm>

namespace ot {

KernelRegistry& KernelRegistry::Global() {
  static KernelRegistry* registry = new KernelRegistry();
  return *registry;
}

void KernelRegistry::Register(KernelDef def) {
  def.domain = CanonicalDomain(def.domain);
  defs_.push_back(std::move(def));
}

const KernelDef* KernelRegistry::Find(const std::string& domain, const std::string& op_type, int64_t opset,
                                      DeviceType device) const {
  const std::string d = CanonicalDomain(domain);
  for (const auto& def : defs_) {
    if (def.device == device && def.op_type == op_type && def.domain == d && opset >= def.since_version &&
        opset <= def.until_version)
      return &def;
  }
  return nullptr;
}

std::vector<std::string> KernelRegistry::OpTypes(DeviceType device) const {
  std::vector<std::string> out;
  for (const auto& def : defs_)
    if (def.device == device) out.push_back(def.op_type);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace ot
