// Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceSumSquare, ReduceLogSum, ReduceLogSumExp (axes an attribute, or for ReduceSum from
// opset 13 an optional input with noop_with_empty_axes; keepdims), and ArgMax/ArgMin.
// float32 runs on oneDNN's reduction primitive where an algorithm matches; other types,
// LogSumExp and what oneDNN rejects run a strided loop that accumulates in double (in the
// element type for integers).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/cpu/layout/dnnl_util.h"
#include "runtime/cpu/dtype_dispatch.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cpu/strided_loop.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/shapes/reduce_shapes.h"

namespace ot {
namespace cpu {
namespace {

// Accumulates x into acc (sized like the kept-dims output) with combine(acc, value, out_index),
// walking x once; out_strides are 0 on reduced axes.
template <typename T, typename Acc, typename Combine>
void Accumulate(const T* x, const Shape& in_shape, const std::vector<int64_t>& out_strides, std::vector<Acc>& acc,
                Combine&& combine) {
  ForEachRow<2>(in_shape, {RowMajorStrides(in_shape), out_strides},
                [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                  const T* in = x + off[0];
                  if (st[1] == 0) {  // the run is along a reduced axis: one accumulator
                    Acc a = acc[static_cast<size_t>(off[1])];
                    for (int64_t i = 0; i < n; ++i) a = combine(a, static_cast<Acc>(in[i * st[0]]), off[1]);
                    acc[static_cast<size_t>(off[1])] = a;
                    return;
                  }
                  Acc* out = acc.data() + off[1];
                  for (int64_t i = 0; i < n; ++i)
                    out[i * st[1]] = combine(out[i * st[1]], static_cast<Acc>(in[i * st[0]]), off[1] + i * st[1]);
                });
}

// Loop reduction of x (in_shape) into y (out_numel elements) for one op.
template <typename T>
void ReduceLoop(ReduceOp op, const T* x, const Shape& in_shape, const std::vector<int64_t>& out_strides,
                int64_t reduced_count, T* y, int64_t out_numel) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
  // Identities of max and min: infinities for floating point, the type's limits otherwise.
  using Limits = std::numeric_limits<Acc>;
  const Acc kLowest = Limits::has_infinity ? -Limits::infinity() : Limits::lowest();
  const Acc kHighest = Limits::has_infinity ? Limits::infinity() : Limits::max();
  std::vector<Acc> acc(static_cast<size_t>(out_numel));
  auto run = [&](Acc init, auto combine) {
    std::fill(acc.begin(), acc.end(), init);
    Accumulate(x, in_shape, out_strides, acc, combine);
  };
  auto plus = [](Acc a, Acc v, int64_t) { return static_cast<Acc>(a + v); };
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
    case ReduceOp::kLogSum:
      run(Acc(0), plus);
      break;
    case ReduceOp::kProd:
      run(Acc(1), [](Acc a, Acc v, int64_t) { return static_cast<Acc>(a * v); });
      break;
    case ReduceOp::kMax:
      run(kLowest, [](Acc a, Acc v, int64_t) { return std::max(a, v); });
      break;
    case ReduceOp::kMin:
      run(kHighest, [](Acc a, Acc v, int64_t) { return std::min(a, v); });
      break;
    case ReduceOp::kL1:
      run(Acc(0), [](Acc a, Acc v, int64_t) { return static_cast<Acc>(a + (v < 0 ? -v : v)); });
      break;
    case ReduceOp::kL2:
    case ReduceOp::kSumSquare:
      run(Acc(0), [](Acc a, Acc v, int64_t) { return static_cast<Acc>(a + v * v); });
      break;
    case ReduceOp::kLogSumExp: {
      // log(sum(exp(x - max))) + max, stable for large inputs.
      run(kLowest, [](Acc a, Acc v, int64_t) { return std::max(a, v); });
      std::vector<Acc> max = acc;
      run(Acc(0),
          [&max](Acc a, Acc v, int64_t o) { return static_cast<Acc>(a + std::exp(v - max[static_cast<size_t>(o)])); });
      for (size_t o = 0; o < acc.size(); ++o) acc[o] = static_cast<Acc>(std::log(acc[o]) + max[o]);
      break;
    }
  }
  for (size_t o = 0; o < acc.size(); ++o) {
    Acc v = acc[o];
    if (op == ReduceOp::kMean)
      v = static_cast<Acc>(v / static_cast<Acc>(reduced_count));
    else if (op == ReduceOp::kL2)
      v = static_cast<Acc>(std::sqrt(v));
    else if (op == ReduceOp::kLogSum)
      v = static_cast<Acc>(std::log(v));
    y[o] = static_cast<T>(v);
  }
}

class ReduceKernel final : public OpKernel {
 public:
  explicit ReduceKernel(const KernelInfo& info) : OpKernel(info), op_(ParseReduceOp(info.node.op_type)) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const DType t = x.dtype();
    CheckReduceType(op_, t, node_);
    in_shape_ = x.shape();
    axes_ = ReadReduceAxes(node_, opset_, op_, ctx, axes_input_);
    const ReducePlan plan = PlanReduce(node_, op_, t, in_shape_, axes_);
    identity_ = plan.identity;
    reduced_count_ = plan.reduced_count;
    const Shape& kept_shape = plan.kept;
    const Shape& out_shape = plan.out;
    out_strides_ = BroadcastStrides(kept_shape, in_shape_);
    ctx.SetOutput(0, t, out_shape);
    use_dnnl_ = t == DType::kFloat32 && !identity_ && x.numel() > 0 && kept_shape != in_shape_ && PlanDnnl(kept_shape);
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    axes_input_.Check(ctx);
    if (identity_) {
      if (x.nbytes() > 0) std::memcpy(y.raw(), x.raw(), x.nbytes());
      return;
    }
    if (y.numel() == 0) return;
    if (use_dnnl_) {
      prim_.execute(Stream(), {{DNNL_ARG_SRC, Wrap(src_desc_, x)}, {DNNL_ARG_DST, Wrap(dst_desc_, y)}});
      Stream().wait();
      return;
    }
    DispatchType(TypeList<float, double, int32_t, int64_t>{}, x.dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      ReduceLoop<T>(op_, x.data<T>(), in_shape_, out_strides_, reduced_count_, y.data<T>(), y.numel());
    });
  }

 private:

  // oneDNN reduction from the input to the kept-dims shape; false when no algorithm fits
  // or the library declines.
  bool PlanDnnl(const Shape& kept_shape) {
    if (in_shape_.size() > DNNL_MAX_NDIMS) return false;
    dnnl::algorithm alg;
    float p = 0.f;
    dnnl::primitive_attr attr;
    switch (op_) {
      case ReduceOp::kSum:
        alg = dnnl::algorithm::reduction_sum;
        break;
      case ReduceOp::kMean:
        alg = dnnl::algorithm::reduction_mean;
        break;
      case ReduceOp::kMax:
        alg = dnnl::algorithm::reduction_max;
        break;
      case ReduceOp::kMin:
        alg = dnnl::algorithm::reduction_min;
        break;
      case ReduceOp::kProd:
        alg = dnnl::algorithm::reduction_mul;
        break;
      case ReduceOp::kL1:
        alg = dnnl::algorithm::reduction_norm_lp_sum;
        p = 1.f;
        break;
      case ReduceOp::kL2:
        alg = dnnl::algorithm::reduction_norm_lp_sum;
        p = 2.f;
        break;
      case ReduceOp::kSumSquare:
        alg = dnnl::algorithm::reduction_norm_lp_power_p_sum;
        p = 2.f;
        break;
      case ReduceOp::kLogSum: {
        alg = dnnl::algorithm::reduction_sum;
        dnnl::post_ops ops;
        ops.append_eltwise(1.f, dnnl::algorithm::eltwise_log, 0.f, 0.f);
        attr.set_post_ops(ops);
        break;
      }
      default:
        return false;
    }
    src_desc_ = PlainDesc(in_shape_, DType::kFloat32);
    dst_desc_ = PlainDesc(kept_shape, DType::kFloat32);
    dnnl::reduction::primitive_desc pd(dnnl::reduction::desc(alg, src_desc_, dst_desc_, p, 0.f), attr, Engine(), true);
    // oneDNN's reference reduction (chosen for axes its JIT kernels do not cover) is many
    // times slower than the loop here.
    if (!pd || std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return false;
    prim_ = dnnl::reduction(pd);
    return true;
  }

  const ReduceOp op_;
  Shape in_shape_;
  std::vector<int64_t> axes_;         // as given (attribute or input)
  ShapeInputValues axes_input_;       // the axes input read in Prepare, checked in Compute
  bool identity_ = false;             // empty axes with noop_with_empty_axes
  std::vector<int64_t> out_strides_;  // output offset per input dimension, 0 on reduced axes
  int64_t reduced_count_ = 1;
  bool use_dnnl_ = false;
  dnnl::memory::desc src_desc_, dst_desc_;
  dnnl::reduction prim_;
};

