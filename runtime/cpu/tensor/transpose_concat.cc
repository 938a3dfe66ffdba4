// CPU kernels that move elements between positions: Transpose, Concat, Split, Slice,
// Gather, GatherElements, Tile, Expand, Where and Pad. Float32 Transpose and Concat run on
// oneDNN (reorder with permuted strides, concat); everything else is a strided byte copy
// (strided_loop.h) that works for any fixed-size element type, since these ops never
// compute on values.
#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_map>

#include "runtime/cpu/layout/dnnl_util.h"
#include "runtime/cpu/tensor/index_util.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cpu/strided_loop.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot {
namespace cpu {

// dst (dense, row-major over out_shape) = src viewed through src_strides from src_offset
// (all in elements). Transpose, Slice, Tile and Expand are all this one copy.
void StridedCopy(const void* src, const std::vector<int64_t>& src_strides, int64_t src_offset, void* dst,
                 const Shape& out_shape, size_t esize) {
  const auto* in = static_cast<const unsigned char*>(src);
  auto* out = static_cast<unsigned char*>(dst);
  DispatchBySize(esize, [&](auto tag) {
    using E = decltype(tag);
    StrideSet<2> strides = {src_strides, RowMajorStrides(out_shape)};
    ForEachRowParallel<2>(out_shape, strides, kParallelCopyElements,
                          [&](const std::array<int64_t, 2>& at, int64_t len, const std::array<int64_t, 2>& step) {
      const E* s = reinterpret_cast<const E*>(in) + src_offset + at[0];
      E* d = reinterpret_cast<E*>(out) + at[1];
      if (step[0] == 1) {
        std::memcpy(d, s, static_cast<size_t>(len) * sizeof(E));
        return;
      }
      for (int64_t i = 0; i < len; ++i) d[i] = s[i * step[0]];
    });
  });
}

namespace {

// ---------------------------------------------------------------------------------------
class TransposeKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    const int64_t rank = x.rank();
    StridedView view = TransposeView(node_, x.shape());
    out_shape_ = std::move(view.shape);
    src_strides_ = std::move(view.strides);
    ctx.SetOutput(0, x.dtype(), out_shape_);
    use_dnnl_ = DnnlSupports(x.dtype()) && rank >= 1 && rank <= DNNL_MAX_NDIMS && x.numel() > 0;
    if (!use_dnnl_) return;
    // The source read in output order: dims of the output, strides of the input.
    src_desc_ = dnnl::memory::desc(ToDims(out_shape_), ToDnnl(x.dtype()), dnnl::memory::dims(src_strides_));
    dst_desc_ = PlainDesc(out_shape_, x.dtype());
    reorder_ = dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), src_desc_, Engine(), dst_desc_));
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    if (use_dnnl_) {
      reorder_.execute(Stream(), {{DNNL_ARG_FROM, Wrap(src_desc_, x)}, {DNNL_ARG_TO, Wrap(dst_desc_, y)}});
      Stream().wait();
      return;
    }
    StridedCopy(x.raw(), src_strides_, 0, y.raw(), out_shape_, esize_);
  }

 private:
  size_t esize_ = 0;
  Shape out_shape_;
  std::vector<int64_t> src_strides_;
  bool use_dnnl_ = false;
  dnnl::memory::desc src_desc_, dst_desc_;
  dnnl::reorder reorder_;
};

