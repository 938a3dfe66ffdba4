// The check that follows every kernel launch (<<<...>>>) of runtime/cuda/: a launch the
// driver refuses (a grid or block size out of range, no kernel image for this GPU, too
// much shared memory) leaves its error in cudaGetLastError and nothing else; without
// this check the kernel's output would stay unwritten and the next CUDA call would
// report someone else's name. tests/unit/runtime/cuda_launch_checks.sh keeps every launch checked.
#pragma once

#include <cuda_runtime.h>

namespace ot::cuda {

// Throws ot::Error "CUDA error: launching <kernel> failed: <name>: <message> (file:line)".
[[noreturn]] void ThrowLaunchError(cudaError_t status, const char* kernel, const char* file, int line);

}  // namespace ot::cuda

// Put right after each `Kernel<<<grid, block, shared, stream>>>(...);`.
#define OT_CUDA_CHECK_LAUNCH(kernel)                                                            \
  do {                                                                                          \
    const cudaError_t ot_launch_status_ = cudaGetLastError();                                   \
    if (ot_launch_status_ != cudaSuccess)                                                       \
      ::ot::cuda::ThrowLaunchError(ot_launch_status_, kernel, __FILE__, __LINE__);              \
  } while (0)
