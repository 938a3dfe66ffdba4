// The CPU device backend: 64-byte aligned host memory and memcpy.
#include <cstdlib>
#include <cstring>
#include <new>

#include "runtime/device.h"

namespace ot {
namespace {

class CpuBackend final : public DeviceBackend {
 public:
  void* Allocate(size_t bytes, int) override {
    size_t rounded = (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    void* p = std::aligned_alloc(kBufferAlignment, rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    return p;
  }
  void Free(void* p, int) override { std::free(p); }
  void CopyToHost(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void CopyFromHost(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void CopyOnDevice(void* dst, const void* src, size_t n, int) override { std::memmove(dst, src, n); }
  void Synchronize(int) override {}
};

struct Registrar {
  Registrar() {
    static CpuBackend backend;
    RegisterBackend(DeviceType::kCPU, &backend);
  }
} registrar;

}  // namespace
}  // namespace ot
