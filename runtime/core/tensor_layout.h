// TensorLayout: how a tensor's elements lie in memory when that is not plain row-major
// (e.g. oneDNN's channel-blocked nChw16c). Device-neutral code only carries it along;
// the device's kernels create and interpret it. A tensor without one is plain.
#pragma once

#include <cstddef>
#include <string>

namespace ot {

class TensorLayout {
 public:
  virtual ~TensorLayout() = default;
  // Bytes the tensor takes in this layout (blocked layouts may pad).
  virtual size_t bytes() const = 0;
  virtual std::string name() const = 0;  // for messages, e.g. "nChw16c"
  virtual bool Equals(const TensorLayout& other) const = 0;
  // Writes the plain row-major form of `src` (in this layout) to `plain_dst`.
  virtual void ToPlain(const void* src, void* plain_dst) const = 0;
};

}  // namespace ot
