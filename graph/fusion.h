// Fusion of decomposed ops before differentiation, as ONNX Runtime's GeluFusion and
// LayerNormFusion do. PyTorch exports GELU as Div, Erf, Add, Mul, Mul before opset 20 and
// LayerNorm as nine ops before opset 17; differentiated op by op they make some thirty
// passes over the activations per layer, each saved for the backward. Fused, each is one
// forward and one backward kernel (org.onnxtrain Gelu and LayerNormalization, whose
// gradient rules and kernels are those of runtime/ops/activation_math.h's GELU and of ONNX's
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

// Fusions of the training graph (after autodiff) that a runtime has kernels for: the
// training session applies them for the CPU device (`onnx-train grad` too, unless
// --no-fusion); the exported training graph keeps the plain ops.
//
// BatchNormalization followed by ReLU, the pair of nearly every convolutional network, is
// three passes over the activations in the forward (statistics, normalise, ReLU) and two in
// the backward (ReluGrad's mask, then the normalisation's gradient). FuseBatchNormRelu
// makes them one forward node and one backward node, as oneDNN's fuse_norm_relu does:
//
//   BatchNormTraining(X, ...) -> Y; Relu(Y) -> Z
//     becomes BatchNormTraining(X, ...) -> Z, ..., [mask]  with relu=1
//   ReluGrad(dZ, Z) -> dY; BatchNormalizationGrad(dY, X, scale, mean, var) -> dX, ...
//     becomes BatchNormalizationGrad(dZ, X, scale, mean, var, mask) -> dX, ...  with relu=1
//
// The mask (output 5 of the forward, input 5 of the gradient) is the runtime's own record
// of where the ReLU passed (oneDNN's workspace: one bit per value in blocked layouts), so
// the backward reads it instead of Z. Only pairs whose Y and dY have no other reader and
// are no graph output fuse; the forward fuses alone where its gradient has another form.
// The function is the same; float32 rounding is the same too (the ReLU is exact).
// Synchronised batch normalisation (--sync-bn) is left as it is. Kernels: CPU only (the
// CUDA kernels refuse relu=1), so the training session fuses for the CPU device.

struct BatchNormReluFusion {
  int forward = 0;   // BatchNormTraining + Relu pairs fused
  int backward = 0;  // of them, also ReluGrad + BatchNormalizationGrad
};

BatchNormReluFusion FuseBatchNormRelu(Model& training_model);

// Add(A, B) -> Y; Relu(Y) -> Z  becomes  org.onnxtrain AddRelu(A, B) -> Z (ResNet's residual
// sum): one pass instead of two in the forward; ReluGrad(dZ, Z) and Add's gradient stay as
// they are. Only where Y has no other reader and is no graph output, and at opsets of 7 and
// later (numpy broadcasting, which AddRelu follows). Returns how many pairs it fused. CPU
// kernel only, as above.
int FuseAddRelu(Model& training_model);

}  // namespace ot
