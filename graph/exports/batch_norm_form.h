// BatchNormalization in the form a training run wants.
//
// An eval-mode export (torch.onnx.export of a model in eval(), the default) brings batch
// normalisation in inference form: BatchNormalization nodes with one output that
// normalise with their running statistics, or, after a convolution, no node at all, since
// PyTorch folds the layer into the convolution's weights and bias. Trained like that, the
// model loses what batch normalisation does for training. By default onnx-train trains
// every BatchNormalization in training form (batch statistics, running statistics
// updated; the autodiff pass does that) and restores the layers PyTorch folded away as
// BatchNormalization nodes after their convolutions. --frozen-bn keeps the exported graph
// and freezes every BatchNormalization instead: it normalises with its running statistics,
// which stay fixed, while its scale and bias train, as in PyTorch fine-tuning in eval().
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"

namespace ot {

struct BatchNormFormReport {
  int inference_nodes = 0;  // BatchNormalization nodes exported in inference form
  int restored = 0;         // layers restored after convolutions PyTorch had folded them into
  int frozen = 0;           // nodes frozen (--frozen-bn)
  // Initializers that must not train: the running statistics, and the epsilons of frozen nodes.
  std::vector<std::string> frozen_statistics;
  // One line for the user saying what was done ("" when there was nothing to do).
  std::string Describe() const;
};

// True for a BatchNormalization in inference form: one output (or training_mode=0) and
// running statistics that are initializers.
bool IsInferenceBatchNorm(const Graph& graph, const Node& node);

// Convolutions whose weight and bias PyTorch computed by folding a batch normalisation
// into them: the legacy exporter's eval-mode export (producer pytorch, initializers named
// "onnx::Conv_*"), or the dynamo exporter's optimizer (metadata_props naming the rewrite
// rule FuseBatchNormIntoConv; the restored layer takes the BatchNorm module's name).
std::vector<const Node*> ConvsWithFoldedBatchNorm(const Model& model);

// The default: counts inference-form nodes (trained in training form by the autodiff pass)
// and inserts, after each convolution with a folded batch normalisation, a
// BatchNormalization with fresh state (scale 1, bias 0, mean 0, variance 1).
BatchNormFormReport UseTrainingFormBatchNorm(Model& model);

// --frozen-bn: every BatchNormalization with running statistics becomes the elementwise
// Y = X * a + c with a = scale / sqrt(var + epsilon), c = bias - mean * a, computed in the
// graph from the same initializers (so checkpoints keep their names); the running
// statistics are listed in frozen_statistics for the caller to freeze. Throws ot::Error
// naming the node when X's rank is unknown or another node reads its statistics outputs.
BatchNormFormReport FreezeBatchNorm(Model& model);

}  // namespace ot
