// Device-neutral Prepare logic of the data-movement ops; see op_shapes.h.
#include "runtime/ops/shapes/op_shapes.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "graph/error.h"
#include "runtime/ops/math/index_math.h"

namespace ot {
namespace {

[[noreturn]] void Fail(const Node& node, const std::string& what) { throw Error(node.Describe() + ": " + what); }
[[noreturn]] void Unsupported(const Node& node, const std::string& what) {
  throw UnsupportedError(node.op_type + ": " + what);
}

// First index and element count of start:end:step on a dimension, clamped as ONNX says.
void SliceAxis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t* first, int64_t* count) {
  *first = *count = 0;
  if (dim == 0) return;
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    *count = end > start ? (end - start - 1) / step + 1 : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    *count = start > end ? (start - end - 1) / -step + 1 : 0;
  }
  *first = *count > 0 ? start : 0;
}

}  // namespace

size_t CheckedElementSize(const Tensor& t, const Node& node) {
  size_t size = DTypeSize(t.dtype());
  if (size == 0) throw UnsupportedError(node.op_type + ": data type " + DTypeName(t.dtype()));
  return size;
}

StridedView TransposeView(const Node& node, const Shape& x) {
  const int64_t rank = static_cast<int64_t>(x.size());
  std::vector<int64_t> perm = node.GetInts("perm");
  if (perm.empty())
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != rank)
    Fail(node, "perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(rank));
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  const std::vector<int64_t> in_strides = RowMajorStrides(x);
  StridedView v;
  for (int64_t p : perm) {
    size_t axis = static_cast<size_t>(NormalizeAxis(p, rank, node));
    if (seen[axis]) Fail(node, "perm repeats axis " + std::to_string(p));
    seen[axis] = true;
    v.shape.push_back(x[axis]);
    v.strides.push_back(in_strides[axis]);
  }
  return v;
}

StridedView SliceView(const Node& node, int opset, const KernelContext& ctx, ShapeInputValues& inputs, const Shape& x,
                      int first_input) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (opset < 10) {
    starts = node.GetInts("starts");
    ends = node.GetInts("ends");
    axes = node.GetInts("axes");
  } else {
    starts = inputs.Read(ctx, first_input);
    ends = inputs.Read(ctx, first_input + 1);
    axes = inputs.Read(ctx, first_input + 2);
    steps = inputs.Read(ctx, first_input + 3);
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    Fail(node, "starts, ends, axes and steps differ in length");

  const int64_t rank = static_cast<int64_t>(x.size());
  StridedView v{x, RowMajorStrides(x), 0};
  std::vector<bool> seen(x.size(), false);
  for (size_t i = 0; i < starts.size(); ++i) {
    size_t axis = static_cast<size_t>(NormalizeAxis(axes[i], rank, node));
    if (seen[axis]) Fail(node, "axis " + std::to_string(axes[i]) + " is sliced twice");
    seen[axis] = true;
    if (steps[i] == 0) Fail(node, "step must not be 0");
    int64_t first = 0, count = 0;
    SliceAxis(x[axis], starts[i], ends[i], steps[i], &first, &count);
    v.shape[axis] = count;
    v.offset += first * v.strides[axis];
    v.strides[axis] *= steps[i];
  }
  return v;
}

StridedView TileView(const Node& node, const KernelContext& ctx, ShapeInputValues& inputs, const Shape& x, Shape* out) {
  std::vector<int64_t> repeats = inputs.Read(ctx, 1);
  if (repeats.size() != x.size())
    Fail(node, "repeats has " + std::to_string(repeats.size()) + " entries for rank " + std::to_string(x.size()));
  const std::vector<int64_t> in_strides = RowMajorStrides(x);
  StridedView v;
  out->clear();
  for (size_t d = 0; d < repeats.size(); ++d) {
    if (repeats[d] < 0) Fail(node, "repeats must not be negative");
    out->push_back(x[d] * repeats[d]);
    v.shape.insert(v.shape.end(), {repeats[d], x[d]});
    v.strides.insert(v.strides.end(), {0, in_strides[d]});
  }
  return v;
}

