// CPU kernels of the ops that generate elements from a few scalars or a shape: OneHot,
// EyeLike and Range. Plain loops, arithmetic by type.
#include <array>
#include <cstring>

#include "graph/op_domains.h"
#include "runtime/cpu/dtype_dispatch.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/math/elementwise_math.h"
#include "runtime/ops/shapes/index_shapes.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot {
namespace cpu {
namespace {

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
      for (int64_t i = 0; i < y.numel(); ++i) p[i] = RangeValue(start, delta, i);
    });
  }

 private:
  std::array<double, 3> Values(const KernelContext& ctx) const {
    return {NumberAt(ctx.Input(0), 0, node_), NumberAt(ctx.Input(1), 0, node_), NumberAt(ctx.Input(2), 0, node_)};
  }
  std::array<double, 3> values_{};
};

OT_REGISTER_CPU_KERNEL("OneHot", 9, kLatestOpset, OneHotKernel);
OT_REGISTER_CPU_KERNEL("EyeLike", 9, kLatestOpset, EyeLikeKernel);
OT_REGISTER_CPU_KERNEL("Range", 11, kLatestOpset, RangeKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
