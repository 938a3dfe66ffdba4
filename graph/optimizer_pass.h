// Optimizer insertion: appends one update node per trainable parameter to a training
// graph, using ONNX's ai.onnx.preview.training ops (Momentum, Adam, Adagrad). The
// learning rate and the step count are graph inputs, so a schedule changes nothing else.
// Optimizer state (momentum buffers, moments) becomes initializers; every updated tensor
// T has a graph output "T/new" that the runtime writes back into T after each step.
#pragma once

#include <string>

#include "graph/autodiff.h"

namespace ot {

constexpr const char* kTrainingOpsDomain = "ai.onnx.preview.training";
constexpr const char* kLearningRateInput = "lr";
constexpr const char* kStepInput = "step";

struct OptimizerConfig {
  enum class Kind { kSgd, kAdam, kAdagrad };
  Kind kind = Kind::kSgd;
  float momentum = 0.f;      // SGD
  bool nesterov = false;     // SGD
  float weight_decay = 0.f;  // all: L2 term added to the gradient (PyTorch's weight_decay)
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // Adam
  float adagrad_decay = 0.f, adagrad_epsilon = 1e-10f;  // Adagrad
};

// Parses "sgd", "adam", "adagrad"; throws ot::Error otherwise.
OptimizerConfig::Kind ParseOptimizerKind(const std::string& name);

void AppendOptimizer(TrainingGraph& tg, const OptimizerConfig& config);

}  // namespace ot
