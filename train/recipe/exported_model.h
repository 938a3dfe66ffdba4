// A model as exported (from PyTorch, usually) made ready for train and eval: a fixed batch
// dimension rebound to a symbolic one when the graph allows (Reshape targets holding it
// rewritten), or else the batch the model must run with; BatchNormalization in training form
// or frozen (graph/exports/batch_norm_form.h); the final classifier replaced for --num-classes and
// the class-score head described (graph/exports/class_head.h). Each change comes with one line for
// the user.
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
  int64_t num_classes = 0;  // --num-classes: > 0 replaces the final classifier with a fresh K-way one
  uint64_t seed = 0;        // its initialisation
  std::string logits_output;  // --logits-output: the scores the loss reads ("" = the first output)
  bool class_scores = true;   // the loss reads class scores [N, K, ...] (cross-entropy): note a final Softmax
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

// The class count of --num-classes VALUE: a whole number of at least 2, or "auto": the class
// folders of imagefolder:DIR (DIR/train when present), 10 for fashion-mnist, mnist and
// cifar10. `data_spec` is --data ("" for commands that read no data). Throws ot::Error
// naming the flag otherwise.
int64_t ParseNumClasses(const std::string& value, const std::string& data_spec);

}  // namespace ot
