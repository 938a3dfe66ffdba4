// CUDA kernels for the data-movement ops, mirroring runtime/cpu/shape_ops.cc,
// transpose_concat.cc and the gradient-domain ConcatGrad, PadGrad and TransposeLastTwo:
//   - ops whose output is input 0 with another shape (Identity, Reshape, Flatten, Squeeze,
//     Unsqueeze) and ops whose output is known on the host when the plan is made (Shape,
//     Size, Constant, ConstantOfShape) let the CPU kernel of the same node decide the
//     output (one definition of the shape semantics and of the error messages), then copy
//     bytes on the device;
//   - Concat, Split and ConcatGrad are pitched 2-D copies (cudaMemcpy2DAsync);
//   - Transpose, Slice, Tile, Expand, TransposeLastTwo are one strided copy, Gather,
//     GatherElements, Pad and PadGrad their own kernels (copy_kernels.cu).
// Small shape-like inputs (Reshape's shape, Slice's starts, Pad's pads) are read on the
// host in Prepare; Compute only enqueues work on the compute stream.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "graph/gradient_registry.h"
#include "runtime/cpu/kernel_util.h"
#include "runtime/cuda/copy_kernels.h"
#include "runtime/cuda/cuda_common.h"

namespace ot::cuda {
namespace {

constexpr int64_t kLatestOpset = 1 << 30;

size_t ElementSize(const Tensor& t, const Node& node) {
  size_t size = DTypeSize(t.dtype());
  if (size == 0) throw UnsupportedError(node.op_type + ": data type " + DTypeName(t.dtype()));
  return size;
}

void CopyBytes(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || dst == src) return;
  OT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

// `rows` rows of `width` bytes, `src_pitch` apart in the source and `dst_pitch` in the
// destination.
void CopyRows(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width, int64_t rows,
              cudaStream_t stream) {
  if (width == 0 || rows == 0) return;
  if (rows == 1 || (dst_pitch == width && src_pitch == width)) {  // contiguous (and no pitch limit)
    OT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(width * rows), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  OT_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_pitch), src, static_cast<size_t>(src_pitch),
                                  static_cast<size_t>(width), static_cast<size_t>(rows), cudaMemcpyDeviceToDevice,
                                  stream));
}

// A data-movement kernel: knows its compute stream.
class CudaKernel : public OpKernel {
 public:
  explicit CudaKernel(const KernelInfo& info) : OpKernel(info), stream_(Context(info.device.index).compute) {}

 protected:
  cudaStream_t stream_;
};

// The CPU kernel of the same node, asked what it decides on the host (output shapes and
// host-known values). Its inputs are this kernel's device tensors: CPU kernels read
// shape-like inputs through Tensor::ToHost, which works for any device.
class CpuTwin {
 public:
  explicit CpuTwin(const KernelInfo& info) {
    const KernelDef* def = KernelRegistry::Global().Find(info.node.domain, info.node.op_type, info.opset, DeviceType::kCPU);
    if (!def) throw Error(info.node.Describe() + ": no CPU kernel to take the output shape from");
    kernel_ = def->factory(KernelInfo{info.node, info.opset, Device::CPU()});
  }
  // Runs the CPU Prepare; returns the declared output specs (no storage).
  std::vector<Tensor> Prepare(const KernelContext& ctx) {
    std::vector<Tensor> outs(static_cast<size_t>(ctx.NumOutputs()));
    KernelContext host = HostContext(ctx, outs);
    kernel_->Prepare(host);
    return outs;
  }
  // Runs Prepare and Compute into host tensors.
  std::vector<Tensor> Evaluate(const KernelContext& ctx) {
    std::vector<Tensor> outs = Prepare(ctx);
    for (Tensor& t : outs)
      if (t.defined()) t = Tensor::Empty(t.dtype(), t.shape(), Device::CPU());
    KernelContext host = HostContext(ctx, outs);
    kernel_->Compute(host);
    return outs;
  }

