// CPU kernels of the elementwise gradient ops (domain org.onnxtrain) that
// graph/autodiff/gradient_rules_elementwise.cc emits:
//   ActivationGrad(dY, X[, min, max]) -> dX = dY * f'(X), f the forward op named by the
//     attribute `op` (runtime/ops/math/activation_math.h), with the forward node's attributes;
//   PReluGrad(dY, X, slope) -> dX, dSlope (summed to the slope's shape);
//   PowGrad(dY, A, B) -> dA, dB, shaped like dY (the rule sums them to A's and B's shapes);
//   MinMaxGrad(dY, Y, X0, X1, ...) -> dX0, dX1, ... shaped like dY: dY goes to the inputs
//     equal to Y, split evenly among ties (as PyTorch's maximum/minimum).
#include <cmath>
#include <cstring>
#include <tuple>

#include "graph/op_domains.h"
#include "runtime/ops/math/elementwise_math.h"
#include "runtime/ops/shapes/op_shapes.h"
#include "runtime/ops/checks/activation_attrs.h"
#include "runtime/cpu/layout/dnnl_layout.h"
#include "runtime/cpu/strided_loop.h"
#include "runtime/cpu/elementwise/vector_loops.h"
#include "runtime/core/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

constexpr int64_t kParallelElements = 1 << 15;

template <UnaryFn F, typename T>
OT_VECTOR_CLONES void UnaryGradRange(const T* dy, const T* x, T* dx, int64_t n, UnaryParams p) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * UnaryDerivative<F>(x[i], p);
}
template <UnaryFn F, typename T>
void UnaryGradLoop(const T* dy, const T* x, T* dx, int64_t n, const UnaryParams& p) {
  ForEachChunk(n, kParallelElements,
               [&](int64_t b, int64_t e) { UnaryGradRange<F, T>(dy + b, x + b, dx + b, e - b, p); });
}

void RequireFloat32(const Node& node, const Tensor& t, const char* what) {
  if (t.dtype() != DType::kFloat32)
    throw UnsupportedError(node.op_type + ": " + what + " of data type " + DTypeName(t.dtype()));
}

void RequireSameShapeOf(const Node& node, const Tensor& dy, const Tensor& x) {
  if (dy.shape() != x.shape())
    throw Error(node.Describe() + ": gradient shape " + ShapeString(dy.shape()) + " differs from X's " +
                ShapeString(x.shape()));
}

class ActivationGradKernel final : public OpKernel {
 public:
  explicit ActivationGradKernel(const KernelInfo& info) : OpKernel(info) {
    const std::string op = node_.GetString("op", "");
    if (!ParseNodeUnaryFn(node_, op, &fn_)) Fail("unknown forward op '" + op + "' (attribute 'op')");
    params_ = ReadUnaryParams(node_, fn_);
  }

  // Any layout where f'(0) is finite: dY's zero padding then stays zero in dX. dY is
  // brought to X's layout, which dX takes.
  bool AcceptsLayouts(const KernelContext& ctx) const override {
    bool finite = false;
    DispatchUnaryFn(fn_, [&](auto f) { finite = std::isfinite(UnaryDerivative<decltype(f)::value>(0.f, params_)); });
    return finite && ctx.Input(1).dtype() == DType::kFloat32;
  }

  // float32 in any layout, float64 plain (a model's float64 stretch between two Casts).
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    if (x.dtype() != DType::kFloat64) RequireFloat32(node_, x, "input");
    if (dy.dtype() != x.dtype())
      Fail("gradient of type " + DTypeName(dy.dtype()) + " for X of type " + DTypeName(x.dtype()));
    RequireSameShapeOf(node_, dy, x);
    ctx.SetOutput(0, x.dtype(), x.shape(), x.layout());
    if (x.dtype() == DType::kFloat32) dy_ = Reorder(DescOf(dy), DescOf(x));
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(1);
    UnaryParams p = params_;
    if (fn_ == UnaryFn::kClip) std::tie(p.alpha, p.beta) = ReadClipBounds(node_, ctx, 2);
    const void* dy = ctx.Input(0).raw();
    if (dy_.needed()) dy = dy_.Apply(ctx.Input(0).raw(), 0).get_data_handle();
    const int64_t n = static_cast<int64_t>(x.nbytes() / DTypeSize(x.dtype()));
    DispatchUnaryFn(fn_, [&](auto f) {
      constexpr UnaryFn F = decltype(f)::value;
      if (x.dtype() == DType::kFloat64)
        UnaryGradLoop<F>(static_cast<const double*>(dy), x.data<double>(), ctx.Output(0).data<double>(), n, p);
      else
        UnaryGradLoop<F>(static_cast<const float*>(dy), x.data<float>(), ctx.Output(0).data<float>(), n, p);
    });
  }

 private:
  UnaryFn fn_ = UnaryFn::kErf;
  UnaryParams params_;
  Reorder dy_;
};

