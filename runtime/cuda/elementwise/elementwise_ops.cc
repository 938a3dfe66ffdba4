// CUDA kernels of the elementwise ops (launching elementwise.cu): broadcasting binary
// and variadic ops (Add, Sub, Mul, Div, Pow, Max, Min, Sum, Mean and the comparisons),
// Where, unary math (Abs, Neg, Exp, Log, Sqrt, Reciprocal, Ceil, Floor, Round, LeakyRelu,
// Softplus), Clip, Cast/CastLike, LeakyReluGrad, Dropout and DropoutGrad. Attributes,
// opset differences and types follow the CPU kernels; float16 is not supported here.
// Nothing in Compute waits for the device: Clip's bounds, Dropout's ratio and training
// mode are read by the kernels from device memory.
#include <cstring>
#include <random>

#include "graph/op_domains.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot::cuda {
namespace {

using math::BinaryOp;
using math::BroadcastIndexer;
using math::UnaryOp;

bool IsOneOf(DType t, std::initializer_list<DType> types) {
  for (DType u : types)
    if (t == u) return true;
  return false;
}

// Data types of the arithmetic instantiations in elementwise.cu.
const std::initializer_list<DType> kArithmeticTypes = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                                       DType::kInt64,   DType::kInt8,    DType::kUInt8};

class BroadcastBinaryKernel final : public OpKernel {
 public:
  explicit BroadcastBinaryKernel(const KernelInfo& info)
      : OpKernel(info),
        op_(ParseBinaryOp(info.node.op_type)),
        mean_(info.node.op_type == "Mean"),
        variadic_(IsVariadicBinary(info.node.op_type)) {}

  void Prepare(KernelContext& ctx) override {
    const int n = ctx.NumInputs();
    CheckBinaryInputs(node_, opset_, op_, ctx);
    shapes_.clear();
    for (int i = 0; i < n; ++i) shapes_.push_back(ctx.Input(i).shape());
    CheckTypes(ctx);
    CheckLegacyBroadcast();
    out_shape_ = shapes_[0];
    for (int i = 1; i < n; ++i) out_shape_ = BroadcastShapes(out_shape_, shapes_[static_cast<size_t>(i)], node_);
    ctx.SetOutput(0, IsComparison(op_) ? DType::kBool : ctx.Input(0).dtype(), out_shape_);
    // Step i folds input i into the output (step 0 reads inputs 0 and 1, or copies input 0).
    steps_.clear();
    for (int i = 0; i < std::max(n, 2) - 1; ++i) {
      std::vector<Shape> operands = i == 0 ? std::vector<Shape>(shapes_.begin(), shapes_.begin() + std::min(n, 2))
                                           : std::vector<Shape>{out_shape_, shapes_[static_cast<size_t>(i + 1)]};
      BroadcastIndexer ix;
      if (!math::MakeBroadcastIndexer(out_shape_, operands, &ix))
        Unsupported("broadcasting that needs more than " + std::to_string(math::kMaxDims) + " dimensions on CUDA");
      steps_.push_back(ix);
    }
    const bool integer_div =
        op_ == BinaryOp::kDiv && !IsOneOf(ctx.Input(0).dtype(), {DType::kFloat32, DType::kFloat64});
    if (integer_div) flag_.Init(device_.index);
  }

  void CheckDeviceErrors() const override {
    if (flag_.Poll()) Fail("integer division by zero (detected on the GPU in an earlier run)");
  }