 private:
  static KernelContext HostContext(const KernelContext& ctx, std::vector<Tensor>& outs) {
    std::vector<const Tensor*> ins;
    for (int i = 0; i < ctx.NumInputs(); ++i) ins.push_back(ctx.OptionalInput(i));
    std::vector<Tensor*> out_ptrs;
    for (int i = 0; i < ctx.NumOutputs(); ++i) out_ptrs.push_back(ctx.HasOutput(i) ? &outs[static_cast<size_t>(i)] : nullptr);
    return KernelContext(ctx.node(), std::move(ins), std::move(out_ptrs), &ctx.rng(), Device::CPU());
  }

  std::unique_ptr<OpKernel> kernel_;
};

// ---------------------------------------------------------------------------------------
// Identity, Reshape, Flatten, Squeeze, Unsqueeze: the bytes of input 0 under another shape.
class ReshapeLikeKernel final : public CudaKernel {
 public:
  explicit ReshapeLikeKernel(const KernelInfo& info) : CudaKernel(info), twin_(info) {}

  void Prepare(KernelContext& ctx) override {
    std::vector<Tensor> outs = twin_.Prepare(ctx);
    ctx.SetOutput(0, outs[0].dtype(), outs[0].shape());
  }
  void Compute(KernelContext& ctx) override {
    CopyBytes(ctx.Output(0).raw(), ctx.Input(0).raw(), ctx.Input(0).nbytes(), stream_);
  }

 private:
  CpuTwin twin_;
};

// Shape, Size, Constant, ConstantOfShape: the value is made on the host once per plan,
// kept on the device and copied out by each run.
class HostValueKernel final : public CudaKernel {
 public:
  explicit HostValueKernel(const KernelInfo& info) : CudaKernel(info), twin_(info) {}

  void Prepare(KernelContext& ctx) override {
    Tensor host = twin_.Evaluate(ctx)[0];
    value_ = Tensor::Empty(host.dtype(), host.shape(), device_);
    value_.CopyFrom(host);
    ctx.SetOutput(0, host.dtype(), host.shape());
  }
  void Compute(KernelContext& ctx) override { CopyBytes(ctx.Output(0).raw(), value_.raw(), value_.nbytes(), stream_); }

 private:
  CpuTwin twin_;
  Tensor value_;
};

// ---------------------------------------------------------------------------------------
// Kernels whose output is one strided view of input 0 fixed in Prepare.
class StridedViewKernel : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void Compute(KernelContext& ctx) final {
    StridedCopy(ctx.Input(0).raw(), walk_strides_, walk_offset_, ctx.Output(0).raw(), walk_shape_, esize_, stream_);
  }

 protected:
  size_t esize_ = 0;
  Shape walk_shape_;  // same element count as the output, laid out densely
  std::vector<int64_t> walk_strides_;
  int64_t walk_offset_ = 0;
  ShapeInputValues shape_inputs_;
};

class TransposeKernel final : public StridedViewKernel {
 public:
  using StridedViewKernel::StridedViewKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = ElementSize(x, node_);
    const int64_t rank = x.rank();
    std::vector<int64_t> perm = node_.GetInts("perm");
    if (perm.empty())
      for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
    if (static_cast<int64_t>(perm.size()) != rank)
      Fail("perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(rank));
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    const std::vector<int64_t> in_strides = RowMajorStrides(x.shape());
    walk_shape_.clear();
    walk_strides_.clear();
    for (int64_t p : perm) {
      size_t axis = static_cast<size_t>(NormalizeAxis(p, rank, node_));
      if (seen[axis]) Fail("perm repeats axis " + std::to_string(p));
      seen[axis] = true;
      walk_shape_.push_back(x.shape()[axis]);
      walk_strides_.push_back(in_strides[axis]);
    }
    ctx.SetOutput(0, x.dtype(), walk_shape_);
  }
};

