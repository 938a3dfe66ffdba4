// Shape conversions of the cuDNN kernels (see cudnn_util.h).
#include "runtime/cuda/cudnn_util.h"

#include <limits>

namespace ot::cuda {

std::vector<int> CudnnDims(const Shape& dims, size_t min_rank, const std::string& what) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (NumElements(dims) > kMax)
    throw UnsupportedError(what + ": tensor of shape " + ShapeString(dims) +
                           " has more than 2^31-1 elements, beyond cuDNN's int32 indexing");
  std::vector<int> out;
  for (int64_t d : dims) {
    if (d < 0 || d > kMax) throw UnsupportedError(what + ": dimension " + std::to_string(d) + " does not fit cuDNN's int32");
    out.push_back(static_cast<int>(d));
  }
  while (out.size() < min_rank) out.push_back(1);
  return out;
}

void SetTensorDesc(TensorDesc& desc, const Shape& dims, const std::string& what, cudnnDataType_t type) {
  std::vector<int> d = CudnnDims(dims, 4, what);
  std::vector<int> strides(d.size(), 1);
  for (size_t i = d.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * d[i];
  OT_CUDNN_CHECK(cudnnSetTensorNdDescriptor(desc.get(), type, static_cast<int>(d.size()), d.data(),
                                            strides.data()));
}

void SetFilterDesc(FilterDesc& desc, const Shape& dims, const std::string& what, cudnnDataType_t type) {
  std::vector<int> d = CudnnDims(dims, 4, what);
  OT_CUDNN_CHECK(cudnnSetFilterNdDescriptor(desc.get(), type, CUDNN_TENSOR_NCHW, static_cast<int>(d.size()),
                                            d.data()));
}

Shape ChannelFoldedShape(const Shape& shape) {
  const int64_t rest = NumElements(Shape(shape.begin() + 2, shape.end()));
  return {shape[0], shape[1], rest, 1};
}

}  // namespace ot::cuda
