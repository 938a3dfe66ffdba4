// Device-neutral Prepare checks of the normalization ops (BatchNormalization,
// BatchNormTraining, BatchNormalizationGrad, InstanceNormalization, LRN, LayerNormalization
// and RMSNormalization with their gradients), shared by the oneDNN
// and cuDNN kernels so both accept the same models with the same messages.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/ir.h"
#include "runtime/core/kernel.h"

namespace ot {

// Throws ot::UnsupportedError unless inputs [0, count) are float32.
void RequireFloat32Inputs(const Node& node, const KernelContext& ctx, int count);
// Throws ot::Error unless inputs [first, end) have shape {channels}.
void RequirePerChannelInputs(const Node& node, const KernelContext& ctx, int first, int end, int64_t channels);
// BatchNormalization(X, scale, B, input_mean, input_var): float32, X is N x C x ..., the
// rest per channel, spatial statistics only. Returns C.
int64_t CheckBatchNormInputs(const Node& node, const KernelContext& ctx);
// Whether the node normalizes with batch statistics: BatchNormTraining always;
// BatchNormalization by training_mode (opset 14+), is_test (opset 6 and before) or else
// by whether statistics are requested. Throws when statistics are requested in inference.
bool BatchNormTrainingMode(const Node& node, int opset, const KernelContext& ctx);
// BatchNormalizationGrad(dY, X, ...): float32, dY shaped as X, X of rank >= 2. Returns C.
int64_t CheckBatchNormGradInputs(const Node& node, const KernelContext& ctx);

// LRN's attributes: a window of `size` channels, y = x / (bias + alpha / size * sum x^2)^beta.
struct LrnAttrs {
  int64_t size = 0;
  float alpha = 1e-4f, beta = 0.75f, bias = 1.f;
};
// LRN (and LRNGrad, whose X is `x`): X is N x C x D1 x ..., size positive. Throws ot::Error
// naming the node. The data type and the device's own limits stay with the kernels.
LrnAttrs ReadLrnAttrs(const Node& node, const Tensor& x);

// X as [outer, inner] around the node's axis, and Scale (and B) expanded to [inner].
struct LayerNormGeometry {
  int64_t outer = 1, inner = 1;
  Shape tail;   // X.shape[axis:]
  Shape stats;  // X.shape with the normalised axes set to 1
  std::vector<int64_t> scale_strides, bias_strides;  // into Scale / B, over `tail`
};
// LayerNormalization / RMSNormalization and their gradients: X is input scale_input - 1,
// Scale input scale_input, B `bias` (or null); float32, stash_type 1, Scale and B broadcast
// to the normalised tail. Throws naming the node.
LayerNormGeometry PlanLayerNorm(const Node& node, const KernelContext& ctx, int scale_input, const Tensor* bias);

}  // namespace ot