// Gradient domain: swaps the last two axes (MatMul gradients of any rank >= 2).
class TransposeLastTwoKernel final : public StridedViewKernel {
 public:
  using StridedViewKernel::StridedViewKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    if (x.rank() < 2) Fail("needs rank >= 2, got " + ShapeString(x.shape()));
    esize_ = sizeof(float);
    walk_shape_ = x.shape();
    walk_strides_ = RowMajorStrides(x.shape());
    const size_t r = walk_shape_.size();
    std::swap(walk_shape_[r - 1], walk_shape_[r - 2]);
    std::swap(walk_strides_[r - 1], walk_strides_[r - 2]);
    ctx.SetOutput(0, DType::kFloat32, walk_shape_);
  }
};

class SliceKernel final : public StridedViewKernel {
 public:
  using StridedViewKernel::StridedViewKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = ElementSize(x, node_);
    std::vector<int64_t> starts, ends, axes, steps;
    if (opset_ < 10) {
      starts = node_.GetInts("starts");
      ends = node_.GetInts("ends");
      axes = node_.GetInts("axes");
    } else {
      starts = shape_inputs_.Read(ctx, 1);
      ends = shape_inputs_.Read(ctx, 2);
      axes = shape_inputs_.Read(ctx, 3);
      steps = shape_inputs_.Read(ctx, 4);
    }
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
      Fail("starts, ends, axes and steps differ in length");
    walk_shape_ = x.shape();
    walk_strides_ = RowMajorStrides(x.shape());
    walk_offset_ = 0;
    std::vector<bool> seen(static_cast<size_t>(x.rank()), false);
    for (size_t i = 0; i < starts.size(); ++i) {
      size_t axis = static_cast<size_t>(NormalizeAxis(axes[i], x.rank(), node_));
      if (seen[axis]) Fail("axis " + std::to_string(axes[i]) + " is sliced twice");
      seen[axis] = true;
      if (steps[i] == 0) Fail("step must not be 0");
      int64_t first = 0, count = 0;
      SliceAxis(x.shape()[axis], starts[i], ends[i], steps[i], &first, &count);
      walk_shape_[axis] = count;
      walk_offset_ += first * walk_strides_[axis];
      walk_strides_[axis] *= steps[i];
    }
    ctx.SetOutput(0, x.dtype(), walk_shape_);
  }

 private:
  // First index and element count of start:end:step on a dimension, clamped as ONNX says.
  static void SliceAxis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t* first, int64_t* count) {
    *first = *count = 0;
    if (dim == 0) return;
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      *count = end > start ? (end - start - 1) / step + 1 : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      *count = start > end ? (start - end - 1) / -step + 1 : 0;
    }
    *first = *count > 0 ? start : 0;
  }
};

class TileKernel final : public StridedViewKernel {
 public:
  using StridedViewKernel::StridedViewKernel;

  // The output seen as [r0, d0, r1, d1, ...] reads the input with strides [0, s0, 0, s1, ...].
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = ElementSize(x, node_);
    std::vector<int64_t> repeats = shape_inputs_.Read(ctx, 1);
    if (static_cast<int>(repeats.size()) != x.rank())
      Fail("repeats has " + std::to_string(repeats.size()) + " entries for rank " + std::to_string(x.rank()));
    const std::vector<int64_t> in_strides = RowMajorStrides(x.shape());
    Shape out;
    walk_shape_.clear();
    walk_strides_.clear();
    for (size_t d = 0; d < repeats.size(); ++d) {
      if (repeats[d] < 0) Fail("repeats must not be negative");
      out.push_back(x.shape()[d] * repeats[d]);
      walk_shape_.insert(walk_shape_.end(), {repeats[d], x.shape()[d]});
      walk_strides_.insert(walk_strides_.end(), {0, in_strides[d]});
    }
    ctx.SetOutput(0, x.dtype(), out);
  }
};

class ExpandKernel final : public StridedViewKernel {
 public:
  using StridedViewKernel::StridedViewKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = ElementSize(x, node_);
    walk_shape_ = BroadcastShapes(x.shape(), shape_inputs_.Read(ctx, 1), node_);
    walk_strides_ = BroadcastStrides(x.shape(), walk_shape_);
    ctx.SetOutput(0, x.dtype(), walk_shape_);
  }
};

