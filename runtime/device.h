// Devices and their backends: memory allocation and copies. The CPU backend lives in
// runtime/cpu/, the CUDA backend in runtime/cuda/; everything above this header is
// device-neutral.
#pragma once

#include <cstddef>
#include <string>

namespace ot {

enum class DeviceType { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string ToString() const;  // "cpu", "cuda:0"
  static Device CPU() { return Device{}; }
  // Parses "cpu", "cuda", "cuda:K"; throws ot::Error for anything else.
  static Device Parse(const std::string& text);
};

// Memory and copies on one device type. Implementations register themselves.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual void* Allocate(size_t bytes, int device_index) = 0;
  virtual void Free(void* ptr, int device_index) = 0;
  virtual void CopyToHost(void* host_dst, const void* src, size_t bytes, int device_index) = 0;
  virtual void CopyFromHost(void* dst, const void* host_src, size_t bytes, int device_index) = 0;
  virtual void CopyOnDevice(void* dst, const void* src, size_t bytes, int device_index) = 0;
  virtual void Synchronize(int device_index) = 0;
};

// The backend for a device type; throws ot::Error when this build or machine lacks it.
DeviceBackend& BackendFor(DeviceType type);
void RegisterBackend(DeviceType type, DeviceBackend* backend);

// Alignment of every buffer the runtime hands to kernels.
constexpr size_t kBufferAlignment = 64;

}  // namespace ot
