// Device-neutral Prepare logic of the reductions (ReduceSum ... ReduceLogSumExp,
// ArgMax/ArgMin) and of their gradient-domain helpers SumToShape and ReduceGrad: op
// names, accepted types, axes and output shapes. The CPU and CUDA kernels both call
// these, so they accept the same models with the same messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/core/kernel.h"
#include "runtime/ops/checks/op_kinds.h"
#include "runtime/core/tensor.h"

namespace ot {

// The reduction an op type names; throws for other op types.
ReduceOp ParseReduceOp(const std::string& op_type);
// Reductions whose integer result is exact in the element type.
bool DefinedForIntegers(ReduceOp op);
// Throws ot::UnsupportedError unless `op` is defined for `t` (float32, float64, or int32
// and int64 for DefinedForIntegers).
void CheckReduceType(ReduceOp op, DType t, const Node& node);

// The axes of a reduction: the attribute, or for ReduceSum from opset 13 the optional
// int64 input 1 (read through `inputs`; empty when absent).
std::vector<int64_t> ReadReduceAxes(const Node& node, int opset, ReduceOp op, const KernelContext& ctx,
                                    ShapeInputValues& inputs);

// A reduction of an input shape over some axes.
struct ReducePlan {
  bool identity = false;      // no axes and noop_with_empty_axes: the output is the input
  std::vector<bool> reduced;  // per input dimension
  Shape kept;                 // the output with keepdims (1 on reduced dims)
  Shape out;                  // the output as the node's keepdims says
  int64_t reduced_count = 1;  // elements folded into each output element
};
// Plans reducing `in` over `axes` (all when empty, unless noop_with_empty_axes) for `op`
// on type `t`; throws for repeated axes and for an integer mean over an empty axis.
ReducePlan PlanReduce(const Node& node, ReduceOp op, DType t, const Shape& in, const std::vector<int64_t>& axes);

// ArgMax / ArgMin: the input seen as [outer, axis_size, inner] around the node's axis,
// the output shape (keepdims) and select_last_index. Throws for an empty axis of a
// non-empty output.
struct ArgExtremePlan {
  int64_t outer = 1, axis_size = 1, inner = 1;
  Shape out;
  bool select_last = false;
};
ArgExtremePlan PlanArgExtreme(const Node& node, const Shape& in);

// SumToShape(grad, shape): float32 grad that broadcasts from the target; returns the target.
Shape SumToShapeTarget(const Node& node, const KernelContext& ctx);

// ReduceGrad(dY, input_shape[, axes]): float32 dY shaped as the reduced input (kept dims);
// fills the input shape (the output), the kept-dims shape and the scale (1/count for a
// mean, else 1).
struct ReduceGradPlan {
  Shape out, kept;
  float scale = 1.f;
};
ReduceGradPlan PlanReduceGrad(const Node& node, const KernelContext& ctx);

}  // namespace ot
