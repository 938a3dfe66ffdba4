// Optimizer insertion: appends one update node per trainable parameter to a training
// graph, using ONNX's ai.onnx.preview.training ops (Momentum, Adam, Adagrad) and our own
// org.onnxtrain ops where ONNX's cannot express PyTorch's update (SGD without a momentum
// buffer, AdamW, RMSprop). The
// learning rate and the step count are graph inputs, so a schedule changes nothing else.
// Optimizer state (momentum buffers, moments) becomes initializers; every updated tensor
// T has a graph output "T/new" that the runtime writes back into T after each step.
#pragma once

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "graph/autodiff/autodiff.h"
#include "graph/op_domains.h"
#include "graph/passes/param_patterns.h"

namespace ot {

constexpr const char* kLearningRateInput = "lr";
constexpr const char* kStepInput = "step";

struct OptimizerConfig {
  enum class Kind { kSgd, kAdam, kAdagrad, kAdamW, kRmsprop };
  Kind kind = Kind::kSgd;
  float momentum = 0.f;      // SGD, RMSprop
  bool nesterov = false;     // SGD
  // All: PyTorch's weight_decay (an L2 term added to the gradient; AdamW: decoupled,
  // X *= 1 - lr * weight_decay before the step).
  float weight_decay = 0.f;
  // Parameter groups as torchvision's set_weight_decay: when set (not NaN), the weight
  // decay of biases (the bias input of Conv, ConvTranspose, Gemm and the normalisation
  // ops, or a 1-D addend of a MatMul) and of normalisation parameters (scale and bias of
  // BatchNormalization, LayerNormalization, InstanceNormalization, GroupNormalization),
  // told from the node that consumes the parameter. Biases take bias_weight_decay first.
  float norm_weight_decay = std::numeric_limits<float>::quiet_NaN();
  float bias_weight_decay = std::numeric_limits<float>::quiet_NaN();
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // Adam, AdamW (epsilon: RMSprop too)
  float adagrad_decay = 0.f, adagrad_epsilon = 1e-10f;  // Adagrad
  float rmsprop_alpha = 0.99f;                          // RMSprop (torch's defaults)
  bool rmsprop_centered = false;
  // > 0: gradients are scaled by min(1, max / (norm + 1e-6)) where norm is the 2-norm of
  // all gradients together (torch.nn.utils.clip_grad_norm_), computed in the graph before
  // the updates, after data-parallel averaging.
  float clip_grad_norm = 0.f;
  // --param-group: per-parameter learning rate and weight decay. The last group whose
  // patterns match a trainable parameter decides its settings; what that group leaves
  // unset keeps the defaults above (weight decay as WeightDecayFor). A group's rate is
  // the lr input times a constant factor (an absolute rate: rate / base_lr), so a schedule
  // scales every group alike, as PyTorch's schedulers do. Every pattern must match an
  // initializer and every group a trainable parameter.
  std::vector<ParamGroup> groups;
  float base_lr = std::numeric_limits<float>::quiet_NaN();  // needed by absolute group rates
};

// What a parameter is to the weight-decay groups, from the nodes that consume it (a
// normalisation op's bias is both).
struct ParamKind {
  bool bias = false, norm = false;
};
ParamKind ParamKindOf(const Graph& g, const std::string& param);
// The weight decay of a parameter of that kind under `config`.
float WeightDecayFor(const OptimizerConfig& config, ParamKind kind);

// Parses "sgd", "adam", "adagrad", "adamw", "rmsprop"; throws ot::Error otherwise.
OptimizerConfig::Kind ParseOptimizerKind(const std::string& name);

void AppendOptimizer(TrainingGraph& tg, const OptimizerConfig& config);

// Gradient accumulation over `steps` micro-batches (steps >= 2), before AppendOptimizer:
// each parameter gets a zero-initialised accumulator state A (named "<param>/grad_accumulator");
// the graph computes S = A + G and the mean S / steps, which becomes tg.grads (what
// clipping, the updates and data-parallel averaging read), and a zero tensor shaped as A
// that tg.state_updates writes back into A (a full step ends with empty accumulators).
// Returns the state updates of a micro-step, which runs forward and backward only: the
// forward's own (BatchNorm statistics) and S written back into A.
std::vector<std::pair<std::string, std::string>> AppendGradientAccumulation(TrainingGraph& tg, int64_t steps);

}  // namespace ot