AxisSplit SplitAround(const Shape& shape, int64_t axis, size_t esize) {
  AxisSplit s;
  s.inner_bytes = static_cast<int64_t>(esize);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (static_cast<int64_t>(d) < axis) s.outer *= shape[d];
    else if (static_cast<int64_t>(d) > axis) s.inner_bytes *= shape[d];
  }
  return s;
}

Shape ConcatOutputShape(const Node& node, int opset, const KernelContext& ctx, int64_t* axis) {
  const Tensor& first = ctx.Input(0);
  if (first.rank() == 0) Fail(node, "cannot concatenate scalars");
  if (!node.HasAttr("axis") && opset >= 4) Fail(node, "attribute 'axis' is required");
  const int64_t a = NormalizeAxis(node.GetInt("axis", 1), first.rank(), node);
  *axis = a;
  Shape out = first.shape();
  out[static_cast<size_t>(a)] = 0;
  for (int i = 0; i < ctx.NumInputs(); ++i) {
    const Tensor& in = ctx.Input(i);
    Shape expect = out;
    expect[static_cast<size_t>(a)] = in.rank() == first.rank() ? in.dim(static_cast<int>(a)) : -1;
    if (in.dtype() != first.dtype() || in.shape() != expect)
      Fail(node, "input " + std::to_string(i) + " (" + in.Describe() + ") does not match input 0 (" + first.Describe() +
                     ") outside axis " + std::to_string(a));
    out[static_cast<size_t>(a)] += in.dim(static_cast<int>(a));
  }
  return out;
}

std::vector<int64_t> PrepareSplitOutputs(const Node& node, int opset, KernelContext& ctx, ShapeInputValues& inputs,
                                         int64_t* axis) {
  const Tensor& x = ctx.Input(0);
  const int64_t a = NormalizeAxis(node.GetInt("axis", 0), x.rank(), node);
  *axis = a;
  const int64_t dim = x.dim(static_cast<int>(a));
  const int n = ctx.NumOutputs();
  std::vector<int64_t> sizes = opset >= 13 ? inputs.Read(ctx, 1) : node.GetInts("split");
  if (sizes.empty() && opset >= 18) {  // num_outputs pieces of ceil(dim / n), the last smaller
    if (!node.HasAttr("num_outputs")) Fail(node, "needs the split input or attribute 'num_outputs'");
    if (node.GetInt("num_outputs", 0) != n)
      Fail(node, "num_outputs " + std::to_string(node.GetInt("num_outputs", 0)) + " differs from the node's " +
                     std::to_string(n) + " outputs");
    const int64_t chunk = (dim + n - 1) / n;
    for (int i = 0; i < n; ++i) sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - chunk * i)));
  }
  if (sizes.empty()) {
    if (n == 0 || dim % n != 0)
      Fail(node, "dimension " + std::to_string(dim) + " cannot be split evenly into " + std::to_string(n) + " outputs");
    sizes.assign(static_cast<size_t>(n), dim / n);
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) Fail(node, "split sizes must not be negative");
    total += s;
  }
  if (static_cast<int>(sizes.size()) != n || total != dim)
    Fail(node, "split sizes " + ShapeString(sizes) + " do not divide dimension " + std::to_string(dim) + " into " +
                   std::to_string(n) + " outputs");
  for (int i = 0; i < n; ++i) {
    Shape s = x.shape();
    s[static_cast<size_t>(a)] = sizes[static_cast<size_t>(i)];
    ctx.SetOutput(i, x.dtype(), s);
  }
  return sizes;
}

