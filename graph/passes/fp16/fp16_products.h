// --amp fp16's products as autocast runs them: after InsertAmpCasts (graph/passes/amp_pass.h)
// has cast their operands to float16, a product (Conv, ConvGrad, MatMul, Gemm) also writes
// float16, as autocast's float16 ops do and as cuDNN's and cuBLAS's half kernels (float32
// accumulation) write, and a Cast back to float32 feeds the float32 rest of the graph. The
// rounding of products' results is what overflows first under a too large loss scale (a
// weight gradient, a sum over the batch, past 65504), as in PyTorch, so GradScaler's skips
// are our skips; and the exported graph is valid ONNX typing (T the same on every operand).
//
// The CPU has no float16 products (no avx512_fp16 here): EmulateFloat16Products makes the
// products read float32 copies of their rounded operands and round their float32 results
// to float16 through Cast nodes, so the kernels are the float32 ones and the values are the
// float16 ones (each product exact up to float32 accumulation order, as on a GPU).
#pragma once

#include "graph/autodiff/autodiff.h"
#include "graph/ir.h"

namespace ot {

// Right after BuildTrainingGraph: the gradient of each trainable bias of a Conv or Gemm
// (input 2) is rounded to float16 (a Cast to float16 and back; tg.grads names the rounded
// value). Autocast adds the bias inside the float16 product, so PyTorch's bias gradient, a
// sum of the output gradient over the batch, is float16 and overflows there first. Returns
// the biases rounded.
int RoundFloat16BiasGradients(TrainingGraph& tg);

// Products reading InsertAmpCasts' float16 casts write "<output>/fp16" (float16) and a
// Cast "amp/cast/fp32/<output>" makes <output> float32 again; a Conv's or Gemm's bias is
// cast to float16 as well ("<bias>/fp16_bias"). Returns the Casts added.
int RoundFloat16ProductOutputs(Model& m);

// The CPU's form of the above (see the top of this file). Returns the Casts added.
int EmulateFloat16Products(Model& m);

}  // namespace ot
