// Builders for the reference models of the recipes, written as ONNX through the IR with
// the node structure torch.onnx.export produces and PyTorch's default initialisation.
#pragma once

#include <cstdint>
#include <string>

#include "graph/ir.h"

namespace ot {

struct ReferenceModelOptions {
  int64_t channels = 3;
  int64_t height = 32;
  int64_t width = 32;
  int64_t classes = 10;
  uint64_t seed = 0;
};

// torchvision resnet34 with conv1 replaced by a 3x3 stride-2 pad-1 conv without bias, no
// max-pool, `classes` outputs. Input "input" [batch, C, H, W], output "logits" [batch, K].
Model BuildResNet34(const ReferenceModelOptions& options);
// Flatten + Linear(C*H*W -> K). Input "input" [batch, C, H, W], output "logits" [batch, K].
Model BuildSimpleNN(const ReferenceModelOptions& options);
// By name: "resnet34" or "simplenn"; throws ot::Error naming the choices otherwise.
Model BuildReferenceModel(const std::string& name, const ReferenceModelOptions& options);

}  // namespace ot
