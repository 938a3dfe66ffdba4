// CPU kernels of the ops that rearrange, mask or accumulate elements without index
// tensors: Trilu, CumSum, ReverseSequence, DepthToSpace and SpaceToDepth (and
// DepthToSpaceGrad, the inverse permutation). Plain loops and strided copies (no oneDNN
// primitive does these); copies go by element size, arithmetic by type. The generators
// (OneHot, EyeLike, Range) are in generate_ops.cc.
#include <algorithm>
#include <cstring>

#include "graph/op_domains.h"
#include "runtime/cpu/dtype_dispatch.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cpu/strided_loop.h"
#include "runtime/ops/shapes/index_shapes.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/shapes/op_shapes.h"

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

OT_REGISTER_CPU_KERNEL("Trilu", 14, kLatestOpset, TriluKernel);
OT_REGISTER_CPU_KERNEL("CumSum", 11, kLatestOpset, CumSumKernel);
OT_REGISTER_CPU_KERNEL("ReverseSequence", 10, kLatestOpset, ReverseSequenceKernel);
OT_REGISTER_CPU_KERNEL("DepthToSpace", 1, kLatestOpset, BlockPermutationKernel);
OT_REGISTER_CPU_KERNEL("SpaceToDepth", 1, kLatestOpset, BlockPermutationKernel);
OT_REGISTER_KERNEL(kGradDomain, "DepthToSpaceGrad", 1, kLatestOpset, DeviceType::kCPU, BlockPermutationKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