// ---------------------------------------------------------------------------------------
class ConcatKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& first = ctx.Input(0);
    esize_ = CheckedElementSize(first, node_);
    const Shape out = ConcatOutputShape(node_, opset_, ctx, &axis_);
    ctx.SetOutput(0, first.dtype(), out);
    PrepareDnnl(ctx, out);
  }

  void Compute(KernelContext& ctx) override {
    Tensor& y = ctx.Output(0);
    if (y.numel() == 0) return;
    if (!dnnl_inputs_.empty()) {
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_DST, Wrap(dst_desc_, y)}};
      for (size_t k = 0; k < dnnl_inputs_.size(); ++k)
        args.emplace(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(k), Wrap(src_descs_[k], ctx.Input(dnnl_inputs_[k])));
      concat_.execute(Stream(), args);
      Stream().wait();
      return;
    }
    auto* out = static_cast<unsigned char*>(y.raw());
    const AxisSplit ys = SplitAround(y.shape(), axis_, esize_);
    for (int64_t o = 0; o < ys.outer; ++o) {
      for (int i = 0; i < ctx.NumInputs(); ++i) {
        const Tensor& in = ctx.Input(i);
        const int64_t bytes = in.dim(static_cast<int>(axis_)) * ys.inner_bytes;
        std::memcpy(out, static_cast<const unsigned char*>(in.raw()) + o * bytes, static_cast<size_t>(bytes));
        out += bytes;
      }
    }
  }

 private:
  // oneDNN concat for float32 over the non-empty inputs.
  void PrepareDnnl(const KernelContext& ctx, const Shape& out) {
    dnnl_inputs_.clear();
    src_descs_.clear();
    if (ctx.Input(0).dtype() != DType::kFloat32 || NumElements(out) == 0) return;
    for (int i = 0; i < ctx.NumInputs(); ++i) {
      if (ctx.Input(i).numel() == 0) continue;
      dnnl_inputs_.push_back(i);
      src_descs_.push_back(PlainDesc(ctx.Input(i).shape(), DType::kFloat32));
    }
    dst_desc_ = PlainDesc(out, DType::kFloat32);
    concat_ = dnnl::concat(dnnl::concat::primitive_desc(dst_desc_, static_cast<int>(axis_), src_descs_, Engine()));
  }

  size_t esize_ = 0;
  int64_t axis_ = 0;
  std::vector<int> dnnl_inputs_;
  std::vector<dnnl::memory::desc> src_descs_;
  dnnl::memory::desc dst_desc_;
  dnnl::concat concat_;
};

// ---------------------------------------------------------------------------------------
class SplitKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    sizes_ = PrepareSplitOutputs(node_, opset_, ctx, shape_inputs_, &axis_);
  }

  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    const Tensor& x = ctx.Input(0);
    const AxisSplit xs = SplitAround(x.shape(), axis_, esize_);
    const auto* in = static_cast<const unsigned char*>(x.raw());
    for (int64_t o = 0; o < xs.outer; ++o) {
      for (int i = 0; i < ctx.NumOutputs(); ++i) {
        const int64_t bytes = sizes_[static_cast<size_t>(i)] * xs.inner_bytes;
        if (ctx.HasOutput(i))
          std::memcpy(static_cast<unsigned char*>(ctx.Output(i).raw()) + o * bytes, in, static_cast<size_t>(bytes));
        in += bytes;
      }
    }
  }

 private:
  size_t esize_ = 0;
  int64_t axis_ = 0;
  std::vector<int64_t> sizes_;
  ShapeInputValues shape_inputs_;
};

// ---------------------------------------------------------------------------------------
class SliceKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    StridedView view = SliceView(node_, opset_, ctx, shape_inputs_, x.shape());
    out_shape_ = std::move(view.shape);
    src_strides_ = std::move(view.strides);
    src_offset_ = view.offset;
    ctx.SetOutput(0, x.dtype(), out_shape_);
  }

  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    StridedCopy(ctx.Input(0).raw(), src_strides_, src_offset_, ctx.Output(0).raw(), out_shape_, esize_);
  }

 private:
  size_t esize_ = 0;
  Shape out_shape_;
  std::vector<int64_t> src_strides_;
  int64_t src_offset_ = 0;
  ShapeInputValues shape_inputs_;
};

// ---------------------------------------------------------------------------------------
class GatherKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    const Tensor& indices = ctx.Input(1);
    esize_ = CheckedElementSize(data, node_);
    ctx.SetOutput(0, data.dtype(), GatherOutputShape(node_, data, indices, &axis_));
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    const Tensor& indices = ctx.Input(1);
    const AxisSplit ds = SplitAround(data.shape(), axis_, esize_);
    const int64_t dim = data.dim(static_cast<int>(axis_));
    const int64_t n = indices.numel();
    const auto* in = static_cast<const unsigned char*>(data.raw());
    auto* out = static_cast<unsigned char*>(ctx.Output(0).raw());
    for (int64_t o = 0; o < ds.outer; ++o) {
      const unsigned char* block = in + o * dim * ds.inner_bytes;
      for (int64_t k = 0; k < n; ++k) {
        int64_t idx = CheckedIndex(IndexAt(indices, k), dim, node_);
        std::memcpy(out, block + idx * ds.inner_bytes, static_cast<size_t>(ds.inner_bytes));
        out += ds.inner_bytes;
      }
    }
  }

 private:
  size_t esize_ = 0;
  int64_t axis_ = 0;
};

class GatherElementsKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    const Tensor& indices = ctx.Input(1);
    esize_ = CheckedElementSize(data, node_);
    axis_ = GatherElementsAxis(node_, data, indices);
    ctx.SetOutput(0, data.dtype(), indices.shape());
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    const Tensor& indices = ctx.Input(1);
    std::vector<int64_t> data_strides = RowMajorStrides(data.shape());
    const int64_t axis_stride = data_strides[static_cast<size_t>(axis_)];
    const int64_t dim = data.dim(static_cast<int>(axis_));
    data_strides[static_cast<size_t>(axis_)] = 0;  // the index supplies this coordinate
    const StrideSet<2> strides = {RowMajorStrides(indices.shape()), data_strides};
    const auto* in = static_cast<const unsigned char*>(data.raw());
    auto* out = static_cast<unsigned char*>(ctx.Output(0).raw());
    DispatchBySize(esize_, [&](auto tag) {
      using E = decltype(tag);
      ForEachRow<2>(indices.shape(), strides, [&](const std::array<int64_t, 2>& at, int64_t len, const std::array<int64_t, 2>& step) {
        for (int64_t i = 0; i < len; ++i) {
          const int64_t pos = at[0] + i * step[0];
          const int64_t idx = CheckedIndex(IndexAt(indices, pos), dim, node_);
          reinterpret_cast<E*>(out)[pos] = reinterpret_cast<const E*>(in)[at[1] + i * step[1] + idx * axis_stride];
        }
      });
    });
  }

 private:
  size_t esize_ = 0;
  int64_t axis_ = 0;
};

// ---------------------------------------------------------------------------------------
// Kernels whose output is one strided view of input 0 fixed in Prepare (Tile, Expand).
class StridedViewKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(KernelContext& ctx) final {
    shape_inputs_.Check(ctx);
    StridedCopy(ctx.Input(0).raw(), walk_strides_, 0, ctx.Output(0).raw(), walk_shape_, esize_);
  }

 protected:
  size_t esize_ = 0;
  Shape walk_shape_;  // same element count as the output, laid out densely
  std::vector<int64_t> walk_strides_;
  ShapeInputValues shape_inputs_;
};

class TileKernel final : public StridedViewKernel {
 public:
  using StridedViewKernel::StridedViewKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    Shape out;
    StridedView view = TileView(node_, ctx, shape_inputs_, x.shape(), &out);
    walk_shape_ = std::move(view.shape);
    walk_strides_ = std::move(view.strides);
    ctx.SetOutput(0, x.dtype(), out);
  }
};

class ExpandKernel final : public StridedViewKernel {
 public:
  using StridedViewKernel::StridedViewKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    walk_shape_ = BroadcastShapes(x.shape(), shape_inputs_.Read(ctx, 1), node_);
    walk_strides_ = BroadcastStrides(x.shape(), walk_shape_);
    ctx.SetOutput(0, x.dtype(), walk_shape_);
  }
};

// ---------------------------------------------------------------------------------------
class WhereKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& cond = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    const Tensor& y = ctx.Input(2);
    out_shape_ = WhereOutputShape(node_, cond, x, y);
    esize_ = DTypeSize(x.dtype());
    ctx.SetOutput(0, x.dtype(), out_shape_);
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& cond = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    const Tensor& y = ctx.Input(2);
    const StrideSet<4> strides = {BroadcastStrides(cond.shape(), out_shape_), BroadcastStrides(x.shape(), out_shape_),
                                  BroadcastStrides(y.shape(), out_shape_), RowMajorStrides(out_shape_)};
    const uint8_t* c = cond.data<uint8_t>();
    DispatchBySize(esize_, [&](auto tag) {
      using E = decltype(tag);
      const E* xs = static_cast<const E*>(x.raw());
      const E* ys = static_cast<const E*>(y.raw());
      E* out = static_cast<E*>(ctx.Output(0).raw());
      ForEachRow<4>(out_shape_, strides, [&](const std::array<int64_t, 4>& at, int64_t len, const std::array<int64_t, 4>& step) {
        for (int64_t i = 0; i < len; ++i)
          out[at[3] + i * step[3]] = c[at[0] + i * step[0]] ? xs[at[1] + i * step[1]] : ys[at[2] + i * step[2]];
      });
    });
  }

 private:
  size_t esize_ = 0;
  Shape out_shape_;
};

