// Forward kernels of the unary activations and functions oneDNN has no eltwise algorithm
// for (Erf, GELU, trigonometry and the hyperbolic functions, Sign, Softsign, Selu,
// Celu, ThresholdedRelu, Shrink), as loops over runtime/ops/math/activation_math.h, and PRelu
// (slope broadcast to X). A function that keeps 0 at 0 runs on any layout (blocked
// padding stays zero), the others on plain data.
#include <algorithm>
#include <cstring>

#include "graph/op_domains.h"
#include "runtime/ops/math/elementwise_math.h"
#include "runtime/ops/checks/activation_attrs.h"
#include "runtime/cpu/dtype_dispatch.h"
#include "runtime/cpu/strided_loop.h"
#include "runtime/cpu/elementwise/vector_loops.h"
#include "runtime/cpu/matmul/bf16_gemm.h"  // ConvertToBFloat16
#include "runtime/core/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

// Elements at or above which the loops split over threads.
constexpr int64_t kParallelElements = 1 << 15;

// out[i] = f(in[i]) for i in [0, n).
template <UnaryFn F, typename T>
OT_VECTOR_CLONES void UnaryRange(const T* in, T* out, int64_t n, UnaryParams p) {
  for (int64_t i = 0; i < n; ++i) out[i] = UnaryForward<F>(in[i], p);
}
template <UnaryFn F, typename T>
void UnaryLoop(const T* in, T* out, int64_t n, const UnaryParams& p) {
  ForEachChunk(n, kParallelElements, [&](int64_t b, int64_t e) { UnaryRange<F, T>(in + b, out + b, e - b, p); });
}

// bfloat16 bits of x rounded to nearest even, as vcvtneps2bf16 (oneDNN's Cast on CPUs with
// avx512_bf16) rounds: subnormal inputs become zero of their sign, a NaN stays a quiet NaN.
// For CPUs without the instruction (ConvertToBFloat16 where they have it).
inline uint16_t ToBFloat16Bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  if (magnitude < 0x00800000u) return static_cast<uint16_t>((bits >> 16) & 0x8000u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// out[i] = bfloat16(f(in[i])): a fused activation that writes the Cast of its output
// (graph/passes/amp_pass.h FoldBFloat16CastsIntoActivations), in blocks that stay in L1: the
// float32 results by the vectorised UnaryRange, then rounded.
template <UnaryFn F>
void UnaryRangeToBFloat16(const float* in, uint16_t* out, int64_t n, const UnaryParams& p) {
  constexpr int64_t kBlock = 1024;
  float block[kBlock];
  const bool fast = HasBFloat16Gemm();
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    UnaryRange<F, float>(in + b, block, len, p);
    if (fast) ConvertToBFloat16(block, out + b, len);
    else
      for (int64_t i = 0; i < len; ++i) out[b + i] = ToBFloat16Bits(block[i]);
  }
}

// f(0) == 0 for these parameters: padding of blocked layouts stays zero.
bool KeepsZero(UnaryFn fn, const UnaryParams& p) {
  bool zero = false;
  DispatchUnaryFn(fn, [&](auto f) { zero = UnaryForward<decltype(f)::value>(0.f, p) == 0.f; });
  return zero;
}

// The fused org.onnxtrain Gelu and Silu take attribute to = BFLOAT16 (16): float32 in, the
// bfloat16 Cast of the result out (plain layout).
class UnaryLoopKernel final : public OpKernel {
 public:
  explicit UnaryLoopKernel(const KernelInfo& info) : OpKernel(info) {
    if (!ParseNodeUnaryFn(node_, node_.op_type, &fn_)) Fail("no element function for this op");
    params_ = ReadUnaryParams(node_, fn_);
    if (node_.domain == kGradDomain && node_.HasAttr("to")) {
      if (node_.GetInt("to", 0) != static_cast<int64_t>(DType::kBFloat16))
        Fail("attribute 'to' must be 16 (BFLOAT16), got " + std::to_string(node_.GetInt("to", 0)));
      to_bf16_ = true;
    }
  }

