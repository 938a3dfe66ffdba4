// Mixed precision (--amp bf16) as a pass over the training graph, autocast's split of ops
// written into the graph. The products, where reduced precision is safe and fast (Conv, its
// ConvGrad, MatMul and Gemm, which the gradients of MatMul and Gemm are made of too), read
// their operands through Cast nodes to bfloat16 and write float32: their accumulation and
// their results stay float32, so no Cast back is needed. Everything else (losses, Softmax,
// normalisation statistics, reductions, the optimizer update) reads and writes float32 as
// before, and the weights stay float32 master copies: the Cast of a weight is a node the
// step runs, the optimizer updates the float32 initializer. Each value is cast once (a
// convolution's input cast serves its forward and its weight gradient), and the casts are
// ordinary ONNX Cast nodes, so `onnx-train export --amp bf16` shows them.
#pragma once

#include <string>

#include "graph/ir.h"

namespace ot {

enum class AmpMode { kOff, kBFloat16, kFloat16 };

// "bf16" or "fp16" ("off" or "" for none); throws ot::Error naming the choices otherwise.
AmpMode ParseAmpMode(const std::string& text);
std::string AmpModeName(AmpMode mode);  // "off", "bf16", "fp16"

struct AmpCounts {
  int products = 0;  // nodes that now read reduced-precision operands
  int casts = 0;     // Cast nodes inserted
};

// Inserts the casts (to bfloat16 for kBFloat16, float16 for kFloat16; nothing for kOff)
// in front of the products' float32 operands; a bias (Conv's input 2, Gemm's C) stays
// float32. Operands known to be of another type are left alone.
AmpCounts InsertAmpCasts(Model& m, AmpMode mode);

// --amp bf16 on the CPU: the fused attention (org.onnxtrain Attention and AttentionGrad,
// graph/passes/fusion.h) computes its products in bfloat16 with float32 sums, as autocast's
// scaled_dot_product_attention does, by the attribute bf16_products = 1; its inputs and
// outputs, the softmax and its statistics stay float32, so no Cast is added (and the CUDA
// runtime, which this is not run for, sees no new type). Returns the nodes marked.
int UseBFloat16Attention(Model& m);

// --amp bf16 on the CPU: a Cast to bfloat16 whose input is the only use of a fused GELU or
// SiLU's output (org.onnxtrain Gelu, Silu; graph/passes/fusion.h), directly or through one
// Reshape or Flatten read by nothing else (Shape nodes aside: they read no element), goes into
// the activation: it writes bfloat16 (attribute to = BFLOAT16, rounded as the Cast rounds) and
// the Reshape, if any, reshapes that. The
// activation's gradient reads its input, not its output, so nothing needs the float32 value.
// Saves the Cast's pass over the float32 activation and half of the activation's writes
// (the ViT's [2080, 768] GELU outputs). Run after InsertAmpCasts; `export` (device-
// independent) keeps the Casts. Returns the Casts folded.
int FoldBFloat16CastsIntoActivations(Model& m);

}  // namespace ot