// ---------------------------------------------------------------------------------------
// A tensor seen as [outer, axis, inner] around one axis, in bytes per axis step.
struct AxisSplit {
  int64_t outer = 1;
  int64_t inner_bytes = 0;
};

AxisSplit SplitAround(const Shape& shape, int64_t axis, size_t esize) {
  AxisSplit s;
  s.inner_bytes = static_cast<int64_t>(esize);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (static_cast<int64_t>(d) < axis) s.outer *= shape[d];
    else if (static_cast<int64_t>(d) > axis) s.inner_bytes *= shape[d];
  }
  return s;
}

class ConcatKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& first = ctx.Input(0);
    esize_ = ElementSize(first, node_);
    if (first.rank() == 0) Fail("cannot concatenate scalars");
    if (!node_.HasAttr("axis") && opset_ >= 4) Fail("attribute 'axis' is required");
    axis_ = NormalizeAxis(node_.GetInt("axis", 1), first.rank(), node_);
    Shape out = first.shape();
    out[static_cast<size_t>(axis_)] = 0;
    for (int i = 0; i < ctx.NumInputs(); ++i) {
      const Tensor& in = ctx.Input(i);
      Shape expect = out;
      expect[static_cast<size_t>(axis_)] = in.rank() == first.rank() ? in.dim(static_cast<int>(axis_)) : -1;
      if (in.dtype() != first.dtype() || in.shape() != expect)
        Fail("input " + std::to_string(i) + " (" + in.Describe() + ") does not match input 0 (" + first.Describe() +
             ") outside axis " + std::to_string(axis_));
      out[static_cast<size_t>(axis_)] += in.dim(static_cast<int>(axis_));
    }
    ctx.SetOutput(0, first.dtype(), out);
  }

  void Compute(KernelContext& ctx) override {
    Tensor& y = ctx.Output(0);
    const AxisSplit ys = SplitAround(y.shape(), axis_, esize_);
    const int64_t row = y.dim(static_cast<int>(axis_)) * ys.inner_bytes;
    int64_t offset = 0;
    for (int i = 0; i < ctx.NumInputs(); ++i) {
      const Tensor& in = ctx.Input(i);
      const int64_t chunk = in.dim(static_cast<int>(axis_)) * ys.inner_bytes;
      CopyRows(static_cast<char*>(y.raw()) + offset, row, in.raw(), chunk, chunk, ys.outer, stream_);
      offset += chunk;
    }
  }

 private:
  size_t esize_ = 0;
  int64_t axis_ = 0;
};

// Cuts input 0 along an axis into pieces of the given sizes (Split, ConcatGrad).
void CutAlongAxis(const Tensor& x, int64_t axis, const std::vector<int64_t>& sizes, KernelContext& ctx, int first_output,
                  cudaStream_t stream) {
  const AxisSplit xs = SplitAround(x.shape(), axis, DTypeSize(x.dtype()));
  const int64_t row = x.dim(static_cast<int>(axis)) * xs.inner_bytes;
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t chunk = sizes[i] * xs.inner_bytes;
    const int out = first_output + static_cast<int>(i);
    if (ctx.HasOutput(out))
      CopyRows(ctx.Output(out).raw(), chunk, static_cast<const char*>(x.raw()) + offset, row, chunk, xs.outer, stream);
    offset += chunk;
  }
}

class SplitKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    ElementSize(x, node_);
    axis_ = NormalizeAxis(node_.GetInt("axis", 0), x.rank(), node_);
    const int64_t dim = x.dim(static_cast<int>(axis_));
    const int n = ctx.NumOutputs();
    sizes_ = opset_ >= 13 ? shape_inputs_.Read(ctx, 1) : node_.GetInts("split");
    if (sizes_.empty()) {
      if (n == 0 || dim % n != 0)
        Fail("dimension " + std::to_string(dim) + " cannot be split evenly into " + std::to_string(n) + " outputs");
      sizes_.assign(static_cast<size_t>(n), dim / n);
    }
    int64_t total = 0;
    for (int64_t s : sizes_) {
      if (s < 0) Fail("split sizes must not be negative");
      total += s;
    }
    if (static_cast<int>(sizes_.size()) != n || total != dim)
      Fail("split sizes " + ShapeString(sizes_) + " do not divide dimension " + std::to_string(dim) + " into " +
           std::to_string(n) + " outputs");
    for (int i = 0; i < n; ++i) {
      Shape s = x.shape();
      s[static_cast<size_t>(axis_)] = sizes_[static_cast<size_t>(i)];
      ctx.SetOutput(i, x.dtype(), s);
    }
  }
  void Compute(KernelContext& ctx) override { CutAlongAxis(ctx.Input(0), axis_, sizes_, ctx, 0, stream_); }

 private:
  int64_t axis_ = 0;
  std::vector<int64_t> sizes_;
  ShapeInputValues shape_inputs_;
};

