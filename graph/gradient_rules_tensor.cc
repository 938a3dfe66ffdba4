// Gradient rules, Indexing and data movement: Gather*, Scatter*, Slice, Split, Tile, Where, Trilu, CumSum, Resize.
#include "graph/gradient_rules_common.h"

#include "graph/error.h"

namespace ot {

void RegisterTensorGradientRules(GradientRegistry& r) {}

}  // namespace ot
