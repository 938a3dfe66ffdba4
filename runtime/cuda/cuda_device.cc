// The CUDA device backend: a caching allocator over cudaMalloc (blocks kept per size
// class and reused, never managed memory), copies ordered on the compute stream, and the
// per-device contexts of cuda_common.h.
#include <dlfcn.h>

#include <algorithm>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/launch_check.h"
#include "runtime/core/device.h"

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
void ThrowLaunchError(cudaError_t status, const char* kernel, const char* file, int line) {
  throw Error(StrFormat("CUDA error: launching %s failed: %s: %s (%s:%d)", kernel, cudaGetErrorName(status),
                        cudaGetErrorString(status), file, line));
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

int DeviceCountOrThrow() {
  int n = 0;
  const cudaError_t st = cudaGetDeviceCount(&n);
  if (st == cudaSuccess) return n;
  cudaGetLastError();
  if (st == cudaErrorNoDevice) return 0;
  // Without a driver the runtime reports cudaErrorInsufficientDriver too; only the absence of
  // the driver library itself means a machine that has no GPU to use.
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!driver) driver = dlopen("libcuda.so.1", RTLD_LAZY);
  if (!driver) return 0;
  dlclose(driver);
  throw Error(std::string("the CUDA driver is installed but cudaGetDeviceCount failed: ") + cudaGetErrorName(st) +
              ": " + cudaGetErrorString(st) + "; check the driver (nvidia-smi) and that it supports this CUDA runtime");
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
std::atomic<bool> g_allow_tf32{false};
// Counts workspace reallocations: a CUDA graph captured before one points at freed scratch.
std::atomic<uint64_t> g_workspace_generation{0};
// Set while this thread captures a CUDA graph: memory handed out then would be baked into
// the graph and reused by others after it is freed, so allocating fails the capture.
thread_local bool t_capturing = false;

void RefuseWhileCapturing(const char* what) {
  if (t_capturing)
    throw Error(std::string(what) + " while capturing a CUDA graph (a kernel allocates in Compute)");
}

cublasMath_t CublasMathMode() { return g_allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH; }

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
  // A workspace of our own, so that cuBLAS calls can be captured into CUDA graphs
  // (32 MiB, NVIDIA's recommendation for Hopper).
  constexpr size_t kCublasWorkspace = 32u << 20;
  void* cublas_workspace = nullptr;
  OT_CUDA_CHECK(cudaMalloc(&cublas_workspace, kCublasWorkspace));
  OT_CUBLAS_CHECK(cublasSetWorkspace(ctx->cublas, cublas_workspace, kCublasWorkspace));
  // fp32 math stays fp32 unless --tf32 asks otherwise (parity with the CPU runtime).
  OT_CUBLAS_CHECK(cublasSetMathMode(ctx->cublas, CublasMathMode()));
  OT_CUDNN_CHECK(cudnnCreate(&ctx->cudnn));
  OT_CUDNN_CHECK(cudnnSetStream(ctx->cudnn, ctx->compute));
  DeviceContext& ref = *ctx;
  g_contexts[device] = std::move(ctx);
  return ref;
}

void SetAllowTf32(bool allow) {
  g_allow_tf32 = allow;
  std::lock_guard<std::mutex> lock(g_ctx_mu);
  for (auto& [device, ctx] : g_contexts) OT_CUBLAS_CHECK(cublasSetMathMode(ctx->cublas, CublasMathMode()));
}

bool AllowTf32() { return g_allow_tf32; }

void MemoryInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  Context(device);  // makes the device current
  OT_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

// The caching allocator's free blocks of `device` back to the driver (defined below).
void ReleaseCachedBlocks(int device);

