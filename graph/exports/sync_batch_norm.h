// --sync-bn: the training graph's batch normalizations made synchronised. In a
// data-parallel run each BatchNormTraining (the training form autodiff gives a
// BatchNormalization) with running statistics (a BatchNorm layer; not a normaliser over
// computed statistics, as torch exports F.batch_norm for weight standardisation) becomes
// kGradDomain's SyncBatchNormTraining, and its
// BatchNormalizationGrad SyncBatchNormalizationGrad: same inputs, outputs and attributes,
// but the kernels compute the statistics and the gradient sums over the global batch
// (runtime/core/cross_replica.h, runtime/cpu/norm/sync_batchnorm.h), like PyTorch's SyncBatchNorm.
// Only the training graph changes: the evaluation and exported inference models keep
// plain BatchNormalization.
#pragma once

#include "graph/ir.h"

namespace ot {

// Rewrites the nodes in place; returns how many batch normalizations it made synchronised
// (0: the graph has none in training mode).
int UseSyncBatchNorm(Graph& training_graph);

}  // namespace ot
