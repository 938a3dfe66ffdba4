// Rewrite of ONNX ops that current ONNX no longer defines but models of the opset 1-9 era
// (the ONNX Model Zoo's Caffe2 conversions) still carry, into ops it does define, before the
// checker sees them:
//
//   ImageScaler(X) {scale, bias}  (experimental, opsets 1-9: Y = scale * X + bias[c] for
//   X of shape [N, C, H, W])
//     becomes Mul(X, Constant scale) then Add(., Constant bias), bias shaped [C, 1, 1]
//     (from opset 7) or [C] with broadcast=1, axis=1 (before). The constants are Constant
//     nodes, not initializers, so training leaves them as they are, as it would the
//     attributes.
#pragma once

#include "graph/ir.h"

namespace ot {

// Rewrites in place; returns how many nodes were replaced (0 when none).
int RewriteLegacyOps(Model& model);

}  // namespace ot
