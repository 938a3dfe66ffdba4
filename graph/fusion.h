// Fusion of decomposed ops before differentiation, as ONNX Runtime's GeluFusion and
// LayerNormFusion do. PyTorch exports GELU as Div, Erf, Add, Mul, Mul before opset 20 and
// LayerNorm as nine ops before opset 17; differentiated op by op they make some thirty
// passes over the activations per layer, each saved for the backward. Fused, each is one
// forward and one backward kernel (org.onnxtrain Gelu and LayerNormalization, whose
// gradient rules and kernels are those of runtime/activation_math.h's GELU and of ONNX's
// LayerNormalization). The fused graph computes the same function; only the order of
// float32 rounding changes.
#pragma once

#include "graph/ir.h"

namespace ot {

struct FusionCounts {
  int gelu = 0;
  int layer_norm = 0;
};

// Rewrites the patterns in place (their intermediate values must have no other readers and
// not be graph outputs) and declares the org.onnxtrain opset where it fused anything.
FusionCounts FuseDecomposedOps(Model& m);

}  // namespace ot
