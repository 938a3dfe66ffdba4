// Device-neutral Prepare logic of the reductions; see reduce_shapes.h.
#include "runtime/ops/shapes/reduce_shapes.h"

#include <utility>

#include "graph/error.h"

namespace ot {
namespace {

[[noreturn]] void Fail(const Node& node, const std::string& what) { throw Error(node.Describe() + ": " + what); }
[[noreturn]] void Unsupported(const Node& node, const std::string& what) {
  throw UnsupportedError(node.op_type + ": " + what);
}

}  // namespace

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

void CheckReduceType(ReduceOp op, DType t, const Node& node) {
  const bool type_ok = t == DType::kFloat32 || t == DType::kFloat64 ||
                       ((t == DType::kInt32 || t == DType::kInt64) && DefinedForIntegers(op));
  if (!type_ok) Unsupported(node, "data type " + DTypeName(t));
}

std::vector<int64_t> ReadReduceAxes(const Node& node, int opset, ReduceOp op, const KernelContext& ctx,
                                    ShapeInputValues& inputs) {
  // ReduceSum takes axes as an input from opset 13 (the other reductions from 18).
  if (!(op == ReduceOp::kSum && opset >= 13) && opset < 18) return node.GetInts("axes");
  const Tensor* axes = ctx.OptionalInput(1);
  if (axes && axes->dtype() != DType::kInt64) Fail(node, "axes must be int64, got " + DTypeName(axes->dtype()));
  return inputs.Read(ctx, 1);
}

ReducePlan PlanReduce(const Node& node, ReduceOp op, DType t, const Shape& in, const std::vector<int64_t>& axes) {
  ReducePlan plan;
  plan.identity = axes.empty() && node.GetInt("noop_with_empty_axes", 0) != 0;
  const int64_t rank = static_cast<int64_t>(in.size());
  plan.reduced.assign(in.size(), axes.empty() && !plan.identity);
  for (int64_t a : axes) {
    const int64_t axis = NormalizeAxis(a, rank, node);
    if (plan.reduced[static_cast<size_t>(axis)]) Fail(node, "axis " + std::to_string(a) + " appears twice in axes");
    plan.reduced[static_cast<size_t>(axis)] = true;
  }
  const bool keepdims = node.GetInt("keepdims", 1) != 0;
  for (size_t d = 0; d < in.size(); ++d) {
    const int64_t size = in[d];
    const bool r = plan.reduced[d];
    if (r) plan.reduced_count *= size;
    plan.kept.push_back(r ? 1 : size);
    if (!r || keepdims) plan.out.push_back(r ? 1 : size);
  }
  if (op == ReduceOp::kMean && t != DType::kFloat32 && t != DType::kFloat64 && plan.reduced_count == 0 &&
      NumElements(plan.out) > 0)
    Fail(node, "the integer mean over an empty axis is undefined");
  return plan;
}

ArgExtremePlan PlanArgExtreme(const Node& node, const Shape& in) {
  ArgExtremePlan plan;
  const int64_t rank = static_cast<int64_t>(in.size());
  const int64_t axis = NormalizeAxis(node.GetInt("axis", 0), rank, node);
  const bool keepdims = node.GetInt("keepdims", 1) != 0;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t size = in[static_cast<size_t>(d)];
    if (d < axis) plan.outer *= size;
    else if (d == axis) plan.axis_size = size;
    else plan.inner *= size;
    if (d != axis) plan.out.push_back(size);
    else if (keepdims) plan.out.push_back(1);
  }
  if (plan.axis_size == 0 && plan.outer * plan.inner > 0)
    Fail(node, "cannot take " + node.op_type + " over an empty axis");
  plan.select_last = node.GetInt("select_last_index", 0) != 0;
  return plan;
}

Shape SumToShapeTarget(const Node& node, const KernelContext& ctx) {
  const Tensor& g = ctx.Input(0);
  if (g.dtype() != DType::kFloat32) Unsupported(node, "data type " + DTypeName(g.dtype()));
  Shape target = ctx.Input(1).ToHost().AsInt64s();
  if (BroadcastShapes(target, g.shape(), node) != g.shape())
    Fail(node, "gradient of shape " + ShapeString(g.shape()) + " cannot be summed to " + ShapeString(target));
  return target;
}

ReduceGradPlan PlanReduceGrad(const Node& node, const KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  if (dy.dtype() != DType::kFloat32) Unsupported(node, "data type " + DTypeName(dy.dtype()));
  ReduceGradPlan plan;
  plan.out = ctx.Input(1).ToHost().AsInt64s();
  std::vector<int64_t> axes = node.GetInts("axes");
  if (const Tensor* a = ctx.OptionalInput(2)) axes = a->ToHost().AsInt64s();
  plan.kept = plan.out;
  double count = 1;
  if (axes.empty() && node.GetInt("noop_with_empty_axes", 0) == 0)
    for (size_t d = 0; d < plan.out.size(); ++d) axes.push_back(static_cast<int64_t>(d));
  for (int64_t a : axes) {
    const size_t d = static_cast<size_t>(NormalizeAxis(a, static_cast<int64_t>(plan.out.size()), node));
    count *= static_cast<double>(plan.out[d]);
    plan.kept[d] = 1;
  }
  if (NumElements(plan.kept) != dy.numel())
    Fail(node, "gradient " + dy.Describe() + " does not fit the reduced shape " + ShapeString(plan.kept));
  plan.scale = node.GetInt("mean", 0) && count > 0 ? static_cast<float>(1.0 / count) : 1.f;
  return plan;
}

}  // namespace ot
