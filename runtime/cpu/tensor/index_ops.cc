// CPU kernels of the ops that select elements by index or by value: GatherND, ScatterND,
// ScatterElements (and the older Scatter), TopK, NonZero, Compress, Unique and
// NonMaxSuppression. Plain
// loops: these pick elements, which no oneDNN primitive does; element copies go by size
// (any fixed-size type), comparisons and reductions by type. arrange_ops.cc holds the
// ops that rearrange, mask, accumulate or generate elements.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>

#include "graph/op_domains.h"
#include "runtime/cpu/dtype_dispatch.h"
#include "runtime/cpu/tensor/index_util.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cpu/strided_loop.h"
#include "runtime/ops/shapes/index_shapes.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot {
namespace cpu {
namespace {

// ---------------------------------------------------------------------------------------
class GatherNDKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    esize_ = CheckedElementSize(data, node_);
    plan_ = PlanGatherND(node_, data.shape(), ctx.Input(1), opset_ >= 12 ? node_.GetInt("batch_dims", 0) : 0);
    ctx.SetOutput(0, data.dtype(), plan_.out);
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& indices = ctx.Input(1);
    const auto* in = static_cast<const unsigned char*>(ctx.Input(0).raw());
    auto* out = static_cast<unsigned char*>(ctx.Output(0).raw());
    const size_t bytes = static_cast<size_t>(plan_.slice) * esize_;
    int64_t t = 0;
    for (int64_t b = 0; b < plan_.batch; ++b)
      for (int64_t j = 0; j < plan_.tuples; ++j, ++t, out += bytes) {
        const int64_t off = GatherNDOffset(plan_, indices, b, t, node_);
        std::memcpy(out, in + static_cast<size_t>(off) * esize_, bytes);
      }
  }

 private:
  size_t esize_ = 0;
  GatherNDPlan plan_;
};

// dst = combine(dst, src) for a scatter reduction.
template <typename T> void Combine(T* dst, T src, const std::string& red) {
  if (red == "add") *dst = static_cast<T>(*dst + src);
  else if (red == "mul") *dst = static_cast<T>(*dst * src);
  else if (red == "max") *dst = std::max(*dst, src);
  else if (red == "min") *dst = std::min(*dst, src);
  else *dst = src;
}

// ScatterND(data, indices, updates): a copy of data with slices replaced (or combined).
class ScatterNDKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    esize_ = CheckedElementSize(data, node_);
    plan_ = PlanGatherND(node_, data.shape(), ctx.Input(1), 0);
    const Tensor& updates = ctx.Input(2);
    if (updates.shape() != plan_.out || updates.dtype() != data.dtype())
      Fail("updates " + updates.Describe() + " must be " + DTypeName(data.dtype()) + " of shape " + ShapeString(plan_.out));
    reduction_ = ScatterReduction(node_, opset_);
    if (reduction_ != "none" && !TypeListHas(NumericTypes{}, data.dtype()))
      Unsupported("reduction '" + reduction_ + "' on data type " + DTypeName(data.dtype()));
    ctx.SetOutput(0, data.dtype(), data.shape());
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& indices = ctx.Input(1);
    ctx.Output(0).CopyFrom(ctx.Input(0));
    auto* out = static_cast<unsigned char*>(ctx.Output(0).raw());
    const auto* upd = static_cast<const unsigned char*>(ctx.Input(2).raw());
    const size_t bytes = static_cast<size_t>(plan_.slice) * esize_;
    for (int64_t t = 0; t < plan_.tuples; ++t, upd += bytes) {
      const int64_t off = GatherNDOffset(plan_, indices, 0, t, node_);
      unsigned char* dst = out + static_cast<size_t>(off) * esize_;
      if (reduction_ == "none") {
        std::memcpy(dst, upd, bytes);
        continue;
      }
      DispatchType(NumericTypes{}, ctx.Input(0).dtype(), node_, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* d = reinterpret_cast<T*>(dst);
        const T* s = reinterpret_cast<const T*>(upd);
        for (int64_t i = 0; i < plan_.slice; ++i) Combine(d + i, s[i], reduction_);
      });
    }
  }

 private:
  size_t esize_ = 0;
  GatherNDPlan plan_;
  std::string reduction_;
};

