// Fusion of decomposed ops before differentiation, as ONNX Runtime's GeluFusion and
// LayerNormFusion do. PyTorch exports GELU as Div, Erf, Add, Mul, Mul before opset 20 and
// LayerNorm as nine ops before opset 17; differentiated op by op they make some thirty
// passes over the activations per layer, each saved for the backward. Fused, each is one
// forward and one backward kernel (org.onnxtrain Gelu and LayerNormalization, whose
// gradient rules and kernels are those of runtime/ops/math/activation_math.h's GELU and of ONNX's
// LayerNormalization). The fused graph computes the same function; only the order of
// float32 rounding changes.
//
// Attention written out as ops (scores, scale, mask, Softmax, weighted sum) fuses into one
// org.onnxtrain Attention node with ONNX Attention-23's inputs, attributes and semantics
// (3D inputs as [batch, sequence, hidden] with one head, 4D as [batch, heads, sequence,
// size]); its gradient is one AttentionGrad node (graph/autodiff/gradient_rules_attention.cc). The
// forms PyTorch writes:
//   torch 1.13's nn.MultiheadAttention (3D [batch*heads, T, d]):
//     MatMul(Div(Q, sqrt d), Transpose(K, [1, 2, 0])) [Mul(., 1) Add(., mask)] -> Softmax -> MatMul(., V)
//   hand-written attention: MatMul(Q, Transpose(K)) -> Div(., sqrt d) or Mul(., 1/sqrt d)
//     [Add(., mask) or Where(bool mask, ., -inf)] -> Softmax -> MatMul(., V)
//   torch 2.x's dynamo exporter of scaled_dot_product_attention below opset 23:
//     MatMul(Mul(Q, sqrt s), Mul(K^T, sqrt s)) [Add(., causal constant)] -> Softmax -> MatMul(., V)
// K^T from a Transpose of K becomes K by changing that Transpose's permutation; otherwise
// a Transpose is inserted. Where Q, K and V are Transposes of sequence-first [T, n, d]
// tensors and Y's one reader transposes it back (nn.MultiheadAttention in torch 1.13), the
// fused node reads and writes those directly (sequence_first=1) and the four Transposes go. A constant mask that is exactly causal (0 on and below the
// diagonal, -inf above; true/false for a bool mask) becomes is_causal=1, which lets the
// kernel skip the masked blocks. The fused node's output 4 (row logsumexp) and output 5
// (the probabilities, which the CPU kernel fills only where q_len and total_len are at most
// 128 and leaves empty beyond) go to the gradient, so that AttentionGrad recomputes no row
// statistics and, for short sequences, no Q.K^T. Only chains whose intermediate values have no other
// reader, whose scalings are before the mask, whose Softmax is over the last axis and whose
// ranks are known to agree (3 or 4) fuse.
//
// A product with a transposed weight matrix, MatMul(A, Transpose(W, [1, 0])) with W 2-D (how
// torch 2.x's exporter writes a Linear whose weight is shared, GPT-2's tied lm_head: W is also
// the token embedding), becomes Gemm(A, W, transB=1), A of rank > 2 flattened to rows and Y
// reshaped back (opset 13 and later; only where every reader of the Transpose is such a
// product). The forward then transposes no copy of W, and Gemm's gradient rule needs no
// transpose either: the three copies of a 50257 x 384 matrix a GPT-2-shaped step made
// (W^T, dY @ W's TransposeLastTwo, the gradient transposed back) go.
#pragma once

#include "graph/ir.h"

