// CPU kernels of the gradient-domain partners of the indexing ops: GatherGrad,
// GatherElementsGrad (also TopK's gradient) and GatherNDGrad scatter-add dY into zeros
// (duplicate and negative indices add up); SliceGrad writes dY back at the sliced
// positions; SliceGradSum writes several slices' dY into one output (the q, k and v
// gradients of a packed in-projection); TileGrad sums dY over the repeats. Float32 loops:
// no library routine scatters with accumulation.
#include <array>
#include <cstring>

#include "graph/op_domains.h"
#include "runtime/cpu/tensor/index_util.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cpu/strided_loop.h"
#include "runtime/ops/shapes/index_shapes.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot {
namespace cpu {
namespace {

// GatherGrad(dY, data_shape, indices) with `axis`.
class GatherGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    data_shape_ = shape_inputs_.Read(ctx, 1);
    CheckGatherGrad(node_, ctx.Input(0), data_shape_, ctx.Input(2), &axis_);
    ctx.SetOutput(0, DType::kFloat32, data_shape_);
  }
  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    const Tensor& indices = ctx.Input(2);
    const AxisSplit ds = SplitAround(data_shape_, axis_, 1);
    const int64_t inner = ds.inner_bytes, dim = data_shape_[static_cast<size_t>(axis_)], n = indices.numel();
    const float* dy = ctx.Input(0).data<float>();
    float* dx = ctx.Output(0).data<float>();
    std::memset(dx, 0, ctx.Output(0).nbytes());
    for (int64_t o = 0; o < ds.outer; ++o) {
      float* block = dx + o * dim * inner;
      for (int64_t k = 0; k < n; ++k, dy += inner) {
        float* row = block + CheckedIndex(IndexAt(indices, k), dim, node_) * inner;
        for (int64_t i = 0; i < inner; ++i) row[i] += dy[i];
      }
    }
  }

 private:
  Shape data_shape_;
  int64_t axis_ = 0;
  ShapeInputValues shape_inputs_;
};

// GatherElementsGrad(dY, data_shape, indices) with `axis`.
class GatherElementsGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    data_shape_ = shape_inputs_.Read(ctx, 1);
    CheckGatherElementsGrad(node_, ctx.Input(0), data_shape_, ctx.Input(2), &axis_);
    ctx.SetOutput(0, DType::kFloat32, data_shape_);
  }
  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    const Tensor& indices = ctx.Input(2);
    std::vector<int64_t> data_strides = RowMajorStrides(data_shape_);
    const int64_t axis_stride = data_strides[static_cast<size_t>(axis_)];
    const int64_t dim = data_shape_[static_cast<size_t>(axis_)];
    data_strides[static_cast<size_t>(axis_)] = 0;
    const float* dy = ctx.Input(0).data<float>();
    float* dx = ctx.Output(0).data<float>();
    std::memset(dx, 0, ctx.Output(0).nbytes());
    const StrideSet<2> strides = {RowMajorStrides(indices.shape()), data_strides};
    ForEachRow<2>(indices.shape(), strides, [&](const std::array<int64_t, 2>& at, int64_t len, const std::array<int64_t, 2>& step) {
      for (int64_t i = 0; i < len; ++i) {
        const int64_t pos = at[0] + i * step[0];
        dx[at[1] + i * step[1] + CheckedIndex(IndexAt(indices, pos), dim, node_) * axis_stride] += dy[pos];
      }
    });
  }

 private:
  Shape data_shape_;
  int64_t axis_ = 0;
  ShapeInputValues shape_inputs_;
};

