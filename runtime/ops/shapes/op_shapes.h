// Device-neutral Prepare logic of the data-movement ops (Transpose, Slice, Tile, Concat,
// Split, Gather, GatherElements, Pad and the gradient-domain TransposeLastTwo,
// ConcatGrad, PadGrad), and of Gemm and Dropout: attribute and shape-input reading, validation and
// output shapes.
// The CPU and CUDA kernels both call these, so the two devices accept the same models and
// fail with the same messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/core/kernel.h"
#include "runtime/ops/checks/op_kinds.h"
#include "runtime/core/tensor.h"

namespace ot {

// Bytes per element of `t`; throws ot::UnsupportedError for types of no fixed size.
size_t CheckedElementSize(const Tensor& t, const Node& node);

// A dense walk over `shape` that reads its source at `offset` + sum(index * strides)
// (in elements). Transpose, Slice, Tile and Expand are each one such view of input 0.
struct StridedView {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

// Transpose by the node's `perm` (reversed axes when absent); the view's shape is the output.
StridedView TransposeView(const Node& node, const Shape& x);
// Slice: starts, ends, axes (attributes before opset 10) and steps (inputs from opset 10,
// read through `inputs` at `first_input` and the three after it: Slice's 1-4); the view's
// shape is the output.
StridedView SliceView(const Node& node, int opset, const KernelContext& ctx, ShapeInputValues& inputs, const Shape& x,
                      int first_input = 1);
// Tile by the repeats in input 1: the output seen as [r0, d0, r1, d1, ...] reads the input
// with strides [0, s0, 0, s1, ...]. Sets `out` to the output shape.
StridedView TileView(const Node& node, const KernelContext& ctx, ShapeInputValues& inputs, const Shape& x, Shape* out);

// A tensor seen as [outer, axis, inner] around one axis, in bytes per axis step.
struct AxisSplit {
  int64_t outer = 1;
  int64_t inner_bytes = 0;  // bytes of one step along the axis
};
AxisSplit SplitAround(const Shape& shape, int64_t axis, size_t esize);

// Concat: checks that the inputs agree outside the axis; returns the output shape and
// sets `axis` (normalised).
Shape ConcatOutputShape(const Node& node, int opset, const KernelContext& ctx, int64_t* axis);
// Split: declares the outputs; returns the size of each piece and sets `axis`.
std::vector<int64_t> PrepareSplitOutputs(const Node& node, int opset, KernelContext& ctx, ShapeInputValues& inputs,
                                         int64_t* axis);
// ConcatGrad(dY, X0, X1, ...): declares dXi shaped like Xi; returns the pieces' sizes
// along the axis and sets `axis`.
std::vector<int64_t> PrepareConcatGradOutputs(const Node& node, KernelContext& ctx, int64_t* axis);

// Throws unless `indices` is int32 or int64.
void RequireIndexType(const Tensor& indices, const Node& node);
// Maps index `raw` into [0, dim) allowing negative values; throws naming the node.
int64_t CheckedIndex(int64_t raw, int64_t dim, const Node& node);
// Gather: checks the inputs; returns the output shape and sets `axis`.
Shape GatherOutputShape(const Node& node, const Tensor& data, const Tensor& indices, int64_t* axis);
// GatherElements: checks the inputs (output shape is the indices'); returns the axis.
int64_t GatherElementsAxis(const Node& node, const Tensor& data, const Tensor& indices);

// Opset 18's Pad axes: pads given for `axes` only (begins, then ends) spread over all
// `rank` axes; `pads` as it is when axes is empty.
std::vector<int64_t> PadsOnAllAxes(const Node& node, std::vector<int64_t> pads, const std::vector<int64_t>& axes,
                                   size_t rank);
// Pad: mode (constant, reflect, edge, or from opset 19 wrap), pads (attribute before opset 11, else input 1;
// from opset 18 for the axes of input 3 when given)
// and the output shape, checked (no axis cropped below 0, no empty axis padded by
// reflect or edge).
struct PadPlan {
  std::string mode;
  std::vector<int64_t> pads;  // begin pads of every axis, then end pads
  Shape out;
};
PadPlan PreparePad(const Node& node, int opset, const KernelContext& ctx, ShapeInputValues& inputs, const Shape& x);
// The padding value's bytes (DTypeSize(t) of them) from the attribute `value` (opsets
// before 11): float32 and float64 take it, other types only 0.
std::vector<unsigned char> PadAttributeValue(const Node& node, DType t);
// Opset 11+: throws when the constant_value input is given in another type than the data.
void CheckPadConstantValue(const Node& node, const Tensor* value, DType t);
// Pad along one axis: the input index each output index reads, -1 where constant padding
// goes (reflect mirrors about both ends, edge repeats them, wrap continues from the other
// end of what negative pads leave).
std::vector<int64_t> PadAxisSources(int64_t dim, int64_t begin, int64_t out_dim, const std::string& mode);
// PadGrad(dY, X, pads[, axes]): checks the inputs and returns the begin pads of every axis.
std::vector<int64_t> PadGradBeginPads(const Node& node, const KernelContext& ctx);

// Gemm: Y [M, N] = alpha op(A) [M, K] op(B) [K, N] + beta C, C read as a [c_rows, c_cols]
// matrix broadcast to Y (each 1 or Y's dimension).
struct GemmShape {
  bool trans_a = false, trans_b = false;
  float alpha = 1.f, beta = 1.f;
  int64_t M = 0, K = 0, N = 0;
  int64_t c_rows = 1, c_cols = 1;
};
// Reads Gemm's attributes and checks its inputs: one data type, A and B matrices, equal
// inner dimensions, C (when given) broadcastable to Y (exactly [M, N] before opset 7 without
// broadcast=1). Throws ot::Error naming the node; data types are the kernels' to check.
GemmShape ReadGemm(const Node& node, int opset, const Tensor& a, const Tensor& b, const Tensor* c);

// Dropout(X[, ratio, training_mode]): declares Y (X's type and shape) and the mask (bool
// from opset 10, X's type before); from opset 12 checks that a given ratio is a scalar and
// a given training_mode a bool scalar. Throws ot::Error naming the node.
void PrepareDropout(const Node& node, int opset, KernelContext& ctx);

// TransposeLastTwo: float32 of rank >= 2; returns the output shape.
Shape TransposeLastTwoShape(const Node& node, const Tensor& x);

// The binary op an op type names (Add, Sum and Mean are kAdd); throws for others.
BinaryOp ParseBinaryOp(const std::string& op_type);
// Comparisons (Equal ... GreaterOrEqual) output bool.
bool IsComparison(BinaryOp op);
// Sum, Mean, Max and Min take one or more inputs; the other binary ops two.
bool IsVariadicBinary(const std::string& op_type);
// The input count, and one data type for all inputs (Pow from opset 12 takes an exponent
// of another type).
void CheckBinaryInputs(const Node& node, int opset, BinaryOp op, const KernelContext& ctx);

// Where(cond, X, Y): bool condition, X and Y of one fixed-size type; returns the
// broadcast output shape.
Shape WhereOutputShape(const Node& node, const Tensor& cond, const Tensor& x, const Tensor& y);
// Clip from opset 11: the optional bounds (inputs 1 and 2) are scalars of the input's type.
void CheckClipBounds(const Node& node, const KernelContext& ctx);
// Cast / CastLike: the target type (attribute 'to', or input 1's type); throws
// ot::UnsupportedError for the attribute 'saturate'.
DType CastTargetType(const Node& node, const KernelContext& ctx);

// PowGrad(dY, A, B) -> dA, dB: dY and A float32, B float32/int32/int64 (no dB for an integer
// exponent), A and B broadcasting to dY. Declares both outputs shaped like dY.
void PreparePowGradOutputs(const Node& node, KernelContext& ctx);

}  // namespace ot