  bool AcceptsLayouts(const KernelContext& ctx) const override {
    return !to_bf16_ && ctx.Input(0).dtype() == DType::kFloat32 && KeepsZero(fn_, params_);
  }

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (to_bf16_) {
      if (x.dtype() != DType::kFloat32) Fail("writing bfloat16 needs a float32 input, got " + x.Describe());
      ctx.SetOutput(0, DType::kBFloat16, x.shape());
      return;
    }
    const bool ok =
        fn_ == UnaryFn::kSign ? TypeListHas(NumericTypes{}, x.dtype()) : TypeListHas(FloatTypes{}, x.dtype());
    if (!ok) ThrowUnsupportedType(x.dtype(), node_);
    ctx.SetOutput(0, x.dtype(), x.shape(), x.layout());
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    if (to_bf16_) {
      const float* in = x.data<float>();
      uint16_t* out = static_cast<uint16_t*>(y.raw());
      DispatchUnaryFn(fn_, [&](auto f) {
        constexpr UnaryFn F = decltype(f)::value;
        ForEachChunk(x.numel(), kParallelElements,
                     [&](int64_t b, int64_t e) { UnaryRangeToBFloat16<F>(in + b, out + b, e - b, params_); });
      });
      return;
    }
    // The storage, padding included, in whatever layout x has (y has the same).
    const int64_t n = static_cast<int64_t>(x.nbytes() / DTypeSize(x.dtype()));
    DispatchUnaryFn(fn_, [&](auto f) {
      constexpr UnaryFn F = decltype(f)::value;
      auto run = [&](auto tag) {
        using T = typename decltype(tag)::type;
        UnaryLoop<F, T>(x.data<T>(), y.data<T>(), n, params_);
      };
      if constexpr (F == UnaryFn::kSign) DispatchType(NumericTypes{}, x.dtype(), node_, run);
      else DispatchType(FloatTypes{}, x.dtype(), node_, run);
    });
  }

 private:
  UnaryFn fn_ = UnaryFn::kErf;
  UnaryParams params_;
  bool to_bf16_ = false;
};

// PRelu(X, slope): X where X >= 0, slope * X elsewhere; slope broadcast to X.
class PReluKernel final : public OpKernel {
 public:
  explicit PReluKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const Tensor& slope = ctx.Input(1);
    if (!TypeListHas(SignedTypes{}, x.dtype())) ThrowUnsupportedType(x.dtype(), node_);
    if (slope.dtype() != x.dtype())
      Fail("slope is " + DTypeName(slope.dtype()) + " but X is " + DTypeName(x.dtype()));
    slope_shape_ = PReluSlopeShape(node_, opset_, x.shape(), slope.shape());
    ctx.SetOutput(0, x.dtype(), x.shape());
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    DispatchType(SignedTypes{}, x.dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      BroadcastMap(x.data<T>(), x.shape(), ctx.Input(1).data<T>(), slope_shape_, ctx.Output(0).data<T>(), x.shape(),
                   [](T v, T s) { return PReluValue(v, s); });
    });
  }

 private:
  Shape slope_shape_;
};
OT_REGISTER_CPU_KERNEL("Erf", 9, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Sin", 7, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Cos", 7, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Tan", 7, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Asin", 7, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Acos", 7, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Atan", 7, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Sinh", 9, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Cosh", 9, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Asinh", 9, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Acosh", 9, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Atanh", 9, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Sign", 9, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Softsign", 1, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Selu", 1, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Celu", 12, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("ThresholdedRelu", 10, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("Shrink", 9, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_CPU_KERNEL("PRelu", 1, kLatestOpset, PReluKernel);
// GELU: ONNX's from opset 20 (approximate "none", the erf form, or "tanh"); and the erf
// form fused from PyTorch's exported Div/Erf/Add/Mul/Mul (graph/passes/fusion.h).
OT_REGISTER_CPU_KERNEL("Gelu", 20, kLatestOpset, UnaryLoopKernel);
OT_REGISTER_KERNEL(kGradDomain, "Gelu", 1, kLatestOpset, DeviceType::kCPU, UnaryLoopKernel);
// SiLU, x * Sigmoid(x), fused from PyTorch's exported Sigmoid and Mul (graph/passes/fusion.h).
OT_REGISTER_KERNEL(kGradDomain, "Silu", 1, kLatestOpset, DeviceType::kCPU, UnaryLoopKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
