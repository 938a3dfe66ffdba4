// Row pruning before differentiation: a Gather that picks the first or last position of an
// axis (ViT's and BERT's class token, `x[:, 0]`; a last-token head, `x[:, -1]`) is moved
// above the ops that work on each position alone, so that they run on the picked rows only.
// In torchvision's ViT the head reads LayerNorm(x)[:, 0]: the last encoder layer's MLP
// (two products forward, four backward), its LayerNorms and residual sums ran on all 65
// tokens for one token's result; hoisted, they run on one.
//
//   Gather(P(X1, X2, ...), i, axis=a)  becomes  P(Gather(X1, i, a), Gather(X2, i, a), ...)
//
// for P's output read by the Gather alone (and no graph output), repeated while it applies.
// P is position-wise along a:
//   - a unary elementwise op (Erf, Relu, Gelu, Tanh, Sigmoid, Neg, Abs, Sqrt, Exp, Identity,
//     Cast, LeakyRelu, Elu, Softplus; Clip on its data input);
//   - Add, Sub, Mul, Div (numpy broadcasting): an operand that has the axis is gathered too,
//     one that lies wholly in the axes after it (a bias [E], a scalar) is read as it is;
//   - LayerNormalization normalising only axes after a (its mean and inverse deviation
//     unread);
//   - MatMul(X, W) with W a matrix (rank 2) and a one of X's leading axes or its rows;
//   - Transpose (the Gather then picks the input axis that becomes a; ViT's attention
//     output, sequence-first [T, n, E] turned back into [n, T, E]).
// The indices must be a constant whose values are all 0 or all -1: the first (last) position
// of a broadcast operand whose axis has size 1 is its only one, so an operand that
// broadcasts along the axis is gathered as exactly as one that has it in full (for any other
// position that would need the operands' shapes, which PyTorch's exports often leave
// unknown). A Gather of a value that another Gather of the same position already reads is
// reused, so that a value read by two hoisted branches (a residual sum's input) is gathered
// once and can be hoisted past in turn.
//
// The function is the same, value for value (each kept row is computed by the same ops in
// the same order); the training graph differs from the exported model only in doing less
// (the trained checkpoint is the model as exported). Dropout with a nonzero ratio draws
// per position and stops the hoist. Returns the number of ops moved.
#pragma once

#include "graph/ir.h"

namespace ot {

int HoistPositionGathers(Model& m);

}  // namespace ot
