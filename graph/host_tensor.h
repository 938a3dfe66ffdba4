// HostTensor: a named, typed, shaped block of bytes in host memory. Used for initializers,
// tensor attributes and tensor files; the runtime turns it into device tensors.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "graph/dtype.h"

namespace ot {

// Number of elements of a shape (1 for a scalar).
int64_t NumElements(const std::vector<int64_t>& dims);
// "[2, 3, 4]"
std::string ShapeString(const std::vector<int64_t>& dims);

struct HostTensor {
  std::string name;
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;

  HostTensor() = default;
  HostTensor(DType t, std::vector<int64_t> shape, std::string tensor_name = "")
      : name(std::move(tensor_name)), dtype(t), dims(std::move(shape)),
        bytes(static_cast<size_t>(ot::NumElements(dims)) * DTypeSize(t)) {}

  // Gives the tensor this type and shape in place, keeping its allocation where it is big
  // enough (a buffer refilled batch after batch); the values are left as they were.
  void Resize(DType t, std::vector<int64_t> shape) {
    dtype = t;
    dims = std::move(shape);
    bytes.resize(static_cast<size_t>(ot::NumElements(dims)) * DTypeSize(t));
  }
  int64_t NumElements() const { return ot::NumElements(dims); }
  size_t NumBytes() const { return bytes.size(); }
  template <typename T> T* Data() { return reinterpret_cast<T*>(bytes.data()); }
  template <typename T> const T* Data() const { return reinterpret_cast<const T*>(bytes.data()); }

  // Values as int64 whatever the integer type (for shape-like tensors).
  std::vector<int64_t> AsInt64s() const;

  template <typename T>
  static HostTensor FromVector(const std::vector<T>& v, std::vector<int64_t> shape, std::string name = "") {
    HostTensor t(DTypeOf<T>::value, std::move(shape), std::move(name));
    if (!v.empty()) std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    return t;
  }
};

}  // namespace ot
