// Helpers shared by the gradient rule files (gradient_rules*.cc), and the registration
// function of each op family. GradientRegistry::Global() calls every Register*Rules.
#pragma once

#include <string>
#include <vector>

#include "graph/autodiff/gradient_registry.h"

namespace ot {

// Writes `grad` (shaped like the node's output) to GI(i), summed over the axes along
// which input i was broadcast (SumToShape of kGradDomain).
void WriteBroadcastGrad(GradientBuilder& b, const std::string& grad, int i);

// Registers `rule` for op type `op` (opsets since..until) in `domain`; `stops` are the
// input positions that never carry a gradient (indices, shapes, masks).
void RegisterRule(GradientRegistry& r, const std::string& op, int64_t since, int64_t until, GradientRule rule,
                  std::vector<int> stops = {}, const std::string& domain = "");

void RegisterStandardGradientRules(GradientRegistry& r);     // gradient_rules.cc
void RegisterElementwiseGradientRules(GradientRegistry& r);  // gradient_rules_elementwise.cc
void RegisterTensorGradientRules(GradientRegistry& r);       // gradient_rules_tensor.cc
void RegisterNnGradientRules(GradientRegistry& r);           // gradient_rules_nn.cc
void RegisterSequenceGradientRules(GradientRegistry& r);     // gradient_rules_sequence.cc
void RegisterAttentionGradientRules(GradientRegistry& r);    // gradient_rules_attention.cc

}  // namespace ot
