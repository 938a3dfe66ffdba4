// Gradient rules, Recurrent layers: LSTM and GRU.
#include "graph/gradient_rules_common.h"

#include "graph/error.h"

namespace ot {

void RegisterSequenceGradientRules(GradientRegistry& r) {}

}  // namespace ot