// ScatterElements(data, indices, updates) along `axis` (also Scatter, opsets 9-10).
class ScatterElementsKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    esize_ = CheckedElementSize(data, node_);
    axis_ = ScatterElementsAxis(node_, data, ctx.Input(1), ctx.Input(2));
    reduction_ = ScatterReduction(node_, opset_);
    if (reduction_ != "none" && !TypeListHas(NumericTypes{}, data.dtype()))
      Unsupported("reduction '" + reduction_ + "' on data type " + DTypeName(data.dtype()));
    ctx.SetOutput(0, data.dtype(), data.shape());
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    const Tensor& indices = ctx.Input(1);
    ctx.Output(0).CopyFrom(data);
    std::vector<int64_t> data_strides = RowMajorStrides(data.shape());
    const int64_t axis_stride = data_strides[static_cast<size_t>(axis_)];
    const int64_t dim = data.dim(static_cast<int>(axis_));
    data_strides[static_cast<size_t>(axis_)] = 0;
    const StrideSet<2> strides = {RowMajorStrides(indices.shape()), data_strides};
    auto* out = static_cast<unsigned char*>(ctx.Output(0).raw());
    const auto* upd = static_cast<const unsigned char*>(ctx.Input(2).raw());
    auto each = [&](auto store) {
      ForEachRow<2>(indices.shape(), strides, [&](const std::array<int64_t, 2>& at, int64_t len, const std::array<int64_t, 2>& step) {
        for (int64_t i = 0; i < len; ++i) {
          const int64_t pos = at[0] + i * step[0];
          store(at[1] + i * step[1] + CheckedIndex(IndexAt(indices, pos), dim, node_) * axis_stride, pos);
        }
      });
    };
    if (reduction_ == "none") {
      each([&](int64_t dst, int64_t src) { std::memcpy(out + dst * esize_, upd + src * esize_, esize_); });
      return;
    }
    DispatchType(NumericTypes{}, data.dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      each([&](int64_t dst, int64_t src) { Combine(reinterpret_cast<T*>(out) + dst, reinterpret_cast<const T*>(upd)[src], reduction_); });
    });
  }

 private:
  size_t esize_ = 0;
  int64_t axis_ = 0;
  std::string reduction_;
};

// TopK(X[, K]) -> Values, Indices (int64). Ties go to the lower index; with sorted=0 the
// k elements come in index order.
class TopKKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (!TypeListHas(NumericTypes{}, x.dtype())) Unsupported("data type " + DTypeName(x.dtype()));
    plan_ = PlanTopK(node_, opset_, ctx, shape_inputs_);
    ctx.SetOutput(0, x.dtype(), plan_.out);
    ctx.SetOutput(1, DType::kInt64, plan_.out);
  }
  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    const Tensor& x = ctx.Input(0);
    const Shape& s = x.shape();
    const int64_t len = s[static_cast<size_t>(plan_.axis)], k = plan_.k;
    const int64_t outer = NumElements(Shape(s.begin(), s.begin() + plan_.axis));
    const int64_t inner = NumElements(Shape(s.begin() + plan_.axis + 1, s.end()));
    DispatchType(NumericTypes{}, x.dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = x.data<T>();
      T* values = ctx.HasOutput(0) ? ctx.Output(0).template data<T>() : nullptr;
      int64_t* idx = ctx.HasOutput(1) ? ctx.Output(1).template data<int64_t>() : nullptr;
      std::vector<int64_t> order(static_cast<size_t>(len));
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const T* row = in + o * len * inner + i;
          std::iota(order.begin(), order.end(), 0);
          auto before = [&](int64_t a, int64_t b) {
            const T va = row[a * inner], vb = row[b * inner];
            if (va != vb) return plan_.largest ? va > vb : va < vb;
            return a < b;
          };
          std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
          if (!plan_.sorted) std::sort(order.begin(), order.begin() + k);
          for (int64_t j = 0; j < k; ++j) {
            const int64_t at = (o * k + j) * inner + i;
            if (values) values[at] = row[order[static_cast<size_t>(j)] * inner];
            if (idx) idx[at] = order[static_cast<size_t>(j)];
          }
        }
    });
  }

 private:
  TopKPlan plan_;
  ShapeInputValues shape_inputs_;
};

