// Device-neutral Prepare logic of the unary activations (runtime/ops/math/activation_math.h) and
// PRelu: the op type as a UnaryFn, its attributes with ONNX's defaults, Clip's bounds,
// and how PRelu's slope lines up with X. Kernels of every device call these.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "graph/ir.h"
#include "runtime/ops/math/activation_math.h"
#include "runtime/core/kernel.h"
#include "runtime/core/tensor.h"

namespace ot {

// The UnaryFn named by an ONNX op type; false when there is none.
bool ParseUnaryFn(const std::string& op_type, UnaryFn* fn);
// The UnaryFn that `node` computes for the op type `op_type` (the node's own, or the forward
// op an ActivationGrad names), in the form its attributes choose: Gelu with approximate
// "tanh" is kGeluTanh ("none" or absent: the erf form). false when the op has none; throws
// naming the node for an approximate other than "none" or "tanh".
bool ParseNodeUnaryFn(const Node& node, const std::string& op_type, UnaryFn* fn);
// The op's attributes (ONNX defaults where absent). Clip's bounds are not attributes from
// opset 11 on: read them with ReadClipBounds.
UnaryParams ReadUnaryParams(const Node& node, UnaryFn fn);
// Clip's bounds as float: the attributes 'min'/'max' when present, else the optional
// float32 or float64 scalar inputs `first_input` and `first_input + 1`; -inf/+inf where
// neither is given.
std::pair<float, float> ReadClipBounds(const Node& node, const KernelContext& ctx, int first_input);

// PRelu(X, slope): the slope's shape aligned for numpy broadcasting to X (unidirectional:
// the output is X's shape). Before opset 7 a 1-D slope of X's channel count applies along
// axis 1 (as the opset-6 models PyTorch wrote); it becomes [C, 1, ...]. Throws naming
// the node when the slope does not broadcast to X.
Shape PReluSlopeShape(const Node& node, int64_t opset, const Shape& x, const Shape& slope);

}  // namespace ot
