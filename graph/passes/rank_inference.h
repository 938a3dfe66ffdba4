// Rank inference where ONNX's shape inference gives up. PyTorch exports compute many
// shapes at run time (Shape -> Gather -> Concat -> Reshape, as ViT's patch embedding and
// every x.view(n, ...) do), and ONNX's inference then leaves every value after such a
// Reshape without a shape. Their ranks are still static: a Reshape's output has as many
// axes as its shape input has elements, which ONNX knows. Gradient rules choose cheaper
// forms by rank (a batched activation times a weight matrix is one Gemm for the weight's
// gradient, not a batched product summed), so this propagates ranks through the ops
// whose output rank follows from their inputs' ranks and static attributes.
#pragma once

#include <map>
#include <string>

#include "graph/ir.h"

namespace ot {

// Rank of every value the graph determines: graph inputs, initializers, value_info with a
// shape, and the outputs of nodes whose rank follows. Values missing from the map are
// unknown. `opset` is the model's default-domain opset (Squeeze, Unsqueeze and the
// reductions take their axes as inputs from opset 13 or 18).
std::map<std::string, int> InferRanks(const Graph& g, int64_t opset);

}  // namespace ot
