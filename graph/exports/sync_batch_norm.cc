// --sync-bn graph rewrite: see sync_batch_norm.h.
#include "graph/exports/sync_batch_norm.h"

#include <set>
#include <string>

#include "graph/autodiff/gradient_registry.h"

namespace ot {

int UseSyncBatchNorm(Graph& training_graph) {
  Graph& g = training_graph;
  // The saved-mean outputs of the converted nodes: their gradients read them (input 3).
  std::set<std::string> saved_means;
  int count = 0;
  for (Node& n : g.nodes) {
    if (n.domain != kGradDomain || n.op_type != "BatchNormTraining") continue;
    // Only layers with running statistics (BatchNorm modules, as PyTorch's
    // convert_sync_batchnorm); a normaliser over computed statistics (F.batch_norm of a
    // weight for weight standardisation) normalises what every rank holds alike.
    if (!n.HasInput(3) || !n.HasInput(4) || !g.FindInitializer(n.inputs[3]) || !g.FindInitializer(n.inputs[4]))
      continue;
    n.op_type = "SyncBatchNormTraining";
    ++count;
    if (n.outputs.size() > 3 && !n.outputs[3].empty()) saved_means.insert(n.outputs[3]);
  }
  for (Node& n : g.nodes)
    if (n.domain == kGradDomain && n.op_type == "BatchNormalizationGrad" && n.HasInput(3) &&
        saved_means.count(n.inputs[3]))
      n.op_type = "SyncBatchNormalizationGrad";
  return count;
}

}  // namespace ot