// ---------------------------------------------------------------------------------------
// Ops whose output size depends on the data (NonZero, Compress): the positions are
// found in Prepare, which sees the data; a later run of the same plan must find as many,
// since plans (and output shapes) are made once per input shapes.
std::vector<int64_t> NonZeroPositions(const Tensor& t, const Node& node) {
  if (!TypeListHas(NumericOrBoolTypes{}, t.dtype()))
    throw UnsupportedError(node.op_type + ": data type " + DTypeName(t.dtype()));
  std::vector<int64_t> pos;
  DispatchType(NumericOrBoolTypes{}, t.dtype(), node, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i)
      if (p[i] != T(0)) pos.push_back(i);
  });
  return pos;
}

class NonZeroKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    count_ = static_cast<int64_t>(NonZeroPositions(x, node_).size());
    ctx.SetOutput(0, DType::kInt64, {std::max<int64_t>(x.rank(), 1), count_});
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const std::vector<int64_t> pos = NonZeroPositions(x, node_);
    if (static_cast<int64_t>(pos.size()) != count_)
      Fail("found " + std::to_string(pos.size()) + " non-zero elements where the plan made for these input shapes found " +
           std::to_string(count_) + "; onnx-train fixes output shapes once per input shapes");
    int64_t* out = ctx.Output(0).data<int64_t>();
    const std::vector<int64_t> strides = RowMajorStrides(x.shape());
    const int64_t rank = x.rank();
    for (int64_t j = 0; j < count_; ++j) {
      int64_t rest = pos[static_cast<size_t>(j)];
      if (rank == 0) out[j] = 0;
      for (int64_t d = 0; d < rank; ++d) {
        out[d * count_ + j] = rest / strides[static_cast<size_t>(d)];
        rest %= strides[static_cast<size_t>(d)];
      }
    }
  }

 private:
  int64_t count_ = 0;
};

// Compress(X, condition[, axis]): the slices along axis (or elements of the flattened X)
// whose condition is true.
class CompressKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    has_axis_ = node_.HasAttr("axis");
    if (has_axis_) axis_ = NormalizeAxis(node_.GetInt("axis", 0), x.rank(), node_);
    keep_ = Kept(ctx);
    Shape out = {static_cast<int64_t>(keep_.size())};
    if (has_axis_) {
      out = x.shape();
      out[static_cast<size_t>(axis_)] = static_cast<int64_t>(keep_.size());
    }
    ctx.SetOutput(0, x.dtype(), out);
  }
  void Compute(KernelContext& ctx) override {
    if (Kept(ctx) != keep_)
      Fail("the condition changed between runs with the same input shapes; onnx-train fixes output shapes once per "
           "input shapes");
    const Tensor& x = ctx.Input(0);
    const Shape flat = {x.numel()};
    const AxisSplit xs = SplitAround(has_axis_ ? x.shape() : flat, has_axis_ ? axis_ : 0, esize_);
    const int64_t dim = has_axis_ ? x.dim(static_cast<int>(axis_)) : x.numel();
    const auto* in = static_cast<const unsigned char*>(x.raw());
    auto* out = static_cast<unsigned char*>(ctx.Output(0).raw());
    for (int64_t o = 0; o < xs.outer; ++o)
      for (int64_t k : keep_) {
        std::memcpy(out, in + (o * dim + k) * xs.inner_bytes, static_cast<size_t>(xs.inner_bytes));
        out += xs.inner_bytes;
      }
  }

 private:
  std::vector<int64_t> Kept(const KernelContext& ctx) const {
    const Tensor& cond = ctx.Input(1);
    if (cond.dtype() != DType::kBool || cond.rank() != 1) Fail("condition must be a 1-D bool tensor");
    const int64_t dim = has_axis_ ? ctx.Input(0).dim(static_cast<int>(axis_)) : ctx.Input(0).numel();
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < std::min(dim, cond.numel()); ++i)
      if (cond.data<uint8_t>()[i]) keep.push_back(i);
    return keep;
  }

  size_t esize_ = 0;
  bool has_axis_ = false;
  int64_t axis_ = 0;
  std::vector<int64_t> keep_;
};