// ConcatGrad(dY, X0, X1, ...) -> dX0, dX1, ...: dY cut along `axis` like the forward inputs.
class ConcatGradKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    ElementSize(dy, node_);
    axis_ = NormalizeAxis(node_.GetInt("axis", 0), dy.rank(), node_);
    sizes_.clear();
    int64_t total = 0;
    for (int i = 1; i < ctx.NumInputs(); ++i) {
      ctx.SetOutput(i - 1, dy.dtype(), ctx.Input(i).shape());
      sizes_.push_back(ctx.Input(i).dim(static_cast<int>(axis_)));
      total += sizes_.back();
    }
    if (total != dy.dim(static_cast<int>(axis_))) Fail("the pieces do not add up to the gradient's axis");
  }
  void Compute(KernelContext& ctx) override { CutAlongAxis(ctx.Input(0), axis_, sizes_, ctx, 0, stream_); }

 private:
  int64_t axis_ = 0;
  std::vector<int64_t> sizes_;
};

// ---------------------------------------------------------------------------------------
void RequireIndexType(const Tensor& indices, const Node& node) {
  if (indices.dtype() != DType::kInt64 && indices.dtype() != DType::kInt32)
    throw Error(node.Describe() + ": indices must be int32 or int64, not " + DTypeName(indices.dtype()));
}

// The device kernels turn indices outside [-dim, dim) into zeros; the run that makes the
// plan checks them on the host so that a wrong model fails as it does on the CPU.
void CheckIndicesOnHost(const Tensor& indices, int64_t dim, const Node& node) {
  if (indices.numel() > (1 << 20)) return;
  for (int64_t raw : indices.ToHost().AsInt64s())
    if (raw < -dim || raw >= dim)
      throw Error(node.Describe() + ": index " + std::to_string(raw) + " is out of range for dimension of size " +
                  std::to_string(dim));
}

class GatherKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    const Tensor& indices = ctx.Input(1);
    esize_ = ElementSize(data, node_);
    RequireIndexType(indices, node_);
    if (data.rank() == 0) Fail("cannot gather from a scalar");
    axis_ = NormalizeAxis(node_.GetInt("axis", 0), data.rank(), node_);
    Shape out(data.shape().begin(), data.shape().begin() + axis_);
    out.insert(out.end(), indices.shape().begin(), indices.shape().end());
    out.insert(out.end(), data.shape().begin() + axis_ + 1, data.shape().end());
    CheckIndicesOnHost(indices, data.dim(static_cast<int>(axis_)), node_);
    ctx.SetOutput(0, data.dtype(), out);
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    const Tensor& indices = ctx.Input(1);
    const AxisSplit ds = SplitAround(data.shape(), axis_, esize_);
    Gather(data.raw(), indices.raw(), indices.dtype() == DType::kInt64, ds.outer, data.dim(static_cast<int>(axis_)),
           indices.numel(), ds.inner_bytes / static_cast<int64_t>(esize_), esize_, ctx.Output(0).raw(), stream_);
  }

 private:
  size_t esize_ = 0;
  int64_t axis_ = 0;
};

class GatherElementsKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    const Tensor& indices = ctx.Input(1);
    esize_ = ElementSize(data, node_);
    RequireIndexType(indices, node_);
    if (data.rank() == 0 || indices.rank() != data.rank())
      Fail("data " + data.Describe() + " and indices " + indices.Describe() + " must have the same rank >= 1");
    axis_ = NormalizeAxis(node_.GetInt("axis", 0), data.rank(), node_);
    for (int d = 0; d < data.rank(); ++d)
      if (d != axis_ && indices.dim(d) > data.dim(d))
        Fail("indices " + indices.Describe() + " exceed data " + data.Describe() + " on axis " + std::to_string(d));
    CheckIndicesOnHost(indices, data.dim(static_cast<int>(axis_)), node_);
    ctx.SetOutput(0, data.dtype(), indices.shape());
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    const Tensor& indices = ctx.Input(1);
    std::vector<int64_t> strides = RowMajorStrides(data.shape());
    const int64_t axis_stride = strides[static_cast<size_t>(axis_)];
    strides[static_cast<size_t>(axis_)] = 0;  // the index supplies this coordinate
    GatherElements(data.raw(), indices.raw(), indices.dtype() == DType::kInt64, indices.shape(), strides, axis_stride,
                   data.dim(static_cast<int>(axis_)), esize_, ctx.Output(0).raw(), stream_);
  }

 private:
  size_t esize_ = 0;
  int64_t axis_ = 0;
};

// ---------------------------------------------------------------------------------------
// Pad: constant, reflect and edge modes; pads may be negative (crop).
class PadKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = ElementSize(x, node_);
    const std::string mode = node_.GetString("mode", "constant");
    if (mode == "constant") mode_ = PadMode::kConstant;
    else if (mode == "reflect") mode_ = PadMode::kReflect;
    else if (mode == "edge") mode_ = PadMode::kEdge;
    else Unsupported("mode '" + mode + "'");
    std::vector<int64_t> pads = opset_ < 11 ? node_.GetInts("pads") : shape_inputs_.Read(ctx, 1);
    const int rank = x.rank();
    if (static_cast<int>(pads.size()) != 2 * rank)
      Fail("pads has " + std::to_string(pads.size()) + " entries for rank " + std::to_string(rank));
    Shape out(static_cast<size_t>(rank));
    begin_.assign(pads.begin(), pads.begin() + rank);
    for (int d = 0; d < rank; ++d) {
      const int64_t b = pads[static_cast<size_t>(d)], e = pads[static_cast<size_t>(d + rank)];
      out[static_cast<size_t>(d)] = x.dim(d) + b + e;
      if (out[static_cast<size_t>(d)] < 0) Fail("pads " + ShapeString(pads) + " crop axis " + std::to_string(d) + " below 0");
      if (mode_ != PadMode::kConstant && x.dim(d) == 0 && out[static_cast<size_t>(d)] > 0)
        Fail("cannot pad an empty axis in mode '" + mode + "'");
    }
    fill_bits_ = 0;
    if (opset_ >= 11) {
      const Tensor* v = ctx.OptionalInput(2);
      if (v && v->numel() > 0 && v->dtype() != x.dtype())
        Fail("constant_value has type " + DTypeName(v->dtype()) + ", data has " + DTypeName(x.dtype()));
    } else {
      const float value = node_.GetFloat("value", 0.f);
      if (x.dtype() == DType::kFloat32) {
        std::memcpy(&fill_bits_, &value, sizeof value);
      } else if (x.dtype() == DType::kFloat64) {
        const double d = value;
        std::memcpy(&fill_bits_, &d, sizeof d);
      } else if (value != 0.f) {
        Unsupported("attribute 'value' for data type " + DTypeName(x.dtype()));
      }
    }
    ctx.SetOutput(0, x.dtype(), out);
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    if (y.rank() == 0) {
      CopyBytes(y.raw(), x.raw(), x.nbytes(), stream_);
      return;
    }
    // constant_value is data: read on the device by every run.
    const Tensor* v = opset_ >= 11 ? ctx.OptionalInput(2) : nullptr;
    const void* fill = v && v->numel() > 0 ? v->raw() : nullptr;
    Pad(x.raw(), x.shape(), y.shape(), begin_, mode_, fill, fill_bits_, esize_, y.raw(), stream_);
  }

 private:
  size_t esize_ = 0;
  PadMode mode_ = PadMode::kConstant;
  std::vector<int64_t> begin_;
  uint64_t fill_bits_ = 0;
  ShapeInputValues shape_inputs_;
};

