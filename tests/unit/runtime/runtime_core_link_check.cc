// The device-neutral runtime core (ot_runtime) linked whole without the CPU kernels
// (ot_runtime_cpu): a reference from the core to a symbol of runtime/cpu/ fails this
// program's link, so the build catches a wrong dependency that include_layering.sh (which
// reads the includes) could miss. Running it checks that the core has no kernels of its own.
#include <cstdio>

#include "runtime/core/kernel_registry.h"

int main() {
  if (ot::KernelRegistry::Global().Find("", "Relu", 14, ot::DeviceType::kCPU) != nullptr) {
    std::fprintf(stderr, "the runtime core registers a CPU kernel (Relu); kernels belong in runtime/cpu/\n");
    return 1;
  }
  std::printf("runtime core links alone and registers no CPU kernel\n");
  return 0;
}
