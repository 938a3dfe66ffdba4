// Small shape helpers shared by kernels on every device: numpy broadcasting, axis
// normalisation, strides.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/ir.h"
#include "runtime/tensor.h"

namespace ot {

// Numpy-style broadcast of two shapes; throws ot::Error naming the node when incompatible.
Shape BroadcastShapes(const Shape& a, const Shape& b, const Node& node);
// Maps a possibly negative axis into [0, rank); throws naming the node when out of range.
int64_t NormalizeAxis(int64_t axis, int64_t rank, const Node& node);
// Row-major strides of a shape.
std::vector<int64_t> RowMajorStrides(const Shape& s);
// Strides of `in` aligned to `out` (right-aligned), 0 where `in` is broadcast.
std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out);

}  // namespace ot
