// CUDA kernels of the reductions (launching reduce.cu and elementwise.cu): ReduceSum,
// ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare,
// ReduceLogSum, ReduceLogSumExp (axes as attribute, or for ReduceSum from opset 13 an
// input; keepdims; noop_with_empty_axes), ArgMax/ArgMin, and the gradient-domain
// SumToShape and ReduceGrad. Semantics follow runtime/cpu/reduce.cc and
// gradient_kernels.cc. Axes and target shapes are read on the host in Prepare; the
// executor keys plans by the values of small integer graph inputs, so they are not
// re-checked in Compute (that would wait for the device every step).
#include "graph/gradient_registry.h"
#include "runtime/cpu/kernel_util.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"

namespace ot::cuda {
namespace {

using math::ReduceOp;

constexpr int64_t kLatest = 1 << 30;

ReduceOp ParseReduceOp(const std::string& op_type) {
  static const std::pair<const char*, ReduceOp> kOps[] = {
      {"ReduceSum", ReduceOp::kSum},       {"ReduceMean", ReduceOp::kMean},
      {"ReduceMax", ReduceOp::kMax},       {"ReduceMin", ReduceOp::kMin},
      {"ReduceProd", ReduceOp::kProd},     {"ReduceL1", ReduceOp::kL1},
      {"ReduceL2", ReduceOp::kL2},         {"ReduceSumSquare", ReduceOp::kSumSquare},
      {"ReduceLogSum", ReduceOp::kLogSum}, {"ReduceLogSumExp", ReduceOp::kLogSumExp}};
  for (const auto& [name, op] : kOps)
    if (op_type == name) return op;
  throw Error("no reduction named " + op_type);
}

bool DefinedForIntegers(ReduceOp op) {
  return op == ReduceOp::kSum || op == ReduceOp::kMean || op == ReduceOp::kMax || op == ReduceOp::kMin ||
         op == ReduceOp::kProd || op == ReduceOp::kL1 || op == ReduceOp::kSumSquare;
}

// Plans a reduction of `in` over the dimensions marked in `reduced`; Unsupported when
// more than kMaxDims dimensions remain after merging.
math::ReduceIndexer PlanReduction(const Node& node, const Shape& in, const std::vector<bool>& reduced) {
  math::ReduceIndexer ix;
  if (!math::MakeReduceIndexer(in, reduced, &ix))
    throw UnsupportedError(node.op_type + ": a reduction over more than " + std::to_string(math::kMaxDims) +
                           " separate dimensions on CUDA");
  return ix;
}

class ReduceKernel final : public OpKernel {
 public:
  explicit ReduceKernel(const KernelInfo& info) : OpKernel(info), op_(ParseReduceOp(info.node.op_type)) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const DType t = x.dtype();
    const bool type_ok = t == DType::kFloat32 || t == DType::kFloat64 ||
                         ((t == DType::kInt32 || t == DType::kInt64) && DefinedForIntegers(op_));
    if (!type_ok) Unsupported("data type " + DTypeName(t));
    const Shape& in_shape = x.shape();
    std::vector<int64_t> axes = ReadAxes(ctx);
    identity_ = axes.empty() && node_.GetInt("noop_with_empty_axes", 0) != 0;
    const int64_t rank = x.rank();
    std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty() && !identity_);
    for (int64_t a : axes) {
      const int64_t axis = NormalizeAxis(a, rank, node_);
      if (reduced[static_cast<size_t>(axis)]) Fail("axis " + std::to_string(a) + " appears twice in axes");
      reduced[static_cast<size_t>(axis)] = true;
    }
    Shape out_shape;
    reduced_count_ = 1;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t size = in_shape[static_cast<size_t>(d)];
      const bool r = reduced[static_cast<size_t>(d)];
      if (r) reduced_count_ *= size;
      if (!r || node_.GetInt("keepdims", 1) != 0) out_shape.push_back(r ? 1 : size);
    }
    if (op_ == ReduceOp::kMean && t != DType::kFloat32 && t != DType::kFloat64 && reduced_count_ == 0 &&
        NumElements(out_shape) > 0)
      Fail("the integer mean over an empty axis is undefined");
    ix_ = PlanReduction(node_, in_shape, reduced);
    ctx.SetOutput(0, t, out_shape);
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    cudaStream_t stream = math::ComputeStream(device_.index);
    if (identity_) {
      if (x.nbytes() > 0)
        OT_CUDA_CHECK(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice, stream));
      return;
    }
    math::LaunchReduce(op_, x.dtype(), x.raw(), y.raw(), y.numel(), reduced_count_, ix_, stream);
    math::CheckLaunch(node_.op_type.c_str());
  }

 private:
  std::vector<int64_t> ReadAxes(const KernelContext& ctx) {
    // ReduceSum takes axes as an input from opset 13 (the others from 18, not registered).
    if (!(op_ == ReduceOp::kSum && opset_ >= 13)) return node_.GetInts("axes");
    const Tensor* axes = ctx.OptionalInput(1);
    if (!axes) return {};
    if (axes->dtype() != DType::kInt64) Fail("axes must be int64, got " + DTypeName(axes->dtype()));
    return axes->ToHost().AsInt64s();
  }

  const ReduceOp op_;
  bool identity_ = false;
  int64_t reduced_count_ = 1;
  math::ReduceIndexer ix_;
};