void* TryWorkspace(int device, size_t bytes) {
  DeviceContext& ctx = Context(device);
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      std::lock_guard<std::mutex> lock(g_ctx_mu);
      WorkspaceBuf& w = g_workspaces[device];
      if (w.bytes >= bytes) return w.ptr;
      RefuseWhileCapturing("growing the workspace");
      const size_t old_bytes = w.bytes;
      if (w.ptr) {
        OT_CUDA_CHECK(cudaStreamSynchronize(ctx.compute));
        OT_CUDA_CHECK(cudaFree(w.ptr));
        w = {};
        ++g_workspace_generation;
      }
      const cudaError_t st = cudaMalloc(&w.ptr, bytes);
      if (st == cudaSuccess) {
        w.bytes = bytes;
        return w.ptr;
      }
      w = {};
      cudaGetLastError();  // an allocation failure is not sticky; clear it for the next call
      if (st != cudaErrorMemoryAllocation) ThrowCudaError(st, "cudaMalloc(workspace)", __FILE__, __LINE__);
      // Keep what the kernels prepared so far were promised (the old size was just freed).
      if (old_bytes && cudaMalloc(&w.ptr, old_bytes) == cudaSuccess) w.bytes = old_bytes;
      else w = {};
      cudaGetLastError();
    }
    // The caching allocator's free blocks may be what is missing: give them back, try once more.
    if (attempt == 0) ReleaseCachedBlocks(device);
  }
  return nullptr;
}

void* Workspace(int device, size_t bytes) {
  if (void* p = TryWorkspace(device, bytes)) return p;
  size_t free_bytes = 0, total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  throw Error(StrFormat("out of memory on cuda:%d: a library call's workspace of %zu bytes does not fit (%zu of %zu "
                        "bytes free); use a smaller batch",
                        device, bytes, free_bytes, total));
}

StreamGraph::~StreamGraph() { Reset(); }

bool StreamGraph::ready() const { return exec_ != nullptr && workspace_generation_ == g_workspace_generation; }

void StreamGraph::Reset() {
  if (exec_) cudaGraphExecDestroy(exec_);
  exec_ = nullptr;
}