std::vector<int64_t> PrepareConcatGradOutputs(const Node& node, KernelContext& ctx, int64_t* axis) {
  const Tensor& dy = ctx.Input(0);
  const int64_t a = NormalizeAxis(node.GetInt("axis", 0), dy.rank(), node);
  *axis = a;
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (int i = 1; i < ctx.NumInputs(); ++i) {
    ctx.SetOutput(i - 1, dy.dtype(), ctx.Input(i).shape());
    sizes.push_back(ctx.Input(i).dim(static_cast<int>(a)));
    total += sizes.back();
  }
  if (total != dy.dim(static_cast<int>(a))) Fail(node, "the pieces do not add up to the gradient's axis");
  return sizes;
}

void RequireIndexType(const Tensor& indices, const Node& node) {
  if (indices.dtype() != DType::kInt64 && indices.dtype() != DType::kInt32)
    throw Error(node.Describe() + ": indices must be int32 or int64, not " + DTypeName(indices.dtype()));
}

int64_t CheckedIndex(int64_t raw, int64_t dim, const Node& node) {
  if (!IndexInRange(raw, dim))
    throw Error(node.Describe() + ": index " + std::to_string(raw) + " is out of range for dimension of size " +
                std::to_string(dim));
  return WrapIndex(raw, dim);
}

Shape GatherOutputShape(const Node& node, const Tensor& data, const Tensor& indices, int64_t* axis) {
  RequireIndexType(indices, node);
  if (data.rank() == 0) Fail(node, "cannot gather from a scalar");
  const int64_t a = NormalizeAxis(node.GetInt("axis", 0), data.rank(), node);
  *axis = a;
  Shape out(data.shape().begin(), data.shape().begin() + a);
  out.insert(out.end(), indices.shape().begin(), indices.shape().end());
  out.insert(out.end(), data.shape().begin() + a + 1, data.shape().end());
  return out;
}

int64_t GatherElementsAxis(const Node& node, const Tensor& data, const Tensor& indices) {
  RequireIndexType(indices, node);
  if (data.rank() == 0 || indices.rank() != data.rank())
    Fail(node, "data " + data.Describe() + " and indices " + indices.Describe() + " must have the same rank >= 1");
  const int64_t axis = NormalizeAxis(node.GetInt("axis", 0), data.rank(), node);
  for (int d = 0; d < data.rank(); ++d)
    if (d != axis && indices.dim(d) > data.dim(d))
      Fail(node, "indices " + indices.Describe() + " exceed data " + data.Describe() + " on axis " + std::to_string(d));
  return axis;
}

std::vector<int64_t> PadsOnAllAxes(const Node& node, std::vector<int64_t> pads, const std::vector<int64_t>& axes,
                                   size_t rank) {
  if (axes.empty()) return pads;
  if (pads.size() != 2 * axes.size())
    Fail(node, "pads has " + std::to_string(pads.size()) + " entries for " + std::to_string(axes.size()) + " axes");
  std::vector<int64_t> full(2 * rank, 0);
  std::vector<bool> seen(rank, false);
  for (size_t k = 0; k < axes.size(); ++k) {
    const auto d = static_cast<size_t>(NormalizeAxis(axes[k], static_cast<int64_t>(rank), node));
    if (seen[d]) Fail(node, "axis " + std::to_string(axes[k]) + " is given twice in axes");
    seen[d] = true;
    full[d] = pads[k];
    full[d + rank] = pads[k + axes.size()];
  }
  return full;
}

