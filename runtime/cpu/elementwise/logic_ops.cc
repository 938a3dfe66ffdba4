// CPU kernels of the logical, bitwise and remainder ops that produce masks and integer
// arithmetic in shape and index paths: Not, And, Or, Xor (bool), BitShift (unsigned),
// Mod (numpy or C remainder), IsNaN and IsInf. Broadcast loops from strided_loop.h.
#include <cmath>
#include <type_traits>

#include "runtime/cpu/dtype_dispatch.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cpu/strided_loop.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/math/elementwise_math.h"

namespace ot {
namespace cpu {
namespace {

// Two inputs of one type broadcast to the output; subclasses say which types and the map.
class BroadcastBinaryKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& a = ctx.Input(0);
    const Tensor& b = ctx.Input(1);
    if (a.dtype() != b.dtype()) Fail("inputs have different data types (" + DTypeName(a.dtype()) + " and " + DTypeName(b.dtype()) + ")");
    CheckType(a.dtype());
    ctx.SetOutput(0, OutputType(a.dtype()), BroadcastShapes(a.shape(), b.shape(), node_));
  }

 protected:
  virtual void CheckType(DType t) const = 0;
  virtual DType OutputType(DType t) const { return t; }
};

// And, Or, Xor on bool.
class LogicalKernel final : public BroadcastBinaryKernel {
 public:
  using BroadcastBinaryKernel::BroadcastBinaryKernel;
  void Compute(KernelContext& ctx) override {
    const Tensor& a = ctx.Input(0);
    const Tensor& b = ctx.Input(1);
    Tensor& y = ctx.Output(0);
    const std::string& op = node_.op_type;
    const uint8_t* pa = a.data<uint8_t>();
    const uint8_t* pb = b.data<uint8_t>();
    uint8_t* py = y.data<uint8_t>();
    if (op == "And") BroadcastMap(pa, a.shape(), pb, b.shape(), py, y.shape(), [](uint8_t x, uint8_t z) -> uint8_t { return x && z; });
    else if (op == "Or") BroadcastMap(pa, a.shape(), pb, b.shape(), py, y.shape(), [](uint8_t x, uint8_t z) -> uint8_t { return x || z; });
    else BroadcastMap(pa, a.shape(), pb, b.shape(), py, y.shape(), [](uint8_t x, uint8_t z) -> uint8_t { return (x != 0) != (z != 0); });
  }

 protected:
  void CheckType(DType t) const override {
    if (t != DType::kBool) Fail("inputs must be bool, not " + DTypeName(t));
  }
};

using UnsignedTypes = TypeList<uint8_t, uint16_t, uint32_t, uint64_t>;

// BitShift(X, Y) with direction LEFT or RIGHT; shifts of the width or more give 0.
class BitShiftKernel final : public BroadcastBinaryKernel {
 public:
  using BroadcastBinaryKernel::BroadcastBinaryKernel;
  void Compute(KernelContext& ctx) override {
    const Tensor& a = ctx.Input(0);
    const Tensor& b = ctx.Input(1);
    Tensor& y = ctx.Output(0);
    const std::string dir = node_.GetString("direction", "");
    if (dir != "LEFT" && dir != "RIGHT") Fail("attribute 'direction' must be LEFT or RIGHT, not '" + dir + "'");
    const bool left = dir == "LEFT";
    DispatchType(UnsignedTypes{}, a.dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      constexpr uint64_t kBits = sizeof(T) * 8;
      BroadcastMap(a.data<T>(), a.shape(), b.data<T>(), b.shape(), y.data<T>(), y.shape(), [left](T x, T s) -> T {
        if (static_cast<uint64_t>(s) >= kBits) return T(0);
        return left ? static_cast<T>(x << s) : static_cast<T>(x >> s);
      });
    });
  }

 protected:
  void CheckType(DType t) const override {
    if (!TypeListHas(UnsignedTypes{}, t)) Unsupported("data type " + DTypeName(t));
  }
};

// Mod(A, B): fmod=1 takes the dividend's sign (C fmod, required for floats); fmod=0 the
// divisor's (numpy/Python %). Integer division by zero is an error.
class ModKernel final : public BroadcastBinaryKernel {
 public:
  using BroadcastBinaryKernel::BroadcastBinaryKernel;
  void Compute(KernelContext& ctx) override {
    const Tensor& a = ctx.Input(0);
    const Tensor& b = ctx.Input(1);
    Tensor& y = ctx.Output(0);
    const bool c_style = node_.GetInt("fmod", 0) != 0;
    DispatchType(NumericTypes{}, a.dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      bool div_zero = false;
      BroadcastMap(a.data<T>(), a.shape(), b.data<T>(), b.shape(), y.data<T>(), y.shape(),
                   [&](T x, T d) -> T { return ModValue(x, d, c_style, &div_zero); });
      if (div_zero) Fail("integer division by zero");
    });
  }

 protected:
  void CheckType(DType t) const override {
    if (!TypeListHas(NumericTypes{}, t)) Unsupported("data type " + DTypeName(t));
    if ((t == DType::kFloat32 || t == DType::kFloat64) && node_.GetInt("fmod", 0) == 0)
      Fail("floating-point inputs need fmod=1");
  }
};

// Not, IsNaN, IsInf: one input, bool output.
class UnaryMaskKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (node_.op_type == "Not" ? x.dtype() != DType::kBool : !TypeListHas(FloatTypes{}, x.dtype()))
      Unsupported("data type " + DTypeName(x.dtype()));
    ctx.SetOutput(0, DType::kBool, x.shape());
  }
  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    uint8_t* y = ctx.Output(0).data<uint8_t>();
    const int64_t n = x.numel();
    if (node_.op_type == "Not") {
      const uint8_t* p = x.data<uint8_t>();
      for (int64_t i = 0; i < n; ++i) y[i] = p[i] == 0;
      return;
    }
    const bool nan = node_.op_type == "IsNaN";
    const bool neg = node_.GetInt("detect_negative", 1) != 0, pos = node_.GetInt("detect_positive", 1) != 0;
    DispatchType(FloatTypes{}, x.dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* p = x.data<T>();
      for (int64_t i = 0; i < n; ++i)
        y[i] = nan ? std::isnan(p[i]) : std::isinf(p[i]) && ((p[i] > 0 && pos) || (p[i] < 0 && neg));
    });
  }
};

OT_REGISTER_CPU_KERNEL("And", 7, kLatestOpset, LogicalKernel);
OT_REGISTER_CPU_KERNEL("Or", 7, kLatestOpset, LogicalKernel);
OT_REGISTER_CPU_KERNEL("Xor", 7, kLatestOpset, LogicalKernel);
OT_REGISTER_CPU_KERNEL("BitShift", 11, kLatestOpset, BitShiftKernel);
OT_REGISTER_CPU_KERNEL("Mod", 10, kLatestOpset, ModKernel);
OT_REGISTER_CPU_KERNEL("Not", 1, kLatestOpset, UnaryMaskKernel);
OT_REGISTER_CPU_KERNEL("IsNaN", 9, kLatestOpset, UnaryMaskKernel);
OT_REGISTER_CPU_KERNEL("IsInf", 10, kLatestOpset, UnaryMaskKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
