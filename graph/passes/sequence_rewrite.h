// Rewrite of the ONNX sequence ops that PyTorch 2.x's exporter writes for torch.split and
// torch.chunk (optimize=False) into tensor ops, since the runtime has tensors only:
//
//   SplitToSequence(X[, split]) -> S;  SequenceAt(S, p) -> Y_p ...;  ConcatFromSequence(S) -> Z;
//   SequenceLength(S) -> L
//     becomes Split(X, sizes) -> chunk_0, ..., chunk_{k-1} (Y_p is chunk p; chunks nobody reads
//     get fresh names), plus Squeeze of each chunk when keepdims is 0 and split is absent,
//     Concat (after Unsqueeze when new_axis is 1) for ConcatFromSequence and a Constant for
//     SequenceLength.
//
// The chunk sizes must be known when the model loads: split a constant list of lengths, or a
// constant chunk size (or absent: chunks of 1) with the length of X along the axis static in
// the model's shapes (ONNX shape inference is run for it when the file records none).
// SequenceAt positions must be constants. Any other use of sequences throws
// ot::UnsupportedError naming the node and what it does that is not supported.
#pragma once

#include "graph/ir.h"

namespace ot {

// Rewrites in place; returns how many sequence nodes were replaced (SplitToSequence,
// SequenceAt, ConcatFromSequence and SequenceLength nodes together), 0 when none.
int RewriteSequenceOps(Model& model);

}  // namespace ot