  void Compute(KernelContext& ctx) override {
    CheckDeviceErrors();
    const int n = ctx.NumInputs();
    const int64_t count = NumElements(out_shape_);
    Tensor& out = ctx.Output(0);
    cudaStream_t stream = math::ComputeStream(device_.index);
    const DType type = ctx.Input(0).dtype();
    if (n == 1) {
      if (!math::LaunchBroadcastCopy(type, ctx.Input(0).raw(), out.raw(), count, steps_[0], stream))
        Unsupported("data type " + DTypeName(type) + " on CUDA");
    } else if (op_ == BinaryOp::kPow) {
      if (!math::LaunchPow(type, ctx.Input(1).dtype(), ctx.Input(0).raw(), ctx.Input(1).raw(), out.raw(), count,
                           steps_[0], stream))
        Unsupported("base type " + DTypeName(type) + " with exponent type " + DTypeName(ctx.Input(1).dtype()) +
                    " on CUDA");
    } else {
      for (int i = 0; i + 1 < n; ++i) {
        const void* a = i == 0 ? ctx.Input(0).raw() : out.raw();
        if (!math::LaunchBinary(op_, type, a, ctx.Input(i + 1).raw(), out.raw(), count, steps_[static_cast<size_t>(i)],
                                flag_.device_ptr(), stream))
          Unsupported("data type " + DTypeName(type) + " on CUDA");
      }
    }
    if (mean_ && !math::LaunchDivideBy(type, out.raw(), count, n, stream))
      Unsupported("data type " + DTypeName(type) + " on CUDA");
    math::CheckLaunch(node_.op_type.c_str());
    if (flag_.device_ptr()) flag_.Publish(stream);
  }

 private:
  void CheckTypes(const KernelContext& ctx) const {
    const DType t = ctx.Input(0).dtype();
    bool ok;
    if (mean_)
      ok = IsOneOf(t, {DType::kFloat32, DType::kFloat64});
    else if (op_ == BinaryOp::kPow)
      ok = IsOneOf(t, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64}) &&
           IsOneOf(ctx.Input(ctx.NumInputs() - 1).dtype(),
                   {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
    else
      ok = IsOneOf(t, kArithmeticTypes) || (IsComparison(op_) && t == DType::kBool);
    if (!ok) Unsupported("data type " + DTypeName(t) + " on CUDA");
  }

  // Before opset 7 (8 for the variadic ops) inputs had equal shapes unless `broadcast`
  // was set; that legacy broadcast runs only on the CPU.
  void CheckLegacyBroadcast() const {
    if (opset_ >= (variadic_ ? 8 : 7)) return;
    if (!variadic_ && node_.GetInt("broadcast", 0) != 0)
      Unsupported("the legacy broadcast attribute (opset " + std::to_string(opset_) +
                  ") on CUDA; convert the model to opset 7 or later, or run it on the CPU");
    for (const Shape& s : shapes_)
      if (s != shapes_[0])
        Fail("inputs must have equal shapes before opset " + std::string(variadic_ ? "8" : "7") + ", got " +
             ShapeString(shapes_[0]) + " and " + ShapeString(s));
  }

  const BinaryOp op_;
  const bool mean_;
  const bool variadic_;
  std::vector<Shape> shapes_;
  Shape out_shape_;
  std::vector<BroadcastIndexer> steps_;
  math::DeviceErrorFlag flag_;  // integer division by zero
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
    if (esize_ != 1 && esize_ != 2 && esize_ != 4 && esize_ != 8) Unsupported("data type " + DTypeName(x.dtype()));
    if (!math::MakeBroadcastIndexer(out_shape_, {cond.shape(), x.shape(), y.shape()}, &ix_))
      Unsupported("broadcasting that needs more than " + std::to_string(math::kMaxDims) + " dimensions on CUDA");
    ctx.SetOutput(0, x.dtype(), out_shape_);
  }

  void Compute(KernelContext& ctx) override {
    math::LaunchWhere(esize_, ctx.Input(0).data<uint8_t>(), ctx.Input(1).raw(), ctx.Input(2).raw(),
                      ctx.Output(0).raw(), NumElements(out_shape_), ix_, math::ComputeStream(device_.index));
    math::CheckLaunch("Where");
  }

 private:
  size_t esize_ = 0;
  Shape out_shape_;
  BroadcastIndexer ix_;
};

