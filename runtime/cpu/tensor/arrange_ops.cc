// CPU kernels of the ops that rearrange, mask, accumulate or generate elements without
// index tensors: Trilu, CumSum, ReverseSequence, DepthToSpace and SpaceToDepth (and
// DepthToSpaceGrad, the inverse permutation), OneHot, EyeLike and Range. Plain loops and
// strided copies (no oneDNN primitive does these); copies go by element size, arithmetic
// by type.
#include <algorithm>
#include <array>
#include <cstring>

#include "graph/op_domains.h"
#include "runtime/cpu/dtype_dispatch.h"
#include "runtime/ops/kernel_util.h"
#include "runtime/cpu/strided_loop.h"
#include "runtime/ops/index_shapes.h"
#include "runtime/kernel_registry.h"
#include "runtime/ops/op_shapes.h"

namespace ot {
namespace cpu {
namespace {

// Trilu(X[, k]): keeps j - i >= k (upper) or j - i <= k (lower) of each matrix.
class TriluKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    k_ = TriluOffset(node_, ctx, shape_inputs_);
    ctx.SetOutput(0, x.dtype(), x.shape());
  }
  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    const Tensor& x = ctx.Input(0);
    const int64_t rows = x.dim(-2), cols = x.dim(-1);
    const int64_t mats = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
    const bool upper = node_.GetInt("upper", 1) != 0;
    const auto* in = static_cast<const unsigned char*>(x.raw());
    auto* out = static_cast<unsigned char*>(ctx.Output(0).raw());
    std::memset(out, 0, ctx.Output(0).nbytes());
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t i = 0; i < rows; ++i) {
        // Columns kept in row i: [i + k, cols) for upper, [0, i + k] for lower.
        const int64_t lo = upper ? std::clamp<int64_t>(i + k_, 0, cols) : 0;
        const int64_t hi = upper ? cols : std::clamp<int64_t>(i + k_ + 1, 0, cols);
        if (hi <= lo) continue;
        const size_t at = static_cast<size_t>((m * rows + i) * cols + lo) * esize_;
        std::memcpy(out + at, in + at, static_cast<size_t>(hi - lo) * esize_);
      }
  }

 private:
  size_t esize_ = 0;
  int64_t k_ = 0;
  ShapeInputValues shape_inputs_;
};

// CumSum(X, axis) with `exclusive` and `reverse`, accumulated in the element type.
class CumSumKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (!TypeListHas(NumericTypes{}, x.dtype())) Unsupported("data type " + DTypeName(x.dtype()));
    axis_ = CumSumAxis(node_, ctx, shape_inputs_);
    ctx.SetOutput(0, x.dtype(), x.shape());
  }
  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    const Tensor& x = ctx.Input(0);
    const Shape& s = x.shape();
    const int64_t len = s[static_cast<size_t>(axis_)];
    const int64_t outer = NumElements(Shape(s.begin(), s.begin() + axis_));
    const int64_t inner = NumElements(Shape(s.begin() + axis_ + 1, s.end()));
    const bool exclusive = node_.GetInt("exclusive", 0) != 0, reverse = node_.GetInt("reverse", 0) != 0;
    DispatchType(NumericTypes{}, x.dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = x.data<T>();
      T* out = ctx.Output(0).data<T>();
      std::vector<T> acc(static_cast<size_t>(inner));
      for (int64_t o = 0; o < outer; ++o) {
        std::fill(acc.begin(), acc.end(), T(0));
        for (int64_t step = 0; step < len; ++step) {
          const int64_t k = reverse ? len - 1 - step : step;
          const int64_t base = (o * len + k) * inner;
          for (int64_t i = 0; i < inner; ++i) {
            const T v = in[base + i];
            if (exclusive) {
              out[base + i] = acc[static_cast<size_t>(i)];
              acc[static_cast<size_t>(i)] = static_cast<T>(acc[static_cast<size_t>(i)] + v);
            } else {
              acc[static_cast<size_t>(i)] = static_cast<T>(acc[static_cast<size_t>(i)] + v);
              out[base + i] = acc[static_cast<size_t>(i)];
            }
          }
        }
      }
    });
  }

 private:
  int64_t axis_ = 0;
  ShapeInputValues shape_inputs_;
};

// ReverseSequence(X, sequence_lens): the first lens[b] steps of each batch entry reversed.
class ReverseSequenceKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    PlanReverseSequence(node_, x, ctx.Input(1));
    ctx.SetOutput(0, x.dtype(), x.shape());
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const ReverseSequencePlan p = PlanReverseSequence(node_, x, ctx.Input(1));
    const int64_t batch = x.dim(static_cast<int>(p.batch_axis)), time = x.dim(static_cast<int>(p.time_axis));
    const int64_t inner = x.numel() / std::max<int64_t>(batch * time, 1);
    const size_t bytes = static_cast<size_t>(inner) * esize_;
    const auto* in = static_cast<const unsigned char*>(x.raw());
    auto* out = static_cast<unsigned char*>(ctx.Output(0).raw());
    auto offset = [&](int64_t b, int64_t t) { return static_cast<size_t>(p.batch_axis == 0 ? b * time + t : t * batch + b) * bytes; };
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = p.lens[static_cast<size_t>(b)];
      for (int64_t t = 0; t < time; ++t) std::memcpy(out + offset(b, t), in + offset(b, t < len ? len - 1 - t : t), bytes);
    }
  }

 private:
  size_t esize_ = 0;
};