// ArgMax / ArgMin along one axis (int64 indices; first or last extreme on ties).
class ArgExtremeKernel final : public OpKernel {
 public:
  explicit ArgExtremeKernel(const KernelInfo& info) : OpKernel(info), is_max_(info.node.op_type == "ArgMax") {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const DType t = x.dtype();
    if (t != DType::kFloat32 && t != DType::kFloat64 && t != DType::kInt32 && t != DType::kInt64 && t != DType::kInt8 &&
        t != DType::kUInt8)
      Unsupported("data type " + DTypeName(t) + " on CUDA");
    const int64_t rank = x.rank();
    const int64_t axis = NormalizeAxis(node_.GetInt("axis", 0), rank, node_);
    outer_ = axis_size_ = inner_ = 1;
    Shape out_shape;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t size = x.dim(static_cast<int>(d));
      if (d < axis) outer_ *= size;
      else if (d == axis) axis_size_ = size;
      else inner_ *= size;
      if (d != axis) out_shape.push_back(size);
      else if (node_.GetInt("keepdims", 1) != 0) out_shape.push_back(1);
    }
    if (axis_size_ == 0 && outer_ * inner_ > 0) Fail("cannot take " + node_.op_type + " over an empty axis");
    select_last_ = node_.GetInt("select_last_index", 0) != 0;
    ctx.SetOutput(0, DType::kInt64, out_shape);
  }

  void Compute(KernelContext& ctx) override {
    math::LaunchArgExtreme(is_max_, select_last_, ctx.Input(0).dtype(), ctx.Input(0).raw(),
                           ctx.Output(0).data<int64_t>(), outer_, axis_size_, inner_,
                           math::ComputeStream(device_.index));
    math::CheckLaunch(node_.op_type.c_str());
  }

 private:
  const bool is_max_;
  bool select_last_ = false;
  int64_t outer_ = 1, axis_size_ = 1, inner_ = 1;
};