PadPlan PreparePad(const Node& node, int opset, const KernelContext& ctx, ShapeInputValues& inputs, const Shape& x) {
  PadPlan plan;
  plan.mode = node.GetString("mode", "constant");
  if (plan.mode != "constant" && plan.mode != "reflect" && plan.mode != "edge" && !(opset >= 19 && plan.mode == "wrap"))
    Fail(node, "mode must be constant, reflect, edge or (from opset 19) wrap, not '" + plan.mode + "'");
  plan.pads = opset < 11 ? node.GetInts("pads") : inputs.Read(ctx, 1);
  const size_t rank = x.size();
  if (opset >= 18) plan.pads = PadsOnAllAxes(node, plan.pads, inputs.Read(ctx, 3), rank);
  if (plan.pads.size() != 2 * rank)
    Fail(node, "pads has " + std::to_string(plan.pads.size()) + " entries for rank " + std::to_string(rank));
  plan.out.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t out = x[d] + plan.pads[d] + plan.pads[d + rank];
    if (out < 0) Fail(node, "pads " + ShapeString(plan.pads) + " crop axis " + std::to_string(d) + " below 0");
    if (plan.mode != "constant" && x[d] == 0 && out > 0)
      Fail(node, "cannot pad an empty axis in mode '" + plan.mode + "'");
    if (plan.mode == "wrap" && out > 0 && x[d] + std::min<int64_t>(plan.pads[d], 0) + std::min<int64_t>(plan.pads[d + rank], 0) <= 0)
      Fail(node, "pads " + ShapeString(plan.pads) + " crop axis " + std::to_string(d) + " to nothing, so it cannot wrap");
    plan.out[d] = out;
  }
  return plan;
}

std::vector<unsigned char> PadAttributeValue(const Node& node, DType t) {
  std::vector<unsigned char> bytes(DTypeSize(t), 0);
  const float value = node.GetFloat("value", 0.f);
  if (t == DType::kFloat32) {
    std::memcpy(bytes.data(), &value, sizeof value);
  } else if (t == DType::kFloat64) {
    const double d = value;
    std::memcpy(bytes.data(), &d, sizeof d);
  } else if (value != 0.f) {
    Unsupported(node, "attribute 'value' for data type " + DTypeName(t));
  }
  return bytes;
}

void CheckPadConstantValue(const Node& node, const Tensor* value, DType t) {
  if (value && value->numel() > 0 && value->dtype() != t)
    Fail(node, "constant_value has type " + DTypeName(value->dtype()) + ", data has " + DTypeName(t));
}

std::vector<int64_t> PadAxisSources(int64_t dim, int64_t begin, int64_t out_dim, const std::string& mode) {
  std::vector<int64_t> src(static_cast<size_t>(out_dim));
  for (int64_t o = 0; o < out_dim; ++o) {
    int64_t i = o - begin;
    if (i < 0 || i >= dim) {
      if (mode == "constant") {
        i = -1;
      } else if (mode == "wrap") {  // around what is left after cropping (negative pads) on either side
        const int64_t lo = std::max<int64_t>(-begin, 0), end = out_dim - dim - begin;
        const int64_t len = dim - lo - std::max<int64_t>(-end, 0);
        i = lo + ((i - lo) % len + len) % len;
      } else if (mode == "edge") {
        i = std::clamp<int64_t>(i, 0, dim - 1);
      } else if (dim == 1) {
        i = 0;
      } else {  // reflect: period 2*(dim-1), mirrored about both ends
        const int64_t period = 2 * (dim - 1);
        i = ((i % period) + period) % period;
        if (i >= dim) i = period - i;
      }
    }
    src[static_cast<size_t>(o)] = i;
  }
  return src;
}

std::vector<int64_t> PadGradBeginPads(const Node& node, const KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& x = ctx.Input(1);
  if (dy.dtype() != DType::kFloat32) Unsupported(node, "data type " + DTypeName(dy.dtype()));
  std::vector<int64_t> pads = node.GetInts("pads");
  if (const Tensor* p = ctx.OptionalInput(2)) pads = p->ToHost().AsInt64s();
  const size_t r = static_cast<size_t>(x.rank());
  if (const Tensor* axes = ctx.OptionalInput(3)) pads = PadsOnAllAxes(node, pads, axes->ToHost().AsInt64s(), r);
  if (pads.size() != 2 * r || dy.rank() != x.rank()) Fail(node, "pads do not match the input's rank");
  return std::vector<int64_t>(pads.begin(), pads.begin() + static_cast<long>(r));
}

Shape TransposeLastTwoShape(const Node& node, const Tensor& x) {
  if (x.dtype() != DType::kFloat32) Unsupported(node, "data type " + DTypeName(x.dtype()));
  if (x.rank() < 2) Fail(node, "needs rank >= 2, got " + ShapeString(x.shape()));
  Shape s = x.shape();
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  return s;
}

