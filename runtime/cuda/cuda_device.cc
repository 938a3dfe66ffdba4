// The CUDA device backend: a caching allocator over cudaMalloc (blocks kept per size
// class and reused, never managed memory), copies ordered on the compute stream, and the
// per-device contexts of cuda_common.h.
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/cuda/cuda_common.h"
#include "runtime/device.h"

namespace ot::cuda {

namespace {
std::string Where(const char* what, const char* file, int line) {
  return std::string(what) + " (" + file + ":" + std::to_string(line) + ")";
}
}  // namespace

void ThrowCudaError(cudaError_t status, const char* what, const char* file, int line) {
  throw Error(StrFormat("CUDA error: %s failed: %s: %s", Where(what, file, line).c_str(), cudaGetErrorName(status),
                        cudaGetErrorString(status)));
}
void ThrowCublasError(cublasStatus_t status, const char* what, const char* file, int line) {
  throw Error(StrFormat("cuBLAS error: %s failed: %s: %s", Where(what, file, line).c_str(),
                        cublasGetStatusName(status), cublasGetStatusString(status)));
}
void ThrowCudnnError(cudnnStatus_t status, const char* what, const char* file, int line) {
  char detail[1024] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  throw Error(StrFormat("cuDNN error: %s failed: %s%s%s", Where(what, file, line).c_str(), cudnnGetErrorString(status),
                        detail[0] ? ": " : "", detail));
}

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status
    return 0;
  }
  return n;
}

std::string NoDeviceReason() {
  int n = 0;
  cudaError_t st = cudaGetDeviceCount(&n);
  if (st != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA device: ") + cudaGetErrorName(st) + ": " + cudaGetErrorString(st);
  }
  if (n == 0) return "no CUDA device found";
  return "";
}

void SetDevice(int device) {
  int n = DeviceCount();
  if (n == 0) throw Error(NoDeviceReason() + "; use --device cpu");
  OT_CHECK(device >= 0 && device < n, "device cuda:%d does not exist: this machine has %d CUDA device(s) (cuda:0..cuda:%d)",
           device, n, n - 1);
  OT_CUDA_CHECK(cudaSetDevice(device));
}

namespace {
std::mutex g_ctx_mu;
std::map<int, std::unique_ptr<DeviceContext>> g_contexts;

struct WorkspaceBuf {
  void* ptr = nullptr;
  size_t bytes = 0;
};
std::map<int, WorkspaceBuf> g_workspaces;
}  // namespace

DeviceContext& Context(int device) {
  std::lock_guard<std::mutex> lock(g_ctx_mu);
  auto it = g_contexts.find(device);
  if (it != g_contexts.end()) {
    OT_CUDA_CHECK(cudaSetDevice(device));
    return *it->second;
  }
  SetDevice(device);
  auto ctx = std::make_unique<DeviceContext>();
  ctx->device = device;
  OT_CUDA_CHECK(cudaGetDeviceProperties(&ctx->props, device));
  OT_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->compute, cudaStreamNonBlocking));
  OT_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->comm, cudaStreamNonBlocking));
  OT_CUBLAS_CHECK(cublasCreate(&ctx->cublas));
  OT_CUBLAS_CHECK(cublasSetStream(ctx->cublas, ctx->compute));
  // fp32 math stays fp32 unless --tf32 asks otherwise (parity with the CPU runtime).
  OT_CUBLAS_CHECK(cublasSetMathMode(ctx->cublas, CUBLAS_PEDANTIC_MATH));
  OT_CUDNN_CHECK(cudnnCreate(&ctx->cudnn));
  OT_CUDNN_CHECK(cudnnSetStream(ctx->cudnn, ctx->compute));
  DeviceContext& ref = *ctx;
  g_contexts[device] = std::move(ctx);
  return ref;
}

void* Workspace(int device, size_t bytes) {
  DeviceContext& ctx = Context(device);
  std::lock_guard<std::mutex> lock(g_ctx_mu);
  WorkspaceBuf& w = g_workspaces[device];
  if (w.bytes >= bytes) return w.ptr;
  if (w.ptr) {
    OT_CUDA_CHECK(cudaStreamSynchronize(ctx.compute));
    OT_CUDA_CHECK(cudaFree(w.ptr));
    w = {};
  }
  OT_CUDA_CHECK(cudaMalloc(&w.ptr, bytes));
  w.bytes = bytes;
  return w.ptr;
}

namespace {

// Caching allocator: freed blocks go to a per-device free list keyed by their rounded
// size and are handed out again for requests of that size class. Memory returns to the
// driver only when an allocation fails (then the cache is emptied and the call retried).
class CudaBackend final : public DeviceBackend {
 public:
  void* Allocate(size_t bytes, int device) override {
    DeviceContext& ctx = Context(device);
    size_t rounded = RoundUp(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& pool = free_[device];
      auto it = pool.find(rounded);
      if (it != pool.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        sizes_[p] = rounded;
        OT_CUDA_CHECK(cudaMemsetAsync(p, 0, rounded, ctx.compute));
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t st = cudaMalloc(&p, rounded);
    if (st == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      ReleaseCached(device);
      st = cudaMalloc(&p, rounded);
    }
    if (st != cudaSuccess) {
      cudaGetLastError();
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      throw Error(StrFormat("out of memory on cuda:%d: asked for %zu bytes, the device has %zu of %zu bytes free (%s)",
                            device, rounded, free_bytes, total, cudaGetErrorString(st)));
    }
    OT_CUDA_CHECK(cudaMemsetAsync(p, 0, rounded, ctx.compute));
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = rounded;
    return p;
  }
  void Free(void* p, int device) override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    free_[device][it->second].push_back(p);
    sizes_.erase(it);
  }
  void CopyToHost(void* dst, const void* src, size_t n, int device) override {
    DeviceContext& ctx = Context(device);
    OT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, ctx.compute));
    OT_CUDA_CHECK(cudaStreamSynchronize(ctx.compute));
  }
  void CopyFromHost(void* dst, const void* src, size_t n, int device) override {
    DeviceContext& ctx = Context(device);
    OT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, ctx.compute));
    // The host buffer may be reused as soon as this returns.
    OT_CUDA_CHECK(cudaStreamSynchronize(ctx.compute));
  }
  void CopyOnDevice(void* dst, const void* src, size_t n, int device) override {
    DeviceContext& ctx = Context(device);
    OT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, ctx.compute));
  }
  void Synchronize(int device) override { OT_CUDA_CHECK(cudaStreamSynchronize(Context(device).compute)); }

 private:
  static size_t RoundUp(size_t bytes) {
    // 512-byte granularity below 1 MiB, 2 MiB above: few size classes, little waste.
    const size_t g = bytes < (1u << 20) ? 512 : (2u << 20);
    return (std::max<size_t>(bytes, 1) + g - 1) / g * g;
  }
  void ReleaseCached(int device) {
    OT_CUDA_CHECK(cudaStreamSynchronize(Context(device).compute));
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : free_[device])
      for (void* p : blocks) cudaFree(p);
    free_[device].clear();
  }

  std::mutex mu_;
  std::map<int, std::map<size_t, std::vector<void*>>> free_;
  std::map<void*, size_t> sizes_;
};

struct Registrar {
  Registrar() {
    static CudaBackend backend;
    RegisterBackend(DeviceType::kCUDA, &backend);
  }
} registrar;

}  // namespace
}  // namespace ot::cuda
