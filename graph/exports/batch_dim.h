// Models exported with a fixed batch size (torch.onnx.export without dynamic_axes writes
// the example input's batch, often 1 or 2, into the input's shape). Such a model can often
// run with any batch once its leading dimension is made symbolic again; it cannot when a
// node holds the batch as a constant (a Reshape to [2, -1] from x.view(x.size(0), -1)),
// unless that node is a Reshape whose target can say "the input's batch" instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace ot {

// The static leading dimension of the model's first input, 0 when it is symbolic, unknown
// or the input has no shape.
int64_t FixedBatchSize(const Model& model);

// A copy of `model` whose inputs and outputs with leading dimension `batch` get the symbolic
// dimension `symbol` there instead; intermediate shapes are inferred anew. A node that holds
// the batch as a constant still produces it (find those with NodesHoldingBatch, or run it).
Model WithSymbolicBatch(const Model& model, int64_t batch, const std::string& symbol = "N");

// Nodes whose shape input is a constant (an initializer or a Constant node's value, also
// through Concat/Unsqueeze of constants) with `batch` as its first element: Reshape, Expand,
// Tile, ConstantOfShape. Described as "node 'x' (Reshape)".
std::vector<std::string> NodesHoldingBatch(const Model& model, int64_t batch);

// Rewrites each Reshape that NodesHoldingBatch finds, where its data input's leading
// dimension is that batch, to a target without it: [1, -1] becomes [0, -1] (0 copies the
// input's batch; allowzero 0), or [-1, 512] with allowzero 1. The target is a new
// initializer; the old constant stays for any other reader. Returns one line per rewritten
// node ("node 'x' (Reshape): target [1, -1] became [0, -1]"); others are left as they are.
std::vector<std::string> FreeReshapesOfBatch(Model& model, int64_t batch);

}  // namespace ot