// DepthToSpace, SpaceToDepth and DepthToSpaceGrad: one strided copy.
class BlockPermutationKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    plan_ = PlanBlockPermutation(node_, x.shape());
    ctx.SetOutput(0, x.dtype(), plan_.out);
  }
  void Compute(KernelContext& ctx) override {
    StridedCopy(ctx.Input(0).raw(), plan_.strides, 0, ctx.Output(0).raw(), plan_.walk, esize_);
  }

 private:
  size_t esize_ = 0;
  BlockPermutation plan_;
};

// ---------------------------------------------------------------------------------------
// Reads element i of a numeric tensor as double.
double NumberAt(const Tensor& t, int64_t i, const Node& node) {
  double v = 0;
  DispatchType(NumericTypes{}, t.dtype(), node, [&](auto tag) {
    using T = typename decltype(tag)::type;
    v = static_cast<double>(t.data<T>()[i]);
  });
  return v;
}

// OneHot(indices, depth, values[off, on]) with `axis`; negative indices count from depth,
// others out of range give an all-off row.
class OneHotKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& depth = ctx.Input(1);
    if (depth.numel() != 1) Fail("depth must hold one value");
    depth_ = static_cast<int64_t>(NumberAt(depth, 0, node_));
    const Tensor& values = ctx.Input(2);
    if (values.numel() != 2) Fail("values must hold [off, on]");
    if (!TypeListHas(NumericTypes{}, ctx.Input(0).dtype())) Unsupported("indices type " + DTypeName(ctx.Input(0).dtype()));
    esize_ = CheckedElementSize(values, node_);
    ctx.SetOutput(0, values.dtype(), OneHotOutputShape(node_, ctx.Input(0), depth_, &axis_));
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& indices = ctx.Input(0);
    if (static_cast<int64_t>(NumberAt(ctx.Input(1), 0, node_)) != depth_) Fail("depth changed between runs");
    const Shape& is = indices.shape();
    const int64_t outer = NumElements(Shape(is.begin(), is.begin() + axis_));
    const int64_t inner = NumElements(Shape(is.begin() + axis_, is.end()));
    const auto* vals = static_cast<const unsigned char*>(ctx.Input(2).raw());
    auto* out = static_cast<unsigned char*>(ctx.Output(0).raw());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t d = 0; d < depth_; ++d)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t v = static_cast<int64_t>(NumberAt(indices, o * inner + i, node_));
          if (v < 0) v += depth_;
          std::memcpy(out, vals + (v == d ? esize_ : 0), esize_);
          out += esize_;
        }
  }

 private:
  int64_t depth_ = 0, axis_ = 0;
  size_t esize_ = 0;
};

// EyeLike(X) with `k` and `dtype`: ones on the k-th diagonal.
class EyeLikeKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const DType t = EyeLikeType(node_, ctx.Input(0));
    if (!TypeListHas(NumericOrBoolTypes{}, t)) Unsupported("data type " + DTypeName(t));
    ctx.SetOutput(0, t, ctx.Input(0).shape());
  }
  void Compute(KernelContext& ctx) override {
    Tensor& y = ctx.Output(0);
    std::memset(y.raw(), 0, y.nbytes());
    const int64_t rows = y.dim(0), cols = y.dim(1), k = node_.GetInt("k", 0);
    DispatchType(NumericOrBoolTypes{}, y.dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = y.data<T>();
      for (int64_t i = 0; i < rows; ++i)
        if (i + k >= 0 && i + k < cols) p[i * cols + i + k] = T(1);
    });
  }
};

// Range(start, limit, delta): scalars of one type; start + i * delta for i < count.
class RangeKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const DType t = ctx.Input(0).dtype();
    for (int i = 0; i < 3; ++i) {
      if (ctx.Input(i).numel() != 1) Fail("input " + std::to_string(i) + " must be a scalar");
      if (ctx.Input(i).dtype() != t) Fail("start, limit and delta must have one type");
    }
    if (t != DType::kFloat32 && t != DType::kFloat64 && t != DType::kInt16 && t != DType::kInt32 && t != DType::kInt64)
      Unsupported("data type " + DTypeName(t));
    values_ = Values(ctx);
    ctx.SetOutput(0, t, {RangeCount(node_, values_[0], values_[1], values_[2])});
  }
  void Compute(KernelContext& ctx) override {
    if (Values(ctx) != values_) Fail("start, limit or delta changed between runs; onnx-train fixes output shapes once");
    Tensor& y = ctx.Output(0);
    DispatchType(NumericTypes{}, y.dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T start = ctx.Input(0).data<T>()[0], delta = ctx.Input(2).data<T>()[0];
      T* p = y.data<T>();
      for (int64_t i = 0; i < y.numel(); ++i) p[i] = static_cast<T>(start + static_cast<T>(i) * delta);
    });
  }

 private:
  std::array<double, 3> Values(const KernelContext& ctx) const {
    return {NumberAt(ctx.Input(0), 0, node_), NumberAt(ctx.Input(1), 0, node_), NumberAt(ctx.Input(2), 0, node_)};
  }
  std::array<double, 3> values_{};
};

OT_REGISTER_CPU_KERNEL("Trilu", 14, kLatestOpset, TriluKernel);
OT_REGISTER_CPU_KERNEL("CumSum", 11, kLatestOpset, CumSumKernel);
OT_REGISTER_CPU_KERNEL("ReverseSequence", 10, kLatestOpset, ReverseSequenceKernel);
OT_REGISTER_CPU_KERNEL("DepthToSpace", 1, kLatestOpset, BlockPermutationKernel);
OT_REGISTER_CPU_KERNEL("SpaceToDepth", 1, kLatestOpset, BlockPermutationKernel);
OT_REGISTER_KERNEL(kGradDomain, "DepthToSpaceGrad", 1, kLatestOpset, DeviceType::kCPU, BlockPermutationKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
