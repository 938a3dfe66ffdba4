// Shared pieces of the CUDA runtime (runtime/cuda/): error checks that carry the
// library's own error string, the per-device context (compute and communication
// streams, cuBLAS and cuDNN handles bound to the compute stream) and the kernel
// registration shorthand. Compiled only when ONNXTRAIN_CUDA is on.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "graph/error.h"
#include "runtime/core/kernel_registry.h"

namespace ot::cuda {

// Each throws ot::Error "<what> failed: <library error name>: <library message> (file:line)".
[[noreturn]] void ThrowCudaError(cudaError_t status, const char* what, const char* file, int line);
[[noreturn]] void ThrowCublasError(cublasStatus_t status, const char* what, const char* file, int line);
[[noreturn]] void ThrowCudnnError(cudnnStatus_t status, const char* what, const char* file, int line);

// Number of CUDA devices visible; 0 (never an exception) when there is no driver or GPU.
int DeviceCount();
// Why there is no usable device (driver missing, no GPU, ...); empty when there is one.
std::string NoDeviceReason();
// For tests and checks that must tell "this machine has no GPU" from "its GPU does not work":
// 0 when there is no GPU (cudaErrorNoDevice) or no CUDA driver at all (libcuda.so.1 cannot
// be loaded); the number of devices when there are some; otherwise (a driver too old for
// this runtime, a broken install, ...) throws ot::Error with the driver's message.
int DeviceCountOrThrow();

// Per-device context, made on first use (sets the current device). Kernels run on
// `compute`; the NCCL communicator runs on `comm`; events order the two.
struct DeviceContext {
  int device = 0;
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
  cublasHandle_t cublas = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cudaDeviceProp props{};
};
// Throws ot::Error naming the index and the device count when `device` is out of range.
DeviceContext& Context(int device);
// Makes `device` current on this thread (cudaSetDevice), checked.
void SetDevice(int device);

// Scratch memory for library calls (cuDNN workspaces), grown on demand and kept; valid
// until the next call on the same device. Stream-ordered on `compute`. Throws ot::Error
// (out of memory, with the device's free memory) when it cannot grow.
void* Workspace(int device, size_t bytes);
// Workspace, but null instead of an exception when the device cannot give `bytes` even
// after the caching allocator returned its free blocks (cudaErrorMemoryAllocation): the
// caller takes a choice that needs less (the next convolution algorithm).
void* TryWorkspace(int device, size_t bytes);

// TF32 tensor-core math for float32 (--tf32; off by default, so float32 stays float32 as
// on the CPU). Setting it switches the cuBLAS math mode of every context, existing and
// future; kernels that choose their own math (cuDNN convolutions' CUDNN_TENSOR_OP_MATH
// or CUDNN_FMA_MATH, cuBLAS compute types) read AllowTf32() when they prepare.
void SetAllowTf32(bool allow);
bool AllowTf32();

// Free and total memory of the device in bytes (cudaMemGetInfo), for messages.
void MemoryInfo(int device, size_t* free_bytes, size_t* total_bytes);

// Whole-step replay: the work a function enqueues on a device's compute stream, captured
// once as a CUDA graph and launched again as one unit (the executor's cuda_graphs).
class StreamGraph {
 public:
  StreamGraph() = default;
  ~StreamGraph();
  StreamGraph(const StreamGraph&) = delete;
  StreamGraph& operator=(const StreamGraph&) = delete;

  // Captures what `enqueue` puts on the compute stream of `device`; nothing runs. Returns
  // false with the reason when the work cannot be captured (something in it synchronises,
  // allocates or copies to the host); the stream is usable again afterwards.
  bool Capture(int device, const std::function<void()>& enqueue, std::string* why);
  // Enqueues the captured work on the compute stream.
  void Launch();
  // Captured, and the scratch memory it uses (Workspace) has not moved since.
  bool ready() const;
  void Reset();

 private:
  int device_ = 0;
  cudaGraphExec_t exec_ = nullptr;
  uint64_t workspace_generation_ = 0;
};

}  // namespace ot::cuda

#define OT_CUDA_CHECK(expr)                                                                     \
  do {                                                                                          \
    cudaError_t ot_cuda_status_ = (expr);                                                       \
    if (ot_cuda_status_ != cudaSuccess) ::ot::cuda::ThrowCudaError(ot_cuda_status_, #expr, __FILE__, __LINE__); \
  } while (0)
#define OT_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                          \
    cublasStatus_t ot_cublas_status_ = (expr);                                                  \
    if (ot_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::ot::cuda::ThrowCublasError(ot_cublas_status_, #expr, __FILE__, __LINE__);               \
  } while (0)
#define OT_CUDNN_CHECK(expr)                                                                    \
  do {                                                                                          \
    cudnnStatus_t ot_cudnn_status_ = (expr);                                                    \
    if (ot_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                               \
      ::ot::cuda::ThrowCudnnError(ot_cudnn_status_, #expr, __FILE__, __LINE__);                 \
  } while (0)

// Registers Class for a default-domain op on CUDA; OT_REGISTER_KERNEL with
// ::ot::DeviceType::kCUDA for other domains (org.onnxtrain gradient ops).
#define OT_REGISTER_CUDA_KERNEL(op, since, until, Class) \
  OT_REGISTER_KERNEL("", op, since, until, ::ot::DeviceType::kCUDA, Class)