// Unique(X) with optional `axis` and `sorted` -> Y, indices (first occurrence),
// inverse_indices, counts. Without an axis X is flattened; with one, the slices along it
// are compared whole (lexicographically when sorted).
struct UniqueResult {
  std::vector<int64_t> first;    // per unique value: its first position along the axis
  std::vector<int64_t> inverse;  // per position: its unique value's number
  std::vector<int64_t> counts;
};

UniqueResult FindUnique(const Tensor& x, bool has_axis, int64_t axis, bool sorted, const Node& node) {
  const Shape flat = {x.numel()};
  const Shape& s = has_axis ? x.shape() : flat;
  const int64_t a = has_axis ? axis : 0;
  const int64_t dim = s[static_cast<size_t>(a)];
  const int64_t outer = NumElements(Shape(s.begin(), s.begin() + a));
  const int64_t inner = NumElements(Shape(s.begin() + a + 1, s.end()));
  UniqueResult r;
  DispatchType(NumericOrBoolTypes{}, x.dtype(), node, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = x.data<T>();
    // -1, 0, 1 comparing the slices at positions i and j along the axis.
    auto compare = [&](int64_t i, int64_t j) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < inner; ++k) {
          const T u = p[(o * dim + i) * inner + k], v = p[(o * dim + j) * inner + k];
          if (u < v) return -1;
          if (v < u) return 1;
        }
      return 0;
    };
    std::vector<int64_t> order(static_cast<size_t>(dim));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return compare(i, j) < 0; });
    std::vector<int64_t> group(static_cast<size_t>(dim));  // sorted group of each position
    std::vector<int64_t> group_first;
    for (size_t n = 0; n < order.size(); ++n) {
      if (n == 0 || compare(order[n - 1], order[n]) != 0) group_first.push_back(order[n]);  // stable: lowest index
      group[static_cast<size_t>(order[n])] = static_cast<int64_t>(group_first.size()) - 1;
    }
    const size_t groups = group_first.size();
    std::vector<int64_t> rank(groups);  // output number of each group
    std::vector<int64_t> by_output(groups);
    std::iota(by_output.begin(), by_output.end(), 0);
    if (!sorted)
      std::sort(by_output.begin(), by_output.end(), [&](int64_t g, int64_t h) { return group_first[static_cast<size_t>(g)] < group_first[static_cast<size_t>(h)]; });
    for (size_t n = 0; n < groups; ++n) rank[static_cast<size_t>(by_output[n])] = static_cast<int64_t>(n);
    r.first.resize(groups);
    r.counts.assign(groups, 0);
    for (size_t g = 0; g < groups; ++g) r.first[static_cast<size_t>(rank[g])] = group_first[g];
    for (int64_t i = 0; i < dim; ++i) {
      const int64_t out = rank[static_cast<size_t>(group[static_cast<size_t>(i)])];
      r.inverse.push_back(out);
      ++r.counts[static_cast<size_t>(out)];
    }
  });
  return r;
}

class UniqueKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (!TypeListHas(NumericOrBoolTypes{}, x.dtype())) Unsupported("data type " + DTypeName(x.dtype()));
    has_axis_ = node_.HasAttr("axis");
    if (has_axis_) axis_ = NormalizeAxis(node_.GetInt("axis", 0), x.rank(), node_);
    result_ = FindUnique(x, has_axis_, axis_, node_.GetInt("sorted", 1) != 0, node_);
    const auto n = static_cast<int64_t>(result_.first.size());
    Shape y = {n};
    if (has_axis_) {
      y = x.shape();
      y[static_cast<size_t>(axis_)] = n;
    }
    ctx.SetOutput(0, x.dtype(), y);
    ctx.SetOutput(1, DType::kInt64, {n});
    ctx.SetOutput(2, DType::kInt64, {static_cast<int64_t>(result_.inverse.size())});
    ctx.SetOutput(3, DType::kInt64, {n});
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    UniqueResult r = FindUnique(x, has_axis_, axis_, node_.GetInt("sorted", 1) != 0, node_);
    if (r.first.size() != result_.first.size())
      Fail("found " + std::to_string(r.first.size()) + " unique values where the plan made for these input shapes found " +
           std::to_string(result_.first.size()) + "; onnx-train fixes output shapes once per input shapes");
    const size_t esize = DTypeSize(x.dtype());
    const Shape flat = {x.numel()};
    const AxisSplit xs = SplitAround(has_axis_ ? x.shape() : flat, has_axis_ ? axis_ : 0, esize);
    const int64_t dim = has_axis_ ? x.dim(static_cast<int>(axis_)) : x.numel();
    if (ctx.HasOutput(0)) {
      const auto* in = static_cast<const unsigned char*>(x.raw());
      auto* out = static_cast<unsigned char*>(ctx.Output(0).raw());
      for (int64_t o = 0; o < xs.outer; ++o)
        for (int64_t k : r.first) {
          std::memcpy(out, in + (o * dim + k) * xs.inner_bytes, static_cast<size_t>(xs.inner_bytes));
          out += xs.inner_bytes;
        }
    }
    const std::vector<int64_t>* lists[] = {nullptr, &r.first, &r.inverse, &r.counts};
    for (int i = 1; i < 4; ++i)
      if (ctx.HasOutput(i)) std::copy(lists[i]->begin(), lists[i]->end(), ctx.Output(i).data<int64_t>());
  }

 private:
  bool has_axis_ = false;
  int64_t axis_ = 0;
  UniqueResult result_;
};