// ---------------------------------------------------------------------------------------
UnaryOp ParseUnaryOp(const std::string& op_type) {
  static const std::pair<const char*, UnaryOp> kOps[] = {
      {"Abs", UnaryOp::kAbs},         {"Neg", UnaryOp::kNeg},     {"Exp", UnaryOp::kExp},
      {"Log", UnaryOp::kLog},         {"Sqrt", UnaryOp::kSqrt},   {"Reciprocal", UnaryOp::kReciprocal},
      {"Ceil", UnaryOp::kCeil},       {"Floor", UnaryOp::kFloor}, {"Round", UnaryOp::kRound},
      {"LeakyRelu", UnaryOp::kLeakyRelu}, {"Softplus", UnaryOp::kSoftplus}};
  for (const auto& [name, op] : kOps)
    if (op_type == name) return op;
  throw Error("no unary op named " + op_type);
}

class UnaryKernel final : public OpKernel {
 public:
  explicit UnaryKernel(const KernelInfo& info)
      : OpKernel(info), op_(ParseUnaryOp(info.node.op_type)), alpha_(info.node.GetFloat("alpha", 0.01f)) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    bool ok;
    switch (op_) {
      case UnaryOp::kNeg:  // signed types
        ok = IsOneOf(x.dtype(), {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kInt32, DType::kInt64});
        break;
      case UnaryOp::kReciprocal:
      case UnaryOp::kCeil:
      case UnaryOp::kFloor:
      case UnaryOp::kRound:
        ok = IsOneOf(x.dtype(), {DType::kFloat32, DType::kFloat64});
        break;
      default:  // the activations: float32, as on the CPU
        ok = x.dtype() == DType::kFloat32;
    }
    if (!ok) Unsupported("data type " + DTypeName(x.dtype()) + " on CUDA");
    ctx.SetOutput(0, x.dtype(), x.shape());
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    math::LaunchUnary(op_, x.dtype(), x.raw(), ctx.Output(0).raw(), x.numel(), alpha_,
                      math::ComputeStream(device_.index));
    math::CheckLaunch(node_.op_type.c_str());
  }

 private:
  const UnaryOp op_;
  const float alpha_;
};

// Clip: bounds are attributes before opset 11 and optional scalar inputs from 11 on.
class ClipKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (!IsOneOf(x.dtype(), kArithmeticTypes)) Unsupported("data type " + DTypeName(x.dtype()) + " on CUDA");
    CheckClipBounds(node_, ctx);
    ctx.SetOutput(0, x.dtype(), x.shape());
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const void* lo_ptr = nullptr;
    const void* hi_ptr = nullptr;
    double lo = 0, hi = 0;
    const double* lo_attr = nullptr;
    const double* hi_attr = nullptr;
    if (opset_ < 11) {
      if (node_.HasAttr("min")) lo = node_.GetFloat("min", 0.f), lo_attr = &lo;
      if (node_.HasAttr("max")) hi = node_.GetFloat("max", 0.f), hi_attr = &hi;
    } else {
      if (const Tensor* t = ctx.OptionalInput(1)) lo_ptr = t->raw();
      if (const Tensor* t = ctx.OptionalInput(2)) hi_ptr = t->raw();
    }
    math::LaunchClip(x.dtype(), x.raw(), ctx.Output(0).raw(), x.numel(), lo_ptr, hi_ptr, lo_attr, hi_attr,
                     math::ComputeStream(device_.index));
    math::CheckLaunch("Clip");
  }
};

// Cast (target type from attribute 'to') and CastLike (target type of input 1).
class CastKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const DType to = CastTargetType(node_, ctx);
    const Tensor& x = ctx.Input(0);
    for (DType t : {x.dtype(), to})  // float16: --amp fp16's casts
      if (!IsOneOf(t, kArithmeticTypes) && t != DType::kBool && t != DType::kFloat16)
        Unsupported("data type " + DTypeName(t) + " on CUDA");
    ctx.SetOutput(0, to, x.shape());
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    cudaStream_t stream = math::ComputeStream(device_.index);
    if (x.dtype() == y.dtype()) {
      if (x.nbytes() > 0)
        OT_CUDA_CHECK(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice, stream));
      return;
    }
    math::LaunchCast(x.dtype(), y.dtype(), x.raw(), y.raw(), x.numel(), stream);
    math::CheckLaunch(node_.op_type.c_str());
  }
};

