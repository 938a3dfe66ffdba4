// The CPU device backend: 64-byte aligned host memory and memcpy.
//
// Buffers of 1 MiB and more are mapped from the kernel (mmap) and unmapped when freed, so
// their pages go back to the system at once. Through malloc they would not: glibc raises its
// mmap threshold to the size of each mapped block that is freed (up to 32 MiB), after which
// blocks of activation size come from the heap, which can only shrink from its top. The
// first (tracing) run of a plan allocates every value of the step separately; through
// malloc their freed pages stayed resident under the arena that replaced them (ViT at batch
// 32: peak RSS 600-744 MB over a 266 MB arena; mapped: 348 MB). Mapped pages are zero and
// committed on first touch, so nothing is cleared by hand.
//
// Up to kCachedBytes of freed mapped blocks are kept for the next request of the same
// length (cleared by hand then): the tracing run of each plan (one per shape: the training
// step, evaluation, a last short batch) frees and asks again for blocks of the same few
// sizes layer after layer, and without the cache each request was a fresh mapping whose
// every page faulted and was zeroed by the kernel (a ViT run with evaluation: 4.2 million
// faults before, 3.2 after).
// A plan gives the cache back before it makes its arena (ReleaseCached), so the cache does
// not add to the peak of a planned step; it does add to the tracing run's peak, which for a
// large model is the process's: ResNet34 at batch 128 peaked at 649 MB with 64 MiB cached,
// 615 MB with none (same wall time), so the cache is 16 MiB.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/cpu/cpu_threads.h"

namespace ot {
namespace {

constexpr size_t kMappedBytes = size_t{1} << 20;
constexpr size_t kCachedBytes = size_t{16} << 20;
constexpr size_t kPageBytes = 4096;

class CpuBackend final : public DeviceBackend {
 public:
  int Threads() override { return GetCpuThreads(); }
  void SetThreads(int n) override { SetCpuThreads(n); }
  void* Allocate(size_t bytes, int) override {
    size_t rounded = (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    if (rounded >= kMappedBytes) {
      rounded = (rounded + kPageBytes - 1) / kPageBytes * kPageBytes;
      void* p = TakeCached(rounded);
      if (p) {
        std::memset(p, 0, rounded);
        return p;
      }
      p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      std::lock_guard<std::mutex> lock(mutex_);
      mapped_[p] = rounded;
      return p;
    }
    void* p = std::aligned_alloc(kBufferAlignment, rounded == 0 ? kBufferAlignment : rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    return p;
  }
  void ReleaseCached(int) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [length, blocks] : cached_)
      for (void* p : blocks) {
        munmap(p, length);
        mapped_.erase(p);
      }
    cached_.clear();
    cached_bytes_ = 0;
  }
  void Free(void* p, int) override {
    if (!p) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = mapped_.find(p);
      if (it != mapped_.end()) {
        const size_t length = it->second;
        if (length <= kCachedBytes - cached_bytes_) {
          cached_[length].push_back(p);  // stays in mapped_, for the next request of this length
          cached_bytes_ += length;
        } else {
          munmap(p, length);
          mapped_.erase(it);
        }
        return;
      }
    }
    std::free(p);
  }
  void CopyToHost(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void CopyFromHost(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void CopyOnDevice(void* dst, const void* src, size_t n, int) override { std::memmove(dst, src, n); }
  void Synchronize(int) override {}

 private:
  // A freed mapped block of exactly `length` bytes, or nullptr.
  void* TakeCached(size_t length) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cached_.find(length);
    if (it == cached_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= length;
    return p;
  }

  std::mutex mutex_;
  std::unordered_map<void*, size_t> mapped_;  // mapped buffer (in use or cached) -> its length
  std::unordered_map<size_t, std::vector<void*>> cached_;  // length -> freed blocks kept mapped
  size_t cached_bytes_ = 0;
};

struct Registrar {
  Registrar() {
    static CpuBackend backend;
    RegisterBackend(DeviceType::kCPU, &backend);
  }
} registrar;

}  // namespace
}  // namespace ot
