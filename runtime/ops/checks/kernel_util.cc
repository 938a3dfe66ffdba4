// Shape helpers shared by kernels.
#include "runtime/ops/checks/kernel_util.h"

#include "graph/error.h"

namespace ot {

Shape BroadcastShapes(const Shape& a, const Shape& b, const Node& node) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      throw Error(node.Describe() + ": shapes " + ShapeString(a) + " and " + ShapeString(b) +
                  " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t NormalizeAxis(int64_t axis, int64_t rank, const Node& node) {
  int64_t lo = -rank, hi = rank - 1;
  if (rank == 0) lo = hi = 0;
  if (axis < lo || axis > hi)
    throw Error(node.Describe() + ": axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> RowMajorStrides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  std::vector<int64_t> in_st = RowMajorStrides(in);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[off + i] = in[i] == 1 ? 0 : in_st[i];
  return st;
}

std::vector<int64_t> ShapeInputValues::Read(const KernelContext& ctx, int input) {
  const Tensor* t = ctx.OptionalInput(input);
  std::vector<int64_t> values = t ? t->ToHost().AsInt64s() : std::vector<int64_t>{};
  seen_.emplace_back(input, values);
  return values;
}

void ShapeInputValues::Check(const KernelContext& ctx) const {
  for (const auto& [input, values] : seen_) {
    const Tensor* t = ctx.OptionalInput(input);
    if ((t ? t->ToHost().AsInt64s() : std::vector<int64_t>{}) != values)
      throw Error(ctx.node().Describe() + ": input " + std::to_string(input) +
                  " changed value between runs with the same input shapes; onnx-train plans output shapes once "
                  "per input shapes, so this value must depend only on shapes");
  }
}

}  // namespace ot
