// Strided loops for CPU kernels without a library primitive: walk a row-major index space
// carrying one offset per operand (each with its own strides, 0 where broadcast), and
// numpy-broadcast elementwise maps built on that walk.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/error.h"

#include "runtime/cpu/elementwise/vector_loops.h"

#include "runtime/ops/checks/kernel_util.h"

namespace ot {
namespace cpu {

template <size_t N>
using StrideSet = std::array<std::vector<int64_t>, N>;

// Drops size-1 dimensions and merges neighbours that are contiguous for every operand,
// so the innermost run is as long as possible.
template <size_t N>
void CoalesceDims(Shape& shape, StrideSet<N>& strides) {
  Shape out_shape;
  StrideSet<N> out_strides;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !out_shape.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = out_strides[k].back() == strides[k][d] * shape[d];
    if (merge) {
      out_shape.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) out_strides[k].back() = strides[k][d];
    } else {
      out_shape.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) out_strides[k].push_back(strides[k][d]);
    }
  }
  shape = std::move(out_shape);
  strides = std::move(out_strides);
}

// Calls row(offsets, count, inner_strides) for every innermost run of `shape`: element i
// of the run is at offsets[k] + i * inner_strides[k] in operand k. Nothing is called for
// an empty shape; a scalar is one run of one element.
template <size_t N, typename RowFn>
void ForEachRow(Shape shape, StrideSet<N> strides, RowFn&& row) {
  if (NumElements(shape) == 0) return;
  CoalesceDims(shape, strides);
  std::array<int64_t, N> offsets{}, inner{};
  if (shape.empty()) {
    row(offsets, int64_t{1}, inner);
    return;
  }
  const size_t last = shape.size() - 1;
  for (size_t k = 0; k < N; ++k) inner[k] = strides[k][last];
  std::vector<int64_t> index(last, 0);
  while (true) {
    row(offsets, shape[last], inner);
    // Odometer over the outer dimensions.
    size_t d = last;
    while (d > 0) {
      --d;
      for (size_t k = 0; k < N; ++k) offsets[k] += strides[k][d];
      if (++index[d] < shape[d]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= strides[k][d] * shape[d];
      index[d] = 0;
      if (d == 0) return;
    }
    if (last == 0) return;
  }
}

// ForEachRow restricted to the elements [begin, end) of the row-major walk of `shape`
// (already coalesced): the first and last runs may be partial. Splitting [0, n) into ranges
// visits every element once, with the same offsets as ForEachRow.
template <size_t N, typename RowFn>
void ForEachRowInRange(const Shape& shape, const StrideSet<N>& strides, int64_t begin, int64_t end, RowFn&& row) {
  std::array<int64_t, N> offsets{}, inner{};
  if (begin >= end) return;
  if (shape.empty()) {  // a scalar: one run of one element
    row(offsets, int64_t{1}, inner);
    return;
  }
  const size_t last = shape.size() - 1;
  const int64_t len = shape[last];
  for (size_t k = 0; k < N; ++k) inner[k] = strides[k][last];
  // The position of `begin`: its run's outer index and the element within the run.
  std::vector<int64_t> index(last, 0);
  int64_t run = begin / len, first = begin % len;
  for (size_t d = last; d-- > 0;) {
    index[d] = run % shape[d];
    run /= shape[d];
    for (size_t k = 0; k < N; ++k) offsets[k] += index[d] * strides[k][d];
  }
  for (int64_t at = begin; at < end;) {
    const int64_t count = std::min(len - first, end - at);
    std::array<int64_t, N> start = offsets;
    for (size_t k = 0; k < N; ++k) start[k] += first * inner[k];
    row(start, count, inner);
    at += count;
    first = 0;
    for (size_t d = last; d-- > 0;) {  // odometer over the outer dimensions
      for (size_t k = 0; k < N; ++k) offsets[k] += strides[k][d];
      if (++index[d] < shape[d]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= strides[k][d] * shape[d];
      index[d] = 0;
    }
  }
}

// ForEachRow with the walk's elements split into one contiguous range per OpenMP thread
// when there are at least `parallel_from` of them (else one range on the calling thread).
// For maps that write each output element once: the result is that of ForEachRow, bitwise.
template <size_t N, typename RowFn>
void ForEachRowParallel(Shape shape, StrideSet<N> strides, int64_t parallel_from, RowFn&& row) {
  const int64_t n = NumElements(shape);
  if (n == 0) return;
  CoalesceDims(shape, strides);
  ForEachChunk(n, parallel_from, [&](int64_t begin, int64_t end) { ForEachRowInRange<N>(shape, strides, begin, end, row); });
}

// out[i] = fn(a[ia], b[ib]) over `out_shape`, with a and b numpy-broadcast to it.
template <typename A, typename B, typename Out, typename Fn>
void BroadcastMap(const A* a, const Shape& a_shape, const B* b, const Shape& b_shape, Out* out, const Shape& out_shape,
                  Fn&& fn) {
  StrideSet<3> strides = {BroadcastStrides(a_shape, out_shape), BroadcastStrides(b_shape, out_shape),
                          RowMajorStrides(out_shape)};
  ForEachRow<3>(out_shape, std::move(strides),
                [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
                  const A* pa = a + off[0];
                  const B* pb = b + off[1];
                  Out* po = out + off[2];
                  for (int64_t i = 0; i < n; ++i) po[i * st[2]] = fn(pa[i * st[0]], pb[i * st[1]]);
                });
}

// out[i] = static_cast<Out>(a[ia]): copies `a` broadcast to `out_shape`.
template <typename A, typename Out>
void BroadcastCopy(const A* a, const Shape& a_shape, Out* out, const Shape& out_shape) {
  StrideSet<2> strides = {BroadcastStrides(a_shape, out_shape), RowMajorStrides(out_shape)};
  ForEachRow<2>(out_shape, std::move(strides),
                [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                  for (int64_t i = 0; i < n; ++i) out[off[1] + i * st[1]] = static_cast<Out>(a[off[0] + i * st[0]]);
                });
}

template <size_t kSize> struct ElementBytes {
  unsigned char b[kSize];
};

// Calls fn(ElementBytes<size>{}) for 1, 2, 4 and 8 byte elements; throws for other sizes.
template <typename Fn> void DispatchBySize(size_t esize, Fn&& fn) {
  switch (esize) {
    case 1: fn(ElementBytes<1>{}); break;
    case 2: fn(ElementBytes<2>{}); break;
    case 4: fn(ElementBytes<4>{}); break;
    case 8: fn(ElementBytes<8>{}); break;
    default: throw Error("element size " + std::to_string(esize) + " has no copy routine");
  }
}

// dst (dense, row-major over out_shape) = src viewed through src_strides from src_offset
// (all in elements), for elements of `esize` bytes (transpose_concat.cc); split among the
// OpenMP threads from kParallelCopyElements elements.
constexpr int64_t kParallelCopyElements = 1 << 16;
void StridedCopy(const void* src, const std::vector<int64_t>& src_strides, int64_t src_offset, void* dst,
                 const Shape& out_shape, size_t esize);

}  // namespace cpu
}  // namespace ot