namespace ot {

struct FusionCounts {
  int gelu = 0;
  int layer_norm = 0;
  int attention = 0;
  int transposed_weights = 0;
};

// Rewrites the patterns in place (their intermediate values must have no other readers and
// not be graph outputs) and declares the org.onnxtrain opset where it fused anything.
FusionCounts FuseDecomposedOps(Model& m, bool attention = true);

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

// MatMul(A, W) -> Y; Add(Y, bias) -> Z  becomes  org.onnxtrain MatMulAdd(A, W, bias) -> Z, where
// W is a weight (an initializer, or a Cast of one under --amp) of [.., K, N] and bias a float32
// [N] initializer: the Linear layers of a transformer as PyTorch exports them on 3D inputs. The
// CPU kernel adds the bias as oneDNN writes the product (one pass over Z instead of two). Run
// on the training graph (after autodiff and the --amp casts: the gradients of MatMul and Add
// read neither Y nor Z's producer); Y must have no other reader. Float32 rounding is the
// same: the bias is added to the finished product.
// Likewise Gemm(A, W) [-> Reshape] -> Add(., bias) (the form FuseDecomposedOps gives a Linear
// whose weight PyTorch transposes) becomes Gemm(A, W, bias) [-> Reshape]: the bias is Gemm's C,
// which the CPU kernel adds as a oneDNN post-op. Returns the number of both rewrites.
int FuseMatMulBias(Model& training_model);

// Sum(SliceGrad(dY_0, ...), SliceGrad(dY_1, ...), ...) -> dX, every SliceGrad read by the Sum
// alone and all of one shape (their data_shape inputs are Shapes of one value), becomes
// org.onnxtrain SliceGradSum(data_shape, dY_0, starts_0, ends_0, axes_0, steps_0, dY_1, ...):
// the gradient of the q, k and v slices of a packed in-projection (nn.MultiheadAttention),
// which otherwise zero-fills three [T, n, 3E] buffers and adds them. The CPU kernel copies
// each dY to its place when the slices tile the output exactly (checked on the run's slice
// bounds, which PyTorch's exports compute from shapes at run time), else adds them into
// zeros; the sum is the same either way. Forward opsets from 10 (slices as inputs). CPU
// kernel only, as above; returns the number of Sums fused.
int FuseSliceGradSums(Model& training_model);

// The weight transposes of PyTorch's Linear (MatMul(X, Transpose(W, [1, 0]))) in the
// training graph: MatMul's gradient TransposeLastTwo(Transpose(W)) becomes an Identity of W
// (a view, no copy), and the weight gradient Transpose(Gemm(A, B, transA=1)) becomes
// Gemm(B, A, transA=1) (B^T A = (A^T B)^T; the Gemm's result has no other reader). Exact.
// Returns the number of rewrites.
int SimplifyWeightTransposes(Model& training_model);

}  // namespace ot

namespace ot {

// SiLU as PyTorch exports it (torch.nn.SiLU, EfficientNet's activation): Sigmoid(X) -> S;
// Mul(X, S) -> Y (either operand order) becomes org.onnxtrain Silu(X) -> Y, where S has no
// other reader and is no graph output. One pass each way instead of Sigmoid and Mul forward
// and Mul, Mul, SigmoidGrad and Sum backward; its gradient is ActivationGrad with op=Silu
// (runtime/ops/math/activation_math.h: dY s (1 + X (1 - s))). Before differentiation, like
// FuseDecomposedOps (graph/passes/activation_fusion.cc); the trained model keeps the ops as exported.
// Returns how many pairs it fused.
int FuseSilu(Model& m);

// BatchNormTraining(X, ...) -> Y; Clip(Y, lo, hi) -> Z (ReLU6: MobileNetV2's activation)
// becomes BatchNormTraining(X, ...) -> Z with clip_min=lo, clip_max=hi: the normalisation
// writes the clipped values in its one pass over the data, and the Clip's gradient
// (ActivationGrad op=Clip) reads Z instead of Y, which gives the same mask (lo < Y < hi
// exactly where lo < Z < hi). Only where Y has no readers but the Clip and its gradients,
// the bounds are constants with lo <= 0 <= hi and lo < hi, and relu=0. CPU kernel only, as
// FuseBatchNormRelu; returns how many pairs it fused.
int FuseBatchNormClip(Model& training_model);

}  // namespace ot