bool StreamGraph::Capture(int device, const std::function<void()>& enqueue, std::string* why) {
  Reset();
  device_ = device;
  workspace_generation_ = g_workspace_generation;
  cudaStream_t stream = Context(device).compute;
  // Thread-local mode: other threads (the communicator's) may still allocate meanwhile.
  OT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  std::string failure;
  t_capturing = true;
  try {
    enqueue();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  t_capturing = false;
  cudaGraph_t graph = nullptr;
  cudaError_t st = cudaStreamEndCapture(stream, &graph);
  if (failure.empty() && st != cudaSuccess)
    failure = std::string("capture failed: ") + cudaGetErrorName(st) + ": " + cudaGetErrorString(st);
  if (failure.empty()) {
    st = cudaGraphInstantiate(&exec_, graph, 0);
    if (st != cudaSuccess) {
      exec_ = nullptr;
      failure = std::string("instantiation failed: ") + cudaGetErrorName(st) + ": " + cudaGetErrorString(st);
    }
  }
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();  // a failed capture leaves its error behind
  if (failure.empty()) return true;
  if (why) *why = failure;
  return false;
}

void StreamGraph::Launch() {
  OT_CHECK(ready(), "internal error: launching a CUDA graph that was not captured or whose workspace moved");
  OT_CUDA_CHECK(cudaGraphLaunch(exec_, Context(device_).compute));
}

namespace {

// Caching allocator: freed blocks go to a per-device free list keyed by their rounded
// size and are handed out again for requests of that size class. Reuse is ordered by the
// compute stream; a block that RecordStream says another stream uses (NCCL's staging
// buffers on the communication stream) is held back at Free until an event recorded on
// that stream has passed. Memory returns to the driver when an allocation fails (then the
// cache is emptied and the call retried), also for a workspace (TryWorkspace).
// StreamGraph behind the device-neutral StepGraph interface.
class CudaStepGraph final : public StepGraph {
 public:
  explicit CudaStepGraph(int device) : device_(device) {}
  bool Capture(const std::function<void()>& enqueue, std::string* why) override {
    return graph_.Capture(device_, enqueue, why);
  }
  void Launch() override { graph_.Launch(); }
  bool ready() const override { return graph_.ready(); }
  void Reset() override { graph_.Reset(); }

 private:
  int device_;
  StreamGraph graph_;
};

class CudaBackend final : public DeviceBackend {
 public:
  void Require(int device) override { Context(device); }
  int DeviceCount() override { return cuda::DeviceCount(); }
  std::string NoDeviceReason() override { return cuda::NoDeviceReason(); }
  void MemoryInfo(int device, size_t* free_bytes, size_t* total_bytes) override {
    cuda::MemoryInfo(device, free_bytes, total_bytes);
  }
  void SetAllowTf32(bool allow) override { cuda::SetAllowTf32(allow); }
  std::unique_ptr<StepGraph> NewStepGraph(int device) override {
    Context(device);
    return std::make_unique<CudaStepGraph>(device);
  }
  void* Allocate(size_t bytes, int device) override {
    RefuseWhileCapturing("allocating device memory");
    DeviceContext& ctx = Context(device);
    size_t rounded = RoundUp(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      CollectHeld(device);
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
      ReleaseCachedBlocks(device);
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
    const size_t size = it->second;
    sizes_.erase(it);
    auto used = streams_.find(p);
    if (used == streams_.end()) {
      free_[device][size].push_back(p);
      return;
    }
    // Used on other streams too: held back until what they have queued so far is done.
    HeldBlock held{p, size, {}};
    for (cudaStream_t s : used->second) {
      cudaEvent_t event = nullptr;
      if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess ||
          cudaEventRecord(event, s) != cudaSuccess) {
        // Cannot tell when the stream is done with it: never reuse the block (a leak, not a race).
        cudaGetLastError();
        if (event) cudaEventDestroy(event);
        for (cudaEvent_t e : held.events) cudaEventDestroy(e);
        held.events.clear();
        held.ptr = nullptr;
        break;
      }
      held.events.push_back(event);
    }
    streams_.erase(used);
    if (held.ptr) held_[device].push_back(std::move(held));
  }
  void RecordStream(void* p, int device, void* stream) override {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (!p || !s || s == Context(device).compute) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (!sizes_.count(p)) return;
    std::vector<cudaStream_t>& used = streams_[p];
    if (std::find(used.begin(), used.end(), s) == used.end()) used.push_back(s);
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
  // Returns the free blocks to the driver (not an override of DeviceBackend::ReleaseCached:
  // plans keep the cache as before; an allocation or a workspace that does not fit calls it).
  void ReleaseCachedBlocks(int device) {
    OT_CUDA_CHECK(cudaStreamSynchronize(Context(device).compute));
    std::lock_guard<std::mutex> lock(mu_);
    CollectHeld(device);
    for (auto& [size, blocks] : free_[device])
      for (void* p : blocks) cudaFree(p);
    free_[device].clear();
  }

 private:
  static size_t RoundUp(size_t bytes) {
    // 512-byte granularity below 1 MiB, 2 MiB above: few size classes, little waste.
    const size_t g = bytes < (1u << 20) ? 512 : (2u << 20);
    return (std::max<size_t>(bytes, 1) + g - 1) / g * g;
  }
  // A freed block that other streams may still use, with an event on each of them.
  struct HeldBlock {
    void* ptr = nullptr;
    size_t size = 0;
    std::vector<cudaEvent_t> events;
  };
  // Moves the held blocks whose streams have passed their events to the free lists; mu_ held.
  void CollectHeld(int device) {
    auto& held = held_[device];
    for (auto it = held.begin(); it != held.end();) {
      bool done = true;
      for (cudaEvent_t e : it->events) {
        const cudaError_t st = cudaEventQuery(e);
        if (st == cudaSuccess) continue;
        if (st != cudaErrorNotReady) cudaGetLastError();  // a failed stream: keep holding the block
        done = false;
        break;
      }
      if (!done) {
        ++it;
        continue;
      }
      for (cudaEvent_t e : it->events) cudaEventDestroy(e);
      free_[device][it->size].push_back(it->ptr);
      it = held.erase(it);
    }
  }

  std::mutex mu_;
  std::map<int, std::map<size_t, std::vector<void*>>> free_;
  std::map<void*, size_t> sizes_;
  std::map<void*, std::vector<cudaStream_t>> streams_;  // RecordStream's, per live block
  std::map<int, std::vector<HeldBlock>> held_;            // freed, waiting for other streams
};

CudaBackend& TheBackend() {
  static CudaBackend backend;
  return backend;
}

struct Registrar {
  Registrar() {
    RegisterBackend(DeviceType::kCUDA, &TheBackend());
  }
} registrar;

}  // namespace

void ReleaseCachedBlocks(int device) { TheBackend().ReleaseCachedBlocks(device); }

}  // namespace ot::cuda
