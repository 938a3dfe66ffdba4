// Small shape helpers shared by kernels on every device: numpy broadcasting, axis
// normalisation, strides.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/ir.h"
#include "runtime/core/kernel.h"
#include "runtime/core/tensor.h"

namespace ot {

// Numpy-style broadcast of two shapes; throws ot::Error naming the node when incompatible.
Shape BroadcastShapes(const Shape& a, const Shape& b, const Node& node);
// Maps a possibly negative axis into [0, rank); throws naming the node when out of range.
int64_t NormalizeAxis(int64_t axis, int64_t rank, const Node& node);
// Row-major strides of a shape.
std::vector<int64_t> RowMajorStrides(const Shape& s);
// Strides of `in` aligned to `out` (right-aligned), 0 where `in` is broadcast.
std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out);

// The values of small integer inputs (shapes, axes, repeats, pads) that a kernel reads in
// Prepare. Plans are cached by input shapes, so a later run may bind other values to the
// same plan; Check() in Compute turns that into an error instead of a stale output shape.
class ShapeInputValues {
 public:
  // Input `input` as int64 values, remembered for Check(); empty when the input is absent.
  std::vector<int64_t> Read(const KernelContext& ctx, int input);
  // Throws ot::Error naming the node when an input read in Prepare now holds other values.
  void Check(const KernelContext& ctx) const;

 private:
  std::vector<std::pair<int, std::vector<int64_t>>> seen_;
};

}  // namespace ot
