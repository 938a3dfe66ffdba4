// CUDA kernels for the data-movement ops, mirroring runtime/cpu/tensor/shape_ops.cc,
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

#include "graph/op_domains.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cuda/tensor/copy_kernels.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot::cuda {
namespace {

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
    return KernelContext(ctx.node(), std::move(ins), std::move(out_ptrs), &ctx.rng(), Device::CPU(), nullptr,
                         &ctx.settings());
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
    StridedCopy(ctx.Input(0).raw(), walk_.strides, walk_.offset, ctx.Output(0).raw(), walk_.shape, esize_, stream_);
  }

 protected:
  size_t esize_ = 0;
  StridedView walk_;  // walk_.shape: same element count as the output, laid out densely
  ShapeInputValues shape_inputs_;
};

class TransposeKernel final : public StridedViewKernel {
 public:
  using StridedViewKernel::StridedViewKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    walk_ = TransposeView(node_, x.shape());
    ctx.SetOutput(0, x.dtype(), walk_.shape);
  }
};

// Gradient domain: swaps the last two axes (MatMul gradients of any rank >= 2).
class TransposeLastTwoKernel final : public StridedViewKernel {
 public:
  using StridedViewKernel::StridedViewKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    walk_.shape = TransposeLastTwoShape(node_, x);
    esize_ = sizeof(float);
    walk_.strides = RowMajorStrides(x.shape());
    const size_t r = walk_.strides.size();
    std::swap(walk_.strides[r - 1], walk_.strides[r - 2]);
    ctx.SetOutput(0, DType::kFloat32, walk_.shape);
  }
};

class SliceKernel final : public StridedViewKernel {
 public:
  using StridedViewKernel::StridedViewKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    walk_ = SliceView(node_, opset_, ctx, shape_inputs_, x.shape());
    ctx.SetOutput(0, x.dtype(), walk_.shape);
  }
};

class TileKernel final : public StridedViewKernel {
 public:
  using StridedViewKernel::StridedViewKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    Shape out;
    walk_ = TileView(node_, ctx, shape_inputs_, x.shape(), &out);
    ctx.SetOutput(0, x.dtype(), out);
  }
};

class ExpandKernel final : public StridedViewKernel {
 public:
  using StridedViewKernel::StridedViewKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    walk_.shape = BroadcastShapes(x.shape(), shape_inputs_.Read(ctx, 1), node_);
    walk_.strides = BroadcastStrides(x.shape(), walk_.shape);
    walk_.offset = 0;
    ctx.SetOutput(0, x.dtype(), walk_.shape);
  }
};

// ---------------------------------------------------------------------------------------
class ConcatKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& first = ctx.Input(0);
    esize_ = CheckedElementSize(first, node_);
    ctx.SetOutput(0, first.dtype(), ConcatOutputShape(node_, opset_, ctx, &axis_));
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
    CheckedElementSize(x, node_);
    sizes_ = PrepareSplitOutputs(node_, opset_, ctx, shape_inputs_, &axis_);
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
    CheckedElementSize(dy, node_);
    sizes_ = PrepareConcatGradOutputs(node_, ctx, &axis_);
  }
  void Compute(KernelContext& ctx) override { CutAlongAxis(ctx.Input(0), axis_, sizes_, ctx, 0, stream_); }

 private:
  int64_t axis_ = 0;
  std::vector<int64_t> sizes_;
};

// ---------------------------------------------------------------------------------------
// Indices outside [-dim, dim): the run that makes the plan checks them on the host, so a
// wrong model fails there as it does on the CPU (naming the index); on every later run
// the device kernels write zeros for them and set a device flag that the next Compute
// (or the executor, around a CUDA graph replay) turns into the same kind of error.
void CheckIndicesOnHost(const Tensor& indices, int64_t dim, const Node& node) {
  for (int64_t raw : indices.ToHost().AsInt64s()) CheckedIndex(raw, dim, node);
}

std::string BadIndexMessage(long long flag, int64_t dim) {
  return "an index at flat position " + std::to_string(flag - 1) + " of the indices was out of range for dimension of "
         "size " + std::to_string(dim) + " (found on the GPU in an earlier run of this node, whose output took zeros "
         "there); check the data, e.g. token ids against the vocabulary size";
}

class GatherKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    const Tensor& indices = ctx.Input(1);
    esize_ = CheckedElementSize(data, node_);
    const Shape out = GatherOutputShape(node_, data, indices, &axis_);
    dim_ = data.dim(static_cast<int>(axis_));
    CheckIndicesOnHost(indices, dim_, node_);
    flag_.Init(device_.index);
    ctx.SetOutput(0, data.dtype(), out);
  }

  void CheckDeviceErrors() const override {
    if (long long bad = flag_.Poll()) Fail(BadIndexMessage(bad, dim_));
  }

  void Compute(KernelContext& ctx) override {
    CheckDeviceErrors();
    const Tensor& data = ctx.Input(0);
    const Tensor& indices = ctx.Input(1);
    const AxisSplit ds = SplitAround(data.shape(), axis_, esize_);
    Gather(data.raw(), indices.raw(), indices.dtype() == DType::kInt64, ds.outer, dim_, indices.numel(),
           ds.inner_bytes / static_cast<int64_t>(esize_), esize_, ctx.Output(0).raw(), flag_.device_ptr(), stream_);
    flag_.Publish(stream_);
  }

 private:
  size_t esize_ = 0;
  int64_t axis_ = 0, dim_ = 0;
  math::DeviceErrorFlag flag_;  // an index out of range
};

class GatherElementsKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& data = ctx.Input(0);
    const Tensor& indices = ctx.Input(1);
    esize_ = CheckedElementSize(data, node_);
    axis_ = GatherElementsAxis(node_, data, indices);
    dim_ = data.dim(static_cast<int>(axis_));
    CheckIndicesOnHost(indices, dim_, node_);
    flag_.Init(device_.index);
    ctx.SetOutput(0, data.dtype(), indices.shape());
  }

  void CheckDeviceErrors() const override {
    if (long long bad = flag_.Poll()) Fail(BadIndexMessage(bad, dim_));
  }

  void Compute(KernelContext& ctx) override {
    CheckDeviceErrors();
    const Tensor& data = ctx.Input(0);
    const Tensor& indices = ctx.Input(1);
    std::vector<int64_t> strides = RowMajorStrides(data.shape());
    const int64_t axis_stride = strides[static_cast<size_t>(axis_)];
    strides[static_cast<size_t>(axis_)] = 0;  // the index supplies this coordinate
    GatherElements(data.raw(), indices.raw(), indices.dtype() == DType::kInt64, indices.shape(), strides, axis_stride,
                   dim_, esize_, ctx.Output(0).raw(), flag_.device_ptr(), stream_);
    flag_.Publish(stream_);
  }

 private:
  size_t esize_ = 0;
  int64_t axis_ = 0, dim_ = 0;
  math::DeviceErrorFlag flag_;  // an index out of range
};

// ---------------------------------------------------------------------------------------
// Pad: constant, reflect and edge modes; pads may be negative (crop).
class PadKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    esize_ = CheckedElementSize(x, node_);
    const PadPlan plan = PreparePad(node_, opset_, ctx, shape_inputs_, x.shape());
    if (plan.mode == "wrap") Unsupported("mode 'wrap' (opset 19) is not supported on CUDA; the CPU runtime has it");
    mode_ = plan.mode == "reflect" ? PadMode::kReflect : plan.mode == "edge" ? PadMode::kEdge : PadMode::kConstant;
    begin_.assign(plan.pads.begin(), plan.pads.begin() + x.rank());
    fill_bits_ = 0;
    if (opset_ >= 11) {
      CheckPadConstantValue(node_, ctx.OptionalInput(2), x.dtype());
    } else {
      const std::vector<unsigned char> value = PadAttributeValue(node_, x.dtype());
      std::memcpy(&fill_bits_, value.data(), std::min(value.size(), sizeof fill_bits_));
    }
    ctx.SetOutput(0, x.dtype(), plan.out);
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
    const std::string mode = node_.GetString("mode", "constant");
    if (mode != "constant") Unsupported("the gradient of Pad in mode '" + mode + "' (only constant on CUDA)");
    neg_begin_ = PadGradBeginPads(node_, ctx);
    for (int64_t& b : neg_begin_) b = -b;
    ctx.SetOutput(0, DType::kFloat32, ctx.Input(1).shape());
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
OT_REGISTER_CUDA_KERNEL("Split", 2, kLatestOpset, SplitKernel);  // 18 num_outputs: PrepareSplitOutputs
OT_REGISTER_CUDA_KERNEL("Slice", 1, kLatestOpset, SliceKernel);
OT_REGISTER_CUDA_KERNEL("Gather", 1, kLatestOpset, GatherKernel);
OT_REGISTER_CUDA_KERNEL("GatherElements", 11, kLatestOpset, GatherElementsKernel);
OT_REGISTER_CUDA_KERNEL("Tile", 6, kLatestOpset, TileKernel);
OT_REGISTER_CUDA_KERNEL("Expand", 8, kLatestOpset, ExpandKernel);
OT_REGISTER_CUDA_KERNEL("Pad", 2, kLatestOpset, PadKernel);  // 18 axes: PreparePad; 19 wrap: Unsupported
OT_REGISTER_KERNEL(kGradDomain, "TransposeLastTwo", 1, kLatestOpset, DeviceType::kCUDA, TransposeLastTwoKernel);
OT_REGISTER_KERNEL(kGradDomain, "ConcatGrad", 1, kLatestOpset, DeviceType::kCUDA, ConcatGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "PadGrad", 1, kLatestOpset, DeviceType::kCUDA, PadGradKernel);

}  // namespace
}  // namespace ot::cuda