// ---------------------------------------------------------------------------------------
// Pad: constant, reflect, edge and (opset 19) wrap modes. Each output coordinate maps to an input
// coordinate per axis (or to "padding" in constant mode); pads may be negative (crop).
class PadKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    const PadPlan plan = PreparePad(node_, opset_, ctx, shape_inputs_, x.shape());
    source_index_.assign(plan.out.size(), {});
    for (size_t d = 0; d < plan.out.size(); ++d)
      source_index_[d] = PadAxisSources(x.shape()[d], plan.pads[d], plan.out[d], plan.mode);
    fill_ = FillValue(ctx, x.dtype());
    ctx.SetOutput(0, x.dtype(), plan.out);
  }

  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    fill_ = FillValue(ctx, x.dtype());  // constant_value is data, read on every run
    if (y.numel() == 0) return;
    if (y.rank() == 0) {
      y.CopyFrom(x);
      return;
    }
    DispatchBySize(esize_, [&](auto tag) { PadRows<decltype(tag)>(x, y); });
  }

 private:
  // The bytes of the padding value in the data type.
  std::vector<unsigned char> FillValue(const KernelContext& ctx, DType t) const {
    if (opset_ < 11) return PadAttributeValue(node_, t);
    std::vector<unsigned char> bytes(esize_, 0);
    const Tensor* v = ctx.OptionalInput(2);
    CheckPadConstantValue(node_, v, t);
    if (v && v->numel() > 0) std::memcpy(bytes.data(), v->raw(), esize_);
    return bytes;
  }

  template <typename E> void PadRows(const Tensor& x, Tensor& y) const {
    const int rank = y.rank();
    const std::vector<int64_t> in_strides = RowMajorStrides(x.shape());
    const std::vector<int64_t>& inner_src = source_index_.back();
    E fill;
    std::memcpy(&fill, fill_.data(), sizeof fill);
    const E* in = static_cast<const E*>(x.raw());
    E* out = static_cast<E*>(y.raw());
    const int64_t row_len = y.dim(rank - 1);
    std::vector<int64_t> index(static_cast<size_t>(rank - 1), 0);
    for (int64_t row = 0, rows = y.numel() / row_len; row < rows; ++row, out += row_len) {
      int64_t base = 0;
      bool padding = false;
      for (size_t d = 0; d < index.size(); ++d) {
        const int64_t s = source_index_[d][static_cast<size_t>(index[d])];
        padding = padding || s < 0;
        base += s * in_strides[d];
      }
      for (int64_t j = 0; j < row_len; ++j) {
        const int64_t s = inner_src[static_cast<size_t>(j)];
        out[j] = padding || s < 0 ? fill : in[base + s];
      }
      for (size_t d = index.size(); d-- > 0;) {
        if (++index[d] < y.dim(static_cast<int>(d))) break;
        index[d] = 0;
      }
    }
  }

  size_t esize_ = 0;
  std::vector<std::vector<int64_t>> source_index_;
  std::vector<unsigned char> fill_;
  ShapeInputValues shape_inputs_;
};

OT_REGISTER_CPU_KERNEL("Transpose", 1, kLatestOpset, TransposeKernel);
OT_REGISTER_CPU_KERNEL("Concat", 1, kLatestOpset, ConcatKernel);
OT_REGISTER_CPU_KERNEL("Split", 2, kLatestOpset, SplitKernel);
OT_REGISTER_CPU_KERNEL("Slice", 1, kLatestOpset, SliceKernel);
OT_REGISTER_CPU_KERNEL("Gather", 1, kLatestOpset, GatherKernel);
OT_REGISTER_CPU_KERNEL("GatherElements", 11, kLatestOpset, GatherElementsKernel);
OT_REGISTER_CPU_KERNEL("Tile", 6, kLatestOpset, TileKernel);
OT_REGISTER_CPU_KERNEL("Expand", 8, kLatestOpset, ExpandKernel);
OT_REGISTER_CPU_KERNEL("Where", 9, kLatestOpset, WhereKernel);
OT_REGISTER_CPU_KERNEL("Pad", 2, kLatestOpset, PadKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