// GatherNDGrad(dY, data_shape, indices) with `batch_dims`.
class GatherNDGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()));
    data_shape_ = shape_inputs_.Read(ctx, 1);
    plan_ = PlanGatherND(node_, data_shape_, ctx.Input(2), node_.GetInt("batch_dims", 0));
    if (plan_.out != dy.shape())
      Fail("gradient shape " + ShapeString(dy.shape()) + " differs from GatherND's output " + ShapeString(plan_.out));
    ctx.SetOutput(0, DType::kFloat32, data_shape_);
  }
  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    const Tensor& indices = ctx.Input(2);
    const float* dy = ctx.Input(0).data<float>();
    float* dx = ctx.Output(0).data<float>();
    std::memset(dx, 0, ctx.Output(0).nbytes());
    int64_t t = 0;
    for (int64_t b = 0; b < plan_.batch; ++b)
      for (int64_t j = 0; j < plan_.tuples; ++j, ++t, dy += plan_.slice) {
        const int64_t off = GatherNDOffset(plan_, indices, b, t, node_);
        for (int64_t i = 0; i < plan_.slice; ++i) dx[off + i] += dy[i];
      }
  }

 private:
  Shape data_shape_;
  GatherNDPlan plan_;
  ShapeInputValues shape_inputs_;
};

// SliceGrad(dY, starts, ends, axes, steps, data_shape): zeros with dY at the sliced
// positions (a slice never reads one position twice).
class SliceGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()));
    data_shape_ = shape_inputs_.Read(ctx, 5);
    view_ = SliceView(node_, static_cast<int>(node_.GetInt("forward_opset", 13)), ctx, shape_inputs_, data_shape_);
    if (view_.shape != dy.shape())
      Fail("gradient shape " + ShapeString(dy.shape()) + " differs from the slice's " + ShapeString(view_.shape));
    ctx.SetOutput(0, DType::kFloat32, data_shape_);
  }
  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    const float* dy = ctx.Input(0).data<float>();
    float* dx = ctx.Output(0).data<float>() + view_.offset;
    std::memset(ctx.Output(0).raw(), 0, ctx.Output(0).nbytes());
    const StrideSet<2> strides = {view_.strides, RowMajorStrides(view_.shape)};
    ForEachRow<2>(view_.shape, strides, [&](const std::array<int64_t, 2>& at, int64_t len, const std::array<int64_t, 2>& step) {
      for (int64_t i = 0; i < len; ++i) dx[at[0] + i * step[0]] = dy[at[1] + i * step[1]];
    });
  }

 private:
  Shape data_shape_;
  StridedView view_;
  ShapeInputValues shape_inputs_;
};

// SliceGradSum(data_shape, dY_0, starts_0, ends_0, axes_0, steps_0, dY_1, ...): the sum of
// the SliceGrads of each group of five (graph/passes/fusion.h FuseSliceGradSums). Where the
// slices, all with step 1, tile the output exactly (q, k and v of one [T, n, 3E] product:
// checked in Prepare on the run's bounds, which Compute holds to), each dY is copied to its
// place and nothing is zeroed or added; otherwise zeros with every dY added at its slice.
class SliceGradSumKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const int groups = (ctx.NumInputs() - 1) / 5;
    if (groups < 1 || ctx.NumInputs() != 1 + 5 * groups) Fail("takes data_shape and groups of five inputs");
    data_shape_ = shape_inputs_.Read(ctx, 0);
    const int opset = static_cast<int>(node_.GetInt("forward_opset", 13));
    if (opset < 10) Unsupported("forward opset " + std::to_string(opset) + " (slices given as attributes)");
    views_.clear();
    for (int k = 0; k < groups; ++k) {
      const Tensor& dy = ctx.Input(1 + 5 * k);
      if (dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()));
      views_.push_back(SliceView(node_, opset, ctx, shape_inputs_, data_shape_, 2 + 5 * k));
      if (views_.back().shape != dy.shape())
        Fail("gradient " + std::to_string(k) + " is " + ShapeString(dy.shape()) + ", its slice " +
             ShapeString(views_.back().shape));
    }
    tiled_ = TileExactly();
    ctx.SetOutput(0, DType::kFloat32, data_shape_);
  }
  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    Tensor& out = ctx.Output(0);
    if (!tiled_) std::memset(out.raw(), 0, out.nbytes());
    for (size_t k = 0; k < views_.size(); ++k) {
      const StridedView& v = views_[k];
      const float* dy = ctx.Input(1 + 5 * static_cast<int>(k)).data<float>();
      float* dx = out.data<float>() + v.offset;
      const StrideSet<2> strides = {v.strides, RowMajorStrides(v.shape)};
      // Each dY writes its slice's elements once (a slice's positions are distinct), so its
      // walk splits among the threads; the dYs stay in order, for the sums where slices overlap.
      ForEachRowParallel<2>(v.shape, strides, kParallelCopyElements,
                            [&](const std::array<int64_t, 2>& at, int64_t len, const std::array<int64_t, 2>& step) {
        if (tiled_) {
          for (int64_t i = 0; i < len; ++i) dx[at[0] + i * step[0]] = dy[at[1] + i * step[1]];
        } else {
          for (int64_t i = 0; i < len; ++i) dx[at[0] + i * step[0]] += dy[at[1] + i * step[1]];
        }
      });
    }
  }

 private:
  // Whether the slices are boxes (step 1 on every axis) that cover the output once: pairwise
  // disjoint, their sizes adding up to the output's.
  bool TileExactly() const {
    const std::vector<int64_t> dense = RowMajorStrides(data_shape_);
    std::vector<std::vector<int64_t>> lo;
    int64_t covered = 0;
    for (const StridedView& v : views_) {
      if (v.strides != dense) return false;
      std::vector<int64_t> corner(data_shape_.size());
      int64_t rest = v.offset;
      for (size_t d = 0; d < data_shape_.size(); ++d) {
        corner[d] = dense[d] > 0 ? rest / dense[d] : 0;
        rest -= corner[d] * dense[d];
      }
      lo.push_back(corner);
      covered += NumElements(v.shape);
    }
    if (covered != NumElements(data_shape_)) return false;
    for (size_t a = 0; a < views_.size(); ++a)
      for (size_t b = a + 1; b < views_.size(); ++b) {
        bool overlap = true;
        for (size_t d = 0; d < data_shape_.size() && overlap; ++d)
          overlap = lo[a][d] < lo[b][d] + views_[b].shape[d] && lo[b][d] < lo[a][d] + views_[a].shape[d];
        if (overlap && NumElements(views_[a].shape) > 0 && NumElements(views_[b].shape) > 0) return false;
      }
    return true;
  }

  Shape data_shape_;
  std::vector<StridedView> views_;
  bool tiled_ = false;
  ShapeInputValues shape_inputs_;
};

