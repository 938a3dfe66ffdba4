// --sync-bn graph rewrite: see sync_batch_norm.h.
#include "graph/sync_batch_norm.h"

#include "graph/gradient_registry.h"

namespace ot {

int UseSyncBatchNorm(Graph& training_graph) {
  int count = 0;
  for (Node& n : training_graph.nodes) {
    if (n.domain != kGradDomain) continue;
    if (n.op_type == "BatchNormTraining") {
      n.op_type = "SyncBatchNormTraining";
      ++count;
    } else if (n.op_type == "BatchNormalizationGrad") {
      n.op_type = "SyncBatchNormalizationGrad";
    }
  }
  return count;
}

}  // namespace ot