// PadGrad(dY, X, pads) -> dX: dX[i] = dY[i + pad_begin] where that lies inside dY, else 0;
// that is dY padded by the negated begin pads with zeros.
class PadGradKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    if (dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()));
    std::vector<int64_t> pads = node_.GetInts("pads");
    if (const Tensor* p = ctx.OptionalInput(2)) pads = p->ToHost().AsInt64s();
    const size_t r = static_cast<size_t>(x.rank());
    if (pads.size() != 2 * r || dy.rank() != x.rank()) Fail("pads do not match the input's rank");
    neg_begin_.clear();
    for (size_t d = 0; d < r; ++d) neg_begin_.push_back(-pads[d]);
    ctx.SetOutput(0, DType::kFloat32, x.shape());
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    Tensor& dx = ctx.Output(0);
    if (dx.rank() == 0) {
      CopyBytes(dx.raw(), dy.raw(), dy.nbytes(), stream_);
      return;
    }
    Pad(dy.raw(), dy.shape(), dx.shape(), neg_begin_, PadMode::kConstant, nullptr, 0, sizeof(float), dx.raw(), stream_);
  }

 private:
  std::vector<int64_t> neg_begin_;
};

OT_REGISTER_CUDA_KERNEL("Flatten", 1, kLatestOpset, ReshapeLikeKernel);
OT_REGISTER_CUDA_KERNEL("Reshape", 5, kLatestOpset, ReshapeLikeKernel);
OT_REGISTER_CUDA_KERNEL("Identity", 1, kLatestOpset, ReshapeLikeKernel);
OT_REGISTER_CUDA_KERNEL("Squeeze", 1, kLatestOpset, ReshapeLikeKernel);
OT_REGISTER_CUDA_KERNEL("Unsqueeze", 1, kLatestOpset, ReshapeLikeKernel);
OT_REGISTER_CUDA_KERNEL("Shape", 1, kLatestOpset, HostValueKernel);
OT_REGISTER_CUDA_KERNEL("Size", 1, kLatestOpset, HostValueKernel);
OT_REGISTER_CUDA_KERNEL("Constant", 1, kLatestOpset, HostValueKernel);
OT_REGISTER_CUDA_KERNEL("ConstantOfShape", 9, kLatestOpset, HostValueKernel);
OT_REGISTER_CUDA_KERNEL("Transpose", 1, kLatestOpset, TransposeKernel);
OT_REGISTER_CUDA_KERNEL("Concat", 1, kLatestOpset, ConcatKernel);
OT_REGISTER_CUDA_KERNEL("Split", 2, 17, SplitKernel);  // 18 adds num_outputs
OT_REGISTER_CUDA_KERNEL("Slice", 1, kLatestOpset, SliceKernel);
OT_REGISTER_CUDA_KERNEL("Gather", 1, kLatestOpset, GatherKernel);
OT_REGISTER_CUDA_KERNEL("GatherElements", 11, kLatestOpset, GatherElementsKernel);
OT_REGISTER_CUDA_KERNEL("Tile", 6, kLatestOpset, TileKernel);
OT_REGISTER_CUDA_KERNEL("Expand", 8, kLatestOpset, ExpandKernel);
OT_REGISTER_CUDA_KERNEL("Pad", 2, 17, PadKernel);  // 18 adds axes, 19 wrap mode
OT_REGISTER_KERNEL(kGradDomain, "TransposeLastTwo", 1, kLatestOpset, DeviceType::kCUDA, TransposeLastTwoKernel);
OT_REGISTER_KERNEL(kGradDomain, "ConcatGrad", 1, kLatestOpset, DeviceType::kCUDA, ConcatGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "PadGrad", 1, kLatestOpset, DeviceType::kCUDA, PadGradKernel);

}  // namespace
}  // namespace ot::cuda
