// Host-side helpers of our own CUDA math kernels (math_kernels.h): broadcast and
// reduction indexers (dimensions merged where contiguous), the launch check, and the
// device error flag that reports kernel-detected errors without a stream sync.
#include <cstring>

#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"

namespace ot::cuda::math {

bool MakeBroadcastIndexer(const std::vector<int64_t>& out, const std::vector<std::vector<int64_t>>& inputs,
                          BroadcastIndexer* indexer) {
  OT_CHECK(inputs.size() <= static_cast<size_t>(kMaxOperands), "a broadcast indexer takes at most %d inputs",
           kMaxOperands);
  const size_t k = inputs.size();
  std::vector<std::vector<int64_t>> strides;
  for (const auto& in : inputs) strides.push_back(BroadcastStrides(in, out));
  strides.push_back(RowMajorStrides(out));  // the output's, so merges keep it row-major
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> merged(k + 1);
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    bool merge = !dims.empty();
    for (size_t j = 0; j <= k && merge; ++j) merge = merged[j].back() == strides[j][d] * out[d];
    if (merge) {
      dims.back() *= out[d];
      for (size_t j = 0; j <= k; ++j) merged[j].back() = strides[j][d];
    } else {
      dims.push_back(out[d]);
      for (size_t j = 0; j <= k; ++j) merged[j].push_back(strides[j][d]);
    }
  }
  if (dims.size() > static_cast<size_t>(kMaxDims)) return false;
  *indexer = BroadcastIndexer{};
  indexer->rank = static_cast<int>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    indexer->dims[d] = dims[d];
    for (size_t j = 0; j < k; ++j) indexer->strides[j][d] = merged[j][d];
  }
  return true;
}

bool MakeReduceIndexer(const std::vector<int64_t>& in, const std::vector<bool>& reduced, ReduceIndexer* indexer) {
  const std::vector<int64_t> strides = RowMajorStrides(in);
  std::vector<int64_t> kept_dims, kept_strides, red_dims, red_strides;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 1) continue;
    auto& dims = reduced[d] ? red_dims : kept_dims;
    auto& st = reduced[d] ? red_strides : kept_strides;
    if (!dims.empty() && st.back() == strides[d] * in[d]) {
      dims.back() *= in[d];
      st.back() = strides[d];
    } else {
      dims.push_back(in[d]);
      st.push_back(strides[d]);
    }
  }
  if (kept_dims.size() > static_cast<size_t>(kMaxDims) || red_dims.size() > static_cast<size_t>(kMaxDims)) return false;
  *indexer = ReduceIndexer{};
  indexer->kept_rank = static_cast<int>(kept_dims.size());
  indexer->reduced_rank = static_cast<int>(red_dims.size());
  for (size_t d = 0; d < kept_dims.size(); ++d) {
    indexer->kept_dims[d] = kept_dims[d];
    indexer->kept_strides[d] = kept_strides[d];
  }
  for (size_t d = 0; d < red_dims.size(); ++d) {
    indexer->reduced_dims[d] = red_dims[d];
    indexer->reduced_strides[d] = red_strides[d];
  }
  return true;
}

cudaStream_t ComputeStream(int device) { return Context(device).compute; }

void CheckLaunch(const char* what) {
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) ThrowCudaError(status, what, __FILE__, __LINE__);
}

DeviceErrorFlag::~DeviceErrorFlag() {
  // Errors are ignored here: a destructor must not throw. cudaFree waits for the device,
  // so no queued copy still targets host_ when it is freed.
  if (device_) cudaFree(device_);
  if (host_) cudaFreeHost(host_);
}

void DeviceErrorFlag::Init(int device) {
  if (device_) return;
  DeviceContext& ctx = Context(device);
  OT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_), sizeof(long long)));
  OT_CUDA_CHECK(cudaMemsetAsync(device_, 0, sizeof(long long), ctx.compute));
  OT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_), sizeof(long long)));
  __atomic_store_n(host_, 0LL, __ATOMIC_RELAXED);
}

void DeviceErrorFlag::Publish(cudaStream_t stream) {
  OT_CUDA_CHECK(cudaMemcpyAsync(host_, device_, sizeof(long long), cudaMemcpyDeviceToHost, stream));
}

long long DeviceErrorFlag::Poll() const {
  // The copy engine may be writing this word right now: an aligned 8-byte load sees
  // either the old or the new value, and the flag only ever goes from 0 to an error.
  return host_ ? __atomic_load_n(host_, __ATOMIC_RELAXED) : 0;
}

}  // namespace ot::cuda::math