Shape WhereOutputShape(const Node& node, const Tensor& cond, const Tensor& x, const Tensor& y) {
  if (cond.dtype() != DType::kBool) Fail(node, "condition must be bool, not " + DTypeName(cond.dtype()));
  if (x.dtype() != y.dtype()) Fail(node, "X and Y differ in type: " + x.Describe() + " and " + y.Describe());
  CheckedElementSize(x, node);
  return BroadcastShapes(BroadcastShapes(cond.shape(), x.shape(), node), y.shape(), node);
}

void CheckClipBounds(const Node& node, const KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  for (int i = 1; i < 3; ++i) {
    const Tensor* bound = ctx.OptionalInput(i);
    if (!bound) continue;
    if (bound->dtype() != x.dtype())
      Fail(node, "bound " + std::to_string(i) + " has type " + DTypeName(bound->dtype()) + ", input has " +
                     DTypeName(x.dtype()));
    if (bound->numel() != 1)
      Fail(node, "bound " + std::to_string(i) + " must be a scalar, got shape " + ShapeString(bound->shape()));
  }
}

DType CastTargetType(const Node& node, const KernelContext& ctx) {
  // saturate (opset 19) and round_mode (opset 24) change only conversions to the float8
  // types, which onnx-train does not have: CheckDTypeSupported refuses those targets.
  const int32_t to = node.op_type == "CastLike" ? static_cast<int32_t>(ctx.Input(1).dtype())
                                                : static_cast<int32_t>(node.GetInt("to", 0));
  CheckDTypeSupported(to, node.op_type + ": the target type");
  return static_cast<DType>(to);
}

BinaryOp ParseBinaryOp(const std::string& op_type) {
  static const std::pair<const char*, BinaryOp> kOps[] = {
      {"Add", BinaryOp::kAdd},         {"Sum", BinaryOp::kAdd},
      {"Mean", BinaryOp::kAdd},        {"Sub", BinaryOp::kSub},
      {"Mul", BinaryOp::kMul},         {"Div", BinaryOp::kDiv},
      {"Pow", BinaryOp::kPow},         {"Max", BinaryOp::kMax},
      {"Min", BinaryOp::kMin},         {"Equal", BinaryOp::kEqual},
      {"Less", BinaryOp::kLess},       {"LessOrEqual", BinaryOp::kLessOrEqual},
      {"Greater", BinaryOp::kGreater}, {"GreaterOrEqual", BinaryOp::kGreaterOrEqual}};
  for (const auto& [name, op] : kOps)
    if (op_type == name) return op;
  throw Error("no binary op named " + op_type);
}

bool IsComparison(BinaryOp op) { return op >= BinaryOp::kEqual; }

bool IsVariadicBinary(const std::string& op_type) {
  return op_type == "Sum" || op_type == "Mean" || op_type == "Max" || op_type == "Min";
}

void CheckBinaryInputs(const Node& node, int opset, BinaryOp op, const KernelContext& ctx) {
  const int n = ctx.NumInputs();
  const bool variadic = IsVariadicBinary(node.op_type);
  if (n < 1 || (!variadic && n != 2)) Fail(node, "expects " + std::string(variadic ? "at least 1" : "2") + " inputs");
  const DType t = ctx.Input(0).dtype();
  const bool mixed_ok = op == BinaryOp::kPow && opset >= 12;
  for (int i = 1; i < n; ++i)
    if (!mixed_ok && ctx.Input(i).dtype() != t)
      Fail(node, "inputs have different data types (" + DTypeName(t) + " and " + DTypeName(ctx.Input(i).dtype()) + ")");
}

