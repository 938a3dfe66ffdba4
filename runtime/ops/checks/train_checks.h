// Device-neutral Prepare logic of the training ops: the classification losses
// (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss and their gradients) and the
// optimizer updates of ai.onnx.preview.training (Momentum, Adagrad, Adam). The CPU and
// CUDA kernels both call these, so they accept the same models with the same messages.
#pragma once

#include <cstdint>

#include "graph/ir.h"
#include "runtime/core/kernel.h"
#include "runtime/ops/checks/op_kinds.h"
#include "runtime/core/tensor.h"
#include "runtime/ops/math/optimizer_math.h"

namespace ot {

// The loss attributes: reduction (none, sum or mean; throws otherwise) and ignore_index.
struct LossAttrs {
  bool reduce = false, mean = false;
  bool has_ignore_index = false;
  int64_t ignore_index = 0;
};
LossAttrs ReadLossAttrs(const Node& node);

// Checks int32/int64 labels against scores [N, C, d1, ...]; returns the labels' shape
// [N, d1, ...].
Shape CheckLossLabels(const Node& node, const Tensor& scores, const Tensor& labels);

// An optimizer node's inputs R (float scalar), T (int64 scalar), then n X, n G and
// `states` state tensors per X, all float32 and shaped as their X. Declares the outputs
// (n new X, then the new states) and returns n.
int PrepareOptimizerOutputs(const Node& node, KernelContext& ctx, int states);
// The tensors of updated tensor i of an optimizer node with n tensors and `states`
// states each; outputs not requested are null.
struct OptimizerSlots {
  const float* x = nullptr;
  const float* g = nullptr;
  const float* state[3] = {nullptr, nullptr, nullptr};
  float* x_new = nullptr;
  float* state_new[3] = {nullptr, nullptr, nullptr};
};
OptimizerSlots OptimizerSlotsOf(KernelContext& ctx, int i, int n, int states);
// The input that output k*n+i (k = 0: X, k >= 1: state k-1) may overwrite, or -1: every
// update reads all of an element's inputs before writing that element.
int OptimizerInPlaceInput(int output, int n, int states);

// The optimizers' attributes, with ONNX's defaults; Momentum's mode must be standard or
// nesterov.
MomentumParams ReadMomentumParams(const Node& node);
AdagradParams ReadAdagradParams(const Node& node);
AdamParams ReadAdamParams(const Node& node);
// org.onnxtrain AdamW's (torch.optim.AdamW's defaults).
AdamWParams ReadAdamWParams(const Node& node);
// org.onnxtrain RMSprop's (torch.optim.RMSprop's defaults).
RmspropParams ReadRmspropParams(const Node& node);

}  // namespace ot