// NonMaxSuppression(boxes [B, N, 4], scores [B, C, N][, max_per_class, iou_threshold,
// score_threshold]) -> selected [K, 3] (batch, class, box): per batch and class, boxes
// above the score threshold in falling score order (ties: lower index first), each kept
// unless its IoU with a kept box exceeds the threshold, at most max_per_class of them.
std::vector<int64_t> SelectBoxes(const Node& node, const KernelContext& ctx) {
  const Tensor& boxes = ctx.Input(0);
  const Tensor& scores = ctx.Input(1);
  if (boxes.dtype() != DType::kFloat32 || scores.dtype() != DType::kFloat32)
    throw UnsupportedError(node.op_type + ": data type " + DTypeName(boxes.dtype()));
  if (boxes.rank() != 3 || boxes.dim(2) != 4 || scores.rank() != 3 || scores.dim(0) != boxes.dim(0) ||
      scores.dim(2) != boxes.dim(1))
    throw Error(node.Describe() + ": boxes must be [B, N, 4] and scores [B, C, N], got " + ShapeString(boxes.shape()) +
                " and " + ShapeString(scores.shape()));
  auto scalar = [&](int i, double fallback) {
    const Tensor* t = ctx.OptionalInput(i);
    if (!t || t->numel() == 0) return fallback;
    return t->dtype() == DType::kInt64 ? static_cast<double>(t->data<int64_t>()[0]) : static_cast<double>(t->data<float>()[0]);
  };
  const auto max_per_class = static_cast<int64_t>(scalar(2, 0));
  const double iou_threshold = scalar(3, 0);
  const bool has_score_threshold = ctx.OptionalInput(4) && ctx.OptionalInput(4)->numel() > 0;
  const double score_threshold = scalar(4, 0);
  const bool center = node.GetInt("center_point_box", 0) != 0;
  const int64_t nb = boxes.dim(0), n = boxes.dim(1), nc = scores.dim(1);
  // Box k of batch b as (y1, x1, y2, x2) with y1 <= y2, x1 <= x2.
  auto corners = [&](int64_t b, int64_t k) {
    const float* p = boxes.data<float>() + (b * n + k) * 4;
    std::array<double, 4> c;
    if (center) c = {p[1] - p[3] / 2.0, p[0] - p[2] / 2.0, p[1] + p[3] / 2.0, p[0] + p[2] / 2.0};
    else c = {std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]), std::max(p[1], p[3])};
    return c;
  };
  auto iou = [](const std::array<double, 4>& a, const std::array<double, 4>& b) {
    const double ih = std::min(a[2], b[2]) - std::max(a[0], b[0]), iw = std::min(a[3], b[3]) - std::max(a[1], b[1]);
    const double area_a = (a[2] - a[0]) * (a[3] - a[1]), area_b = (b[2] - b[0]) * (b[3] - b[1]);
    if (ih <= 0 || iw <= 0 || area_a <= 0 || area_b <= 0) return 0.0;
    return ih * iw / (area_a + area_b - ih * iw);
  };
  std::vector<int64_t> out;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t c = 0; c < nc; ++c) {
      const float* sc = scores.data<float>() + (b * nc + c) * n;
      std::vector<int64_t> order;
      for (int64_t k = 0; k < n; ++k)
        if (!has_score_threshold || sc[k] > score_threshold) order.push_back(k);
      std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return sc[i] > sc[j]; });
      std::vector<int64_t> kept;
      for (int64_t k : order) {
        if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
        bool keep = true;
        for (int64_t q : kept) keep = keep && iou(corners(b, k), corners(b, q)) <= iou_threshold;
        if (!keep) continue;
        kept.push_back(k);
        out.insert(out.end(), {b, c, k});
      }
    }
  return out;
}

class NonMaxSuppressionKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    selected_ = SelectBoxes(node_, ctx);
    ctx.SetOutput(0, DType::kInt64, {static_cast<int64_t>(selected_.size() / 3), 3});
  }
  void Compute(KernelContext& ctx) override {
    const std::vector<int64_t> now = SelectBoxes(node_, ctx);
    if (now.size() != selected_.size())
      Fail("selected " + std::to_string(now.size() / 3) + " boxes where the plan made for these input shapes selected " +
           std::to_string(selected_.size() / 3) + "; onnx-train fixes output shapes once per input shapes");
    std::copy(now.begin(), now.end(), ctx.Output(0).data<int64_t>());
  }

 private:
  std::vector<int64_t> selected_;
};

OT_REGISTER_CPU_KERNEL("GatherND", 11, kLatestOpset, GatherNDKernel);
OT_REGISTER_CPU_KERNEL("ScatterND", 11, kLatestOpset, ScatterNDKernel);
OT_REGISTER_CPU_KERNEL("ScatterElements", 11, kLatestOpset, ScatterElementsKernel);
OT_REGISTER_CPU_KERNEL("Scatter", 9, 10, ScatterElementsKernel);
OT_REGISTER_CPU_KERNEL("TopK", 1, kLatestOpset, TopKKernel);
OT_REGISTER_CPU_KERNEL("NonZero", 9, kLatestOpset, NonZeroKernel);
OT_REGISTER_CPU_KERNEL("Compress", 9, kLatestOpset, CompressKernel);
OT_REGISTER_CPU_KERNEL("Unique", 11, kLatestOpset, UniqueKernel);
OT_REGISTER_CPU_KERNEL("NonMaxSuppression", 10, kLatestOpset, NonMaxSuppressionKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
