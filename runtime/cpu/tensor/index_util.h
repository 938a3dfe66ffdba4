// Reading index tensors in CPU kernels: one int32 or int64 index at a time, and the data
// offset a GatherND/ScatterND index tuple names.
#pragma once

#include <cstdint>

#include "graph/ir.h"
#include "runtime/ops/shapes/index_shapes.h"
#include "runtime/ops/shapes/op_shapes.h"
#include "runtime/core/tensor.h"

namespace ot {
namespace cpu {

// Element i of an int32 or int64 index tensor (RequireIndexType checked the type).
inline int64_t IndexAt(const Tensor& indices, int64_t i) {
  return indices.dtype() == DType::kInt64 ? indices.data<int64_t>()[i] : indices.data<int32_t>()[i];
}

// Offset in elements of the slice that index tuple `tuple` (counted over all batches)
// names in batch `batch`; negative indices count from the end, others out of range throw
// naming the node.
inline int64_t GatherNDOffset(const GatherNDPlan& p, const Tensor& indices, int64_t batch, int64_t tuple,
                              const Node& node) {
  int64_t off = batch * p.batch_stride;
  for (int64_t q = 0; q < p.k; ++q)
    off += CheckedIndex(IndexAt(indices, tuple * p.k + q), p.dims[static_cast<size_t>(q)], node) *
           p.strides[static_cast<size_t>(q)];
  return off;
}

}  // namespace cpu
}  // namespace ot
