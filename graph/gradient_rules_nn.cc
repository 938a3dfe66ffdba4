// Gradient rules, Normalisation, reductions and contractions: LayerNormalization, InstanceNormalization, the Reduce* family, ConvTranspose, Einsum.
#include "graph/gradient_rules_common.h"

#include "graph/error.h"

namespace ot {

void RegisterNnGradientRules(GradientRegistry& r) {}

}  // namespace ot
