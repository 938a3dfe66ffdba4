// Devices and their backends: memory allocation and copies. The CPU backend lives in
// runtime/cpu/, the CUDA backend in runtime/cuda/; everything above this header is
// device-neutral.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
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

// Work a device queues, recorded once and launched again as one unit (CUDA graphs).
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  // Records what `enqueue` queues on the device; nothing runs. False with the reason when
  // the work cannot be recorded (it synchronises, allocates or copies to the host).
  virtual bool Capture(const std::function<void()>& enqueue, std::string* why) = 0;
  // Queues the recorded work.
  virtual void Launch() = 0;
  // Recorded, and still valid (the scratch memory it uses has not moved).
  virtual bool ready() const = 0;
  virtual void Reset() = 0;
};

// Memory and copies on one device type. Implementations register themselves; the CUDA
// one lives in a plugin (runtime/core/plugin.h) that BackendFor loads on first use.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // Makes device `device_index` usable, or throws one clear sentence (no GPU, no such
  // device).
  virtual void Require(int device_index) {}
  // Devices of this type on the machine (0 with no driver or GPU).
  virtual int DeviceCount() { return 1; }
  // Why there is no usable device; empty when there is one.
  virtual std::string NoDeviceReason() { return ""; }
  // Free and total memory of the device in bytes (0, 0 where unknown).
  virtual void MemoryInfo(int device_index, size_t* free_bytes, size_t* total_bytes) {
    *free_bytes = *total_bytes = 0;
  }
  // Threads the device's kernels run on (the CPU's OpenMP threads); 0 where that is not
  // a setting of the device. SetThreads(n <= 0) leaves it.
  virtual int Threads() { return 0; }
  virtual void SetThreads(int n) {}
  // Lower-precision tensor-core math for float32 (TF32), where the device has it.
  virtual void SetAllowTf32(bool allow) {}
  // A recorder of queued work for whole-step replay; nullptr where the device has none.
  virtual std::unique_ptr<StepGraph> NewStepGraph(int device_index) { return nullptr; }
  virtual void* Allocate(size_t bytes, int device_index) = 0;
  // Gives back memory the backend keeps for reuse after frees (a plan's arena is about to be
  // made from other sizes).
  virtual void ReleaseCached(int device_index) {}
  virtual void Free(void* ptr, int device_index) = 0;
  // `ptr` (from Allocate) is also used by work queued on `stream` (CUDA: a cudaStream_t
  // other than the device's compute stream, whose order covers reuse by itself), as
  // PyTorch's recordStream: once freed, the block is not handed out again before the work
  // queued on that stream by the time of Free has finished. No-op where memory has no streams.
  virtual void RecordStream(void* ptr, int device_index, void* stream) {}
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
