// KernelRegistry: (domain, op type, opset range, device) -> kernel factory. Kernel files
// register themselves with OT_REGISTER_KERNEL; the runtime library is linked whole so
// that every registration runs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/kernel.h"
#include "graph/op_domains.h"

namespace ot {

using KernelFactory = std::function<std::unique_ptr<OpKernel>(const KernelInfo&)>;

struct KernelDef {
  std::string domain;  // "" = ai.onnx
  std::string op_type;
  int64_t since_version = 1;
  int64_t until_version = kLatestOpset;  // inclusive
  DeviceType device = DeviceType::kCPU;
  KernelFactory factory;
};

class KernelRegistry {
 public:
  static KernelRegistry& Global();
  void Register(KernelDef def);
  // nullptr when no kernel covers the opset on that device.
  const KernelDef* Find(const std::string& domain, const std::string& op_type, int64_t opset, DeviceType device) const;
  // Op types registered for a device (sorted, unique).
  std::vector<std::string> OpTypes(DeviceType device) const;

 private:
  std::vector<KernelDef> defs_;
};

struct KernelRegistrar {
  explicit KernelRegistrar(KernelDef def) { KernelRegistry::Global().Register(std::move(def)); }
};

}  // namespace ot

#define OT_KERNEL_CONCAT_INNER(a, b) a##b
#define OT_KERNEL_CONCAT(a, b) OT_KERNEL_CONCAT_INNER(a, b)
// Registers Class (constructible from const KernelInfo&) for op in [since, until] on device.
#define OT_REGISTER_KERNEL(domain, op, since, until, device, Class)                              \
  static ::ot::KernelRegistrar OT_KERNEL_CONCAT(ot_kernel_registrar_, __COUNTER__)(::ot::KernelDef{ \
      domain, op, since, until, device,                                                          \
      [](const ::ot::KernelInfo& info) -> std::unique_ptr<::ot::OpKernel> {                      \
        return std::make_unique<Class>(info);                                                    \
      }})
// Shorthand for the default domain on the CPU.
#define OT_REGISTER_CPU_KERNEL(op, since, until, Class) \
  OT_REGISTER_KERNEL("", op, since, until, ::ot::DeviceType::kCPU, Class)
