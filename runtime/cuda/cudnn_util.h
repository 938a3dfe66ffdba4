// cuDNN descriptor wrappers (RAII, made once in a kernel's Prepare and reused by every
// Compute) and the shape conversions the cuDNN kernels share: ONNX shapes to cuDNN's
// packed N x C x D1 x ... descriptors of at least four dimensions, with int32 checks.
// The legacy cuDNN API used here is marked deprecated in cuDNN 9 but only warns when
// CUDNN_WARN_DEPRECATED is defined, which this project does not do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_common.h"
#include "runtime/core/tensor.h"

namespace ot::cuda {

// Moves a cuDNN descriptor handle; destroys it with `Destroy` when it goes.
template <typename Handle, cudnnStatus_t (*Create)(Handle*), cudnnStatus_t (*Destroy)(Handle)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() = default;
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  CudnnDescriptor(CudnnDescriptor&& o) noexcept : h_(o.h_) { o.h_ = nullptr; }
  CudnnDescriptor& operator=(CudnnDescriptor&& o) noexcept {
    if (this != &o) {
      Reset();
      h_ = o.h_;
      o.h_ = nullptr;
    }
    return *this;
  }
  ~CudnnDescriptor() { Reset(); }

  // The handle, created on first use.
  Handle get() {
    if (!h_) OT_CUDNN_CHECK(Create(&h_));
    return h_;
  }
  Handle get() const { return h_; }

 private:
  void Reset() {
    if (h_) Destroy(h_);
    h_ = nullptr;
  }
  Handle h_ = nullptr;
};

using TensorDesc = CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using PoolDesc = CudnnDescriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using ActivationDesc =
    CudnnDescriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;
using LrnDesc = CudnnDescriptor<cudnnLRNDescriptor_t, cudnnCreateLRNDescriptor, cudnnDestroyLRNDescriptor>;

// `dims` as cuDNN's int dimensions, padded with trailing 1s to at least `min_rank`.
// Throws ot::UnsupportedError (naming `what`) when a dimension exceeds int32 or the
// tensor has more than INT32_MAX elements.
std::vector<int> CudnnDims(const Shape& dims, size_t min_rank, const std::string& what);

// Sets a packed (row-major) tensor descriptor over `dims` (at least 4 after padding), float
// unless `type` says otherwise (--amp fp16: CUDNN_DATA_HALF).
void SetTensorDesc(TensorDesc& desc, const Shape& dims, const std::string& what,
                   cudnnDataType_t type = CUDNN_DATA_FLOAT);
// Sets an NCHW filter descriptor over `dims` (padded to at least 4), float unless `type` says.
void SetFilterDesc(FilterDesc& desc, const Shape& dims, const std::string& what,
                   cudnnDataType_t type = CUDNN_DATA_FLOAT);

// N x C x (product of the rest) x 1: per-channel ops (batch norm, LRN) on any rank >= 2.
Shape ChannelFoldedShape(const Shape& shape);

// cuDNN's alpha/beta scaling arguments (host pointers to float).
inline const float* One() {
  static const float one = 1.f;
  return &one;
}
inline const float* Zero() {
  static const float zero = 0.f;
  return &zero;
}

}  // namespace ot::cuda
