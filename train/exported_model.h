// A model as exported (from PyTorch, usually) made ready for train and eval: a fixed batch
// dimension rebound to a symbolic one when the graph allows, or else the batch the model
// must run with; BatchNormalization in training form or frozen (graph/batch_norm_form.h).
// Each change comes with one line for the user.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace ot {

struct ExportedModelOptions {
  bool training = true;     // train: BatchNormalization forms apply; eval: only the batch
  bool frozen_bn = false;   // --frozen-bn
  int64_t batch = 0;        // the batch the caller will run (0: any; eval)
};

struct PreparedModel {
  Model model;
  // > 0 when the model can only run with this batch (it holds it as a constant); the
  // caller must evaluate in batches of exactly this size.
  int64_t fixed_batch = 0;
  std::vector<std::string> freeze;  // initializers that must not train (frozen statistics)
  std::vector<std::string> notes;   // one line each, for the user
};

// Throws ot::Error at start, before any training, when the model holds a fixed batch that
// differs from options.batch: "the model was exported with batch fixed at 2; export with
// dynamic_axes={'input': {0: 'N'}} or use --batch 2".
PreparedModel PrepareExportedModel(const Model& model, const ExportedModelOptions& options);

}  // namespace ot
