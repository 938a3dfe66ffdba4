// MaxUnpool (opset 9+) and its gradient on the CPU, float32.
//
//   MaxUnpool(X, I[, output_shape]) -> Y: zeros, with each X value written where its
//     index I (a flat position from MaxPool's Indices, over N x C x the unpooled shape
//     (in - 1) * stride + kernel - pads) points. With output_shape, the positions keep
//     their coordinates in that unpooled shape and Y is that shape grown at the end (as
//     ONNX's backend data has it). Two values at one position: the later one wins.
//   MaxUnpoolGrad(dY, I[, output_shape]) -> dX (org.onnxtrain, forward attributes):
//     dX = dY at each value's position, 0 for a value another one overwrote.
#include <vector>

#include "graph/op_domains.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/ops/shapes/window_geometry.h"
#include "runtime/core/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

// Where each index lands in Y (flat), checked; shared by the forward and the gradient.
struct UnpoolPlan {
  Shape y;                        // output shape
  std::vector<int64_t> positions;  // per element of I
};

UnpoolPlan PlanUnpool(const Node& node, const KernelContext& ctx, ShapeInputValues& shape_inputs, const Shape& x,
                      const Tensor& indices) {
  auto fail = [&](const std::string& what) { throw Error(node.Describe() + ": " + what); };
  if (x.size() < 3) fail("input of shape " + ShapeString(x) + " must be N x C x D1 x ...");
  if (indices.dtype() != DType::kInt64) fail("indices must be int64, not " + DTypeName(indices.dtype()));
  if (indices.shape() != x) fail("indices " + indices.Describe() + " must have the input's shape " + ShapeString(x));
  const size_t sr = x.size() - 2;
  const WindowAttrs a = ReadWindowAttrs(node, sr, {});
  Shape base = {x[0], x[1]};
  for (size_t d = 0; d < sr; ++d)
    base.push_back((x[d + 2] - 1) * a.strides[d] + a.kernel[d] - a.pads_begin[d] - a.pads_end[d]);
  UnpoolPlan p;
  p.y = base;
  if (ctx.OptionalInput(2)) {
    const std::vector<int64_t> want = shape_inputs.Read(ctx, 2);
    if (want.size() != base.size()) fail("output_shape must have " + std::to_string(base.size()) + " values");
    for (size_t d = 0; d < base.size(); ++d)
      if (want[d] < base[d])
        fail("output_shape " + ShapeString(want) + " is smaller than the unpooled shape " + ShapeString(base));
    p.y = want;
  }
  const int64_t base_n = NumElements(base);
  const std::vector<int64_t> y_strides = RowMajorStrides(p.y);
  const int64_t* idx = indices.data<int64_t>();
  p.positions.resize(static_cast<size_t>(indices.numel()));
  for (int64_t i = 0; i < indices.numel(); ++i) {
    int64_t r = idx[i];
    if (r < 0 || r >= base_n)
      fail("index " + std::to_string(r) + " is outside the unpooled shape " + ShapeString(base));
    int64_t pos = 0;
    for (size_t d = base.size(); d-- > 0;) {
      pos += (r % base[d]) * y_strides[d];
      r /= base[d];
    }
    p.positions[static_cast<size_t>(i)] = pos;
  }
  return p;
}

class MaxUnpoolKernel final : public OpKernel {
 public:
  explicit MaxUnpoolKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    if (ctx.Input(0).dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(ctx.Input(0).dtype()));
    shape_inputs_ = ShapeInputValues();
    const UnpoolPlan p = PlanUnpool(node_, ctx, shape_inputs_, ctx.Input(0).shape(), ctx.Input(1));
    ctx.SetOutput(0, DType::kFloat32, p.y);
  }

  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    // Indices are data: read them on every run.
    ShapeInputValues unused;
    const UnpoolPlan p = PlanUnpool(node_, ctx, unused, ctx.Input(0).shape(), ctx.Input(1));
    const float* x = ctx.Input(0).data<float>();
    float* y = ctx.Output(0).data<float>();
    std::fill(y, y + ctx.Output(0).numel(), 0.f);
    for (size_t i = 0; i < p.positions.size(); ++i) y[p.positions[i]] = x[i];
  }

 private:
  ShapeInputValues shape_inputs_;
};

class MaxUnpoolGradKernel final : public OpKernel {
 public:
  explicit MaxUnpoolGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    shape_inputs_ = ShapeInputValues();
    const Tensor& indices = ctx.Input(1);
    const UnpoolPlan p = PlanUnpool(node_, ctx, shape_inputs_, indices.shape(), indices);
    if (ctx.Input(0).shape() != p.y || ctx.Input(0).dtype() != DType::kFloat32)
      Fail("gradient " + ctx.Input(0).Describe() + " does not match the output shape " + ShapeString(p.y));
    ctx.SetOutput(0, DType::kFloat32, indices.shape());
  }

  void Compute(KernelContext& ctx) override {
    shape_inputs_.Check(ctx);
    ShapeInputValues unused;
    const Tensor& indices = ctx.Input(1);
    const UnpoolPlan p = PlanUnpool(node_, ctx, unused, indices.shape(), indices);
    const float* dy = ctx.Input(0).data<float>();
    float* dx = ctx.Output(0).data<float>();
    std::vector<int64_t> last(static_cast<size_t>(ctx.Input(0).numel()), -1);  // the value that stayed
    for (size_t i = 0; i < p.positions.size(); ++i) last[static_cast<size_t>(p.positions[i])] = static_cast<int64_t>(i);
    for (size_t i = 0; i < p.positions.size(); ++i)
      dx[i] = last[static_cast<size_t>(p.positions[i])] == static_cast<int64_t>(i) ? dy[p.positions[i]] : 0.f;
  }

 private:
  ShapeInputValues shape_inputs_;
};

OT_REGISTER_CPU_KERNEL("MaxUnpool", 9, kLatestOpset, MaxUnpoolKernel);
OT_REGISTER_KERNEL(kGradDomain, "MaxUnpoolGrad", 1, kLatestOpset, DeviceType::kCPU, MaxUnpoolGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