// ArgMax / ArgMin along one axis (int64 indices; first or last extreme on ties).
class ArgExtremeKernel final : public OpKernel {
 public:
  explicit ArgExtremeKernel(const KernelInfo& info) : OpKernel(info), is_max_(info.node.op_type == "ArgMax") {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (!TypeListHas(NumericTypes{}, x.dtype())) ThrowUnsupportedType(x.dtype(), node_);
    plan_ = PlanArgExtreme(node_, x.shape());
    ctx.SetOutput(0, DType::kInt64, plan_.out);
  }

  void Compute(KernelContext& ctx) override {
    DispatchType(NumericTypes{}, ctx.Input(0).dtype(), node_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = ctx.Input(0).data<T>();
      int64_t* y = ctx.Output(0).data<int64_t>();
      for (int64_t o = 0; o < plan_.outer; ++o) {
        for (int64_t i = 0; i < plan_.inner; ++i) {
          const T* row = x + o * plan_.axis_size * plan_.inner + i;
          int64_t best = 0;
          for (int64_t a = 1; a < plan_.axis_size; ++a) {
            T v = row[a * plan_.inner], b = row[best * plan_.inner];
            bool better = is_max_ ? (plan_.select_last ? v >= b : v > b) : (plan_.select_last ? v <= b : v < b);
            if (better) best = a;
          }
          y[o * plan_.inner + i] = best;
        }
      }
    });
  }

 private:
  const bool is_max_;
  ArgExtremePlan plan_;
};
// Opset 18 moves axes to an input for every reduction (ReduceSum at 13); ReadReduceAxes
// reads the attribute or the input as the opset says.
constexpr int64_t kAxesAttributeUntil = kLatestOpset;
OT_REGISTER_CPU_KERNEL("ReduceSum", 1, kLatestOpset, ReduceKernel);
OT_REGISTER_CPU_KERNEL("ReduceMean", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CPU_KERNEL("ReduceMax", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CPU_KERNEL("ReduceMin", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CPU_KERNEL("ReduceProd", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CPU_KERNEL("ReduceL1", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CPU_KERNEL("ReduceL2", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CPU_KERNEL("ReduceSumSquare", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CPU_KERNEL("ReduceLogSum", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CPU_KERNEL("ReduceLogSumExp", 1, kAxesAttributeUntil, ReduceKernel);
OT_REGISTER_CPU_KERNEL("ArgMax", 1, kLatestOpset, ArgExtremeKernel);
OT_REGISTER_CPU_KERNEL("ArgMin", 1, kLatestOpset, ArgExtremeKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
