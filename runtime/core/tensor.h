// Tensor: a typed, shaped view of device memory, owning it or borrowing it (a slice of a
// planned arena). Copies are shallow: the storage is shared. A tensor may carry a layout
// (runtime/core/tensor_layout.h) chosen by the kernel that produced it; without one it is plain.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "graph/host_tensor.h"
#include "runtime/core/device.h"
#include "runtime/core/tensor_layout.h"

namespace ot {

using Shape = std::vector<int64_t>;

class Tensor {
 public:
  Tensor() = default;
  // New zero-filled storage on the device.
  static Tensor Empty(DType dtype, Shape shape, Device device = Device::CPU(),
                      std::shared_ptr<const TensorLayout> layout = nullptr);
  // Borrowed storage; the caller keeps it alive.
  static Tensor View(DType dtype, Shape shape, void* data, Device device = Device::CPU(),
                     std::shared_ptr<const TensorLayout> layout = nullptr);
  // Copy of a host tensor on the device.
  static Tensor FromHost(const HostTensor& host, Device device = Device::CPU());

  bool defined() const { return dtype_ != DType::kUndefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  int64_t numel() const { return NumElements(shape_); }
  // Bytes of storage, in the tensor's layout.
  size_t nbytes() const { return layout_ ? layout_->bytes() : static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  // Null for plain row-major data; otherwise only kernels that accept layouts read it.
  const std::shared_ptr<const TensorLayout>& layout() const { return layout_; }
  bool is_plain() const { return layout_ == nullptr; }
  Device device() const { return device_; }
  void* raw() const { return data_; }
  template <typename T> T* data() const { return static_cast<T*>(data_); }

  // Same storage, another shape of the same element count (plain tensors only).
  Tensor Reshaped(Shape shape) const;
  // Plain host copy (synchronous) with the given name.
  HostTensor ToHost(const std::string& name = "") const;
  // Deep copy on the same device.
  Tensor Clone() const;
  // Copies contents from another tensor of the same dtype and shape (any devices); a
  // laid-out source is converted when this tensor is plain.
  void CopyFrom(const Tensor& src);
  std::string Describe() const;  // "float[2, 3] on cpu"

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  void* data_ = nullptr;
  Device device_;
  std::shared_ptr<void> storage_;
  std::shared_ptr<const TensorLayout> layout_;
};

// Equal layouts (both plain, or the same non-plain layout).
bool SameLayout(const Tensor& a, const Tensor& b);

}  // namespace ot