// PReluGrad(dY, X, slope) -> dX = X >= 0 ? dY : slope * dY; dSlope = sum of dY * X where
// X < 0, over the axes along which the slope was broadcast. Attribute channel_slope: the
// forward opset was below 7 (a 1-D slope runs along axis 1).
class PReluGradKernel final : public OpKernel {
 public:
  explicit PReluGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    const Tensor& slope = ctx.Input(2);
    for (const Tensor* t : {&dy, &x, &slope}) RequireFloat32(node_, *t, "input");
    RequireSameShapeOf(node_, dy, x);
    slope_shape_ = PReluSlopeShape(node_, node_.GetInt("channel_slope", 0) ? 6 : 7, x.shape(), slope.shape());
    ctx.SetOutput(0, DType::kFloat32, x.shape());
    ctx.SetOutput(1, DType::kFloat32, slope.shape());
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(1);
    const float* dy = ctx.Input(0).data<float>();
    const float* xs = x.data<float>();
    const float* s = ctx.Input(2).data<float>();
    float* dx = ctx.HasOutput(0) ? ctx.Output(0).data<float>() : nullptr;
    float* ds = ctx.HasOutput(1) ? ctx.Output(1).data<float>() : nullptr;
    if (ds) std::memset(ds, 0, ctx.Output(1).nbytes());
    // Operands: dY, X and dX (row-major over X), slope and dSlope (broadcast).
    StrideSet<2> strides = {RowMajorStrides(x.shape()), BroadcastStrides(slope_shape_, x.shape())};
    ForEachRow<2>(x.shape(), std::move(strides),
                  [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                    for (int64_t i = 0; i < n; ++i) {
                      const int64_t a = off[0] + i * st[0], b = off[1] + i * st[1];
                      if (dx) dx[a] = PReluInputGrad(dy[a], xs[a], s[b]);
                      if (ds) ds[b] += PReluSlopeGradTerm(dy[a], xs[a]);
                    }
                  });
  }

 private:
  Shape slope_shape_;
};

// dA of x^e for one exponent e over a contiguous range.
OT_VECTOR_CLONES void PowBaseGradRange(const float* dy, const float* a, float* da, int64_t n, float e) {
  if (e == 2.f) {
    for (int64_t i = 0; i < n; ++i) da[i] = 2.f * a[i] * dy[i];
  } else if (e == 0.f) {
    for (int64_t i = 0; i < n; ++i) da[i] = 0.f;
  } else {
    for (int64_t i = 0; i < n; ++i) da[i] = dy[i] * e * std::pow(a[i], e - 1.f);
  }
}

// PowGrad(dY, A, B) -> dA = dY * B * A^(B-1) (0 where B == 0), dB = dY * A^B * ln A (0
// where A == 0 and B >= 0), both shaped like dY, as PyTorch's pow backward. A is
// float32; B float32 or an integer type (then dB is not available).
class PowGradKernel final : public OpKernel {
 public:
  explicit PowGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override { PreparePowGradOutputs(node_, ctx); }

  void Compute(KernelContext& ctx) override {
    switch (ctx.Input(2).dtype()) {
      case DType::kInt32: return Run<int32_t>(ctx);
      case DType::kInt64: return Run<int64_t>(ctx);
      default: return Run<float>(ctx);
    }
  }