// SumToShape(grad, shape): sums a gradient over the axes along which the forward input
// of that shape was broadcast.
class SumToShapeKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& g = ctx.Input(0);
    if (g.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(g.dtype()));
    const Shape target = ctx.Input(1).ToHost().AsInt64s();
    if (BroadcastShapes(target, g.shape(), node_) != g.shape())
      Fail("gradient of shape " + ShapeString(g.shape()) + " cannot be summed to " + ShapeString(target));
    copy_ = NumElements(target) == g.numel();
    const size_t rank = g.shape().size();
    std::vector<bool> reduced(rank, false);
    for (size_t d = 0; d < rank; ++d) {
      const size_t lead = rank - target.size();
      const int64_t td = d < lead ? 1 : target[d - lead];
      reduced[d] = td == 1 && g.shape()[d] != 1;
    }
    count_ = NumElements(target) > 0 ? g.numel() / NumElements(target) : 0;
    if (!copy_) ix_ = PlanReduction(node_, g.shape(), reduced);
    ctx.SetOutput(0, DType::kFloat32, target);
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& g = ctx.Input(0);
    Tensor& out = ctx.Output(0);
    cudaStream_t stream = math::ComputeStream(device_.index);
    if (copy_) {
      if (g.nbytes() > 0)
        OT_CUDA_CHECK(cudaMemcpyAsync(out.raw(), g.raw(), g.nbytes(), cudaMemcpyDeviceToDevice, stream));
      return;
    }
    math::LaunchReduce(ReduceOp::kSum, DType::kFloat32, g.raw(), out.raw(), out.numel(), count_, ix_, stream);
    math::CheckLaunch("SumToShape");
  }

 private:
  bool copy_ = false;
  int64_t count_ = 0;
  math::ReduceIndexer ix_;
};

// ReduceGrad(dY, input_shape[, axes]) for ReduceSum/ReduceMean: dY broadcast back over
// the reduced axes, divided by the reduced count for a mean.
class ReduceGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()));
    const Shape out = ctx.Input(1).ToHost().AsInt64s();
    std::vector<int64_t> axes = node_.GetInts("axes");
    if (const Tensor* a = ctx.OptionalInput(2)) axes = a->ToHost().AsInt64s();
    Shape kept = out;
    double count = 1;
    if (axes.empty() && node_.GetInt("noop_with_empty_axes", 0) == 0)
      for (size_t d = 0; d < out.size(); ++d) axes.push_back(static_cast<int64_t>(d));
    for (int64_t a : axes) {
      const size_t d = static_cast<size_t>(NormalizeAxis(a, static_cast<int64_t>(out.size()), node_));
      count *= static_cast<double>(out[d]);
      kept[d] = 1;
    }
    if (NumElements(kept) != dy.numel())
      Fail("gradient " + dy.Describe() + " does not fit the reduced shape " + ShapeString(kept));
    if (!math::MakeBroadcastIndexer(out, {kept}, &ix_))
      Unsupported("broadcasting that needs more than " + std::to_string(math::kMaxDims) + " dimensions on CUDA");
    scale_ = node_.GetInt("mean", 0) && count > 0 ? static_cast<float>(1.0 / count) : 1.f;
    ctx.SetOutput(0, DType::kFloat32, out);
  }

  void Compute(KernelContext& ctx) override {
    math::LaunchBroadcastScale(ctx.Input(0).data<float>(), ctx.Output(0).data<float>(), ctx.Output(0).numel(), ix_,
                               scale_, math::ComputeStream(device_.index));
    math::CheckLaunch("ReduceGrad");
  }

 private:
  math::BroadcastIndexer ix_;
  float scale_ = 1.f;
};

// Opset 18 moves axes to an input for every reduction; until then only ReduceSum (13).
constexpr int64_t kAxesAttributeUntil = 17;
OT_REGISTER_CUDA_KERNEL("ReduceSum", 1, kLatest, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceMean", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceMax", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceMin", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceProd", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceL1", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceL2", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceSumSquare", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceLogSum", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ReduceLogSumExp", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CUDA_KERNEL("ArgMax", 1, kLatest, ArgExtremeKernel);
OT_REGISTER_CUDA_KERNEL("ArgMin", 1, kLatest, ArgExtremeKernel);
OT_REGISTER_KERNEL(kGradDomain, "SumToShape", 1, kLatest, ::ot::DeviceType::kCUDA, SumToShapeKernel);
OT_REGISTER_KERNEL(kGradDomain, "ReduceGrad", 1, kLatest, ::ot::DeviceType::kCUDA, ReduceGradKernel);

}  // namespace
}  // namespace ot::cuda