GemmShape ReadGemm(const Node& node, int opset, const Tensor& a, const Tensor& b, const Tensor* c) {
  // --amp's casts make A and B bfloat16 (or float16) while C, the bias, stays float32.
  const bool reduced = a.dtype() == DType::kBFloat16 || a.dtype() == DType::kFloat16;
  const DType c_type = reduced && c && c->dtype() == DType::kFloat32 ? DType::kFloat32 : a.dtype();
  if (b.dtype() != a.dtype() || (c && c->dtype() != c_type))
    Fail(node, "inputs have different data types (" + a.Describe() + ", " + b.Describe() + ")");
  if (a.rank() != 2 || b.rank() != 2)
    Fail(node, "A and B must be matrices, got " + a.Describe() + " and " + b.Describe());
  GemmShape g;
  g.trans_a = node.GetInt("transA", 0) != 0;
  g.trans_b = node.GetInt("transB", 0) != 0;
  g.alpha = node.GetFloat("alpha", 1.f);
  g.beta = node.GetFloat("beta", 1.f);
  g.M = g.trans_a ? a.dim(1) : a.dim(0);
  g.K = g.trans_a ? a.dim(0) : a.dim(1);
  g.N = g.trans_b ? b.dim(0) : b.dim(1);
  const int64_t kb = g.trans_b ? b.dim(1) : b.dim(0);
  if (kb != g.K)
    Fail(node, "inner dimensions differ: op(A) is [" + std::to_string(g.M) + ", " + std::to_string(g.K) +
                   "], op(B) is [" + std::to_string(kb) + ", " + std::to_string(g.N) + "]");
  if (c) {
    if (c->rank() == 1) g.c_cols = c->dim(0);
    if (c->rank() == 2) g.c_rows = c->dim(0), g.c_cols = c->dim(1);
    bool fits = c->rank() <= 2 && (g.c_rows == 1 || g.c_rows == g.M) && (g.c_cols == 1 || g.c_cols == g.N);
    if (opset < 7 && node.GetInt("broadcast", 0) == 0) fits = c->rank() == 2 && g.c_rows == g.M && g.c_cols == g.N;
    if (!fits)
      Fail(node, "C " + c->Describe() + " does not broadcast to the output [" + std::to_string(g.M) + ", " +
                     std::to_string(g.N) + "]" + (opset < 7 ? " (set broadcast=1 to broadcast it)" : ""));
  }
  return g;
}

void PrepareDropout(const Node& node, int opset, KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  if (opset >= 12) {
    if (const Tensor* r = ctx.OptionalInput(1); r && r->numel() != 1) Fail(node, "ratio must be a scalar");
    if (const Tensor* mode = ctx.OptionalInput(2); mode && (mode->dtype() != DType::kBool || mode->numel() != 1))
      Fail(node, "training_mode must be a bool scalar");
  }
  ctx.SetOutput(0, x.dtype(), x.shape());
  ctx.SetOutput(1, opset >= 10 ? DType::kBool : x.dtype(), x.shape());
}

void PreparePowGradOutputs(const Node& node, KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  for (int i : {0, 1})
    if (ctx.Input(i).dtype() != DType::kFloat32)
      Unsupported(node, std::string(i == 0 ? "gradient" : "base") + " of data type " + DTypeName(ctx.Input(i).dtype()));
  const DType e = ctx.Input(2).dtype();
  if (e != DType::kFloat32 && e != DType::kInt32 && e != DType::kInt64)
    Unsupported(node, "exponent of data type " + DTypeName(e));
  if (ctx.HasOutput(1) && e != DType::kFloat32) Fail(node, "the gradient of an integer exponent is not defined");
  for (int i : {1, 2})
    if (BroadcastShapes(ctx.Input(i).shape(), dy.shape(), node) != dy.shape())
      Fail(node, "input " + std::to_string(i) + " " + ShapeString(ctx.Input(i).shape()) +
                     " does not broadcast to the gradient's " + ShapeString(dy.shape()));
  ctx.SetOutput(0, DType::kFloat32, dy.shape());
  ctx.SetOutput(1, DType::kFloat32, dy.shape());
}

}  // namespace ot