 private:
  template <typename E>
  void Run(KernelContext& ctx) {
    const Tensor& dyt = ctx.Input(0);
    // x^e with one exponent and dA alone (LayerNorm's decomposition before opset 17 squares
    // with Pow(x, 2.0)): a contiguous loop.
    if (ctx.Input(2).numel() == 1 && ctx.Input(1).shape() == dyt.shape() && !ctx.HasOutput(1) && ctx.HasOutput(0)) {
      const float e = static_cast<float>(*ctx.Input(2).data<E>());
      const float* dy = dyt.data<float>();
      const float* a = ctx.Input(1).data<float>();
      float* da = ctx.Output(0).data<float>();
      ForEachChunk(dyt.numel(), kParallelElements, [&](int64_t begin, int64_t end) {
        PowBaseGradRange(dy + begin, a + begin, da + begin, end - begin, e);
      });
      return;
    }
    const float* dy = dyt.data<float>();
    const float* a = ctx.Input(1).data<float>();
    const E* b = ctx.Input(2).data<E>();
    float* da = ctx.HasOutput(0) ? ctx.Output(0).data<float>() : nullptr;
    float* db = ctx.HasOutput(1) ? ctx.Output(1).data<float>() : nullptr;
    StrideSet<3> strides = {RowMajorStrides(dyt.shape()), BroadcastStrides(ctx.Input(1).shape(), dyt.shape()),
                            BroadcastStrides(ctx.Input(2).shape(), dyt.shape())};
    ForEachRow<3>(dyt.shape(), std::move(strides),
                  [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
                    for (int64_t i = 0; i < n; ++i) {
                      const int64_t o = off[0] + i * st[0];
                      const float x = a[off[1] + i * st[1]];
                      const float e = static_cast<float>(b[off[2] + i * st[2]]);
                      if (da) da[o] = PowBaseGrad(dy[o], x, e);
                      if (db) db[o] = PowExponentGrad(dy[o], x, e);
                    }
                  });
  }
};

// MinMaxGrad(dY, Y, X0, X1, ...) -> dX0, dX1, ... (each shaped like dY; absent outputs are
// not computed).
class MinMaxGradKernel final : public OpKernel {
 public:
  explicit MinMaxGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    if (ctx.NumInputs() < 3) Fail("expects dY, Y and at least one input");
    if (ctx.NumOutputs() != ctx.NumInputs() - 2) Fail("expects one output per forward input");
    for (int i = 0; i < ctx.NumInputs(); ++i) RequireFloat32(node_, ctx.Input(i), "input");
    if (ctx.Input(1).shape() != dy.shape()) Fail("Y's shape differs from the gradient's");
    for (int i = 2; i < ctx.NumInputs(); ++i) {
      if (BroadcastShapes(ctx.Input(i).shape(), dy.shape(), node_) != dy.shape())
        Fail("input " + std::to_string(i) + " does not broadcast to Y's shape " + ShapeString(dy.shape()));
      ctx.SetOutput(i - 2, DType::kFloat32, dy.shape());
    }
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& dyt = ctx.Input(0);
    const Shape& shape = dyt.shape();
    const size_t k = static_cast<size_t>(ctx.NumInputs() - 2);
    std::vector<const float*> xs(k);
    std::vector<float*> dxs(k, nullptr);
    std::vector<std::vector<int64_t>> strides(k);
    for (size_t j = 0; j < k; ++j) {
      const Tensor& x = ctx.Input(static_cast<int>(j) + 2);
      xs[j] = x.data<float>();
      strides[j] = BroadcastStrides(x.shape(), shape);
      if (ctx.HasOutput(static_cast<int>(j))) dxs[j] = ctx.Output(static_cast<int>(j)).data<float>();
    }
    const float* dy = dyt.data<float>();
    const float* y = ctx.Input(1).data<float>();
    std::vector<int64_t> index(shape.size(), 0), off(k, 0);
    for (int64_t i = 0, n = dyt.numel(); i < n; ++i) {
      int ties = 0;
      for (size_t j = 0; j < k; ++j) ties += xs[j][off[j]] == y[i];
      const float share = ties ? dy[i] / static_cast<float>(ties) : 0.f;
      for (size_t j = 0; j < k; ++j)
        if (dxs[j]) dxs[j][i] = xs[j][off[j]] == y[i] ? share : 0.f;
      for (size_t d = shape.size(); d-- > 0;) {  // odometer over Y's index
        for (size_t j = 0; j < k; ++j) off[j] += strides[j][d];
        if (++index[d] < shape[d]) break;
        for (size_t j = 0; j < k; ++j) off[j] -= strides[j][d] * shape[d];
        index[d] = 0;
      }
    }
  }
};
OT_REGISTER_KERNEL(kGradDomain, "ActivationGrad", 1, kLatestOpset, DeviceType::kCPU, ActivationGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "PReluGrad", 1, kLatestOpset, DeviceType::kCPU, PReluGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "PowGrad", 1, kLatestOpset, DeviceType::kCPU, PowGradKernel);
OT_REGISTER_KERNEL(kGradDomain, "MinMaxGrad", 1, kLatestOpset, DeviceType::kCPU, MinMaxGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