// LeakyReluGrad(dY, X) -> dX.
class LeakyReluGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    if (dy.dtype() != DType::kFloat32 || x.dtype() != DType::kFloat32)
      Unsupported("data type " + DTypeName(dy.dtype()));
    if (dy.shape() != x.shape())
      Fail("gradient shape " + ShapeString(dy.shape()) + " differs from " + ShapeString(x.shape()));
    ctx.SetOutput(0, DType::kFloat32, dy.shape());
  }

  void Compute(KernelContext& ctx) override {
    math::LaunchLeakyReluGrad(ctx.Input(0).data<float>(), ctx.Input(1).data<float>(), ctx.Output(0).data<float>(),
                              ctx.Input(0).numel(), node_.GetFloat("alpha", 0.01f), math::ComputeStream(device_.index));
    math::CheckLaunch("LeakyReluGrad");
  }
};

// ---------------------------------------------------------------------------------------
// Dropout: identity in inference mode (mask all true). In training mode (opset 12 on,
// training_mode input true, read by the kernel) each element is kept with probability
// 1-ratio and scaled by 1/(1-ratio). The masks come from a Philox stream keyed by a
// 64-bit draw from the executor's generator (or, with a 'seed' attribute, from a
// generator seeded once with it); they differ from the CPU's masks.
class DropoutKernel final : public OpKernel {
 public:
  explicit DropoutKernel(const KernelInfo& info) : OpKernel(info) {
    if (node_.HasAttr("seed")) {
      seeded_ = true;
      seeded_rng_.seed(static_cast<uint64_t>(node_.GetInt("seed", 0)));
    }
  }

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    DType t = x.dtype();
    if (t != DType::kFloat32 && t != DType::kFloat64) Unsupported("data type " + DTypeName(t) + " on CUDA");
    PrepareDropout(node_, static_cast<int>(opset_), ctx);
    may_train_ = opset_ >= 12 && ctx.OptionalInput(2) != nullptr;
    if (may_train_) {
      if (const Tensor* r = ctx.OptionalInput(1); r && r->dtype() != DType::kFloat32 && r->dtype() != DType::kFloat64)
        Unsupported("ratio of type " + DTypeName(r->dtype()) + " on CUDA");
      flag_.Init(device_.index);
    }
  }

  void CheckDeviceErrors() const override {
    if (flag_.Poll()) Fail("ratio is outside [0, 1) in training mode (detected on the GPU in an earlier run)");
  }

  void Compute(KernelContext& ctx) override {
    CheckDeviceErrors();
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    cudaStream_t stream = math::ComputeStream(device_.index);
    if (!may_train_) {
      if (x.nbytes() > 0)
        OT_CUDA_CHECK(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice, stream));
      if (ctx.HasOutput(1)) math::LaunchFillOnes(ctx.Output(1).dtype(), ctx.Output(1).raw(), x.numel(), stream);
      math::CheckLaunch("Dropout");
      return;
    }
    const Tensor* ratio = ctx.OptionalInput(1);
    const uint64_t seed = seeded_ ? seeded_rng_() : ctx.rng()();
    math::LaunchDropout(x.dtype(), x.raw(), y.raw(), ctx.HasOutput(1) ? ctx.Output(1).data<uint8_t>() : nullptr,
                        x.numel(), ratio ? ratio->raw() : nullptr, ratio ? ratio->dtype() : DType::kFloat32, 0.5f,
                        ctx.Input(2).data<uint8_t>(), seed, flag_.device_ptr(), stream);
    math::CheckLaunch("Dropout");
    flag_.Publish(stream);
  }

 private:
  bool seeded_ = false;
  std::mt19937_64 seeded_rng_;
  bool may_train_ = false;
  math::DeviceErrorFlag flag_;  // ratio outside [0, 1)
};