// TileGrad(dY, data_shape): dY seen as [r0, d0, r1, d1, ...] summed over the r axes.
class TileGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()));
    data_shape_ = shape_inputs_.Read(ctx, 1);
    const std::vector<int64_t> repeats = TileGradRepeats(node_, dy.shape(), data_shape_);
    const std::vector<int64_t> xs = RowMajorStrides(data_shape_);
    walk_.clear();
    strides_.clear();
    for (size_t d = 0; d < repeats.size(); ++d) {
      walk_.insert(walk_.end(), {repeats[d], data_shape_[d]});
      strides_.insert(strides_.end(), {0, xs[d]});
    }
    ctx.SetOutput(0, DType::kFloat32, data_shape_);
  }
  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    const float* dy = ctx.Input(0).data<float>();
    float* dx = ctx.Output(0).data<float>();
    std::memset(dx, 0, ctx.Output(0).nbytes());
    const StrideSet<2> strides = {strides_, RowMajorStrides(walk_)};
    ForEachRow<2>(walk_, strides, [&](const std::array<int64_t, 2>& at, int64_t len, const std::array<int64_t, 2>& step) {
      for (int64_t i = 0; i < len; ++i) dx[at[0] + i * step[0]] += dy[at[1] + i * step[1]];
    });
  }

 private:
  Shape data_shape_, walk_;
  std::vector<int64_t> strides_;
  ShapeInputValues shape_inputs_;
};
OT_REGISTER_KERNEL(kGradDomain, "GatherGrad", 1, kLatestOpset, DeviceType::kCPU, GatherGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "GatherElementsGrad", 1, kLatestOpset, DeviceType::kCPU, GatherElementsGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "GatherNDGrad", 1, kLatestOpset, DeviceType::kCPU, GatherNDGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "SliceGrad", 1, kLatestOpset, DeviceType::kCPU, SliceGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "SliceGradSum", 1, kLatestOpset, DeviceType::kCPU, SliceGradSumKernel);
OT_REGISTER_KERNEL(kGradDomain, "TileGrad", 1, kLatestOpset, DeviceType::kCPU, TileGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