// DropoutGrad(dY, mask[, ratio]) -> dY * mask / (1 - ratio).
class DropoutGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(dy.dtype()));
    if (ctx.Input(1).shape() != dy.shape()) Fail("mask shape differs from the gradient's");
    if (ctx.Input(1).dtype() != DType::kBool)
      Unsupported("mask of type " + DTypeName(ctx.Input(1).dtype()) + " on CUDA");
    if (const Tensor* r = ctx.OptionalInput(2))
      if (r->dtype() != DType::kFloat32 || r->numel() != 1) Fail("ratio must be a float scalar, got " + r->Describe());
    ctx.SetOutput(0, DType::kFloat32, dy.shape());
  }

  void Compute(KernelContext& ctx) override {
    const Tensor* r = ctx.OptionalInput(2);
    math::LaunchDropoutGrad(ctx.Input(0).data<float>(), ctx.Input(1).data<uint8_t>(), ctx.Output(0).data<float>(),
                            ctx.Input(0).numel(), r ? r->data<float>() : nullptr, node_.GetFloat("ratio", 0.5f),
                            math::ComputeStream(device_.index));
    math::CheckLaunch("DropoutGrad");
  }
};

OT_REGISTER_CUDA_KERNEL("Add", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("Sub", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("Mul", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("Div", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("Pow", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("Max", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("Min", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("Sum", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("Mean", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("Equal", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("Less", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("Greater", 1, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("LessOrEqual", 12, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("GreaterOrEqual", 12, kLatestOpset, BroadcastBinaryKernel);
OT_REGISTER_CUDA_KERNEL("Where", 9, kLatestOpset, WhereKernel);
OT_REGISTER_CUDA_KERNEL("Abs", 1, kLatestOpset, UnaryKernel);
OT_REGISTER_CUDA_KERNEL("Neg", 1, kLatestOpset, UnaryKernel);
OT_REGISTER_CUDA_KERNEL("Exp", 1, kLatestOpset, UnaryKernel);
OT_REGISTER_CUDA_KERNEL("Log", 1, kLatestOpset, UnaryKernel);
OT_REGISTER_CUDA_KERNEL("Sqrt", 1, kLatestOpset, UnaryKernel);
OT_REGISTER_CUDA_KERNEL("Reciprocal", 1, kLatestOpset, UnaryKernel);
OT_REGISTER_CUDA_KERNEL("Ceil", 1, kLatestOpset, UnaryKernel);
OT_REGISTER_CUDA_KERNEL("Floor", 1, kLatestOpset, UnaryKernel);
OT_REGISTER_CUDA_KERNEL("Round", 11, kLatestOpset, UnaryKernel);
OT_REGISTER_CUDA_KERNEL("LeakyRelu", 1, kLatestOpset, UnaryKernel);
OT_REGISTER_CUDA_KERNEL("Softplus", 1, kLatestOpset, UnaryKernel);
OT_REGISTER_CUDA_KERNEL("Clip", 1, kLatestOpset, ClipKernel);
OT_REGISTER_CUDA_KERNEL("Cast", 6, kLatestOpset, CastKernel);
OT_REGISTER_CUDA_KERNEL("CastLike", 15, kLatestOpset, CastKernel);
OT_REGISTER_CUDA_KERNEL("Dropout", 7, kLatestOpset, DropoutKernel);
OT_REGISTER_KERNEL(kGradDomain, "LeakyReluGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, LeakyReluGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "DropoutGrad", 1, kLatestOpset, ::ot::DeviceType::kCUDA, DropoutGradKernel);

}  // namespace
}  // namespace ot::cuda
